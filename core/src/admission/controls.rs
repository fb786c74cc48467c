//! The controls people change while a batch runs (`cowork pause`, `resume-dispatch`,
//! `adjust`), as admission obeys them.
//!
//! A pause admits nothing more and takes back the queued jobs (the same withdrawal as a
//! cancel); each job taken back goes back to its unit's cursor, so `resume-dispatch` admits
//! from exactly where each unit stopped and the units fold the same outcomes in the same
//! order as an undisturbed run. Jobs already started run on and are folded. Jobs published
//! after a resume carry the next dispatch epoch in their message id, so the queue does not
//! drop them as duplicates of the publication the pause took back.
//!
//! An `adjust` that lowers `--max-running` raises the dispatch epoch too (the coordinator
//! writes both in one change of the record): workers then skip every publication of the
//! older epoch, so admission takes back the jobs no worker started, as a pause does, and
//! admits again at once within the new cap, under the new epoch. The cap is on jobs
//! outstanding, queued ones included; without the take-back the jobs queued before the
//! adjust would all still run.

use cowork_schema::registry::BatchControls;

use super::Admission;

/// Where the take-back of the queued jobs is (after a pause, or a rise of the dispatch epoch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum TakeBack {
    #[default]
    Idle,
    /// The queued jobs must be withdrawn.
    Wanted,
    /// Asked of the driver; [`super::Input::Withdrawn`] follows.
    Asked,
}

/// The dispatch state of a batch.
#[derive(Clone, Debug, Default)]
pub(super) struct Dispatch {
    paused: bool,
    epoch: u32,
    take_back: TakeBack,
    /// A take-back happened at least once: a late `started` of a job it took back means a
    /// worker took it just before.
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
        self.take_back == TakeBack::Wanted
    }

    /// Nothing is admitted: dispatch is paused, or queued jobs are being taken back (a job
    /// published now would be withdrawn with them).
    pub(super) fn holds_admission(&self) -> bool {
        self.paused || self.take_back != TakeBack::Idle
    }

    /// The withdrawal was asked of the driver, or found nothing to withdraw (`done`).
    pub(super) fn withdrawal_asked(&mut self, done: bool) {
        self.take_back = if done {
            TakeBack::Idle
        } else {
            TakeBack::Asked
        };
    }

    pub(super) fn withdrawing(&self) -> bool {
        self.take_back == TakeBack::Asked
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

    /// Takes the batch's controls as its record says them. A pause takes the queued jobs back;
    /// so does a later dispatch epoch while not paused (an `adjust` that lowered the cap, or a
    /// resume whose pause this supervisor never saw): workers skip the older publications.
    pub(super) fn apply_controls(&mut self, controls: &BatchControls) {
        let dispatch = &mut self.dispatch;
        if controls.paused && !dispatch.paused {
            dispatch.paused = true;
            dispatch.take_back = TakeBack::Wanted;
        } else if !controls.paused {
            dispatch.paused = false;
            if controls.dispatch_epoch > dispatch.epoch && dispatch.take_back == TakeBack::Idle {
                dispatch.take_back = TakeBack::Wanted;
            }
        }
        dispatch.epoch = dispatch.epoch.max(controls.dispatch_epoch);
        self.control_changes.clone_from(&controls.changes);
        let budget = controls.batch_budget_usd.or(self.submitted_budget_usd);
        self.flags.batch_budget_usd = budget;
        self.progress.batch_budget_usd = budget;
        self.window = controls
            .max_running
            .map_or(self.configured_window, |max| (max as usize).max(1));
    }

    /// The queue took back the queued jobs (after a pause or a rise of the dispatch epoch):
    /// each goes back to its unit's cursor, neither an attempt nor a run, off the admitted
    /// count, to be admitted again under the current epoch (at once, or after
    /// `resume-dispatch`).
    pub(super) fn taken_back(&mut self, _jobs: u64) {
        self.dispatch.take_back = TakeBack::Idle;
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
