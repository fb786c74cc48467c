use std::collections::BTreeSet;

use cowork_schema::ids::UnitRef;
use cowork_schema::pricing::Pricing;
use cowork_schema::unit::CellAxes;
use cowork_schema::unit::Tier;

use super::*;
use crate::plan::flags::parse_prices;

fn unit(tier: Tier, model: Option<&str>) -> PlanUnit {
    PlanUnit {
        unit: UnitRef::File(0),
        scenario_name: "s".into(),
        label: "s".into(),
        axes: model.map(|model| CellAxes {
            model: Some(model.to_owned()),
            ..CellAxes::default()
        }),
        scenario_file: "s.yaml".into(),
        tier,
        cell_error: None,
        timeout_ms: 1000,
        arm: None,
    }
}

fn priced(sandbox: &[&str], model: &[&str]) -> Pricing {
    let owned = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    parse_prices(&owned(sandbox), &owned(model)).expect("valid prices")
}

#[test]
fn price_flags_name_a_known_tier_and_a_price_of_at_least_zero() {
    let pricing = priced(&["container=0.02", "microvm=0"], &["claude-sonnet=0.1"]);
    assert_eq!(sandbox_price(&pricing, Tier::Container), Some(0.02));
    assert_eq!(sandbox_price(&pricing, Tier::Microvm), Some(0.0));
    assert_eq!(sandbox_price(&pricing, Tier::Replay), None);
    let bad = |sandbox: &str| {
        parse_prices(&[sandbox.to_owned()], &[]).expect_err("refused")[0]
            .message
            .clone()
    };
    assert!(bad("docker=0.02").contains("unknown tier \"docker\""));
    assert!(bad("container").contains("TIER=USD_PER_MIN"));
    assert!(bad("container=-1").contains("at least 0"));
    assert!(bad("container=").contains("at least 0"));
    assert!(bad("container=abc").contains("at least 0"));
}

#[test]
fn a_model_price_is_its_longest_prefix() {
    let pricing = priced(&[], &["claude=0.5", "claude-sonnet=0.1"]);
    assert_eq!(model_price(&pricing, "claude-sonnet-4"), Some(0.1));
    assert_eq!(model_price(&pricing, "claude-opus"), Some(0.5));
    assert_eq!(model_price(&pricing, "gpt"), None);
}

#[test]
fn a_run_costs_its_model_spend_plus_its_sandbox_minutes() {
    let pricing = priced(&["container=0.02"], &["default=0.3"]);
    // 90 s on a $0.02/min host beside $0.10 of model spend.
    let cost = run_cost(&pricing, (Tier::Container, "default"), Some(0.1), 90_000);
    assert_eq!(cost.model_usd, Some(0.1));
    assert!(!cost.estimated);
    assert!((cost.sandbox_usd.expect("priced") - 0.03).abs() < 1e-12);
    assert!((cost.whole_usd().expect("priced") - 0.13).abs() < 1e-12);
    // No cost reported: the model price stands in, so the run is never free.
    let estimated = run_cost(&pricing, (Tier::Container, "default"), None, 0);
    assert_eq!(estimated.model_usd, Some(0.3));
    assert!(estimated.estimated);
    // Nothing priced at all: no whole cost.
    let nothing = run_cost(&Pricing::default(), (Tier::Replay, "m"), None, 60_000);
    assert_eq!(nothing.whole_usd(), None);
    assert_eq!(nothing.sandbox_minutes, 1.0);
}

#[test]
fn a_batch_budget_over_an_unpriced_tier_or_model_is_refused_unless_allowed() {
    let units = [
        unit(Tier::Container, Some("claude-sonnet")),
        unit(Tier::Microvm, Some("gpt")),
    ];
    let pricing = priced(&["container=0.02"], &["claude=0.1"]);
    let history: BTreeSet<String> = BTreeSet::new();
    let found = unpriced(&units, &pricing, &history);
    assert_eq!(found.tiers, BTreeSet::from([Tier::Microvm]));
    assert_eq!(found.models, BTreeSet::from(["gpt".to_owned()]));
    let problems = refusal(Some(1.0), &pricing, &found).expect("refused");
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("--sandbox-price microvm="),
        "{problems:?}"
    );
    assert!(problems[1].contains("--model-price gpt="), "{problems:?}");
    assert!(problems.iter().all(|p| p.contains("--allow-unpriced")));
    // Without a batch budget, or allowed, nothing is refused.
    assert_eq!(refusal(None, &pricing, &found), None);
    let allowed = Pricing {
        allow_unpriced: true,
        ..pricing.clone()
    };
    assert_eq!(refusal(Some(1.0), &allowed, &found), None);
    // History that saw the model report a cost prices it.
    let seen = BTreeSet::from(["gpt".to_owned()]);
    assert!(unpriced(&units, &pricing, &seen).models.is_empty());
}

#[test]
fn a_batchs_prices_override_the_fleets() {
    let fleet = priced(&["container=0.05", "microvm=0.1"], &["default=1"]);
    let batch = priced(&["container=0.01"], &[]);
    let merged = batch.over(&fleet);
    assert_eq!(sandbox_price(&merged, Tier::Container), Some(0.01));
    assert_eq!(sandbox_price(&merged, Tier::Microvm), Some(0.1));
    assert_eq!(model_price(&merged, "default"), Some(1.0));
}
