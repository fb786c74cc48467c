//! One decision of [`Admission`]: deadlines, lost jobs, the withdrawal after a cancel, then an
//! admission round over the units in their order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use crate::limits::Held;

use super::{Admission, Decision, End, JobRef, Note, Publish, Wait, Withdrawal};

/// What a job that never reported back is folded with, after a re-publication.
const SILENT_MESSAGE: &str = "the job never reported back: no result within its timeout plus the grace after it started, and again after it was published a second time";
/// What a job the queue gave up on is folded with.
const GIVEN_UP_MESSAGE: &str = "the queue gave up on the job (its deliveries ran out, or a worker refused it) and no result was reported";

/// Waiting units a round looks past, at least: enough that units of other tiers and models
/// behind a paused tier or a held model still go.
const MAX_PASSED_OVER: usize = 256;

/// The next job of a unit.
enum NextRun {
    /// Nothing left to admit: every run is admitted, finished or skipped.
    Done,
    Wait(Wait),
    /// `running`: a worker started it before this supervisor did (catch-up); publishing it
    /// again is deduplicated and costs nothing, so no rule holds it back.
    Ready {
        run: u32,
        running: bool,
    },
}

/// What came of trying to admit one job.
enum Tried {
    Admitted,
    /// Held by a pause or a model limit: the next units may go.
    Held,
    /// The batch budget holds (or stopped) admission.
    BudgetHolds,
}

/// Why admission waits, gathered over one round.
#[derive(Default)]
struct Waits {
    first: Option<String>,
    wake_at: Option<Instant>,
    wait_for_release: bool,
}

impl Waits {
    fn note(&mut self, wait: Wait) {
        match &wait {
            Wait::Paused(_, until) | Wait::Rate(_, until) => {
                self.wake_at = Some(self.wake_at.map_or(*until, |at| at.min(*until)));
            }
            Wait::Concurrency(_) => self.wait_for_release = true,
            Wait::UnitBudget | Wait::Speculation | Wait::Share(_) => {}
        }
        if self.first.is_none() {
            self.first = Some(wait.held_by());
        }
    }
}

impl Admission {
    /// What to do at `now`: jobs to publish (new, or again after a missed deadline), jobs to
    /// declare lost, tiers to withdraw, when to ask again, and whether the batch ended.
    pub fn next(&mut self, now: Instant) -> Decision {
        let mut decision = Decision::default();
        if !self.catching_up {
            if !self.adopted_running {
                self.adopt_running(now, &mut decision);
            }
            self.expire_deadlines(now, &mut decision);
        }
        self.declare_given_up(&mut decision);
        if self.cancelling && self.withdrawal == Withdrawal::NotAsked {
            self.withdrawal = self.ask_withdrawal(&mut decision);
        } else if !self.cancelling && self.dispatch.wants_withdrawal() {
            let asked = self.ask_withdrawal(&mut decision);
            self.dispatch.withdrawal_asked(asked == Withdrawal::Done);
        }
        let mut waits = Waits::default();
        let freed_before = self.share_round_begins();
        if !self.cancelling
            && self.budget_stopped.is_none()
            && !self.sequentially_stopped()
            && !self.dispatch.holds_admission()
        {
            if self.interleave {
                self.round_interleaved(now, &mut decision, &mut waits);
            } else {
                self.round_in_unit_order(now, &mut decision, &mut waits);
            }
        }
        let (wait_for_share, freed_after) = self.share_round_ends();
        decision.wait_for_share = wait_for_share;
        decision.share_freed = freed_before || freed_after;
        self.close_after_sequential_stop();
        self.conclude(now, waits, &mut decision);
        decision
    }

    /// Tracks the jobs a worker started before this supervisor did, before anything new is
    /// admitted: each holds its model's slot (over the limit if need be), so a restart never
    /// admits beside them more than the limit allows, and gets a deadline. Published again
    /// (deduplicated by the queue) in case the delivery went with its worker.
    fn adopt_running(&mut self, now: Instant, decision: &mut Decision) {
        self.adopted_running = true;
        let running: Vec<u64> = self.started.difference(&self.finished).collect();
        for ordinal in running {
            if self.outstanding.contains_key(&ordinal) {
                continue;
            }
            let (unit, run) = self.grid.unit_and_run(ordinal);
            let model = &self.units[unit as usize].model;
            let model_slot = self.limits.adopt(model).then(|| model.clone());
            self.track(unit, run, model_slot);
            let deadline = now + self.units[unit as usize].timeout + self.deadline_grace;
            self.set_deadline(ordinal, Some(deadline));
            decision.publish.push(Publish {
                job: JobRef {
                    unit,
                    repeat_index: self.grid.repeat_index(run),
                },
                republished: 0,
            });
        }
    }

    /// Started jobs past their deadline: published once more, then declared lost.
    fn expire_deadlines(&mut self, now: Instant, decision: &mut Decision) {
        while let Some(&(at, ordinal)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.set_deadline(ordinal, None);
            let Some(job) = self.outstanding.get_mut(&ordinal) else {
                continue;
            };
            let first_time = job.republished == 0;
            let declare = !first_time && !job.lost;
            if first_time {
                job.republished = 1;
            }
            if declare {
                job.lost = true;
            }
            let job_ref = JobRef {
                unit: job.unit,
                repeat_index: self.grid.repeat_index(job.run),
            };
            let job_id = self.job_id(job_ref);
            if first_time {
                // Its worker may be gone with the delivery (a delivery the queue will not make
                // again); a new message id makes the queue deliver it once more.
                self.progress.republished += 1;
                decision.publish.push(Publish {
                    job: job_ref,
                    republished: 1,
                });
                decision.notes.push(Note::Republished { job_id });
            } else if declare {
                decision.lost.push(self.lost_event(job_ref, SILENT_MESSAGE));
                decision.notes.push(Note::Lost { job_id });
            }
        }
    }

    /// Jobs the queue gave up on: each is declared lost once, unless its outcome arrived.
    fn declare_given_up(&mut self, decision: &mut Decision) {
        for (unit, run) in std::mem::take(&mut self.lost_by_queue) {
            let ordinal = self.grid.ordinal(unit, run);
            if self.finished.contains(ordinal) {
                continue;
            }
            match self.outstanding.get_mut(&ordinal) {
                Some(job) if job.lost => continue,
                Some(job) => job.lost = true,
                None if self.lost_elsewhere.contains(&ordinal) => continue,
                None => self.lost_elsewhere.push(ordinal),
            }
            self.set_deadline(ordinal, None);
            let job = JobRef {
                unit,
                repeat_index: self.grid.repeat_index(run),
            };
            decision.lost.push(self.lost_event(job, GIVEN_UP_MESSAGE));
            decision.notes.push(Note::Lost {
                job_id: self.job_id(job),
            });
        }
    }

    /// After a cancel, a pause or a rise of the dispatch epoch: the tiers holding this batch's
    /// jobs that no worker started. Returns `Done` when there are none (nothing to wait for),
    /// else `Asked`.
    fn ask_withdrawal(&self, decision: &mut Decision) -> Withdrawal {
        let mut tiers: Vec<_> = self
            .outstanding
            .iter()
            .filter(|(ordinal, _)| !self.started.contains(**ordinal))
            .map(|(_, job)| self.units[job.unit as usize].tier)
            .collect();
        tiers.sort();
        tiers.dedup();
        if tiers.is_empty() {
            Withdrawal::Done
        } else {
            decision.withdraw = tiers;
            Withdrawal::Asked
        }
    }

    /// Unit-major: each unit in turn admits as many jobs as its rules allow, then the next one
    /// goes. A unit that waits is passed over; a round passes over at most
    /// [`MAX_PASSED_OVER`] (or `window`, if larger) of them, which bounds its work when many
    /// units wait for the same pause or limit.
    fn round_in_unit_order(&mut self, now: Instant, decision: &mut Decision, waits: &mut Waits) {
        let max_passed_over = self.window.max(MAX_PASSED_OVER);
        let mut passed_over = 0;
        let mut rank = self.order.open_from(0);
        while let Some(at) = rank {
            if self.outstanding.len() >= self.window || passed_over >= max_passed_over {
                break;
            }
            let unit = self.order.unit_at(at);
            let tried = match self.next_run(unit) {
                NextRun::Done => {
                    self.order.close(at);
                    rank = self.order.open_from(at + 1);
                    continue;
                }
                NextRun::Wait(wait) => {
                    waits.note(wait);
                    Tried::Held
                }
                NextRun::Ready { run, running } => {
                    self.try_admit((unit, run), running, now, decision, waits)
                }
            };
            match tried {
                Tried::Admitted => {}
                Tried::Held => {
                    passed_over += 1;
                    rank = self.order.open_from(at + 1);
                }
                Tried::BudgetHolds => break,
            }
        }
    }

    /// Repeat-major (eval batches): every unit's run 0, then every unit's run 1, …, so the two
    /// arms of an eval meet the same fleet conditions.
    fn round_interleaved(&mut self, now: Instant, decision: &mut Decision, waits: &mut Waits) {
        let mut candidates = BinaryHeap::new();
        let mut rank = self.order.open_from(0);
        while let Some(at) = rank {
            match self.next_run(self.order.unit_at(at)) {
                NextRun::Done => self.order.close(at),
                NextRun::Wait(wait) => waits.note(wait),
                NextRun::Ready { run, running } => candidates.push(Reverse((run, at, running))),
            }
            rank = self.order.open_from(at + 1);
        }
        while self.outstanding.len() < self.window {
            let Some(Reverse((run, at, running))) = candidates.pop() else {
                break;
            };
            let unit = self.order.unit_at(at);
            match self.try_admit((unit, run), running, now, decision, waits) {
                Tried::Admitted => match self.next_run(unit) {
                    NextRun::Done => self.order.close(at),
                    NextRun::Wait(wait) => waits.note(wait),
                    NextRun::Ready { run, running } => {
                        candidates.push(Reverse((run, at, running)));
                    }
                },
                Tried::Held => {}
                Tried::BudgetHolds => break,
            }
        }
    }

    /// The next run of `unit` to admit, passing over runs that finished (seen in catch-up) and
    /// skipping the rest once the reducer no longer needs them.
    fn next_run(&mut self, unit: u32) -> NextRun {
        let runs = self.grid.runs();
        if !self.units[unit as usize].runnable {
            return NextRun::Done;
        }
        let mut run = self.units[unit as usize].cursor;
        // Outstanding runs are passed over too: after a pause the cursor goes back to the
        // first run taken back, and runs above it may be running.
        while run < runs && {
            let ordinal = self.grid.ordinal(unit, run);
            self.finished.contains(ordinal) || self.outstanding.contains_key(&ordinal)
        } {
            run += 1;
        }
        self.units[unit as usize].cursor = run;
        if run >= runs {
            return NextRun::Done;
        }
        let ordinal = self.grid.ordinal(unit, run);
        if self
            .reducer
            .is_cancellable(unit, self.grid.repeat_index(run))
        {
            // Jobs a worker started before this supervisor did are running already: they are
            // not skipped, their outcomes arrive and are discarded.
            let end = self.grid.ordinal(unit, 0) + u64::from(runs);
            self.progress.skipped +=
                self.started
                    .count_absent_from_both(&self.finished, ordinal, end);
            self.units[unit as usize].cursor = runs;
            return NextRun::Done;
        }
        if self.started.contains(ordinal) {
            return NextRun::Ready { run, running: true };
        }
        match self.unit_rule(unit, run) {
            Some(wait) => NextRun::Wait(wait),
            None => NextRun::Ready {
                run,
                running: false,
            },
        }
    }

    /// The unit's own limits on running jobs at once: the speculation bound and the per-unit
    /// budget. A unit with nothing in flight may always go, or its fold would wait forever.
    fn unit_rule(&self, unit: u32, run: u32) -> Option<Wait> {
        let state = &self.units[unit as usize];
        if state.in_flight == 0 {
            return None;
        }
        let fold = self.reducer.repeat_fold(unit);
        if let Some(speculation) = self.speculation {
            let lowest = fold.and_then(|fold| fold.next_needed()).unwrap_or(run);
            if run > lowest.saturating_add(speculation) {
                return Some(Wait::Speculation);
            }
        }
        if let Some(cap) = self.unit_budget_usd {
            // A run without `cost.usd` disabled the unit's budget stop (as in the CLI), and
            // with it the budget's hold on admission.
            let live = fold.is_some_and(|fold| !fold.telemetry_missing_warned());
            if live
                && !state
                    .price
                    .fits_beside(cap, state.spent_usd, state.in_flight)
            {
                return Some(Wait::UnitBudget);
            }
        }
        None
    }

    /// Admits run `run` of `unit` unless the batch budget, a tier pause or a model limit holds
    /// it.
    fn try_admit(
        &mut self,
        (unit, run): (u32, u32),
        running: bool,
        now: Instant,
        decision: &mut Decision,
        waits: &mut Waits,
    ) -> Tried {
        let mut model_slot = None;
        if !running {
            if let Some(wait) = self.share_holds(unit) {
                waits.note(wait);
                return Tried::Held;
            }
            if !self.batch_budget_fits(waits) {
                return Tried::BudgetHolds;
            }
            match self.gate(unit, run, now) {
                Ok(slot) => model_slot = slot,
                Err(wait) => {
                    waits.note(wait);
                    return Tried::Held;
                }
            }
        }
        self.track(unit, run, model_slot);
        self.share_admitted(unit);
        let ordinal = self.grid.ordinal(unit, run);
        if running {
            let deadline = now + self.units[unit as usize].timeout + self.deadline_grace;
            self.set_deadline(ordinal, Some(deadline));
        } else {
            self.progress.admitted += 1;
        }
        self.units[unit as usize].cursor = run + 1;
        self.first_admission.get_or_insert(now);
        decision.publish.push(Publish {
            job: JobRef {
                unit,
                repeat_index: self.grid.repeat_index(run),
            },
            republished: 0,
        });
        Tried::Admitted
    }

    /// The batch budget: known spend plus the in-flight runs and this one at the estimated
    /// price must fit. With nothing in flight and no room for one more run, the budget ends
    /// the batch: every open unit stops as a budget stop.
    fn batch_budget_fits(&mut self, waits: &mut Waits) -> bool {
        let Some(cap) = self.flags.batch_budget_usd else {
            return true;
        };
        // The whole cost: model spend plus sandbox minutes (decisions.md#whole-cost).
        let spent = self.whole.spent();
        let in_flight = u32::try_from(self.outstanding.len()).unwrap_or(u32::MAX);
        let fits = if in_flight == 0 {
            // Before any price, one job at a time.
            self.batch_price
                .per_run()
                .is_none_or(|price| spent + price <= cap)
        } else {
            self.batch_price.fits_beside(cap, spent, in_flight)
        };
        if fits {
            return true;
        }
        if in_flight == 0 {
            let stopped = self.reducer.stop_for_batch_budget();
            self.notes.push(Note::BudgetStopped {
                spent_usd: spent,
                cap_usd: cap,
                units: stopped.len(),
            });
            self.budget_stopped = Some(stopped);
        } else if waits.first.is_none() {
            waits.first = Some("batch budget".to_owned());
        }
        false
    }

    /// The tier pause and the model limit of a job; takes a model slot when it may go.
    fn gate(&mut self, unit: u32, run: u32, now: Instant) -> Result<Option<String>, Wait> {
        let state = &self.units[unit as usize];
        if let Some(until) = self.pauses.paused_until(state.tier, now) {
            return Err(Wait::Paused(state.tier, until));
        }
        let Some(rule) = self.limits.rule_of(&state.model) else {
            return Ok(None);
        };
        let wait = match self.limits.try_acquire(&state.model, now) {
            Ok(()) => return Ok(Some(state.model.clone())),
            Err(Held::Concurrency) => Wait::Concurrency(self.limits.rules()[rule].to_string()),
            Err(Held::RateUntil(until)) => Wait::Rate(self.limits.rules()[rule].to_string(), until),
        };
        // Each delayed job counts once, however many rounds it waits.
        let state = &mut self.units[unit as usize];
        if state.delay_counted_at != Some(run) {
            state.delay_counted_at = Some(run);
            let text = self.limits.rules()[rule].to_string();
            *self.delayed.entry(text).or_insert(0) += 1;
        }
        Err(wait)
    }

    /// The progress fields, the wake-up and the end of the batch.
    fn conclude(&mut self, now: Instant, waits: Waits, decision: &mut Decision) {
        self.progress.pauses = self.pauses.count();
        self.progress.paused_tiers = self.pauses.paused_tiers(now);
        let open = !self.cancelling
            && self.budget_stopped.is_none()
            && !self.sequentially_stopped()
            && !self.order.all_closed();
        let paused = open && self.dispatch.is_paused();
        let admitting = open && !paused;
        let window_open = self.outstanding.len() < self.window;
        self.progress.held_by = if paused {
            Some("dispatch paused".to_owned())
        } else if self.sequentially_stopped() && !self.outstanding.is_empty() {
            Some(super::sequential::HELD_BY.to_owned())
        } else {
            waits.first.filter(|_| admitting && window_open)
        };
        self.show_shares();
        if admitting {
            decision.wake_at = waits.wake_at;
            decision.wait_for_release = waits.wait_for_release;
        }
        if let Some(&(deadline, _)) = self.deadlines.first() {
            decision.wake_at = Some(decision.wake_at.map_or(deadline, |at| at.min(deadline)));
        }
        decision.notes.append(&mut self.notes);
        decision.released_slots = std::mem::take(&mut self.released_slots);
        let quiet = decision.publish.is_empty()
            && decision.lost.is_empty()
            && self.withdrawal != Withdrawal::Asked
            && !self.dispatch.withdrawing();
        // A paused batch that is not decided waits for `resume-dispatch`, however quiet.
        let waits_for_resume = paused && !self.reducer.is_complete();
        if self.outstanding.is_empty() && !admitting && quiet && !waits_for_resume {
            decision.end = Some(if self.cancelling && !self.reducer.is_complete() {
                End::Cancelled
            } else {
                End::Decided
            });
        }
    }
}
