//! Repeat and matrix rollups (harness-behaviour.md#repeat-rollup, harness-behaviour.md#matrix) and
//! the batch's `rollup.json`.
//!
//! These are output formats: the field order of each struct is the JSON key order the CLI
//! emits, absent values are omitted (never `null`, harness-behaviour.md#json-absent-keys) and
//! computed doubles print like JavaScript numbers (harness-behaviour.md#json-numbers,
//! [`crate::json_number`]). The reducer in the coordinator builds them; this module only defines
//! their shape.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::job::CellAxes;

/// Why a repeat batch stopped before `requested` iterations (harness-behaviour.md#repeat-loop).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// The running cost reached `--max-budget-usd` with iterations left.
    Budget,
    /// `--stop-on-diverge` saw both a pass and a fail.
    Diverged,
    /// An iteration hit an unanswered gate.
    Unanswered,
    /// An iteration failed with any other error.
    Error,
}

impl StopReason {
    /// The serialised name (`budget`, `diverged`, `unanswered`, `error`).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Budget => "budget",
            StopReason::Diverged => "diverged",
            StopReason::Unanswered => "unanswered",
            StopReason::Error => "error",
        }
    }
}

/// Models, skills and ablation over the folded runs of a rollup (harness-behaviour.md#provenance).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Provenance {
    /// Distinct per-run `model` strings, first-seen order.
    pub models: Vec<String>,
    /// Distinct per-run `skill` strings, first-seen order.
    pub skills: Vec<String>,
    /// Number of runs with `ablated: true`.
    pub ablated_runs: u32,
}

/// One position of the assertion lists of a rollup (`perAssertion`,
/// harness-behaviour.md#per-assertion).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PerAssertion {
    pub index: u32,
    /// First key of the assertion object of the last run having this position, or
    /// `(empty assertion)`.
    pub key: String,
    pub passes: u32,
    pub fails: u32,
    /// First message among failing entries at this position, in fold order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_failure: Option<String>,
}

/// The rollup of one repeat batch: one scenario file or one matrix cell
/// (harness-behaviour.md#repeat-rollup).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RepeatRollup {
    /// Scenario name; `"<name> [<axesLabel>]"` for a matrix cell.
    pub scenario: String,
    /// N of `--repeat N`.
    pub requested: u32,
    /// Number of folded runs.
    pub completed: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<StopReason>,
    pub passes: u32,
    /// `passes / completed`, exactly 0 when nothing completed.
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub pass_rate: f64,
    /// Every signal code of every folded run (fail and warn), first-seen order.
    pub signal_histogram: IndexMap<String, u64>,
    pub per_assertion: Vec<PerAssertion>,
    /// Sum of `cost.usd` in fold order; absent when no run had it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json_number::serialize_opt"
    )]
    pub total_cost_usd: Option<f64>,
    /// Sum of input plus output tokens; absent when no run had both.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json_number::serialize_opt"
    )]
    pub total_tokens: Option<f64>,
    pub non_deterministic_runs: u32,
    pub provenance: Provenance,
}

/// One cell of a plain matrix (harness-behaviour.md#matrix-cell).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatrixCellResult {
    pub index: u32,
    pub axes: CellAxes,
    pub pass: bool,
    /// First key (or `(empty assertion)`) of each failing assertion, in order.
    pub failed_assertions: Vec<String>,
    /// Every signal code of the run (fail and warn, `assertion` included), in order.
    pub signals: Vec<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json_number::serialize_opt"
    )]
    pub cost_usd: Option<f64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json_number::serialize_opt"
    )]
    pub duration_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_fidelity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_dir: Option<String>,
    /// Cell error: the cell produced no RunResult.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The `matrix` key of a plain matrix batch (harness-behaviour.md#matrix-rollup).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatrixRollup {
    /// Cells in index order.
    pub cells: Vec<MatrixCellResult>,
    /// Cells before the cap (`totalBeforeCap`).
    pub requested: u32,
    pub ran_cells: u32,
    pub truncated: bool,
    pub any_fail: bool,
}

/// One cell of a matrix + repeat batch: exactly one of `rollup` and `error`
/// (harness-behaviour.md#matrix-repeat).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatrixCellRepeatResult {
    pub index: u32,
    pub axes: CellAxes,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollup: Option<RepeatRollup>,
    /// Pre-execution failure: the cell's overrides could not be applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The `matrixRepeat` key of a matrix + repeat batch (harness-behaviour.md#matrix-repeat).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatrixRepeatRollup {
    pub cells: Vec<MatrixCellRepeatResult>,
    /// Cells before the cap (`totalBeforeCap`), not iterations.
    pub requested: u32,
    pub ran_cells: u32,
    pub truncated: bool,
    pub any_fail: bool,
}

/// The order in which outcomes were folded (harness-behaviour.md#choice-c2). Only the index order
/// of harness-behaviour.md#index-order-reducer is implemented.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FoldOrder {
    /// Repeat-index order (harness-behaviour.md#index-order-reducer): the rollup equals the CLI's
    /// for the same outcomes.
    Index,
}

/// The judging settings and fleet facts that make a batch's `ok` re-derivable
/// (harness-behaviour.md#choice-c15, harness-behaviour.md#ok-not-rederivable). Overshoot (jobs
/// discarded after an early stop) is left out on purpose: how many jobs were already running when a
/// unit was decided depends on timing, and this document must not; the envelope's `fleet` key
/// reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetJudging {
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub min_pass_rate: f64,
    pub allow_budget_stop: bool,
    pub allow_truncated_matrix: bool,
    pub stop_on_diverge: bool,
    /// The per-file / per-cell budget (harness-behaviour.md#choice-c6).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json_number::serialize_opt"
    )]
    pub max_budget_usd: Option<f64>,
    pub fold_order: FoldOrder,
    /// Order of the envelope's `results[]` (harness-behaviour.md#choice-c3): (unit index, repeat
    /// index).
    pub results_order: FoldOrder,
    /// Folded runs made by the `sim` executor; a report must not present them as real.
    pub simulated_runs: u64,
    /// Labels of the units whose budget stop was disabled by a run without `cost.usd`.
    pub budget_telemetry_missing: Vec<String>,
}

/// The current [`RollupDoc::schema_version`].
pub const ROLLUP_DOC_VERSION: u32 = 1;

/// `batches/<batch>/rollup.json`: the deterministic outcome of a batch.
///
/// It holds nothing that depends on timing, worker identity, batch id or the clock, so the same
/// job outcomes always give the same bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollupDoc {
    pub schema_version: u32,
    pub command: String,
    pub ok: bool,
    pub exit_code: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollups: Option<Vec<RepeatRollup>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix: Option<MatrixRollup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix_repeat: Option<MatrixRepeatRollup>,
    pub fleet: FleetJudging,
    /// The quarantine `ok` and `exitCode` honour, as in the envelope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<crate::quarantine::QuarantineRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollup() -> RepeatRollup {
        RepeatRollup {
            scenario: "s".into(),
            requested: 3,
            completed: 3,
            stopped_early: None,
            passes: 3,
            pass_rate: 1.0,
            signal_histogram: IndexMap::new(),
            per_assertion: vec![PerAssertion {
                index: 0,
                key: "result".into(),
                passes: 3,
                fails: 0,
                sample_failure: None,
            }],
            total_cost_usd: None,
            total_tokens: Some(450.0),
            non_deterministic_runs: 0,
            provenance: Provenance::default(),
        }
    }

    #[test]
    fn repeat_rollup_omits_absent_keys_and_prints_integral_doubles() {
        let text = serde_json::to_string(&rollup()).expect("a rollup serializes");
        assert_eq!(
            text,
            r#"{"scenario":"s","requested":3,"completed":3,"passes":3,"passRate":1,"signalHistogram":{},"perAssertion":[{"index":0,"key":"result","passes":3,"fails":0}],"totalTokens":450,"nonDeterministicRuns":0,"provenance":{"models":[],"skills":[],"ablatedRuns":0}}"#
        );
        let back: RepeatRollup = serde_json::from_str(&text).expect("output parses back");
        assert_eq!(back, rollup());
    }

    #[test]
    fn stop_reasons_are_lowercase() {
        for reason in [
            StopReason::Budget,
            StopReason::Diverged,
            StopReason::Unanswered,
            StopReason::Error,
        ] {
            let text = serde_json::to_string(&reason).expect("an enum serializes");
            assert_eq!(text, format!("\"{}\"", reason.as_str()));
        }
    }

    #[test]
    fn matrix_cell_error_has_no_run_fields() {
        let cell = MatrixCellResult {
            index: 1,
            axes: CellAxes::default(),
            pass: false,
            failed_assertions: Vec::new(),
            signals: Vec::new(),
            cost_usd: None,
            duration_ms: None,
            effective_fidelity: None,
            out_dir: None,
            error: Some("boom".into()),
        };
        assert_eq!(
            serde_json::to_string(&cell).expect("a cell serializes"),
            r#"{"index":1,"axes":{},"pass":false,"failedAssertions":[],"signals":[],"error":"boom"}"#
        );
    }
}
