//! Job events: what workers publish on `cowork.events.<batch>` (decisions.md#wire-protocol). The
//! batch's state is a fold over these events.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::{BatchId, JobId};
use crate::run_result::RunView;

/// How one job ended (harness-behaviour.md#outcome-classes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "camelCase")]
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
    Error {
        category: ErrorCategory,
        message: String,
    },
}

/// What kind of error ended a job. The harness's own `error.category` values keep their names;
/// the fleet adds its own (`timeout`, `crashed`, `infra`, `infra_after_spend`,
/// `cancelled`). A category
/// this build does not know (a newer harness or worker) is kept as [`ErrorCategory::Other`], so
/// it is still reported and folded as an error.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCategory {
    /// The harness refused its input (exit 2).
    Usage,
    /// The harness failed while running (exit 2).
    Runtime,
    /// The harness or the worker hit a bug (exit 2), e.g. an unreadable `result.json`.
    Internal,
    /// The harness refused a workspace boundary (exit 3).
    Boundary,
    /// The fleet's wall-clock limit for the job fired (harness-behaviour.md#choice-c13).
    Timeout,
    /// The harness process was killed by a signal it did not ask for (OOM, a stray kill).
    Crashed,
    /// An infrastructure failure before anything was spent, out of retries
    /// (harness-behaviour.md#choice-c8).
    Infra,
    /// An infrastructure failure after the harness was spawned: the run was paid for, its
    /// result could not be kept, and it is never run again.
    InfraAfterSpend,
    /// The job was killed or skipped because its batch was cancelled.
    Cancelled,
    /// Any other category, kept as written.
    Other(String),
}

impl ErrorCategory {
    /// The category as it is written in events, outcomes and envelopes.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCategory::Usage => "usage",
            ErrorCategory::Runtime => "runtime",
            ErrorCategory::Internal => "internal",
            ErrorCategory::Boundary => "boundary",
            ErrorCategory::Timeout => "timeout",
            ErrorCategory::Crashed => "crashed",
            ErrorCategory::Infra => "infra",
            ErrorCategory::InfraAfterSpend => "infra_after_spend",
            ErrorCategory::Cancelled => "cancelled",
            ErrorCategory::Other(other) => other,
        }
    }

    /// Reads a written category; unknown text becomes [`ErrorCategory::Other`].
    pub fn parse(text: &str) -> ErrorCategory {
        match text {
            "usage" => ErrorCategory::Usage,
            "runtime" => ErrorCategory::Runtime,
            "internal" => ErrorCategory::Internal,
            "boundary" => ErrorCategory::Boundary,
            "timeout" => ErrorCategory::Timeout,
            "crashed" => ErrorCategory::Crashed,
            "infra" => ErrorCategory::Infra,
            "infra_after_spend" => ErrorCategory::InfraAfterSpend,
            "cancelled" => ErrorCategory::Cancelled,
            other => ErrorCategory::Other(other.to_owned()),
        }
    }
}

impl From<&str> for ErrorCategory {
    fn from(text: &str) -> ErrorCategory {
        ErrorCategory::parse(text)
    }
}

impl std::fmt::Display for ErrorCategory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCategory {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCategory {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(ErrorCategory::parse(&text))
    }
}

impl JsonSchema for ErrorCategory {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ErrorCategory".into()
    }

    fn json_schema(_generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "usage, runtime, internal, boundary (the harness's categories); timeout, crashed, infra, infra_after_spend, cancelled (the fleet's); any other text is kept as written",
        })
    }
}

/// A stored artifact of a job: its key, size and sha256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactRef {
    /// Store key, e.g. `batches/<batch>/jobs/c0/r3/result.json`.
    pub key: String,
    pub size: u64,
    /// sha256 of the bytes, lowercase hex.
    pub sha256: String,
}

/// Class of an infrastructure failure (harness-behaviour.md#choice-c8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InfraClass {
    /// The bundle could not be fetched or unpacked.
    Bundle,
    /// The CLI could not be started; nothing was spent.
    Spawn,
    /// The job's sandbox could not be started on this worker (a container that could not be
    /// created or started, a missing image, a VM that did not boot, a full disk); nothing was
    /// spent. Handed back for another worker and counted apart from the job's attempts.
    SandboxStart,
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
#[serde(tag = "type", rename_all = "camelCase")]
pub enum JobEventKind {
    /// A worker took the job and is about to run it.
    Started,
    /// The job ended and its artifacts are stored.
    Finished {
        outcome: JobOutcome,
        artifacts: Vec<ArtifactRef>,
        /// `envelope.version` of the CLI that ran the job (harness-behaviour.md#cli-version-pin),
        /// when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        harness_version: Option<String>,
        /// Process exit code of the CLI, when it exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// Wall-clock time the executor took, in milliseconds.
        run_ms: u64,
        /// With an `infra_after_spend` outcome: what the run itself ended with (its result's
        /// view, cost and verdict for a completed run), kept here because its artifacts could
        /// not be stored. The event log is then the only record of what the run learned and
        /// spent. Absent otherwise; a reader that does not know the field ignores it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unstored_outcome: Option<JobOutcome>,
        /// Present when this delivery did not run the job: it found the job's record, stored by
        /// this earlier attempt, and reports that record again. That happens when the earlier
        /// attempt's ack was lost (JetStream can lose one in a leader election) or its event
        /// could not be published. A fold that already holds this very run counts the report
        /// as a re-ack, not as a duplicate; absent on a report of a run this delivery made.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_record_of_attempt: Option<u32>,
    },
    /// The attempt failed for an infrastructure reason (harness-behaviour.md#choice-c8).
    Failed {
        class: InfraClass,
        message: String,
        /// `true` when the job will be delivered again. A worker only hands a job back when
        /// the harness never started for this attempt (a bundle, work dir or sandbox failure),
        /// so a retry never pays for a second run; after the harness started, the job ends
        /// with a `finished` event instead.
        will_retry: bool,
    },
}

/// A job's record: `outcome.json` in the job's directory (see [`crate::layout`]), written last
/// and create-if-absent by the attempt that stored its artifacts first. It holds what that
/// attempt's `finished` event holds, so a stored batch can be re-judged, resumed and reported
/// without the event log, and a redelivered job can re-publish its `finished` event instead of
/// running again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobRecord {
    pub outcome: JobOutcome,
    /// Every stored artifact of the attempt (`result.json` among them for a completed run),
    /// with its size and sha256.
    pub artifacts: Vec<ArtifactRef>,
    /// The delivery attempt whose artifacts these are.
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u32,
    pub worker_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Wall-clock time the executor took, in milliseconds.
    pub run_ms: u64,
}

impl JobRecord {
    /// The `finished` event this record stands for: what the attempt that stored it published
    /// (or would have), for a redelivery that reports it and for a resume that replays it.
    pub fn finished_event(&self) -> JobEventKind {
        JobEventKind::Finished {
            outcome: self.outcome.clone(),
            artifacts: self.artifacts.clone(),
            harness_version: self.harness_version.clone(),
            exit_code: self.exit_code,
            run_ms: self.run_ms,
            unstored_outcome: None,
            from_record_of_attempt: None,
        }
    }

    /// The `finished` event of a delivery that found this record and did not run the job:
    /// [`JobRecord::finished_event`] marked with the attempt that stored the record.
    pub fn reported_again_event(&self) -> JobEventKind {
        let mut event = self.finished_event();
        if let JobEventKind::Finished {
            from_record_of_attempt,
            ..
        } = &mut event
        {
            *from_record_of_attempt = Some(self.attempt);
        }
        event
    }

    /// The stored artifact called `name` (`result.json`, …), if the attempt stored one.
    pub fn artifact(&self, name: &str) -> Option<&ArtifactRef> {
        self.artifacts
            .iter()
            .find(|artifact| artifact.key.rsplit('/').next() == Some(name))
    }
}

/// What a job's `outcome.json` holds: a [`JobRecord`], or — in stores written before job
/// records existed — a bare [`JobOutcome`] whose artifacts are at the job's own directory
/// (`layout::job_dir`). Every reader of `outcome.json` goes through [`StoredOutcome::parse`].
#[derive(Clone, Debug, PartialEq)]
pub enum StoredOutcome {
    Record(JobRecord),
    Bare(JobOutcome),
}

impl StoredOutcome {
    /// Reads either shape; the error is the record's, the shape written today.
    pub fn parse(bytes: &[u8]) -> Result<StoredOutcome, serde_json::Error> {
        match serde_json::from_slice::<JobRecord>(bytes) {
            Ok(record) => Ok(StoredOutcome::Record(record)),
            Err(error) => serde_json::from_slice::<JobOutcome>(bytes)
                .map(StoredOutcome::Bare)
                .map_err(|_| error),
        }
    }

    /// The outcome, whichever the shape.
    pub fn outcome(&self) -> &JobOutcome {
        match self {
            StoredOutcome::Record(record) => &record.outcome,
            StoredOutcome::Bare(outcome) => outcome,
        }
    }
}

/// One event on the event log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobEvent {
    /// [`PROTOCOL_VERSION`](crate::job::PROTOCOL_VERSION) of the worker that published it.
    #[serde(default = "crate::job::legacy_protocol")]
    pub protocol: u32,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_from_a_newer_peer_keep_what_this_build_knows() {
        // A rolling upgrade: the newer worker adds a field at every level and a category this
        // build does not know; the event still decodes, and the category is kept as written.
        let text = r#"{"protocol":3,"batchId":"b1","jobId":"b1/f0/r1","attempt":1,
            "workerId":"w","addedTopLevel":true,
            "event":{"type":"finished","addedInKind":1,"run_ms":5,
                "artifacts":[{"key":"k","size":1,"sha256":"ab","addedInRef":"x"}],
                "outcome":{"kind":"error","category":"quota_v2","message":"m","addedInOutcome":2}}}"#;
        let event: JobEvent = serde_json::from_str(text).expect("unknown fields are ignored");
        assert_eq!(event.protocol, 3);
        let JobEventKind::Finished { outcome, .. } = event.event else {
            panic!("a finished event: {:?}", event.event);
        };
        assert_eq!(
            outcome,
            JobOutcome::Error {
                category: ErrorCategory::Other("quota_v2".to_owned()),
                message: "m".to_owned(),
            }
        );
    }

    #[test]
    fn events_without_a_protocol_are_the_first_version() {
        let text = r#"{"batchId":"b1","jobId":"b1/f0/r1","attempt":1,"workerId":"w",
            "event":{"type":"started"}}"#;
        let event: JobEvent = serde_json::from_str(text).expect("a legacy event");
        assert_eq!(event.protocol, 1);
    }

    #[test]
    fn error_categories_read_back_as_written() {
        for text in [
            "usage",
            "runtime",
            "internal",
            "boundary",
            "timeout",
            "crashed",
            "infra",
            "infra_after_spend",
            "cancelled",
            "something_new",
        ] {
            let category = ErrorCategory::parse(text);
            assert_eq!(category.as_str(), text);
            let json = serde_json::to_string(&category).expect("serializes");
            assert_eq!(json, format!("\"{text}\""));
        }
        assert_eq!(ErrorCategory::parse("infra"), ErrorCategory::Infra);
    }

    fn check_stored(text: &str, expect: Option<StoredOutcome>) {
        assert_eq!(StoredOutcome::parse(text.as_bytes()).ok(), expect, "{text}");
    }

    #[test]
    fn both_shapes_of_a_stored_outcome_are_read() {
        let killed = JobOutcome::Error {
            category: ErrorCategory::Cancelled,
            message: "killed".to_owned(),
        };
        check_stored(
            r#"{"kind":"error","category":"cancelled","message":"killed"}"#,
            Some(StoredOutcome::Bare(killed.clone())),
        );
        check_stored(
            r#"{"outcome":{"kind":"error","category":"cancelled","message":"killed"},
                "artifacts":[{"key":"batches/b/jobs/f0/g1a2/harness.stderr.log","size":0,"sha256":"e3"}],
                "attempt":2,"generation":1,"workerId":"w","runMs":5,"addedLater":true}"#,
            Some(StoredOutcome::Record(JobRecord {
                outcome: killed,
                artifacts: vec![ArtifactRef {
                    key: "batches/b/jobs/f0/g1a2/harness.stderr.log".to_owned(),
                    size: 0,
                    sha256: "e3".to_owned(),
                }],
                attempt: 2,
                generation: 1,
                worker_id: "w".to_owned(),
                harness_version: None,
                exit_code: None,
                run_ms: 5,
            })),
        );
        check_stored(r#"{"kind":"exploded"}"#, None);
        check_stored("not json", None);
    }
}
