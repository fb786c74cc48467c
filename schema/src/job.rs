//! Jobs: one execution of one scenario by the CLI (harness-behaviour.md#job).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::batch::{ExecutorKind, SimSpec};
use crate::ids::{BatchId, JobId, UnitRef};
pub use crate::unit::{CellAxes, Tier};

/// The CLI subcommand a job runs (harness-behaviour.md#job).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobCommand {
    Run,
    Record,
    Replay,
}

impl JobCommand {
    pub fn as_str(self) -> &'static str {
        match self {
            JobCommand::Run => "run",
            JobCommand::Record => "record",
            JobCommand::Replay => "replay",
        }
    }
}

/// The version of the coordinator–worker protocol: job messages, job events, heartbeats and the
/// storage layout they refer to. Wire types ignore fields they do not know, so adding an
/// optional field needs no new version; a change an older peer would misread does. A
/// coordinator refuses workers of another version by name (`cowork workers`, its log).
pub const PROTOCOL_VERSION: u32 = 2;

/// The protocol version of a message written before versions were written down.
pub fn legacy_protocol() -> u32 {
    1
}

/// Everything a worker needs to run one job. Published on `cowork.jobs.<tier>.<batch>` with
/// `Nats-Msg-Id` = [`JobSpec::message_id`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    /// [`PROTOCOL_VERSION`] of the coordinator that published the job.
    #[serde(default = "legacy_protocol")]
    pub protocol: u32,
    pub batch_id: BatchId,
    pub job_id: JobId,
    pub command: JobCommand,
    pub tier: Tier,
    pub unit: UnitRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_index: Option<u32>,
    /// Scenario (or cassette, for replay) path inside the bundle, `/`-separated. For matrix
    /// cells this is the materialized derived scenario (harness-behaviour.md#choice-c1, strategy
    /// A).
    pub scenario_file: String,
    /// Effective scenario name (harness-behaviour.md#scenario-name), used for labels and
    /// simulation.
    pub scenario_name: String,
    /// The cell's axes (matrix batches only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axes: Option<CellAxes>,
    /// Eval arm (`a` or `b`) for eval batches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm: Option<String>,
    /// Flags forwarded to the CLI after the scenario (harness-behaviour.md#job-invocation), in
    /// order.
    pub forwarded_flags: Vec<String>,
    /// sha256 (hex) of the bundle holding every input of the job.
    pub bundle_sha256: String,
    /// Hard wall-clock limit for the whole job in milliseconds (harness-behaviour.md#choice-c13).
    pub timeout_ms: u64,
    pub executor: ExecutorKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimSpec>,
    /// Resume generation of the batch that published this job (0 for the first run; `cowork
    /// resume` increments it). It is part of the queue's message id, so a resumed job is not
    /// dropped as a duplicate of its earlier publication.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u32,
    /// W3C `traceparent` of the job's admission span, set by the coordinator when it exports
    /// traces; the worker's job span continues that trace (one trace per job,
    /// decisions.md#operations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// How many times the coordinator published this job again because it did not report back
    /// within its deadline (0, or 1: a job is re-published once). It is part of the queue's
    /// message id, so the new publication is not dropped as a duplicate of the one that went
    /// silent, and it shifts the delivery attempts ([`JobSpec::attempt_of`]) so the two
    /// publications never share an artifact key.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub republished: u32,
    /// The batch's dispatch epoch when the job was published
    /// ([`crate::registry::BatchControls::dispatch_epoch`]). It is part of the queue's message
    /// id, so a job taken back by a pause and published again after `resume-dispatch` is not
    /// dropped as a duplicate; a worker that still holds the older publication skips it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dispatch_epoch: u32,
    /// The lease revision of the coordinator term that published the job, its fencing token
    /// (decisions.md#coordinator-lease); 0 from a coordinator that leads without a lease.
    /// The queue refuses the publish once a later leader has fenced the queue with a higher
    /// revision, so a coordinator that lost the lease while paused admits nothing. Not part of
    /// the message id: a later leader publishing the same job is still deduplicated.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub leader_term: u64,
}

fn is_zero<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Delivery attempts reserved per publication of a job: the attempts of a re-published job
/// ([`JobSpec::republished`]) start above every attempt the first publication can have (a
/// queue's `max_deliver` is far below it).
pub const ATTEMPTS_PER_PUBLICATION: u32 = 1000;

impl JobSpec {
    /// The queue's deduplication id (`Nats-Msg-Id`): the job id, plus `@g<n>` for a resumed
    /// generation, plus `+r<n>` for a re-publication, plus `+p<n>` for a publication after the `n`th
    /// `resume-dispatch`.
    pub fn message_id(&self) -> String {
        let mut id = self.job_id.to_string();
        if self.generation != 0 {
            id.push_str(&format!("@g{}", self.generation));
        }
        if self.republished != 0 {
            id.push_str(&format!("+r{}", self.republished));
        }
        if self.dispatch_epoch != 0 {
            id.push_str(&format!("+p{}", self.dispatch_epoch));
        }
        id
    }

    /// The attempt number of delivery `delivery_attempt` (1-based, as the queue counts it) of
    /// this publication: the queue counts again from 1 for a re-published job, so its attempts
    /// are shifted by [`ATTEMPTS_PER_PUBLICATION`] per re-publication.
    pub fn attempt_of(&self, delivery_attempt: u32) -> u32 {
        self.republished
            .saturating_mul(ATTEMPTS_PER_PUBLICATION)
            .saturating_add(delivery_attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::ExecutorKind;

    #[test]
    fn a_republished_job_has_its_own_message_id_and_attempts() {
        let batch = BatchId::new("b1").expect("valid literal");
        let mut job = JobSpec {
            protocol: PROTOCOL_VERSION,
            job_id: JobId::new(&batch, UnitRef::File(0), Some(3)),
            batch_id: batch,
            command: JobCommand::Run,
            tier: Tier::Container,
            unit: UnitRef::File(0),
            repeat_index: Some(3),
            scenario_file: "s.yaml".into(),
            scenario_name: "s".into(),
            axes: None,
            arm: None,
            forwarded_flags: Vec::new(),
            bundle_sha256: "00".into(),
            timeout_ms: 1,
            executor: ExecutorKind::Sim,
            sim: None,
            generation: 0,
            traceparent: None,
            republished: 0,
            dispatch_epoch: 0,
            leader_term: 0,
        };
        assert_eq!(
            (job.message_id().as_str(), job.attempt_of(2)),
            ("b1/f0/r3", 2)
        );
        job.republished = 1;
        assert_eq!(job.message_id(), "b1/f0/r3+r1");
        assert_eq!(job.attempt_of(1), 1001);
        job.generation = 2;
        assert_eq!(job.message_id(), "b1/f0/r3@g2+r1");
        let text = serde_json::to_string(&job).expect("serializes");
        assert!(text.contains(r#""republished":1"#), "{text}");
    }
}
