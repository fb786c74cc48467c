//! The controls people change while a batch runs (`cowork pause`, `resume-dispatch`,
//! `adjust`), as admission obeys them.
//!
//! A pause admits nothing more and takes back the queued jobs (the same withdrawal as a
//! cancel); each job taken back goes back to its unit's cursor, so `resume-dispatch` admits
//! from exactly where each unit stopped and the units fold the same outcomes in the same
//! order as an undisturbed run. Jobs already started run on and are folded. Jobs published
//! after a resume carry the next dispatch epoch in their message id, so the queue does not
//! drop them as duplicates of the publication the pause took back.

use cowork_schema::registry::BatchControls;

use super::Admission;

/// Where the withdrawal of a pause is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum PauseWithdrawal {
    #[default]
    Idle,
    /// Paused: the queued jobs must be withdrawn.
    Wanted,
    /// Asked of the driver; [`super::Input::Withdrawn`] follows.
    Asked,
}

/// The dispatch state of a batch.
#[derive(Clone, Debug, Default)]
pub(super) struct Dispatch {
    paused: bool,
    epoch: u32,
    withdrawal: PauseWithdrawal,
    /// A pause took jobs back at least once: a late `started` of one of them means a worker
    /// took it just before.
    withdrew_any: bool,
}

impl Dispatch {
    pub(super) fn is_paused(&self) -> bool {
        self.paused
    }

    pub(super) fn epoch(&self) -> u32 {
        self.epoch
    }

    pub(super) fn wants_withdrawal(&self) -> bool {
        self.paused && self.withdrawal == PauseWithdrawal::Wanted
    }

    /// The withdrawal was asked of the driver, or found nothing to withdraw (`done`).
    pub(super) fn withdrawal_asked(&mut self, done: bool) {
        self.withdrawal = if done {
            PauseWithdrawal::Idle
        } else {
            PauseWithdrawal::Asked
        };
    }

    pub(super) fn withdrawing(&self) -> bool {
        self.withdrawal == PauseWithdrawal::Asked
    }

    pub(super) fn withdrew_any(&self) -> bool {
        self.withdrew_any
    }
}

impl Admission {
    /// The dispatch epoch jobs are published under now.
    pub fn dispatch_epoch(&self) -> u32 {
        self.dispatch.epoch()
    }

    /// `true` while dispatch is paused.
    pub fn is_paused(&self) -> bool {
        self.dispatch.is_paused()
    }

    /// Jobs outstanding at most, as adjusted.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Takes the batch's controls as its record says them.
    pub(super) fn apply_controls(&mut self, controls: &BatchControls) {
        if controls.paused && !self.dispatch.paused {
            self.dispatch.paused = true;
            self.dispatch.withdrawal = PauseWithdrawal::Wanted;
        } else if !controls.paused && self.dispatch.paused {
            self.dispatch.paused = false;
        }
        self.dispatch.epoch = self.dispatch.epoch.max(controls.dispatch_epoch);
        self.control_changes.clone_from(&controls.changes);
        let budget = controls.batch_budget_usd.or(self.submitted_budget_usd);
        self.flags.batch_budget_usd = budget;
        self.progress.batch_budget_usd = budget;
        self.window = controls
            .max_running
            .map_or(self.configured_window, |max| (max as usize).max(1));
    }

    /// The queue took back the queued jobs of a paused batch: each goes back to its unit, to
    /// be admitted again after `resume-dispatch`.
    pub(super) fn withdrawn_for_pause(&mut self, _jobs: u64) {
        self.dispatch.withdrawal = PauseWithdrawal::Idle;
        self.dispatch.withdrew_any = true;
        for ordinal in self.unstarted_outstanding() {
            let Some(job) = self.outstanding.get(&ordinal) else {
                continue;
            };
            let (unit, run) = (job.unit, job.run);
            self.settle(ordinal);
            let state = &mut self.units[unit as usize];
            state.cursor = state.cursor.min(run);
            self.progress.admitted = self.progress.admitted.saturating_sub(1);
        }
        self.order.reopen_all();
    }
}
