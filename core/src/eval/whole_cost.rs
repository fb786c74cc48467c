//! The whole cost of each arm of an eval (decisions.md#whole-cost): model spend plus sandbox
//! minutes at the tier's price, per scenario and pooled, beside the arms' `costUsd`. The
//! envelope's results carry each run's `durationMs` but not its worker's time, so an arm's
//! sandbox minutes are its runs' durations.

use std::collections::BTreeMap;

use cowork_schema::eval::{Arm, ArmSummary, EvalReport};
use serde_json::Value;

use crate::plan::Plan;
use crate::pricing::{model_key, run_cost};
use crate::verdict::view_with_rederived_verdict;

/// Model and sandbox spend of one arm's runs.
#[derive(Clone, Copy, Debug, Default)]
struct ArmCost {
    model_usd: Option<f64>,
    sandbox_usd: Option<f64>,
}

impl ArmCost {
    fn add(&mut self, model_usd: Option<f64>, sandbox_usd: Option<f64>) {
        let sum = |total: Option<f64>, more: Option<f64>| match (total, more) {
            (Some(total), Some(more)) => Some(total + more),
            (total, more) => total.or(more),
        };
        self.model_usd = sum(self.model_usd, model_usd);
        self.sandbox_usd = sum(self.sandbox_usd, sandbox_usd);
    }

    fn fill(&self, summary: &mut ArmSummary) {
        summary.sandbox_cost_usd = Some(self.sandbox_usd.unwrap_or(0.0));
        summary.whole_cost_usd =
            Some(self.model_usd.unwrap_or(0.0) + self.sandbox_usd.unwrap_or(0.0));
    }
}

/// Fills `sandboxCostUsd` and `wholeCostUsd` of every arm summary of `report` (the comparison
/// of the plan's arms `control` as A and `candidate` as B) from the folded runs' results, when
/// the eval set any price; leaves the report as it was otherwise.
pub(super) fn add_whole_costs(
    report: &mut EvalReport,
    plan: &Plan,
    folded: &[(u32, Option<u32>)],
    results: &[Value],
    (control, candidate): (u32, u32),
) {
    let pricing = &plan.flags.pricing;
    if pricing.is_empty() {
        return;
    }
    let report_arm = |index: u32| {
        if index == control {
            Some(Arm::A)
        } else if index == candidate {
            Some(Arm::B)
        } else {
            None
        }
    };
    let mut by_scenario: BTreeMap<(String, Arm), ArmCost> = BTreeMap::new();
    for (&(unit, _), result) in folded.iter().zip(results) {
        let Some(unit) = plan.units.get(unit as usize) else {
            continue;
        };
        let Some(arm) = unit.arm.and_then(|arm| report_arm(arm.index)) else {
            continue;
        };
        let Ok(view) = view_with_rederived_verdict(result) else {
            continue;
        };
        let duration_ms = view
            .duration_ms
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            // `as` saturates for a finite non-negative f64 beyond u64::MAX.
            .map_or(0, |ms| ms.round() as u64);
        let cost = run_cost(
            pricing,
            (unit.tier, &model_key(unit)),
            view.cost_usd,
            duration_ms,
        );
        by_scenario
            .entry((unit.scenario_name.clone(), arm))
            .or_default()
            .add(cost.model_usd, cost.sandbox_usd);
    }
    let mut overall = [ArmCost::default(); 2];
    for ((_, arm), cost) in &by_scenario {
        overall[arm_index(*arm)].add(cost.model_usd, cost.sandbox_usd);
    }
    for (summary, cost) in report.overall.arms.iter_mut().zip(&overall) {
        cost.fill(summary);
    }
    for scenario in &mut report.scenarios {
        for summary in &mut scenario.comparison.arms {
            let cost = by_scenario
                .get(&(scenario.scenario.clone(), summary.arm))
                .copied()
                .unwrap_or_default();
            cost.fill(summary);
        }
    }
}

fn arm_index(arm: Arm) -> usize {
    match arm {
        Arm::A => 0,
        Arm::B => 1,
    }
}
