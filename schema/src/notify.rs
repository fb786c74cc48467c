//! The body of a notification: what a webhook receives when a batch is decided, stops on its
//! budget, stalls, loses a worker mid-job or is cancelled (docs/operations/unattended.md).
//!
//! One flat object for every kind: the fields a kind does not have are left out, so a
//! receiver reads `kind`, `batchId` and `text` the same way for all of them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::BatchId;

/// What happened to the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotifyKind {
    /// Every unit is decided; `verdict` says how.
    Decided,
    /// The batch budget was reached: open units stop as budget stops.
    BudgetStop,
    /// Nothing moved for too long; `reason` says what it waits on.
    Stalled,
    /// A worker stopped beating while it held jobs of the batch.
    WorkerLost,
    /// The batch was cancelled before it was decided.
    Cancelled,
    /// Another coordinator took the lease over and resumed the batch; `reason` names both.
    TakenOver,
    /// A sample sent by `cowork notify-test`.
    Test,
}

impl NotifyKind {
    /// The word in the body (`decided`, `budget_stop`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyKind::Decided => "decided",
            NotifyKind::BudgetStop => "budget_stop",
            NotifyKind::Stalled => "stalled",
            NotifyKind::WorkerLost => "worker_lost",
            NotifyKind::Cancelled => "cancelled",
            NotifyKind::TakenOver => "taken_over",
            NotifyKind::Test => "test",
        }
    }
}

/// The JSON body POSTed to every hook of a batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotifyBody {
    /// The event's id, also sent as `Cowork-Event-Id`: the same on every retry and on every
    /// hook, so a receiver drops a delivery it has seen.
    pub id: String,
    pub kind: NotifyKind,
    pub batch_id: BatchId,
    /// When the event happened, in seconds since the Unix epoch (not when it was delivered).
    pub created_at: u64,
    /// One or two lines for people (Slack shows this field).
    pub text: String,
    /// `PASS`, `FAIL`, or an eval's verdict in words (`decided`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// The batch's exit code (`decided`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Units of the batch (`decided`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units_total: Option<u64>,
    /// Labels of the units that did not pass (`decided`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing: Option<Vec<String>>,
    /// Labels of failing units that passed in the most recent earlier batch holding them
    /// (`decided`; empty when no earlier batch is known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newly_failing: Option<Vec<String>>,
    /// Labels of quarantined units (`decided`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined: Option<Vec<String>>,
    /// What the batch's runs reported spending so far, in US dollars.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json_number::serialize_opt"
    )]
    pub cost_usd: Option<f64>,
    /// The batch budget that stopped it (`budget_stop`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json_number::serialize_opt"
    )]
    pub budget_usd: Option<f64>,
    /// Why the batch stalled (`stalled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The lost worker (`worker_lost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// Jobs the lost worker held at its last heartbeat (`worker_lost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_held: Option<u32>,
    /// Where people read the batch: its report on the coordinator, or the command that
    /// makes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
}
