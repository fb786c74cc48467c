//! Records of the fleet's shared state: batch entries (`COWORK_BATCHES` KV bucket) and worker
//! heartbeats (`COWORK_WORKERS` KV bucket).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::BatchId;
use crate::job::Tier;

/// Lifecycle of a batch (decisions.md#wire-protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BatchState {
    /// Validated and stored; no job admitted yet.
    Planned,
    /// Jobs are being admitted and folded.
    Running,
    /// Cancel requested: no more admission; in-flight jobs finish (or are killed).
    Stopping,
    /// Decided: `rollup.json` and `envelope.json` are stored.
    Done,
    /// Ended by a cancel before it was decided.
    Cancelled,
}

impl BatchState {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchState::Planned => "planned",
            BatchState::Running => "running",
            BatchState::Stopping => "stopping",
            BatchState::Done => "done",
            BatchState::Cancelled => "cancelled",
        }
    }

    /// `true` once the batch will not change any more.
    pub fn is_final(self) -> bool {
        matches!(self, BatchState::Done | BatchState::Cancelled)
    }
}

/// One entry of the batches bucket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchRecord {
    pub batch_id: BatchId,
    pub state: BatchState,
    /// sha256 of the stored `spec.json`.
    pub spec_sha256: String,
    /// Jobs the plan holds.
    pub n_jobs: u64,
    /// Submission time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Last state change, milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
    /// The batch verdict once `done`. An eval batch is judged by its A/B comparison:
    /// `ok` and `exitCode` are those `cowork eval` gives it with its default gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// An eval batch's overall A/B verdict in words (`no detectable difference`, `B worse`,
    /// `B better` or `nothing to compare`), once its `eval.json` is stored; absent for every
    /// other batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_verdict: Option<String>,
    /// Id of the coordinator replica that owns the batch's supervision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Resume generation: 0 for the first run, +1 per `cowork resume`. Jobs ended by an
    /// infrastructure failure in an earlier generation are run again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u32,
    /// Set by `cowork cancel --kill-running`: workers kill the batch's in-flight jobs and skip
    /// its queued ones.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kill_running: bool,
    /// What people changed while the batch ran (`cowork pause`, `resume-dispatch`, `adjust`).
    /// Kept in the record so a restarted coordinator, and every worker, sees it.
    #[serde(default, skip_serializing_if = "BatchControls::is_untouched")]
    pub controls: BatchControls,
    /// What a list of batches shows without reading the store: kept in the record so that
    /// `GET /v1/batches`, `/v1/ui` and `cowork batches` show a finished or cancelled batch's
    /// target and spend from one read of the bucket.
    #[serde(flatten)]
    pub listing: BatchListing,
}

/// What lists show of a batch, kept in its record. Records written before these fields
/// existed read as empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchListing {
    /// The batch's target as the user named it (`targetDisplay` of its spec), set when the
    /// batch is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `true` for an eval batch (`cowork eval`), set when it is accepted, so a list marks an
    /// eval as one even when it was cancelled before its A/B verdict.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub eval: bool,
    /// What the batch's finished runs reported spending in USD, folded or not, set when the
    /// batch ends (decided or cancelled): a cancelled batch has no stats, yet it spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent_usd: Option<f64>,
    /// The name of the token policy the batch was submitted under (`--token-policy`), whose
    /// slot quota it shares with that token's other batches; `None` for a token without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_name: Option<String>,
}

/// The controls of a running batch: its dispatch pause, its adjusted limits and every change.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchControls {
    /// `true` while dispatch is paused: nothing new is admitted and queued jobs are taken back;
    /// workers start no job of the batch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// +1 per `resume-dispatch` and per `adjust` that lowers `maxRunning`. Jobs carry the
    /// epoch they were published in ([`crate::job::JobSpec::dispatch_epoch`]); a worker starts
    /// no job of an older epoch (one taken back by a pause or a lowered cap and published
    /// again since).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dispatch_epoch: u32,
    /// The batch-wide budget in USD as last adjusted; `None`: the submitted one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_budget_usd: Option<f64>,
    /// Jobs of the batch outstanding (queued or running) at most, as last adjusted; `None`:
    /// the coordinator's window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
    /// Every change, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<ControlChange>,
}

impl BatchControls {
    /// `true` when nobody touched the batch's controls.
    pub fn is_untouched(&self) -> bool {
        *self == BatchControls::default()
    }
}

/// One change of a batch's controls: who, when, what, from and to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlChange {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Who asked, as the client said (`cowork` sends `user@host`; the live page `live page`).
    pub by: String,
    /// `dispatch`, `batch-budget-usd` or `max-running`.
    pub control: String,
    /// Before and after, as text (`running`/`paused`, `$2.5`, `none`, `16`).
    pub old: String,
    pub new: String,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// One worker's heartbeat in the workers bucket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerInfo {
    /// [`PROTOCOL_VERSION`](crate::job::PROTOCOL_VERSION) the worker speaks.
    #[serde(default = "crate::job::legacy_protocol")]
    pub protocol: u32,
    pub worker_id: String,
    pub tiers: Vec<Tier>,
    pub slots: u32,
    /// Jobs running now.
    pub busy: u32,
    /// Executor kind (`harness`, `container`, `sim`).
    pub executor: String,
    /// `cowork-harness --version` on this worker, when known
    /// (harness-behaviour.md#cli-version-pin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness_version: Option<String>,
    pub os: String,
    pub arch: String,
    pub hostname: String,
    /// Jobs finished since the worker started.
    pub jobs_finished: u64,
    /// Worker start, milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// Time of this heartbeat, milliseconds since the Unix epoch.
    pub heartbeat_at_ms: u64,
    /// How often the worker beats, in milliseconds (0 from a worker that does not say): a
    /// heartbeat older than one beat and a half means the worker is probably gone.
    #[serde(default)]
    pub heartbeat_every_ms: u64,
    /// `true` once the worker is draining (SIGTERM): it pulls no new jobs.
    #[serde(default)]
    pub draining: bool,
    /// Jobs in a row whose sandbox did not start on this worker (a container that could not
    /// be created or started, a missing image, a VM that did not boot, a full disk), over all
    /// its tiers; back to 0 after a job whose sandbox started. Each was handed back for
    /// another worker without counting as an attempt. Left out while 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sandbox_start_failures: u32,
    /// Tiers this worker does not take for now, after sandbox start failures in a row on them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backed_off_tiers: Vec<TierBackoff>,
}

/// A tier a worker stopped taking for a while after sandbox start failures in a row on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TierBackoff {
    pub tier: Tier,
    /// Sandbox start failures in a row on this tier.
    pub failures: u32,
    /// When the worker takes the tier again, milliseconds since the Unix epoch.
    pub until_ms: u64,
}
