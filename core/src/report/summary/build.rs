//! [`summarize`]: judges every unit, then adds up the batch: totals, cost (a replay's as
//! recorded), simulated runs, truncated cells, failure reasons and stop notes.

use cowork_schema::batch::{PlanKindName, PlanSummary};

use super::notes::{failure_reasons, stop_notes};
use super::units::unit_reports;
use super::{Summary, UnitReport, discarded_of, sum_present};
use crate::reduce::Judging;
use crate::report::input::{ReportInput, RunBrief};

/// Reads a stored batch into the summary every renderer shares.
pub(crate) fn summarize(input: &ReportInput) -> Summary<'_> {
    let plan = &input.stored.plan;
    let fleet = &input.rollup.fleet;
    let judging = Judging {
        min_pass_rate: fleet.min_pass_rate,
        allow_budget_stop: fleet.allow_budget_stop,
        allow_truncated_matrix: fleet.allow_truncated_matrix,
    };
    let kind = plan.kind;
    let briefs = input.run_briefs();
    let mut units = unit_reports(input, &judging);
    let truncated_cells = truncated_cells_of(plan);
    let reasons = failure_reasons(&units);
    let stops = stop_notes(input, &units, truncated_cells);
    // Every stored run counts, discarded ones too: they ran (and were paid for) like the rest.
    let stored_simulated = briefs.iter().filter(|run| run.simulated()).count() as u64;
    let simulated_runs = fleet.simulated_runs.max(stored_simulated);
    let summed_run_ms = summed_run_ms(briefs);
    let simulated = simulated_runs > 0
        || input.stored.spec.executor == cowork_schema::batch::ExecutorKind::Sim
        || input.envelope.fleet_view().simulated;
    let total_runs = units.iter().map(|unit| u64::from(unit.completed)).sum();
    let total_passes = units.iter().map(|unit| u64::from(unit.passes)).sum();
    if input.stored.spec.mode.spends_nothing() {
        charge_replay(&mut units);
    }
    let total_cost_usd = sum_present(units.iter().map(|unit| unit.cost_usd));
    let recorded_cost_usd = sum_present(units.iter().map(|unit| unit.recorded_cost_usd));
    let total_duration_ms = sum_present(units.iter().map(|unit| unit.duration_ms));
    Summary {
        input,
        batch_id: input.stored.batch_id.as_str(),
        kind,
        units,
        truncated_cells,
        reasons,
        stops,
        simulated_runs,
        simulated,
        judging,
        total_runs,
        total_passes,
        total_cost_usd,
        recorded_cost_usd,
        total_duration_ms,
        discarded: discarded_of(input),
        stored_runs: briefs.len() as u64,
        summed_run_ms,
    }
}

/// Matrix cells cut by `--max-cells`: (first index not run, count).
fn truncated_cells_of(plan: &PlanSummary) -> Option<(u32, u32)> {
    match (plan.kind, plan.truncated) {
        (PlanKindName::Matrix, true) => {
            let ran = u32::try_from(plan.units.len()).unwrap_or(u32::MAX);
            Some((ran, plan.requested_cells.saturating_sub(ran)))
        }
        _ => None,
    }
}

/// Summed `durationMs` of every stored run, and how many had one.
fn summed_run_ms(briefs: &[RunBrief]) -> (Option<f64>, u64) {
    let (mut timed_sum, mut timed_count) = (0.0, 0u64);
    for run_ms in briefs.iter().filter_map(RunBrief::duration_ms) {
        timed_sum += run_ms;
        timed_count += 1;
    }
    ((timed_count > 0).then_some(timed_sum), timed_count)
}

/// A replay spends nothing: the cost in its results is what the recorded runs cost, shown
/// as such beside the $0 it spent (decisions.md#replay-spends-nothing).
fn charge_replay(units: &mut [UnitReport<'_>]) {
    for unit in units {
        unit.recorded_cost_usd = unit.cost_usd.take();
        unit.cost_usd = Some(0.0);
    }
}
