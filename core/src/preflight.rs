//! What `--dry-run` prints before anything is spent: the jobs of each unit, its tier and job
//! timeout, what earlier batches say it will cost and take, and the caps that would apply.
//!
//! Pure: the plan and the history estimates ([`crate::history::estimates`]) come in, a
//! [`Preflight`] comes out; the CLI prints it.

use std::collections::BTreeMap;

use cowork_schema::batch::BatchFlags;
use cowork_schema::job::Tier;

use crate::history::UnitEstimate;
use crate::plan::Plan;

/// About how long the CLI takes to start before a dir replay (node and the CLI loaded), paid
/// once per replay pack (harness-behaviour.md#replay-packs).
pub const REPLAY_PROCESS_START_MS: u64 = 400;

/// About how long the CLI's dir replay takes per cassette once started, when no earlier replay
/// batch says better (cowork-harness 2.0.0 on one core).
pub const REPLAY_MS_PER_CASSETTE: u64 = 6;

/// How long a replay corpus takes, from the replay rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayEstimate {
    /// Wall time on the given slots.
    pub wall_ms: u64,
    /// Replay time per cassette, a process start's share included.
    pub ms_per_replay: u64,
    /// Harness processes the corpus takes (one per pack).
    pub n_packs: u64,
    /// `true` when the rate came from earlier replay batches, `false` for the CLI's own rate.
    pub from_history: bool,
}

/// How long `n_jobs` replays take on `slots` slots in packs of at most `replay_pack`: each
/// slot replays an even share of the corpus in `ceil(share / replay_pack)` processes. With
/// `history_run_ms` (the run time earlier batches recorded for these replays, each job's
/// share of its pack's process included) that rate is used; without it, a process start plus
/// the CLI's rate per cassette.
pub fn replay_estimate(
    n_jobs: u64,
    slots: u32,
    replay_pack: u32,
    history_run_ms: Option<u64>,
) -> ReplayEstimate {
    let slots = u64::from(slots.max(1));
    let replay_pack = u64::from(replay_pack.max(1));
    let share = n_jobs.div_ceil(slots);
    let packs_per_slot = share.div_ceil(replay_pack);
    let n_packs = n_jobs.div_ceil(share.div_ceil(packs_per_slot.max(1)).max(1));
    match history_run_ms {
        Some(run_ms) if n_jobs > 0 => {
            let ms_per_replay = run_ms.div_ceil(n_jobs);
            ReplayEstimate {
                wall_ms: share * ms_per_replay,
                ms_per_replay,
                n_packs,
                from_history: true,
            }
        }
        _ => {
            let wall_ms = packs_per_slot * REPLAY_PROCESS_START_MS + share * REPLAY_MS_PER_CASSETTE;
            ReplayEstimate {
                wall_ms,
                ms_per_replay: if share == 0 {
                    0
                } else {
                    wall_ms.div_ceil(share)
                },
                n_packs,
                from_history: false,
            }
        }
    }
}

/// One unit of the plan with its estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct PreflightRow {
    /// The unit's label (the rollup's `scenario`).
    pub label: String,
    pub tier: Tier,
    /// Jobs planned for the unit (0 for a cell with a pre-execution error).
    pub jobs: u64,
    /// The job's hard wall-clock limit, in milliseconds.
    pub job_timeout_ms: u64,
    /// The cell error that keeps the unit from running.
    pub cell_error: Option<String>,
    /// What history says, when an earlier batch ran this unit.
    pub estimate: Option<UnitEstimate>,
}

impl PreflightRow {
    /// Estimated cost of the unit's jobs: jobs × median cost per run.
    pub fn cost_usd(&self) -> Option<f64> {
        let per_run = self.estimate.as_ref()?.cost_per_run_usd?;
        Some(per_run * self.jobs as f64)
    }

    /// Estimated run time of the unit's jobs, summed: jobs × median run time.
    pub fn run_ms(&self) -> Option<u64> {
        let per_run = self.estimate.as_ref()?.run_ms?;
        Some(per_run.saturating_mul(self.jobs))
    }
}

/// A cap that applies to the batch, with what the estimate says about it.
#[derive(Clone, Debug, PartialEq)]
pub struct Cap {
    /// The flag, e.g. `--batch-budget-usd`.
    pub flag: &'static str,
    /// What it does to this batch, in words.
    pub effect: String,
}

/// The dry run of one batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Preflight {
    pub rows: Vec<PreflightRow>,
    pub n_jobs: u64,
    /// Estimated cost of the units that have history, and how many units have none.
    pub cost_usd: Option<f64>,
    pub units_without_history: usize,
    /// Estimated run time of every job with history, summed.
    pub run_ms: Option<u64>,
    /// Estimated wall time on `slots` parallel slots (`None` when the slots are unknown, as
    /// for a fleet, or nothing has history).
    pub wall_ms: Option<u64>,
    pub caps: Vec<Cap>,
}

/// The dry run of `plan` with `estimates` by unit label, on `slots` slots when known.
pub fn preflight(
    plan: &Plan,
    estimates: &BTreeMap<String, UnitEstimate>,
    slots: Option<u32>,
) -> Preflight {
    let runs = u64::from(plan.runs_per_unit());
    let rows: Vec<PreflightRow> = plan
        .units
        .iter()
        .map(|unit| PreflightRow {
            label: unit.label.clone(),
            tier: unit.tier,
            jobs: if unit.cell_error.is_some() { 0 } else { runs },
            job_timeout_ms: unit.timeout_ms,
            cell_error: unit.cell_error.clone(),
            estimate: estimates.get(&unit.label).cloned(),
        })
        .collect();
    let runnable = || rows.iter().filter(|row| row.jobs > 0);
    let costs: Vec<f64> = runnable().filter_map(PreflightRow::cost_usd).collect();
    let times: Vec<u64> = runnable().filter_map(PreflightRow::run_ms).collect();
    let units_without_history = runnable()
        .filter(|row| row.cost_usd().is_none() && row.run_ms().is_none())
        .count();
    let run_ms = (!times.is_empty()).then(|| times.iter().sum::<u64>());
    let longest_run = runnable()
        .filter_map(|row| row.estimate.as_ref()?.run_ms)
        .max()
        .unwrap_or(0);
    let wall_ms = match (run_ms, slots) {
        // Slots run in parallel, but no batch finishes before its longest run does.
        (Some(total), Some(slots)) if slots > 0 => {
            Some((total / u64::from(slots)).max(longest_run))
        }
        _ => None,
    };
    let cost_usd = (!costs.is_empty()).then(|| costs.iter().sum::<f64>());
    let caps = caps(&plan.flags, &rows, cost_usd, plan.truncated);
    Preflight {
        n_jobs: plan.n_jobs(),
        rows,
        cost_usd,
        units_without_history,
        run_ms,
        wall_ms,
        caps,
    }
}

/// The caps of `flags` that would apply, each with its effect on this batch as far as the
/// estimate can tell.
fn caps(
    flags: &BatchFlags,
    rows: &[PreflightRow],
    cost_usd: Option<f64>,
    truncated: bool,
) -> Vec<Cap> {
    let mut caps = Vec::new();
    if let Some(cap) = flags.batch_budget_usd {
        let effect = match cost_usd {
            Some(estimate) if estimate > cap => format!(
                "${cap:.2} for the whole batch; the estimate (${estimate:.2}) is over it, so the batch \
                 would stop early as a budget stop"
            ),
            Some(estimate) => {
                format!("${cap:.2} for the whole batch; the estimate (${estimate:.2}) fits")
            }
            None => format!("${cap:.2} for the whole batch"),
        };
        caps.push(Cap {
            flag: "--batch-budget-usd",
            effect,
        });
    }
    if let Some(cap) = flags.max_budget_usd {
        let over: Vec<&str> = rows
            .iter()
            .filter(|row| row.cost_usd().is_some_and(|cost| cost > cap))
            .map(|row| row.label.as_str())
            .collect();
        let mut effect = format!("${cap:.2} per unit");
        if !over.is_empty() {
            effect.push_str(&format!(
                "; {} of {} unit(s) would stop early by the estimate: {}",
                over.len(),
                rows.len(),
                over.join(", ")
            ));
        }
        caps.push(Cap {
            flag: "--max-budget-usd",
            effect,
        });
    }
    if flags.repeat.is_some() {
        caps.push(Cap {
            flag: "--min-pass-rate",
            effect: format!(
                "a unit passes at {:.0}% of its runs or more",
                flags.min_pass_rate * 100.0
            ),
        });
    }
    if flags.stop_on_diverge {
        caps.push(Cap {
            flag: "--stop-on-diverge",
            effect: "a unit stops at its first run that disagrees with an earlier one".to_owned(),
        });
    }
    if truncated {
        caps.push(Cap {
            flag: "--max-cells",
            effect: format!("only the first {} matrix cells run", flags.max_cells),
        });
    }
    caps
}

#[cfg(test)]
mod tests;
