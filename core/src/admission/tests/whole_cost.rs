//! Table tests of the whole cost under a batch budget: sandbox minutes at the tier's price
//! count beside model spend, a run without a cost is charged its model's price, and the
//! envelope's `fleet.spend` splits what was spent.

use cowork_schema::pricing::Pricing;

use super::*;

/// A run finished after `run_ms` on its worker, reporting `cost`.
fn finished_after(admission: &Admission, job: JobRef, cost: Option<f64>, run_ms: u64) -> Input {
    event(
        admission,
        job,
        JobEventKind::Finished {
            outcome: completed(true, cost, false),
            artifacts: Vec::new(),
            harness_version: Some("2.0.0".into()),
            exit_code: Some(0),
            run_ms,
            unstored_outcome: None,
            from_record_of_attempt: None,
        },
    )
}

#[test]
fn sandbox_minutes_and_model_prices_count_against_the_batch_budget() {
    let flags = BatchFlags {
        batch_budget_usd: Some(0.5),
        pricing: Pricing {
            sandbox_usd_per_min: [("container".to_owned(), 0.1)].into(),
            ..Pricing::default()
        },
        ..repeat(10)
    };
    let plan = plan_of(&[unit(Tier::Container)], flags);
    let (mut admission, t0) = start(&plan, config(4));
    // The coordinator's prices fill what the batch left out; the batch's own win.
    admission.use_fleet_prices(&Pricing {
        sandbox_usd_per_min: [("container".to_owned(), 9.0)].into(),
        model_usd_per_run: [("default".to_owned(), 0.05)].into(),
        ..Pricing::default()
    });
    assert_eq!(published(&admission.next(t0)), [r(0, 0)]);
    // A minute of sandbox beside $0.01 of model spend: $0.11.
    let input = finished_after(&admission, r(0, 0), Some(0.01), 60_000);
    admission.apply(input, t0);
    assert_eq!(published(&admission.next(t0)), [r(0, 1)]);
    // No cost reported: its model's price stands in; two minutes of sandbox.
    let input = finished_after(&admission, r(0, 1), None, 120_000);
    admission.apply(input, t0);
    // Spent 0.11 + 0.25 = 0.36; the estimate (0.25 × 3/2) does not fit beside it: the budget
    // stops the batch, which model spend alone (0.06) was far from.
    let decision = admission.next(t0);
    assert_eq!(published(&decision), []);
    assert!(matches!(decision.notes[..], [Note::BudgetStopped { .. }]));
    let spent = admission
        .progress()
        .budget_spent_usd
        .expect("a batch budget");
    assert!((spent - 0.36).abs() < 1e-9, "{spent}");
    assert!((admission.progress().cost_usd - 0.01).abs() < 1e-9);
    let meta = admission.fleet_meta(&admission.finish().expect("decided"));
    let spend = meta.spend.expect("prices set");
    assert!((spend.model_usd - 0.06).abs() < 1e-9, "{spend:?}");
    assert!((spend.estimated_model_usd - 0.05).abs() < 1e-9, "{spend:?}");
    assert!((spend.sandbox_usd - 0.3).abs() < 1e-9, "{spend:?}");
    assert!((spend.sandbox_minutes - 3.0).abs() < 1e-9, "{spend:?}");
    assert!(spend.unpriced_tiers.is_empty() && spend.unpriced_models.is_empty());
    let budget = meta.batch_budget.expect("a batch budget");
    assert!((budget.spent_usd - spend.total_usd).abs() < 1e-12);
}

#[test]
fn without_prices_the_split_names_what_ran_unpriced() {
    let flags = BatchFlags {
        batch_budget_usd: Some(5.0),
        ..repeat(2)
    };
    let plan = plan_of(&[unit(Tier::Microvm)], flags);
    let (mut admission, t0) = start(&plan, config(4));
    assert_eq!(published(&admission.next(t0)), [r(0, 0)]);
    let input = finished_after(&admission, r(0, 0), None, 60_000);
    admission.apply(input, t0);
    let spend = admission
        .fleet_meta(&reduction_so_far(&admission))
        .spend
        .expect("a batch budget");
    assert_eq!(spend.unpriced_tiers, ["microvm"]);
    assert_eq!(spend.unpriced_models, ["default"]);
    assert_eq!(spend.total_usd, 0.0);
}
