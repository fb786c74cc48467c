//! How a job's events change admission: a start arms the job's deadline; the first `finished`
//! settles the job, is counted and offered to the reducer; a later one is a re-ack or a
//! duplicate and changes nothing but its count.

use std::time::Instant;

use cowork_schema::event::{ArtifactRef, InfraClass, JobEvent, JobEventKind, JobOutcome};
use cowork_schema::ids::JobId;

use super::reacks::Report;
use super::{Admission, JobRef, LOST_JOB_WORKER, Note, Withdrawal, is_killed, is_rerun_on_resume};
use crate::reduce::Offer;

impl Admission {
    /// Takes one job event into account at `now`.
    pub(super) fn apply_event(&mut self, event: JobEvent, now: Instant) {
        let JobEvent {
            job_id,
            attempt,
            generation,
            worker_id,
            event,
            ..
        } = event;
        let Some((unit, run)) = JobId::parse(job_id.as_str())
            .and_then(|(_, unit, repeat)| self.grid.locate(unit, repeat))
        else {
            self.notes.push(Note::ForeignJob { job_id });
            return;
        };
        match event {
            JobEventKind::Started => self.apply_started((unit, run), generation, worker_id, now),
            JobEventKind::Failed {
                class, will_retry, ..
            } => {
                if matches!(class, InfraClass::SandboxStart | InfraClass::Spawn) {
                    // What the stall watchdog reads: handed back before anything ran.
                    self.progress.sandbox_start_failures += 1;
                }
                self.apply_failed((unit, run), class, will_retry);
            }
            JobEventKind::Finished {
                outcome,
                artifacts,
                harness_version,
                run_ms,
                unstored_outcome,
                from_record_of_attempt,
                ..
            } => {
                let unstored_cost = match unstored_outcome {
                    Some(JobOutcome::Completed { run }) => run.cost_usd,
                    _ => None,
                };
                let finished = Finished {
                    job_id,
                    unit,
                    run,
                    attempt,
                    generation,
                    worker_id,
                    outcome,
                    artifacts,
                    harness_version,
                    run_ms,
                    unstored_cost,
                    from_record_of_attempt,
                };
                self.apply_finished(finished, now);
            }
        }
    }

    /// A delivery handed back. One whose sandbox did not start on its worker, or whose run a
    /// worker's stop cut short (its drain grace passed), is counted apart and is no attempt of
    /// the job: its next delivery is not a redelivery.
    fn apply_failed(&mut self, (unit, run): (u32, u32), class: InfraClass, will_retry: bool) {
        if !will_retry {
            return;
        }
        match class {
            InfraClass::SandboxStart => self.progress.sandbox_start_retries += 1,
            InfraClass::WorkerLost => self.progress.disrupted += 1,
            InfraClass::Bundle | InfraClass::Spawn | InfraClass::Upload => {
                self.progress.retries += 1;
                return;
            }
        }
        let ordinal = self.grid.ordinal(unit, run);
        if let Some(job) = self.outstanding.get_mut(&ordinal) {
            job.free_deliveries = job.free_deliveries.saturating_add(1);
        }
    }

    fn apply_started(
        &mut self,
        (unit, run): (u32, u32),
        generation: u32,
        worker_id: String,
        now: Instant,
    ) {
        // A start of an earlier generation says nothing about this one: the job is either
        // finished (its event follows) or runs again.
        if generation < self.generation {
            return;
        }
        let ordinal = self.grid.ordinal(unit, run);
        if self.finished.contains(ordinal) {
            return;
        }
        if self.started.insert(ordinal) {
            self.progress.running += 1;
        }
        let withdrawn = (self.cancelling && self.withdrawal == Withdrawal::Done)
            || self.dispatch.withdrew_any();
        if !self.outstanding.contains_key(&ordinal) && (withdrawn || !self.catching_up) {
            // A worker took it just before the withdrawal (a cancel's, or the take-back of a
            // pause or a lowered cap), or an earlier supervisor published it and it starts only
            // now: it runs, so the batch waits for it, it counts against the window, admission
            // does not publish it again, and it holds its model's slot (over the limit if need
            // be) so nothing new of that model is admitted beside it.
            let model = &self.units[unit as usize].model;
            let model_slot = self.limits.adopt(model).then(|| model.clone());
            self.track(unit, run, model_slot);
            if !self.cancelling {
                // Not on the admitted count yet: the take-back took it off, or this supervisor
                // never admitted it.
                self.progress.admitted += 1;
            }
        }
        if let Some(job) = self.outstanding.get_mut(&ordinal) {
            job.starts = job.starts.saturating_add(1);
        }
        let deadline = now + self.units[unit as usize].timeout + self.deadline_grace;
        self.set_deadline(ordinal, Some(deadline));
        if let Some(job) = self.outstanding.get_mut(&ordinal) {
            job.claim = Some((worker_id, deadline));
        }
    }

    fn apply_finished(&mut self, finished: Finished, now: Instant) {
        if finished.generation < self.generation && is_rerun_on_resume(&finished.outcome) {
            // `cowork resume` runs this job again: its earlier infra failure (or kill) is not
            // a result.
            self.ledger.superseded += 1;
            return;
        }
        let ordinal = self.grid.ordinal(finished.unit, finished.run);
        if is_killed(&finished.outcome) {
            // Killed by `cancel --kill-running`: cut short by us, so not a sample; the batch
            // ends cancelled and `resume` runs the job again.
            if self.finished.insert(ordinal) {
                self.settle(ordinal);
                self.progress.running = self
                    .progress
                    .running
                    .saturating_sub(u64::from(self.started.contains(ordinal)));
                self.progress.errored += 1;
                self.ledger.killed += 1;
                self.cancelling = true;
            }
            return;
        }
        if !self.finished.insert(ordinal) {
            let report = Report {
                unit: finished.unit,
                run: finished.run,
                ordinal,
                job_id: &finished.job_id,
                outcome: &finished.outcome,
                artifacts: &finished.artifacts,
                from_record_of_attempt: finished.from_record_of_attempt,
            };
            if self.unsampled.is_reack(&self.results, &report) {
                self.progress.reacked += 1;
            } else {
                self.progress.duplicates += 1;
            }
            return;
        }
        self.unsampled
            .folded(ordinal, &finished.outcome, &finished.artifacts);
        // Redelivered: more than one delivery started the job, hand-backs that are no attempts
        // left out (a job a stopping worker held but never started counts no start). A job
        // not tracked here (admitted by an earlier coordinator) goes by its attempt number.
        let redelivered = match self.outstanding.get(&ordinal) {
            Some(job) => job.starts.saturating_sub(job.free_deliveries) > 1,
            None => finished.attempt > 1,
        };
        self.settle(ordinal);
        self.progress.running = self
            .progress
            .running
            .saturating_sub(u64::from(self.started.contains(ordinal)));
        if redelivered {
            self.progress.redelivered += 1;
        }
        if finished.worker_id == LOST_JOB_WORKER {
            self.progress.lost += 1;
        } else {
            self.ledger.worker_ran(&finished.worker_id, finished.run_ms);
        }
        self.ledger
            .harness_version(finished.harness_version.as_deref());
        self.count_outcome(&finished, now);
        self.observe_for_sequential(&finished);
        let job = JobRef {
            unit: finished.unit,
            repeat_index: self.grid.repeat_index(finished.run),
        };
        // A fold that stops discards the outcomes it buffered beyond its stop index: counted
        // here with the offered one, so the live count is the reduction's.
        let discarded_before = self.discarded_by_fold(job.unit);
        let offer = self
            .reducer
            .offer(job.unit, job.repeat_index, finished.outcome);
        let newly_discarded = self.discarded_by_fold(job.unit) - discarded_before;
        match offer {
            // A plain file after the one that aborted the batch is discarded by no fold.
            Offer::Discarded => self.progress.discarded += newly_discarded.max(1),
            Offer::Duplicate => self.progress.duplicates += 1,
            Offer::Unexpected => self.notes.push(Note::ForeignJob {
                job_id: finished.job_id,
            }),
            Offer::Folded | Offer::Buffered => self.progress.discarded += newly_discarded,
        }
    }

    /// Outcomes the repeat fold of `unit` discarded so far (0 for a plain unit).
    fn discarded_by_fold(&self, unit: u32) -> u64 {
        self.reducer
            .repeat_fold(unit)
            .map_or(0, |fold| fold.discarded().len() as u64)
    }

    /// Counts a first `finished` outcome: verdicts, spend, prices, pauses, samples, results.
    fn count_outcome(&mut self, finished: &Finished, now: Instant) {
        let unit = &mut self.units[finished.unit as usize];
        let cost = match &finished.outcome {
            JobOutcome::Completed { run } => {
                let usage_limited = run.signals.iter().any(|s| s.code == "usage_limit");
                if !self.catching_up {
                    if usage_limited {
                        let pause = self.pauses.pause(unit.tier, now);
                        self.notes.push(Note::Paused {
                            tier: unit.tier,
                            pause,
                        });
                    } else {
                        self.pauses.clear_streak(unit.tier);
                    }
                }
                if run.pass {
                    self.progress.passed += 1;
                    self.passed
                        .insert(self.grid.ordinal(finished.unit, finished.run));
                } else {
                    self.progress.failed += 1;
                }
                self.ledger.units[finished.unit as usize].passed = Some(run.pass);
                self.results.record(
                    (finished.unit, finished.run),
                    &finished.job_id,
                    (finished.generation, finished.attempt),
                    &finished.artifacts,
                );
                run.cost_usd
            }
            JobOutcome::Unanswered { .. } | JobOutcome::Error { .. } => {
                self.progress.errored += 1;
                finished.unstored_cost
            }
        };
        if let Some(cost) = cost {
            self.progress.cost_usd += cost;
            unit.spent_usd += cost;
            unit.price.observe(cost);
        }
        self.charge(finished, cost);
        self.ledger.units[finished.unit as usize].observe(cost, run_time_ms(finished));
        self.live.observe(
            finished,
            &self.units[finished.unit as usize],
            cost,
            self.catching_up,
        );
        self.progress.finished += 1;
    }
}

/// The run time a finished job adds to its unit's history (`stats.json`, the dry run's
/// time/run): the run's own `durationMs`, the time every report shows, when its result has one;
/// else the time the worker measured around the job. They differ most for the sim executor,
/// whose results carry simulated durations while the job itself takes milliseconds.
fn run_time_ms(finished: &Finished) -> u64 {
    let reported = match &finished.outcome {
        JobOutcome::Completed { run } => run.duration_ms.filter(|ms| ms.is_finite() && *ms >= 0.0),
        JobOutcome::Unanswered { .. } | JobOutcome::Error { .. } => None,
    };
    // `as` saturates for a finite non-negative f64 beyond u64::MAX.
    reported.map_or(finished.run_ms, |ms| ms.round() as u64)
}

/// A first look at a `finished` event, located in the plan.
pub(super) struct Finished {
    pub(super) job_id: JobId,
    pub(super) unit: u32,
    pub(super) run: u32,
    pub(super) attempt: u32,
    pub(super) generation: u32,
    pub(super) worker_id: String,
    pub(super) outcome: JobOutcome,
    pub(super) artifacts: Vec<ArtifactRef>,
    pub(super) harness_version: Option<String>,
    pub(super) run_ms: u64,
    /// The price of a run that was paid but whose result could not be stored (an
    /// `infra_after_spend` error carries the run's own outcome inline): spend, never a sample.
    pub(super) unstored_cost: Option<f64>,
    /// Set when the reporting delivery did not run the job (see [`super::reacks`]).
    pub(super) from_record_of_attempt: Option<u32>,
}
