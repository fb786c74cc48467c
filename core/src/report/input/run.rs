//! One stored run of a job as the loader found it ([`StoredRun`]), how it ended ([`RunState`])
//! and the names its job and its page section go by.

use cowork_schema::ids::UnitRef;
use serde_json::Value;

use super::result::run_passes;

/// How a stored run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum RunOutcome {
    /// The harness produced a result (whatever its verdict).
    Completed,
    /// The run stopped at a question nobody answered (exit 2, `unanswered`).
    Unanswered { message: String },
    /// The run ended without a result: a harness error, a timeout, a crash, an infrastructure
    /// failure (`category` as stored: `runtime`, `timeout`, `infra_after_spend`, …).
    Error { category: String, message: String },
}

/// The job record of a stored run: which attempt made it, where and how long it took.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    pub attempt: u32,
    pub generation: u32,
    pub worker_id: String,
    pub harness_version: Option<String>,
    pub exit_code: Option<i32>,
    /// Wall-clock time the executor took, in milliseconds.
    pub run_ms: u64,
}

/// One stored run of a job.
#[derive(Clone, Debug)]
pub struct StoredRun {
    pub unit: UnitRef,
    pub repeat_index: Option<u32>,
    /// The result as stored (key order kept); `null` when the run ended without one.
    pub result: Value,
    /// Listed in the envelope's `fleet.discarded`: stored, but left out of every rollup
    /// (overshoot after an early stop, harness-behaviour.md#safe-cancellation).
    pub discarded: bool,
    /// How the run ended.
    pub outcome: RunOutcome,
    /// Store keys of the attempt's stored files (`batches/<id>/jobs/…`), as its job record
    /// lists them (or as found beside a record of the older, bare shape), sorted.
    pub artifacts: Vec<String>,
    /// The job record, when the store holds one in the current shape.
    pub record: Option<RunRecord>,
}

impl StoredRun {
    /// A completed run with its result and nothing else known (no record, no artifact list).
    pub fn completed(unit: UnitRef, repeat_index: Option<u32>, result: Value) -> Self {
        Self {
            unit,
            repeat_index,
            result,
            discarded: false,
            outcome: RunOutcome::Completed,
            artifacts: Vec::new(),
            record: None,
        }
    }

    /// `true` when the run produced a result.
    pub fn is_completed(&self) -> bool {
        self.outcome == RunOutcome::Completed
    }

    /// The job id's local part: `c0/r3`, or `f1` without repeat.
    pub fn job_path(&self) -> String {
        job_path(self.unit, self.repeat_index)
    }

    /// The anchor of the run's section in the HTML report: `run-c0-r3`.
    pub fn anchor(&self) -> String {
        anchor_of(&self.job_path())
    }
}

/// How one run of a unit ended, as the per-cell strip shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Folded, and its verdict passed.
    Pass,
    /// Folded, and its verdict failed.
    Fail,
    /// Ended without a result (error, timeout, unanswered gate, infrastructure failure).
    Error,
    /// Finished after its unit was decided: stored, paid for, never folded.
    Discarded,
    /// Never ran (not admitted after an early stop, or the batch ended first).
    NotRun,
}

impl RunState {
    /// `pass`, `fail`, `error`, `discarded` or `not-run`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunState::Pass => "pass",
            RunState::Fail => "fail",
            RunState::Error => "error",
            RunState::Discarded => "discarded",
            RunState::NotRun => "not-run",
        }
    }

    /// The state of a stored run (as [`RunBrief::state`](super::RunBrief::state) gives it).
    pub fn of(run: &StoredRun) -> Self {
        if run.discarded {
            RunState::Discarded
        } else if !run.is_completed() {
            RunState::Error
        } else if run_passes(&run.result) {
            RunState::Pass
        } else {
            RunState::Fail
        }
    }
}

pub(super) fn job_path(unit: UnitRef, repeat_index: Option<u32>) -> String {
    match repeat_index {
        Some(index) => format!("{}/r{index}", unit_id(unit)),
        None => unit_id(unit),
    }
}

pub(super) fn anchor_of(job_path: &str) -> String {
    format!("run-{}", job_path.replace('/', "-"))
}

/// The id of a unit as in its job ids: `c<k>` or `f<k>`.
pub(crate) fn unit_id(unit: UnitRef) -> String {
    match unit {
        UnitRef::File(index) => format!("f{index}"),
        UnitRef::Cell(index) => format!("c{index}"),
    }
}
