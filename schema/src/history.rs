//! `batches/<batch>/stats.json`: what each unit of a decided batch cost and how long its runs
//! took. It is the fleet's memory across batches: dry runs estimate cost and wall time from it,
//! admission schedules long cells first with it, and `cowork trend` reads it.
//!
//! Unlike `rollup.json` it holds timings and spend of every finished run (discarded overshoot
//! included), so it is not byte-deterministic and is never compared across runs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::BatchId;
use crate::job::CellAxes;

/// The file name of a batch's stats, beside its `rollup.json`.
pub const BATCH_STATS_FILE: &str = crate::layout::names::STATS;

/// Per-unit history of one decided batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchStats {
    pub batch_id: BatchId,
    /// When the batch was decided, milliseconds since the Unix epoch.
    pub decided_at_ms: u64,
    /// Wall time from the first admission to the decision, in milliseconds.
    pub wall_ms: u64,
    pub units: Vec<UnitStats>,
}

/// One unit (scenario file, matrix cell or eval arm) of a decided batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnitStats {
    /// The unit's key across batches: its rollup label (`"<name>"`, or `"<name> [<axes>]"` for
    /// a matrix cell, with the arm for an eval).
    pub label: String,
    /// Effective scenario name.
    pub scenario: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axes: Option<CellAxes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm: Option<String>,
    /// Runs that finished (folded or discarded; errors included).
    pub runs: u32,
    /// Folded runs and how many of them passed (the rollup's counts).
    pub folded: u32,
    pub passes: u32,
    /// Runs that reported a cost, their total and median in USD.
    pub priced_runs: u32,
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub cost_usd: f64,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json_number::serialize_opt"
    )]
    pub median_cost_usd: Option<f64>,
    /// Median and longest executor time of the unit's runs, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_run_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_run_ms: Option<u64>,
}
