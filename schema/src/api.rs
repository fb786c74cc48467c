//! Wire types of the coordinator's HTTP API (decisions.md#operations): what `POST /v1/batches`
//! answers, what `GET /v1/batches/{id}` returns, the events of `GET /v1/batches/{id}/events` (SSE)
//! and the error body of every refused request.
//!
//! The request side needs no type of its own: a submit is a multipart body whose `spec` part is
//! a [`crate::batch::BatchSpec`] and whose `bundle` part is the bundle's bytes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::BatchId;
use crate::job::Tier;
use crate::registry::{BatchRecord, BatchState};
use crate::rollup::RollupDoc;

/// The answer to an accepted submit (`201 Created`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubmitResponse {
    pub batch_id: BatchId,
    /// Jobs the plan holds (before early stops).
    pub n_jobs: u64,
    /// Units of the plan: scenario files, or kept matrix cells.
    pub units: u32,
    /// The batch's state when the answer was sent (normally `planned`).
    pub state: BatchState,
}

/// A live snapshot of a supervised batch: how many jobs are where, and what they cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgressSnapshot {
    /// Jobs the plan holds (before early stops).
    pub planned: u64,
    /// Jobs published to the queue.
    pub admitted: u64,
    /// Jobs a worker has started and not finished.
    pub running: u64,
    pub finished: u64,
    pub passed: u64,
    pub failed: u64,
    /// Jobs ending unanswered or in error.
    pub errored: u64,
    /// Jobs never admitted because their unit was decided first.
    pub skipped: u64,
    /// Finished jobs whose unit was already decided (overshoot, harness-behaviour.md#choice-c4).
    pub discarded: u64,
    /// Jobs reported again by a second run, or by a report that differs from the folded one.
    pub duplicates: u64,
    /// Finished jobs delivered again after a lost ack and reported from their stored record
    /// without running (the same run again, not a duplicate).
    #[serde(default)]
    pub reacked: u64,
    /// Attempts handed back for retry (harness-behaviour.md#choice-c8), sandbox start
    /// failures left out.
    pub retries: u64,
    /// Deliveries handed back because the job's sandbox did not start on its worker: retried
    /// on another worker as infrastructure, not attempts of the job. Left out while 0.
    #[serde(default, skip_serializing_if = "crate::fleet::is_zero_u64")]
    pub sandbox_start_retries: u64,
    /// Runs cut short by a worker's stop (SIGTERM, its drain grace passed) and handed back:
    /// run again on another worker, not attempts of the job. Left out while 0.
    #[serde(default, skip_serializing_if = "crate::fleet::is_zero_u64")]
    pub disrupted: u64,
    /// Finished jobs that more than one delivery started (hand-backs that are no attempts left
    /// out: a sandbox that did not start, a run a stopping worker cut short).
    #[serde(default)]
    pub redelivered: u64,
    /// Dispatch pauses after `usage_limit` results (harness-behaviour.md#choice-c9).
    #[serde(default)]
    pub pauses: u64,
    /// Tiers whose dispatch is paused now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paused_tiers: Vec<Tier>,
    /// Resume generation of the batch (0 = never resumed).
    #[serde(default)]
    pub generation: u32,
    /// Items of the event log that could not be decoded; skipped.
    #[serde(default)]
    pub malformed_events: u64,
    /// Events the coordinator refused to fold (see `FleetJobs::refused_events`).
    #[serde(default, skip_serializing_if = "crate::fleet::is_zero_u64")]
    pub refused_events: u64,
    /// Jobs published a second time because they did not report back within their deadline.
    #[serde(default)]
    pub republished: u64,
    /// Jobs that never reported back, folded as infrastructure errors.
    #[serde(default)]
    pub lost: u64,
    /// Queued jobs taken back from the queue by a cancel.
    #[serde(default)]
    pub withdrawn: u64,
    /// Why admission waits now: `usage-limit pause (<tier>)`, `model limit <rule>`,
    /// `batch budget`, `unit budget` or `speculation limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// What the batch holds of each tier's slots beside the other batches, and why it waits
    /// for more (decisions.md#fair-share). Empty when the coordinator does not share (one
    /// batch in `cowork run`) or no live worker count is known yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<crate::share::TierShare>,
    /// The batch-wide budget in USD, when one is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_budget_usd: Option<f64>,
    /// Spend reported by finished runs, folded or not, in USD.
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub cost_usd: f64,
    /// With a batch budget: what it counts, model plus sandbox spend of the finished runs
    /// (decisions.md#whole-cost).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json_number::serialize_opt"
    )]
    pub budget_spent_usd: Option<f64>,
    /// Tiers of the batch with jobs waiting in the queue and no live worker to serve them: the
    /// batch cannot progress on those until a worker of that tier joins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unserved_tiers: Vec<UnservedTier>,
    /// Streams and buckets of the queue that cannot serve now (no leader, no answer): every
    /// batch waits on them, whatever its progress says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fabric_stalls: Vec<FabricStall>,
    /// Workers whose heartbeat is late while they were running jobs (killed, cut off): the
    /// jobs they held wait for redelivery.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_workers: Vec<LostWorker>,
    /// Infrastructure failures at the start of a job (the CLI or its sandbox could not be
    /// started) reported so far; the watchdog compares them across a stall.
    #[serde(default, skip_serializing_if = "crate::fleet::is_zero_u64")]
    pub sandbox_start_failures: u64,
    /// Set while the batch has jobs outstanding and none started or finished for its
    /// `--stall-after`: why, in words, and since when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall: Option<BatchStall>,
    /// Jobs past their timeout plus the grace that the worker which started them has not
    /// reported back on, longest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overdue_jobs: Vec<OverdueJob>,
}

/// A started job past its timeout plus the grace, still claimed by the worker that started it
/// (no result yet).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverdueJob {
    pub job_id: String,
    pub worker_id: String,
    /// When its timeout plus the grace ran out, in milliseconds since the Unix epoch.
    pub overdue_since_ms: u64,
}

impl OverdueJob {
    /// One line for people, given the reader's clock: `job b1/f0/r2 on worker w1: 95s past
    /// its timeout plus grace, no result yet`.
    pub fn describe(&self, now_ms: u64) -> String {
        let seconds = now_ms.saturating_sub(self.overdue_since_ms) / 1000;
        format!(
            "job {} on worker {}: {seconds}s past its timeout plus grace, no result yet",
            self.job_id, self.worker_id
        )
    }
}

/// Why a batch with jobs outstanding makes no progress, as the stall watchdog decides it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum StallReason {
    /// The broker does not answer, or a stream or bucket the fleet needs cannot serve.
    BrokerUnreachable,
    /// Dispatch of the batch is paused (`cowork pause`).
    Paused,
    /// Tiers of the batch's outstanding jobs that no live worker serves.
    #[serde(rename_all = "camelCase")]
    NoWorker { tiers: Vec<Tier> },
    /// Every job tried since the last progress failed before its harness started (the CLI or
    /// its sandbox could not be started): this many failures.
    #[serde(rename_all = "camelCase")]
    SandboxStart { failures: u64 },
    /// Nothing the coordinator can see explains it.
    Unexplained,
}

impl StallReason {
    /// The reason in words: `no worker serves tier microvm: no live worker of that tier`,
    /// `every job failing at sandbox start (3 failures)`, `the broker unreachable`, `paused`.
    pub fn describe(&self) -> String {
        match self {
            StallReason::BrokerUnreachable => "the broker unreachable".to_owned(),
            StallReason::Paused => "paused".to_owned(),
            StallReason::NoWorker { tiers } => {
                let names: Vec<&str> = tiers.iter().map(|tier| tier.as_str()).collect();
                let (tier, that) = if tiers.len() == 1 {
                    ("tier", "that tier")
                } else {
                    ("tiers", "those tiers")
                };
                format!(
                    "no worker serves {tier} {}: no live worker of {that}",
                    names.join(", ")
                )
            }
            StallReason::SandboxStart { failures } => {
                let word = if *failures == 1 {
                    "failure"
                } else {
                    "failures"
                };
                format!("every job failing at sandbox start ({failures} {word})")
            }
            StallReason::Unexplained => "no cause the fleet can see".to_owned(),
        }
    }
}

/// A stalled batch: why, since when, and what was done about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchStall {
    pub reason: StallReason,
    /// The reason in words ([`StallReason::describe`]).
    pub message: String,
    /// The last time a job of the batch started or finished (or supervision began), in
    /// milliseconds since the Unix epoch.
    pub progress_at_ms: u64,
    /// The stall threshold that applied, in milliseconds.
    pub stall_after_ms: u64,
    /// `true` once `--on-stall cancel` cancelled the batch for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
}

impl BatchStall {
    /// One line for people, given the reader's clock: `stalled: no worker serves tier microvm:
    /// no live worker of that tier — no job started or finished for 242s (stall after 2m)`.
    pub fn describe(&self, now_ms: u64) -> String {
        let idle = now_ms.saturating_sub(self.progress_at_ms) / 1000;
        let after =
            crate::duration::format_duration(std::time::Duration::from_millis(self.stall_after_ms));
        let action = if self.cancelled {
            "; cancelled (--on-stall cancel)"
        } else {
            ""
        };
        format!(
            "stalled: {} — no job started or finished for {idle}s (stall after {after}){action}",
            self.message
        )
    }
}

/// A worker that stopped beating while it ran jobs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LostWorker {
    pub worker_id: String,
    /// Jobs it was running at its last heartbeat.
    pub busy: u32,
    /// Its last heartbeat, in milliseconds since the Unix epoch.
    pub heartbeat_at_ms: u64,
}

impl LostWorker {
    /// One line for people, given the reader's clock: `worker w2 lost: no heartbeat since
    /// 10:17:30 UTC (17s); the 2 jobs it was running wait for redelivery (one ack wait after
    /// they were last renewed, 60 s by default)`.
    pub fn describe(&self, now_ms: u64) -> String {
        let seconds = now_ms.saturating_sub(self.heartbeat_at_ms) / 1000;
        let jobs = if self.busy == 1 { "job" } else { "jobs" };
        format!(
            "worker {} lost: no heartbeat since {} ({seconds}s); the {} {jobs} it was running wait for redelivery (one ack wait after their last renewal, 60s by default)",
            self.worker_id,
            utc_clock(self.heartbeat_at_ms),
            self.busy
        )
    }
}

/// A stream or bucket the fleet needs that cannot serve now: while it lasts, jobs, events or
/// batch records that live in it can be neither written nor read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FabricStall {
    /// `stream` or `bucket`.
    pub kind: String,
    pub name: String,
    /// Why, as the end of a sentence that starts with the kind and name: `has no leader: 2 of 3
    /// replicas unavailable (n2, n3)`, `does not answer: no answer within 3s`.
    pub reason: String,
    /// When the coordinator first saw it stall, in milliseconds since the Unix epoch.
    pub since_ms: u64,
}

impl FabricStall {
    /// One line for people, given the reader's clock: `stream COWORK_JOBS has no leader: … —
    /// since 10:17:30 UTC (12s)`.
    pub fn describe(&self, now_ms: u64) -> String {
        let seconds = now_ms.saturating_sub(self.since_ms) / 1000;
        format!(
            "{} {} {} — since {} ({seconds}s)",
            self.kind,
            self.name,
            self.reason,
            utc_clock(self.since_ms)
        )
    }
}

/// `YYYY-MM-DD HH:MM:SS UTC` of a time in milliseconds since the Unix epoch: a leader may
/// lead for days, so its start needs the date.
pub fn utc_date_time(ms: u64) -> String {
    format!("{} UTC", crate::ids::date_time_of_ms(ms))
}

/// `HH:MM:SS UTC` of a time in milliseconds since the Unix epoch.
fn utc_clock(ms: u64) -> String {
    let seconds = (ms / 1000) % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        seconds / 3600,
        (seconds / 60) % 60,
        seconds % 60
    )
}

/// `GET /v1/fabric`: the queue's streams and buckets as the coordinator last checked them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FabricStatus {
    /// Replicas asked of every stream and bucket; absent for the embedded fabric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// Those that cannot serve now.
    #[serde(default)]
    pub stalls: Vec<FabricStall>,
    /// Those that serve with less redundancy than asked, one line each (`stream COWORK_JOBS
    /// has 1 replica, 3 asked`).
    #[serde(default)]
    pub shortfalls: Vec<String>,
    /// Who leads the coordinators of this fabric, as the answering one knows it; absent
    /// while it does not know (its first claim of the lease has not come back, or NATS does
    /// not answer) and from coordinators older than the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<LeaderStatus>,
}

/// The header a standby sets on each API answer: the leader's URL (its `--advertise-url`),
/// so a client given several coordinators moves to the leader.
pub const LEADER_HEADER: &str = "cowork-leader";

/// The coordinator that leads (holds the lease, admits and decides), as one coordinator
/// knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderStatus {
    /// The leader's `--coordinator-id`.
    pub coordinator_id: String,
    /// Where the leader's API answers (its `--advertise-url`); empty for a coordinator that
    /// runs alone, without a lease.
    #[serde(default)]
    pub url: String,
    /// Since when it leads, in milliseconds since the Unix epoch.
    pub since_ms: u64,
    /// The coordinator that answered is the leader itself.
    pub answering: bool,
}

impl LeaderStatus {
    /// One line for people: `coord-a at http://a:8080 (this one), since 12:03:04 UTC`.
    pub fn describe(&self) -> String {
        let mut line = self.coordinator_id.clone();
        if !self.url.is_empty() {
            line.push_str(" at ");
            line.push_str(&self.url);
        }
        if self.answering {
            line.push_str(" (this one)");
        }
        line.push_str(", since ");
        line.push_str(&utc_date_time(self.since_ms));
        line
    }
}

/// A tier with queued jobs and no live worker that serves it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnservedTier {
    pub tier: Tier,
    /// Jobs of the tier waiting in the queue to be delivered (of every batch on the tier).
    pub waiting: u64,
}

impl UnservedTier {
    /// One line for people: `no live worker serves tier microvm: 2 jobs waiting`.
    pub fn describe(&self) -> String {
        let jobs = if self.waiting == 1 { "job" } else { "jobs" };
        format!(
            "no live worker serves tier {}: {} {jobs} waiting",
            self.tier.as_str(),
            self.waiting
        )
    }
}

/// One worker of `GET /v1/workers`: its latest heartbeat, and why this coordinator refuses it
/// when it does (a worker of another protocol version gets no jobs it could misread).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerStatus {
    #[serde(flatten)]
    pub info: crate::registry::WorkerInfo,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// `GET /v1/batches/{id}`: the registry record, the live progress when this coordinator
/// supervises the batch, and the stored rollup once the batch is done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchStatus {
    pub record: BatchRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressSnapshot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollup: Option<RollupDoc>,
    /// The last failed delivery of a notification of this batch, while a hook fails; as this
    /// coordinator process saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_error: Option<String>,
}

/// The last event of a watch: the batch reached a final state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchEnd {
    pub state: BatchState,
    /// The batch verdict (envelope `ok`), when the batch was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// The batch's exit code (harness-behaviour.md#exit-codes), when the batch was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// An eval batch's A/B verdict in words (the record's `evalVerdict`); `ok` and `exitCode`
    /// are then the eval's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_verdict: Option<String>,
    /// Why supervision failed, when it ended without a stored envelope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The body of `POST /v1/batches/{id}/pause`, `/resume-dispatch` and `/adjust`: who asks, and
/// for `adjust` the new limits (at least one).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlRequest {
    /// Who asks, recorded with the change (`cowork` sends `user@host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The new batch-wide budget in USD (0 or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_budget_usd: Option<f64>,
    /// The new cap on the batch's jobs outstanding (queued or running) at once (1 or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
}

/// The body of every refused request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiError {
    /// One lowercase line saying what was refused.
    pub error: String,
    /// Every problem found, each naming its file, field or part (empty when there is one cause).
    #[serde(default)]
    pub problems: Vec<String>,
}

/// Name of the SSE event that carries a [`ProgressSnapshot`].
pub const SSE_PROGRESS: &str = "progress";
/// The most keys one page of `GET /v1/batches/{id}/artifacts?limit=N` holds: a larger `limit`
/// is cut to this, so a client pages through a listing of any length in bounded memory.
pub const MAX_ARTIFACT_PAGE: usize = 1_000;
/// Name of the SSE event that carries the [`BatchEnd`]; the stream closes after it.
pub const SSE_END: &str = "end";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_prints_integral_cost_like_javascript() {
        let snapshot = ProgressSnapshot {
            planned: 3,
            cost_usd: 2.0,
            ..ProgressSnapshot::default()
        };
        let text = serde_json::to_string(&snapshot).expect("a snapshot serializes");
        assert!(text.contains(r#""costUsd":2}"#), "{text}");
        let back: ProgressSnapshot = serde_json::from_str(&text).expect("round trip");
        assert_eq!(back, snapshot);
    }

    #[test]
    fn a_leader_is_named_with_its_url_and_the_date_it_began() {
        let leader = LeaderStatus {
            coordinator_id: "coord-a".to_owned(),
            url: "http://a:8080".to_owned(),
            // 2026-12-07 12:03:04 UTC.
            since_ms: 1_796_644_984_000,
            answering: false,
        };
        assert_eq!(
            leader.describe(),
            "coord-a at http://a:8080, since 2026-12-07 12:03:04 UTC"
        );
        let alone = LeaderStatus {
            url: String::new(),
            answering: true,
            since_ms: 0,
            ..leader
        };
        assert_eq!(
            alone.describe(),
            "coord-a (this one), since 1970-01-01 00:00:00 UTC"
        );
        // The leap day and the last day of a year.
        assert_eq!(utc_date_time(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_date_time(1_798_761_599_000), "2026-12-31 23:59:59 UTC");
    }

    #[test]
    fn stall_reasons_read_as_words() {
        let one = StallReason::NoWorker {
            tiers: vec![Tier::Microvm],
        };
        assert_eq!(
            one.describe(),
            "no worker serves tier microvm: no live worker of that tier"
        );
        assert_eq!(StallReason::Paused.describe(), "paused");
        assert_eq!(
            StallReason::BrokerUnreachable.describe(),
            "the broker unreachable"
        );
        assert_eq!(
            StallReason::SandboxStart { failures: 3 }.describe(),
            "every job failing at sandbox start (3 failures)"
        );
        let stall = BatchStall {
            message: one.describe(),
            reason: one,
            progress_at_ms: 1_000,
            stall_after_ms: 120_000,
            cancelled: true,
        };
        assert_eq!(
            stall.describe(243_000),
            "stalled: no worker serves tier microvm: no live worker of that tier — no job started or finished for 242s (stall after 2m); cancelled (--on-stall cancel)"
        );
        let text = serde_json::to_string(&stall).expect("serializes");
        assert!(
            text.starts_with(r#"{"reason":{"kind":"noWorker","tiers":["microvm"]},"#),
            "{text}"
        );
        let back: BatchStall = serde_json::from_str(&text).expect("round trip");
        assert_eq!(back, stall);
        let overdue = OverdueJob {
            job_id: "b1/f0/r2".to_owned(),
            worker_id: "w1".to_owned(),
            overdue_since_ms: 5_000,
        };
        assert_eq!(
            overdue.describe(100_000),
            "job b1/f0/r2 on worker w1: 95s past its timeout plus grace, no result yet"
        );
    }

    #[test]
    fn unserved_tiers_read_as_a_sentence() {
        let one = UnservedTier {
            tier: Tier::Microvm,
            waiting: 1,
        };
        assert_eq!(
            one.describe(),
            "no live worker serves tier microvm: 1 job waiting"
        );
        let two = UnservedTier { waiting: 2, ..one };
        assert_eq!(
            two.describe(),
            "no live worker serves tier microvm: 2 jobs waiting"
        );
        let text = serde_json::to_string(&ProgressSnapshot {
            unserved_tiers: vec![two],
            ..ProgressSnapshot::default()
        })
        .expect("serializes");
        assert!(
            text.ends_with(r#""unservedTiers":[{"tier":"microvm","waiting":2}]}"#),
            "{text}"
        );
    }

    #[test]
    fn fabric_stalls_read_as_a_sentence_with_their_start() {
        let stall = FabricStall {
            kind: "stream".to_owned(),
            name: "COWORK_JOBS".to_owned(),
            reason: "has no leader".to_owned(),
            // 1970-01-02 10:17:30 UTC.
            since_ms: (86_400 + 10 * 3600 + 17 * 60 + 30) * 1000,
        };
        assert_eq!(
            stall.describe(stall.since_ms + 12_500),
            "stream COWORK_JOBS has no leader — since 10:17:30 UTC (12s)"
        );
        // A reader whose clock is behind the coordinator's sees 0s, not a wrapped number.
        assert!(stall.describe(0).ends_with("(0s)"));
        let text = serde_json::to_string(&ProgressSnapshot {
            fabric_stalls: vec![stall],
            ..ProgressSnapshot::default()
        })
        .expect("serializes");
        assert!(
            text.contains(r#""fabricStalls":[{"kind":"stream","name":"COWORK_JOBS""#),
            "{text}"
        );
    }

    #[test]
    fn end_omits_absent_fields() {
        let end = BatchEnd {
            state: BatchState::Cancelled,
            ok: None,
            exit_code: None,
            eval_verdict: None,
            message: None,
        };
        assert_eq!(
            serde_json::to_string(&end).expect("an end serializes"),
            r#"{"state":"cancelled"}"#
        );
        let error: ApiError =
            serde_json::from_str(r#"{"error":"unauthorized"}"#).expect("problems default");
        assert!(error.problems.is_empty());
    }
}
