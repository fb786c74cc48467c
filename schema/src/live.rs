//! The live view of a running batch (`GET /v1/batches/{id}/live` and its SSE stream of
//! deltas): progress, rate, cost burn, a heatmap of its cells, its latest failures, the workers
//! serving it and, once decided, its verdict.
//!
//! The snapshot is small whatever the batch's size: at most
//! `cowork_core::admission::LIVE_CELLS_MAX` cells (consecutive units are grouped beyond that)
//! and a bounded list of failures; a unit's runs are read one unit at a time
//! ([`LiveUnitRuns`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::{BatchStall, FabricStall, UnservedTier};
use crate::job::Tier;
use crate::registry::ControlChange;

/// The whole live view of one batch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveSnapshot {
    pub batch_id: String,
    /// `running`, `paused`, `cancelling`, `done` or `cancelled`.
    pub state: String,
    /// `true` when the batch's runs come from the simulator: no model was called.
    pub simulated: bool,
    pub progress: LiveProgress,
    pub cost: LiveCost,
    pub dispatch: LiveDispatch,
    /// Units per heatmap cell: 1, or more when the batch has more units than the snapshot
    /// shows cells.
    pub units_per_cell: u32,
    pub cells: Vec<LiveCell>,
    /// The batch's `--min-pass-rate`: a cell passes when its pass rate reaches it (the page
    /// colours cells by that verdict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_pass_rate: Option<f64>,
    /// The latest failed, errored or unanswered runs, newest first.
    pub failures: Vec<LiveFailure>,
    /// Live workers serving the batch's tiers.
    #[serde(default)]
    pub workers: Vec<LiveWorker>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unserved_tiers: Vec<UnservedTier>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fabric_stalls: Vec<FabricStall>,
    /// Set while the batch is stalled (no job started or finished for its `--stall-after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall: Option<BatchStall>,
    /// Every change people made to the batch's controls, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub control_changes: Vec<ControlChange>,
    /// Set once the batch is final.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<LiveVerdict>,
}

/// Where the batch's jobs are.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveProgress {
    pub planned: u64,
    /// Published and not started.
    pub queued: u64,
    pub running: u64,
    pub finished: u64,
    pub passed: u64,
    pub failed: u64,
    /// Unanswered or in error (infrastructure failures included).
    pub errored: u64,
    /// Of `errored`: failed by the infrastructure (the run may have been paid).
    pub infra_failed: u64,
    /// Finished after their unit was decided: left out of every rollup.
    pub discarded: u64,
    /// Never run because their unit was decided first.
    pub skipped: u64,
    /// Finished jobs per minute since admission started, when measurable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<f64>,
    /// Seconds until the last job is expected to finish at that rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_s: Option<u64>,
}

/// Money spent and expected.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveCost {
    /// Reported by finished runs, folded or not.
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub spent_usd: f64,
    /// `--max-budget-usd`: each unit's cap (with `--repeat`) and each run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget_usd: Option<f64>,
    /// The batch-wide budget in force (as submitted or adjusted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_budget_usd: Option<f64>,
    /// The mean price of a priced run so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_run_usd: Option<f64>,
    /// Spend so far plus the jobs still to run at `perRunUsd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projected_usd: Option<f64>,
}

/// What admission does now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveDispatch {
    /// `true` while `cowork pause` holds dispatch.
    pub paused: bool,
    pub epoch: u32,
    /// Jobs outstanding at most (`--max-running` as adjusted, or the window).
    pub max_running: u64,
    /// Why admission waits, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// Tiers paused after a usage limit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paused_tiers: Vec<Tier>,
    /// What the batch holds of each tier beside the other batches, and why it waits
    /// (decisions.md#fair-share).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<crate::share::TierShare>,
}

/// One cell of the heatmap: a unit (a scenario file or a matrix cell), or a run of
/// consecutive units.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveCell {
    /// Index of its first unit.
    pub unit: u32,
    /// The row of the heatmap (scenario), and the column (the cell's axes, or `-`).
    pub row: String,
    pub col: String,
    pub runs: u32,
    pub finished: u32,
    pub passed: u32,
    pub failed: u32,
    pub errored: u32,
}

/// A run that failed, errored or went unanswered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveFailure {
    pub job_id: String,
    pub unit: u32,
    pub scenario: String,
    pub cell: String,
    /// `fail`, `error` or `unanswered`.
    pub kind: String,
    pub reason: String,
    /// Its stored files, relative to the batch (`jobs/c0/r1/a1/result.json`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

/// A live worker serving one of the batch's tiers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveWorker {
    pub worker_id: String,
    pub tiers: Vec<Tier>,
    pub slots: u32,
    pub busy: u32,
    pub draining: bool,
}

/// How a final batch ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveVerdict {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// An eval batch's A/B verdict in words: the page shows it instead of PASS or FAIL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_verdict: Option<String>,
    /// The report's path (`report?format=html`), once there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
}

/// A change of the live view: what differs from the snapshot before. Fields absent did not
/// change; `cells` lists only the changed cells.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<LiveProgress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<LiveCost>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<LiveDispatch>,
    /// Changed cells, by position in the snapshot's `cells`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cells: Vec<(u32, LiveCell)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<Vec<LiveFailure>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<LiveWorker>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unserved_tiers: Option<Vec<UnservedTier>>,
    /// A changed stall: `null` once the batch moves again.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_even_if_null"
    )]
    pub stall: Option<Option<BatchStall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_changes: Option<Vec<ControlChange>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<LiveVerdict>,
}

/// Reads a present field as `Some`, `null` included, so a delta can say a value went away.
fn some_even_if_null<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

impl LiveDelta {
    /// `true` when nothing changed.
    pub fn is_empty(&self) -> bool {
        *self == LiveDelta::default()
    }
}

/// `GET /v1/batches/{id}/live/units/{unit}`: one unit's runs, for its strip.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveUnitRuns {
    pub unit: u32,
    pub label: String,
    pub runs: Vec<LiveRun>,
}

/// One run of a unit's strip.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveRun {
    /// Repeat index (0 without `--repeat`).
    pub run: u32,
    /// `pass`, `fail`, `error`, `running`, `queued` or `waiting`.
    pub state: String,
    /// The folded result, relative to the batch, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// Name of the SSE event that carries a whole [`LiveSnapshot`] (first, and after a gap).
pub const SSE_LIVE_SNAPSHOT: &str = "snapshot";
/// Name of the SSE event that carries a [`LiveDelta`].
pub const SSE_LIVE_DELTA: &str = "delta";
