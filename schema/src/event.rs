//! Job events: what workers publish on `cowork.events.<batch>` (brief §4). The batch's state is
//! a fold over these events.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::{BatchId, JobId};
use crate::run_result::RunView;

/// How one job ended (contract §1.6).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum JobOutcome {
    /// Exit 0 or 1 with a result: a real sample, whatever its verdict.
    Completed { run: RunView },
    /// Exit 2 with `error.category == "unanswered"`; the salvaged partial result is never folded.
    Unanswered {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hint: Option<String>,
    },
    /// Any other CLI error: exit 2 (usage, runtime, internal), exit 3 (boundary), no parseable
    /// envelope, a signal-killed process, or the orchestrator's timeout.
    Error { category: String, message: String },
}

/// A stored artifact of a job: its key, size and sha256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArtifactRef {
    /// Store key, e.g. `batches/<batch>/jobs/c0/r3/result.json`.
    pub key: String,
    pub size: u64,
    /// sha256 of the bytes, lowercase hex.
    pub sha256: String,
}

/// Class of an infrastructure failure (policy C8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InfraClass {
    /// The bundle could not be fetched or unpacked.
    Bundle,
    /// The CLI or the sandbox could not be started; nothing was spent.
    Spawn,
    /// Artifacts could not be stored.
    Upload,
    /// The worker stopped before the job finished.
    WorkerLost,
}

/// What happened, with the data of that event.
// `Finished` is much larger than the other variants because it carries the run's view; events
// are built once and serialized at once, so boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum JobEventKind {
    /// A worker took the job and is about to run it.
    Started,
    /// The job ended and its artifacts are stored.
    Finished {
        outcome: JobOutcome,
        artifacts: Vec<ArtifactRef>,
        /// `envelope.version` of the CLI that ran the job (W1), when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        harness_version: Option<String>,
        /// Process exit code of the CLI, when it exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// Wall-clock time the executor took, in milliseconds.
        run_ms: u64,
    },
    /// The attempt failed for an infrastructure reason (C8).
    Failed {
        class: InfraClass,
        message: String,
        /// `true` when the job will be retried (nothing was spent).
        will_retry: bool,
    },
}

/// One event on the event log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobEvent {
    pub batch_id: BatchId,
    pub job_id: JobId,
    /// Delivery attempt, 1-based (counted per generation).
    pub attempt: u32,
    /// Resume generation of the delivered job (see `JobSpec::generation`); 0 when never resumed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u32,
    pub worker_id: String,
    pub event: JobEventKind,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}
