//! The live view of a batch under admission: what the live page shows, built on demand from
//! counters kept as outcomes arrive, and the delta between two views.
//!
//! Its size does not grow with the batch: at most [`LIVE_CELLS_MAX`] heatmap cells (beyond
//! that many units, consecutive units share a cell) and [`LIVE_FAILURES_MAX`] failures. A
//! unit's runs, for its strip, are read one unit at a time ([`Admission::live_unit_runs`]).

use std::collections::VecDeque;
use std::time::Instant;

use cowork_schema::event::{ErrorCategory, JobOutcome};
use cowork_schema::layout::{BatchKey, JobKey};
use cowork_schema::live::{
    LiveCell, LiveCost, LiveDelta, LiveDispatch, LiveFailure, LiveProgress, LiveRun, LiveSnapshot,
    LiveUnitRuns,
};

use super::{Admission, Finished, JobRef, UnitAdmission};

/// Heatmap cells a snapshot holds at most: a 100,000-unit batch's snapshot stays far below
/// 200 KB, and a page draws it at once.
pub const LIVE_CELLS_MAX: usize = 1000;
/// Latest failures a snapshot holds.
pub const LIVE_FAILURES_MAX: usize = 20;
/// Runs of one unit's strip at most (a strip of more is cut, its end said).
const LIVE_RUNS_MAX: u32 = 5000;

/// One unit's finished runs, by verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct UnitCounts {
    finished: u32,
    passed: u32,
    failed: u32,
    errored: u32,
}

/// What the live view counts beside the progress.
#[derive(Clone, Debug, Default)]
pub(super) struct LiveTally {
    units: Vec<UnitCounts>,
    failures: VecDeque<LiveFailure>,
    infra_failed: u64,
    /// Finished after catch-up: the rate is measured on these.
    finished_live: u64,
    priced_runs: u64,
    priced_usd: f64,
}

impl LiveTally {
    pub(super) fn new(n_units: usize) -> LiveTally {
        LiveTally {
            units: vec![UnitCounts::default(); n_units],
            ..LiveTally::default()
        }
    }

    /// Counts a first `finished` outcome of `unit`.
    pub(super) fn observe(
        &mut self,
        finished: &Finished,
        unit: &UnitAdmission,
        cost: Option<f64>,
        catching_up: bool,
    ) {
        if !catching_up {
            self.finished_live += 1;
        }
        if let Some(cost) = cost.filter(|cost| cost.is_finite() && *cost >= 0.0) {
            self.priced_runs += 1;
            self.priced_usd += cost;
        }
        let Some(counts) = self.units.get_mut(finished.unit as usize) else {
            return;
        };
        counts.finished += 1;
        let (kind, reason) = match &finished.outcome {
            JobOutcome::Completed { run } if run.pass => {
                counts.passed += 1;
                return;
            }
            JobOutcome::Completed { run } => {
                counts.failed += 1;
                let reason = run
                    .assertions
                    .iter()
                    .find(|assertion| !assertion.pass)
                    .map(|assertion| {
                        let key = assertion.key.as_deref().unwrap_or("assertion");
                        match &assertion.message {
                            Some(message) => format!("{key}: {message}"),
                            None => format!("{key} failed"),
                        }
                    })
                    .or_else(|| run.signals.first().map(|signal| signal.code.clone()))
                    .unwrap_or_else(|| "the verdict failed".to_owned());
                ("fail", reason)
            }
            JobOutcome::Unanswered { message, .. } => {
                counts.errored += 1;
                ("unanswered", message.clone())
            }
            JobOutcome::Error { category, message } => {
                counts.errored += 1;
                if matches!(
                    category,
                    ErrorCategory::Infra | ErrorCategory::InfraAfterSpend
                ) {
                    self.infra_failed += 1;
                }
                ("error", format!("{}: {message}", category.as_str()))
            }
        };
        let prefix = JobKey::new(&finished.job_id).batch_prefix();
        let files = finished
            .artifacts
            .iter()
            .filter_map(|artifact| prefix.relative(&artifact.key))
            .take(4)
            .map(str::to_owned)
            .collect();
        self.failures.push_front(LiveFailure {
            job_id: finished.job_id.to_string(),
            unit: finished.unit,
            scenario: unit.scenario.clone(),
            cell: unit.label.clone(),
            kind: kind.to_owned(),
            reason: shorten(&reason, 300),
            files,
        });
        self.failures.truncate(LIVE_FAILURES_MAX);
    }
}

/// `text` cut to at most `max` characters, with an ellipsis when cut.
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

impl Admission {
    /// The live view at `now` (state `running`, `paused` or `cancelling`; the caller says
    /// when the batch is final, and adds workers and the fleet's words).
    pub fn live_snapshot(&self, now: Instant) -> LiveSnapshot {
        let progress = &self.progress;
        let queued = self
            .outstanding
            .keys()
            .filter(|ordinal| !self.started.contains(**ordinal))
            .count() as u64;
        let remaining = progress
            .planned
            .saturating_sub(progress.finished + progress.skipped);
        let elapsed_s = self
            .first_admission
            .map(|first| now.saturating_duration_since(first).as_secs_f64())
            .unwrap_or(0.0);
        let per_second = (elapsed_s >= 1.0 && self.live.finished_live > 0)
            .then(|| self.live.finished_live as f64 / elapsed_s);
        let per_run_usd = (self.live.priced_runs > 0)
            .then(|| self.live.priced_usd / self.live.priced_runs as f64);
        let state = if self.cancelling {
            "cancelling"
        } else if self.dispatch.is_paused() {
            "paused"
        } else {
            "running"
        };
        let (units_per_cell, cells) = self.live_cells();
        LiveSnapshot {
            batch_id: self.batch_id.to_string(),
            state: state.to_owned(),
            simulated: self.executor == "sim",
            progress: LiveProgress {
                planned: progress.planned,
                queued,
                running: progress.running,
                finished: progress.finished,
                passed: progress.passed,
                failed: progress.failed,
                errored: progress.errored,
                infra_failed: self.live.infra_failed,
                discarded: progress.discarded,
                skipped: progress.skipped,
                per_minute: per_second.map(|rate| round2(rate * 60.0)),
                // No ETA while dispatch is paused: nothing new starts until someone resumes.
                eta_s: per_second
                    .filter(|_| !self.dispatch.is_paused())
                    .map(|rate| (remaining as f64 / rate).ceil() as u64),
            },
            cost: LiveCost {
                spent_usd: progress.cost_usd,
                max_budget_usd: self.flags.max_budget_usd,
                batch_budget_usd: self.flags.batch_budget_usd,
                per_run_usd,
                projected_usd: per_run_usd
                    .map(|price| progress.cost_usd + remaining as f64 * price),
            },
            dispatch: LiveDispatch {
                paused: self.dispatch.is_paused(),
                epoch: self.dispatch.epoch(),
                max_running: self.window as u64,
                held_by: progress.held_by.clone(),
                paused_tiers: progress.paused_tiers.clone(),
                shares: progress.shares.clone(),
            },
            units_per_cell,
            cells,
            min_pass_rate: Some(self.flags.min_pass_rate),
            failures: self.live.failures.iter().cloned().collect(),
            ..LiveSnapshot::default()
        }
    }

    /// The heatmap: one cell per unit, or per run of consecutive units past
    /// [`LIVE_CELLS_MAX`].
    fn live_cells(&self) -> (u32, Vec<LiveCell>) {
        let n_units = self.units.len();
        let per_cell = n_units.div_ceil(LIVE_CELLS_MAX).max(1);
        let runs = self.grid.runs();
        let cells = self
            .units
            .chunks(per_cell)
            .zip(self.live.units.chunks(per_cell))
            .enumerate()
            .map(|(index, (units, counts))| {
                let first = (index * per_cell) as u32;
                let (row, col) = match units {
                    [unit] => (
                        unit.scenario.clone(),
                        unit.axes
                            .as_ref()
                            .map_or_else(|| "-".to_owned(), |axes| axes.label()),
                    ),
                    _ => (
                        format!("units {}–{}", first + 1, first + units.len() as u32),
                        String::new(),
                    ),
                };
                let mut cell = LiveCell {
                    unit: first,
                    row,
                    col,
                    ..LiveCell::default()
                };
                for (unit, count) in units.iter().zip(counts) {
                    if unit.runnable {
                        cell.runs += runs;
                    }
                    cell.finished += count.finished;
                    cell.passed += count.passed;
                    cell.failed += count.failed;
                    cell.errored += count.errored;
                }
                cell
            })
            .collect();
        (per_cell as u32, cells)
    }

    /// The runs of unit `unit` for its strip; `None` for a unit the plan does not have.
    pub fn live_unit_runs(&self, unit: u32) -> Option<LiveUnitRuns> {
        let state = self.units.get(unit as usize)?;
        let prefix = BatchKey::new(&self.batch_id).prefix();
        let runs = (0..self.grid.runs().min(LIVE_RUNS_MAX))
            .map(|run| {
                let ordinal = self.grid.ordinal(unit, run);
                let job = JobRef {
                    unit,
                    repeat_index: self.grid.repeat_index(run),
                };
                let result = self
                    .result_location(job)
                    .and_then(|location| prefix.relative(&location.key).map(str::to_owned));
                let state = if self.finished.contains(ordinal) {
                    if self.passed.contains(ordinal) {
                        "pass"
                    } else if result.is_some() {
                        "fail"
                    } else {
                        "error"
                    }
                } else if self.started.contains(ordinal) {
                    "running"
                } else if self.outstanding.contains_key(&ordinal) {
                    "queued"
                } else {
                    "waiting"
                };
                LiveRun {
                    run,
                    state: state.to_owned(),
                    result,
                }
            })
            .collect();
        Some(LiveUnitRuns {
            unit,
            label: state.label.clone(),
            runs,
        })
    }
}

fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// What changed from `before` to `after` (two snapshots of the same batch with the same
/// cells); empty when nothing did.
pub fn live_delta(before: &LiveSnapshot, after: &LiveSnapshot) -> LiveDelta {
    fn changed<T: PartialEq + Clone>(before: &T, after: &T) -> Option<T> {
        (before != after).then(|| after.clone())
    }
    let cells = after
        .cells
        .iter()
        .enumerate()
        .filter(|(index, cell)| before.cells.get(*index) != Some(*cell))
        .map(|(index, cell)| (index as u32, cell.clone()))
        .collect();
    LiveDelta {
        state: changed(&before.state, &after.state),
        progress: changed(&before.progress, &after.progress),
        cost: changed(&before.cost, &after.cost),
        dispatch: changed(&before.dispatch, &after.dispatch),
        cells,
        failures: changed(&before.failures, &after.failures),
        workers: changed(&before.workers, &after.workers),
        unserved_tiers: changed(&before.unserved_tiers, &after.unserved_tiers),
        stall: changed(&before.stall, &after.stall),
        control_changes: changed(&before.control_changes, &after.control_changes),
        verdict: changed(&before.verdict, &after.verdict).flatten(),
    }
}
