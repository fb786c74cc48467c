//! The view of a RunResult (`turns/<N>/result.json`) that the reducer needs (contract §2).
//!
//! The full result stays a `serde_json::Value` with preserved key order (J1): it is stored and
//! emitted as-is. [`RunView`] is the compact extract that travels in `finished` events and feeds
//! the reducer, so the coordinator never has to fetch a result file to judge a batch.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One verdict signal: code (an open string, contract §3.7) and severity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignalView {
    pub code: String,
    /// `true` when the persisted severity is `"fail"`.
    pub fail: bool,
}

/// One `assertions[]` entry, reduced to what the rollups read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AssertionView {
    /// First key of the stored `assertion` object (J1); `None` for `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub pass: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The reducer's view of one completed run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunView {
    /// `verdict.pass` as persisted (contract §3.7).
    pub pass: bool,
    /// `verdict.signals[]` in persisted order.
    pub signals: Vec<SignalView>,
    /// `true` when the result had no persisted verdict and it was re-derived (contract §3.7).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verdict_rederived: bool,
    pub assertions: Vec<AssertionView>,
    /// `cost.usd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// `usage.input_tokens + usage.output_tokens` when both are numbers (contract §2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_total: Option<f64>,
    /// `nonDeterministic == true`.
    pub non_deterministic: bool,
    /// Per-run provenance `model` string (contract §4.4).
    pub provenance_model: String,
    /// Per-run provenance `skill` string (contract §4.4).
    pub provenance_skill: String,
    /// `ablated === true`.
    pub ablated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_fidelity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_dir: Option<String>,
    /// `true` for results made by the `sim` executor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simulated: bool,
}
