//! Judging each unit: its status and numbers, read from the rollup (a repeat rollup, a plain
//! cell, or a plain file's one run), and marked incomplete when a job it needed never ran.

use std::collections::{HashMap, HashSet};

use cowork_schema::batch::PlanKindName;
use cowork_schema::ids::UnitRef;
use cowork_schema::rollup::{MatrixCellResult, RepeatRollup, RollupDoc, StopReason};

use super::{Folded, UnitReport, UnitStatus, sum_present};
use crate::reduce::{Judging, arm_label, rollup_passes};
use crate::report::input::{ReportInput, RunBrief, StoredRun};

/// Every unit of the plan, in plan order, judged by `judging`.
pub(super) fn unit_reports<'a>(input: &'a ReportInput, judging: &Judging) -> Vec<UnitReport<'a>> {
    let plan = &input.stored.plan;
    let kind = plan.kind;
    let mut units = Vec::with_capacity(plan.units.len());
    // A plain files batch stops at the first file that threw (harness-behaviour.md#envelope-error):
    // that file gets the envelope's error, later files were never run.
    let mut plain_error = input
        .envelope
        .error
        .as_ref()
        .map(|error| error.message.clone());
    // Grouped once: a sweep has thousands of units and runs.
    // In (unit, repeat index) order: a unit's runs are the slice found by two binary searches.
    let briefs = input.run_briefs();
    let mut detailed_by_unit: HashMap<UnitRef, Vec<&StoredRun>> = HashMap::new();
    for run in &input.runs {
        detailed_by_unit.entry(run.unit).or_default().push(run);
    }
    let incomplete_units: HashSet<&str> = input
        .incomplete
        .iter()
        .flat_map(|incomplete| incomplete.never_ran.iter())
        .map(|job| job.split('/').next().unwrap_or(job))
        .collect();
    for (position, unit) in plan.units.iter().enumerate() {
        let index = unit.unit.index();
        let start = briefs.partition_point(|run| run.unit < unit.unit);
        let end = start + briefs[start..].partition_point(|run| run.unit == unit.unit);
        let all_runs = &briefs[start..end];
        let first_folded = all_runs
            .iter()
            .find(|run| !run.discarded() && run.completed());
        let detailed = detailed_by_unit.remove(&unit.unit).unwrap_or_default();
        let mut report = UnitReport::empty(unit, plan.repeat, all_runs, detailed);
        report.min_pass_rate = judging.min_pass_rate;
        if let Some(error) = &unit.cell_error {
            report.status = UnitStatus::Error(error.clone());
        } else if let Some(rollup) = repeat_rollup_of(&input.rollup, kind, position, index) {
            fill_from_repeat(&mut report, rollup, judging);
        } else if let Some(error) = repeat_cell_error(&input.rollup, index) {
            report.status = UnitStatus::Error(error.to_owned());
        } else if let Some(cell) = plain_cell_of(&input.rollup, index) {
            fill_from_plain_cell(&mut report, cell, first_folded);
        } else if let Some(run) = first_folded {
            fill_from_plain_run(&mut report, run);
        } else if let Some(error) = plain_error.take() {
            report.status = UnitStatus::Error(error);
        }
        if incomplete_units.contains(report.id.as_str()) {
            mark_incomplete(&mut report);
        }
        units.push(report);
    }
    units
}

/// A unit with a job that never ran is incomplete, whatever its stop looks like (the reducer
/// saw the missing job as an error at that index).
fn mark_incomplete(report: &mut UnitReport<'_>) {
    if !matches!(report.status, UnitStatus::Error(_)) {
        report.status = UnitStatus::Incomplete;
        if report.stopped_early == Some(StopReason::Error) {
            report.stopped_early = None;
        }
    }
}

/// The repeat rollup of a unit: the `matrixRepeat` cell with its index, or the files batch's
/// rollup at the unit's position.
fn repeat_rollup_of(
    rollup: &RollupDoc,
    kind: PlanKindName,
    position: usize,
    index: u32,
) -> Option<&RepeatRollup> {
    match kind {
        PlanKindName::Matrix => rollup
            .matrix_repeat
            .as_ref()?
            .cells
            .iter()
            .find(|cell| cell.index == index)?
            .rollup
            .as_ref(),
        PlanKindName::Files => rollup.rollups.as_ref()?.get(position),
    }
}

fn repeat_cell_error(rollup: &RollupDoc, index: u32) -> Option<&str> {
    rollup
        .matrix_repeat
        .as_ref()?
        .cells
        .iter()
        .find(|cell| cell.index == index)?
        .error
        .as_deref()
}

fn plain_cell_of(rollup: &RollupDoc, index: u32) -> Option<&MatrixCellResult> {
    rollup
        .matrix
        .as_ref()?
        .cells
        .iter()
        .find(|cell| cell.index == index)
}

fn fill_from_repeat(report: &mut UnitReport<'_>, rollup: &RepeatRollup, judging: &Judging) {
    report.requested = rollup.requested;
    report.completed = rollup.completed;
    report.passes = rollup.passes;
    report.pass_rate = (rollup.completed > 0).then_some(rollup.pass_rate);
    report.stopped_early = rollup.stopped_early;
    report.arm_label = arm_label(rollup);
    report.cost_usd = rollup.total_cost_usd;
    report.tokens = rollup.total_tokens;
    report.models = rollup.provenance.models.clone();
    report.skills = rollup.provenance.skills.clone();
    report.status = if rollup_passes(rollup, judging) {
        UnitStatus::Passed
    } else {
        UnitStatus::Failed
    };
    // The reducer folds in index order without gaps, so the folded runs are exactly the
    // repeat indices below `completed` (harness-behaviour.md#index-order-reducer).
    report.folded = Folded::RepeatsBelow(rollup.completed);
    report.duration_ms = sum_present(report.runs().map(RunBrief::duration_ms));
}

fn fill_from_plain_cell(
    report: &mut UnitReport<'_>,
    cell: &MatrixCellResult,
    first_folded: Option<&RunBrief>,
) {
    if let Some(error) = &cell.error {
        report.status = UnitStatus::Error(error.clone());
        return;
    }
    report.completed = 1;
    report.passes = u32::from(cell.pass);
    report.pass_rate = Some(if cell.pass { 1.0 } else { 0.0 });
    report.status = if cell.pass {
        UnitStatus::Passed
    } else {
        UnitStatus::Failed
    };
    report.cost_usd = cell.cost_usd;
    report.duration_ms = cell.duration_ms;
    report.folded = Folded::First;
    if let Some(run) = first_folded {
        report.tokens = run.single().and_then(|single| single.tokens);
        provenance_of_run(report, run);
    }
}

fn fill_from_plain_run(report: &mut UnitReport<'_>, run: &RunBrief) {
    let pass = run.pass();
    report.completed = 1;
    report.passes = u32::from(pass);
    report.pass_rate = Some(if pass { 1.0 } else { 0.0 });
    report.status = if pass {
        UnitStatus::Passed
    } else {
        UnitStatus::Failed
    };
    report.cost_usd = run.cost_usd();
    report.tokens = run.single().and_then(|single| single.tokens);
    report.duration_ms = run.duration_ms();
    report.folded = Folded::First;
    provenance_of_run(report, run);
}

/// The models and skills of a unit's only run (a run with a repeat index keeps none: its
/// unit's rollup has them).
fn provenance_of_run(report: &mut UnitReport<'_>, run: &RunBrief) {
    if let Some(single) = run.single() {
        report.models = vec![single.model.clone()];
        report.skills = vec![single.skill.clone()];
    }
}
