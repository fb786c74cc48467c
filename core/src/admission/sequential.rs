//! The sequential stop of an eval (`--sequential`, decisions.md#eval-sequential): admission
//! watches the pairs of an eval batch finish and, at each planned look, applies the sequential
//! test ([`crate::eval::sequential`]). When it decides (or is futile) nothing more of the batch is
//! admitted, as after a batch budget stop: jobs already out finish and are folded, then every
//! unit still open is closed on the runs it folded and the batch is decided.
//!
//! A look holds the first pairs in admission order (pair `p` is repeat `p / S` of scenario
//! `p % S`, `S` scenarios), so the look is reached, and decides, the same way whatever order the
//! runs finish in, during catch-up after a restart as well as live, and the report
//! ([`crate::eval::sequential::sequential_summary`]) replays the same looks from the outcomes.

use crate::eval::sequential::{
    SequentialDecision, SequentialSettings, decide_at_look, look_points,
};
use crate::plan::Plan;
use cowork_schema::batch::BatchMode;
use cowork_schema::eval::Discordant;
use cowork_schema::event::JobOutcome;

use super::events::Finished;
use super::{Admission, Note};

/// What holds admission once the test decided, while the jobs out finish (the progress's
/// `heldBy`).
pub(super) const HELD_BY: &str = "decided early by the sequential test";

/// What one run of a pair came to, as the test sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum RunState {
    #[default]
    Waiting,
    /// Finished without a result (an error): the pair is finished, not complete.
    NoResult,
    Passed,
    Failed,
}

/// Where the eval stopped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SequentialStop {
    /// From 1.
    pub look: u32,
    /// Looks planned (after dropping repeats when there are fewer pairs than looks).
    pub looks: u32,
    pub pairs: u64,
    pub planned_pairs: u64,
    pub decision: SequentialDecision,
}

/// The looks of one sequential eval batch.
#[derive(Clone, Debug)]
pub(super) struct SequentialWatch {
    settings: SequentialSettings,
    scenarios: u64,
    planned_pairs: u64,
    points: Vec<u64>,
    next_look: usize,
    /// Arm A's and arm B's run of every pair, by pair index.
    runs: Vec<[RunState; 2]>,
    /// Pairs `0..prefix` are finished and counted in `discordant`.
    prefix: u64,
    discordant: Discordant,
    stop: Option<SequentialStop>,
    /// The open units were closed after the stop.
    closed: bool,
}

impl SequentialWatch {
    /// The watch of a sequential eval plan; `None` for any other plan.
    pub(super) fn of(plan: &Plan) -> Option<SequentialWatch> {
        let settings = plan.sequential?;
        if plan.mode != BatchMode::Eval || !plan.units.len().is_multiple_of(2) {
            return None;
        }
        let scenarios = plan.units.len() as u64 / 2;
        let planned_pairs = scenarios * u64::from(plan.runs_per_unit());
        Some(SequentialWatch {
            settings,
            scenarios,
            planned_pairs,
            points: look_points(planned_pairs, settings.looks),
            next_look: 0,
            runs: vec![[RunState::Waiting; 2]; usize::try_from(planned_pairs).ok()?],
            prefix: 0,
            discordant: Discordant::default(),
            stop: None,
            closed: false,
        })
    }

    /// Records the first outcome of run `run` of `unit`; returns the stop when this outcome
    /// completed a look that decided.
    fn observe(&mut self, unit: u32, run: u32, outcome: &JobOutcome) -> Option<SequentialStop> {
        let pair = u64::from(run) * self.scenarios + u64::from(unit / 2);
        let slot = self
            .runs
            .get_mut(usize::try_from(pair).ok()?)?
            .get_mut((unit % 2) as usize)?;
        *slot = match outcome {
            JobOutcome::Completed { run } if run.pass => RunState::Passed,
            JobOutcome::Completed { .. } => RunState::Failed,
            JobOutcome::Unanswered { .. } | JobOutcome::Error { .. } => RunState::NoResult,
        };
        self.advance()
    }

    /// Counts the finished pairs in admission order and takes every look they reach.
    fn advance(&mut self) -> Option<SequentialStop> {
        while self.stop.is_none() {
            let &target = self.points.get(self.next_look)?;
            while self.prefix < target {
                let [a, b] = *self.runs.get(usize::try_from(self.prefix).ok()?)?;
                if a == RunState::Waiting || b == RunState::Waiting {
                    return None;
                }
                match (a, b) {
                    (RunState::Passed, RunState::Failed) => self.discordant.a_pass_b_fail += 1,
                    (RunState::Failed, RunState::Passed) => self.discordant.a_fail_b_pass += 1,
                    _ => {}
                }
                self.prefix += 1;
            }
            self.next_look += 1;
            let decision = decide_at_look(
                (self.discordant.a_pass_b_fail, self.discordant.a_fail_b_pass),
                target,
                self.planned_pairs,
                self.settings.alpha,
                self.settings.mde,
            );
            // The last look ends the batch anyway: it is no early stop.
            let last = self.next_look == self.points.len();
            if decision != SequentialDecision::Continue && !last {
                self.stop = Some(SequentialStop {
                    look: u32::try_from(self.next_look).unwrap_or(u32::MAX),
                    looks: u32::try_from(self.points.len()).unwrap_or(u32::MAX),
                    pairs: target,
                    planned_pairs: self.planned_pairs,
                    decision,
                });
                return self.stop;
            }
        }
        None
    }
}

impl Admission {
    /// Where the sequential test stopped the batch, if it did.
    pub fn sequential_stop(&self) -> Option<SequentialStop> {
        self.sequential.as_ref().and_then(|watch| watch.stop)
    }

    /// `true` once the sequential test stopped the batch: nothing more is admitted.
    pub(super) fn sequentially_stopped(&self) -> bool {
        self.sequential_stop().is_some()
    }

    /// Takes a first `finished` outcome into account for the sequential test.
    pub(super) fn observe_for_sequential(&mut self, finished: &Finished) {
        let Some(watch) = self.sequential.as_mut() else {
            return;
        };
        if let Some(stop) = watch.observe(finished.unit, finished.run, &finished.outcome) {
            self.notes.push(Note::SequentialStopped(stop));
        }
    }

    /// After a sequential stop, once every job out has finished, closes the units still open
    /// on the runs they folded (no stop reason: the eval report says why), so the batch is
    /// decided.
    pub(super) fn close_after_sequential_stop(&mut self) {
        let Some(watch) = self.sequential.as_mut() else {
            return;
        };
        if watch.stop.is_none() || watch.closed || !self.outstanding.is_empty() {
            return;
        }
        watch.closed = true;
        self.reducer.close_incomplete();
    }
}
