//! What a decided batch's admission reports: the envelope's `fleet` key and `stats.json`.

use std::time::Instant;

use cowork_schema::fleet::{
    AdmissionMeta, BATCH_BUDGET_SCOPE, BatchBudgetMeta, DiscardedRunMeta, DiscardedTotal,
    FleetJobs, FleetMeta, ModelLimitMeta, StopError, UsageLimitPauses, WorkerMeta,
};
use cowork_schema::history::{BatchStats, UnitStats};
use cowork_schema::rollup::{FoldOrder, RepeatRollup};

use crate::history::{median_f64, median_u64};
use crate::reduce::BatchReduction;

use super::{Admission, JobRef};

impl Admission {
    /// The envelope's `fleet` key of the decided batch.
    pub fn fleet_meta(&self, reduction: &BatchReduction) -> FleetMeta {
        let discarded = self.discarded_runs(reduction);
        let discarded_total = DiscardedTotal {
            runs: discarded.len() as u64,
            // Folding from 0.0 keeps an all-unpriced list at 0, not -0.
            cost_usd: discarded
                .iter()
                .filter_map(|run| run.cost_usd)
                .fold(0.0, |sum, cost| sum + cost),
        };
        FleetMeta {
            batch_id: self.batch_id.to_string(),
            min_pass_rate: self.flags.min_pass_rate,
            allow_budget_stop: self.flags.allow_budget_stop,
            allow_truncated_matrix: self.flags.allow_truncated_matrix,
            exit_code: reduction.exit_code,
            fold_order: FoldOrder::Index,
            results_order: FoldOrder::Index,
            executor: self.executor.to_owned(),
            simulated: reduction.simulated_runs > 0,
            simulated_runs: reduction.simulated_runs,
            harness_versions: self.ledger.harness_versions.clone(),
            jobs: self.job_counts(),
            generation: self.generation,
            batch_budget: self.batch_budget_meta(),
            model_limits: self
                .limits
                .snapshot()
                .into_iter()
                .map(|(rule, _, max_in_flight)| {
                    let delayed_admissions = self.delayed.get(&rule).copied().unwrap_or(0);
                    let meta = ModelLimitMeta {
                        max_in_flight,
                        delayed_admissions,
                    };
                    (rule, meta)
                })
                .collect(),
            usage_limit_pauses: self.usage_limit_pauses(),
            discarded,
            workers: self
                .ledger
                .workers
                .iter()
                .map(|(id, tally)| {
                    let meta = WorkerMeta {
                        jobs: tally.jobs,
                        run_ms: tally.run_ms,
                    };
                    (id.clone(), meta)
                })
                .collect(),
            discarded_total,
            admission: self.admission_meta(),
            stop_errors: reduction
                .stop_errors
                .iter()
                .map(|(unit, category, message)| StopError {
                    unit: unit.clone(),
                    message: message.clone(),
                    category: category.clone(),
                })
                .collect(),
            control_changes: self.control_changes.clone(),
            spend: self.spend_meta(),
        }
    }

    /// The runs the reduction left out of every rollup, named by job id.
    fn discarded_runs(&self, reduction: &BatchReduction) -> Vec<DiscardedRunMeta> {
        reduction
            .discarded
            .iter()
            .map(|job| DiscardedRunMeta {
                job: self
                    .job_id(JobRef {
                        unit: job.unit,
                        repeat_index: job.repeat_index,
                    })
                    .to_string(),
                completed: job.completed,
                cost_usd: job.cost_usd,
            })
            .collect()
    }

    /// What happened to the batch's jobs, counted.
    fn job_counts(&self) -> FleetJobs {
        let progress = &self.progress;
        FleetJobs {
            planned: progress.planned,
            admitted: progress.admitted,
            finished: progress.finished,
            skipped: progress.skipped,
            retries: progress.retries,
            sandbox_start_retries: progress.sandbox_start_retries,
            disrupted: progress.disrupted,
            redelivered: progress.redelivered,
            duplicates: progress.duplicates,
            reacked: progress.reacked,
            rerun_on_resume: self.ledger.superseded,
            malformed_events: progress.malformed_events,
            refused_events: progress.refused_events,
            republished: progress.republished,
            lost: progress.lost,
            withdrawn: progress.withdrawn,
        }
    }

    /// The batch budget, what was spent against it and whether it stopped units; `None`
    /// without `--batch-budget-usd`.
    fn batch_budget_meta(&self) -> Option<BatchBudgetMeta> {
        let spent_usd = self.whole.spent();
        self.flags.batch_budget_usd.map(|cap| BatchBudgetMeta {
            cap_usd: cap,
            spent_usd,
            overshoot_usd: (spent_usd - cap).max(0.0),
            stopped: self.budget_stopped.is_some(),
            stopped_units: self.budget_stopped.clone().unwrap_or_default(),
            scope: BATCH_BUDGET_SCOPE.to_owned(),
        })
    }

    /// The tier pauses that `usage_limit` results caused.
    fn usage_limit_pauses(&self) -> UsageLimitPauses {
        UsageLimitPauses {
            count: self.pauses.count(),
            total_ms: u64::try_from(self.pauses.total().as_millis()).unwrap_or(u64::MAX),
            by_tier: self
                .pauses
                .by_tier()
                .iter()
                .map(|(tier, n)| (tier.as_str().to_owned(), *n))
                .collect(),
        }
    }

    /// How admission was set up: window, unit order, speculation and the per-unit budget.
    fn admission_meta(&self) -> AdmissionMeta {
        AdmissionMeta {
            window: self.window as u64,
            unit_order: if self.order.by_history() {
                "history"
            } else {
                "plan"
            }
            .to_owned(),
            speculation: self.speculation,
            unit_budget_usd: self.unit_budget_usd,
            max_unit_spent_usd: self.unit_budget_usd.map(|_| {
                self.units
                    .iter()
                    .map(|unit| unit.spent_usd)
                    .fold(0.0, f64::max)
            }),
        }
    }

    /// `stats.json` of the decided batch: per unit, its runs, what they cost and how long
    /// they took. `decided_at_ms` is the wall-clock time of the decision (ms since the Unix
    /// epoch) and `now` the same instant on the clock admission runs on.
    pub fn batch_stats(
        &self,
        reduction: &BatchReduction,
        decided_at_ms: u64,
        now: Instant,
    ) -> BatchStats {
        // Files batches list one rollup per file in file order, matrices one cell per unit.
        let rollup_of = |unit: usize| -> Option<&RepeatRollup> {
            match (&reduction.rollups, &reduction.matrix_repeat) {
                (Some(rollups), _) => rollups.get(unit),
                (None, Some(matrix)) => matrix.cells.get(unit)?.rollup.as_ref(),
                (None, None) => None,
            }
        };
        let mut folded_plain = vec![false; self.units.len()];
        for (unit, _) in &reduction.results {
            if let Some(folded) = folded_plain.get_mut(*unit as usize) {
                *folded = true;
            }
        }
        let units = self
            .units
            .iter()
            .enumerate()
            .map(|(index, unit)| {
                let ledger = &self.ledger.units[index];
                let (folded, passes) = match rollup_of(index) {
                    Some(rollup) => (rollup.completed, rollup.passes),
                    None => {
                        let folded = folded_plain[index];
                        let passed = folded && ledger.passed == Some(true);
                        (u32::from(folded), u32::from(passed))
                    }
                };
                UnitStats {
                    label: unit.label.clone(),
                    scenario: unit.scenario.clone(),
                    axes: unit.axes.clone(),
                    arm: unit.arm.clone(),
                    runs: ledger.runs,
                    folded,
                    passes,
                    priced_runs: ledger.priced_runs,
                    cost_usd: ledger.cost_usd,
                    median_cost_usd: median_f64(&mut ledger.costs.values()),
                    median_run_ms: median_u64(&mut ledger.run_ms.values()),
                    max_run_ms: ledger.max_run_ms,
                }
            })
            .collect();
        BatchStats {
            batch_id: self.batch_id.clone(),
            decided_at_ms,
            wall_ms: self.first_admission.map_or(0, |first| {
                u64::try_from(now.saturating_duration_since(first).as_millis()).unwrap_or(u64::MAX)
            }),
            units,
        }
    }
}
