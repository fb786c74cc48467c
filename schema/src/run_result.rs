//! The view of a RunResult (`turns/<N>/result.json`) that the reducer needs
//! (harness-behaviour.md#runresult-fields).
//!
//! The full result stays a `serde_json::Value` with preserved key order
//! (harness-behaviour.md#json-key-order): it is stored and emitted as-is. [`RunView`] is the
//! compact extract that travels in `finished` events and feeds the reducer, so the coordinator
//! never has to fetch a result file to judge a batch. [`RunView::from_result`] is the only way to
//! build one from a result, so every consumer reads the same fields with the same
//! absent-versus-present rules (harness-behaviour.md#json-absent-keys).
//!
//! Everything here reads the CLI's result.json by key on purpose: its shape is the CLI's and open
//! across CLI versions, and a field that is absent or of another type reads as the JavaScript CLI
//! reads it (loosely). The small accessors below are the shared reads other crates use.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One verdict signal: code (an open string, harness-behaviour.md#verdict-source) and severity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignalView {
    pub code: String,
    /// `true` when the persisted severity is `"fail"`.
    pub fail: bool,
}

/// One `assertions[]` entry, reduced to what the rollups read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssertionView {
    /// First key of the stored `assertion` object (harness-behaviour.md#json-key-order); `None` for
    /// `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub pass: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The reducer's view of one completed run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    /// `verdict.pass` as persisted (harness-behaviour.md#verdict-source).
    pub pass: bool,
    /// `verdict.signals[]` in persisted order.
    pub signals: Vec<SignalView>,
    /// `true` when the result had no persisted verdict and it was re-derived
    /// (harness-behaviour.md#verdict-source).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verdict_rederived: bool,
    pub assertions: Vec<AssertionView>,
    /// `cost.usd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// `usage.input_tokens + usage.output_tokens` when both are numbers
    /// (harness-behaviour.md#runresult-fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_total: Option<f64>,
    /// `nonDeterministic == true`.
    pub non_deterministic: bool,
    /// Per-run provenance `model` string (harness-behaviour.md#provenance).
    pub provenance_model: String,
    /// Per-run provenance `skill` string (harness-behaviour.md#provenance).
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

/// Why a RunResult could not be turned into a [`RunView`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunViewError {
    /// The document is not a JSON object.
    #[error("result is not a json object")]
    NotAnObject,
    /// The result carries no persisted `verdict` (a legacy or `chat` result). The coordinator's
    /// verdict port can re-derive one (harness-behaviour.md#verdict-source); this crate cannot.
    #[error("result has no verdict")]
    NoVerdict,
    /// A field the reducer reads is present with the wrong type.
    #[error("result field {field} is malformed: expected {expected}")]
    Malformed {
        /// Path of the field, e.g. `verdict.signals[2].code`.
        field: String,
        /// What the field should have been.
        expected: &'static str,
    },
}

/// Signal codes that make a run's `outcome` `no_deliverable` (harness-behaviour.md#run-outcome).
pub const NO_DELIVERABLE_CODES: [&str; 2] = ["stalled", "ended_with_question"];

/// Label used for an assertion object without any key (harness-behaviour.md#repeat-rollup,
/// harness-behaviour.md#matrix-cell).
pub const EMPTY_ASSERTION_KEY: &str = "(empty assertion)";

impl RunView {
    /// Extracts the reducer's view from a RunResult with a persisted verdict.
    ///
    /// Absent optional fields stay `None` (harness-behaviour.md#json-absent-keys); present fields
    /// of an unexpected type are treated as absent, except the ones a verdict depends on
    /// (`verdict.pass`, `verdict.signals[].code`, `assertions[].pass`), which give
    /// [`RunViewError::Malformed`]. A result without `verdict` gives [`RunViewError::NoVerdict`].
    pub fn from_result(result: &Value) -> Result<RunView, RunViewError> {
        let Some(object) = result.as_object() else {
            return Err(RunViewError::NotAnObject);
        };
        let Some(verdict) = object.get("verdict") else {
            return Err(RunViewError::NoVerdict);
        };
        let Some(verdict) = verdict.as_object() else {
            return Err(malformed("verdict", "an object"));
        };
        let Some(pass) = verdict.get("pass").and_then(Value::as_bool) else {
            return Err(malformed("verdict.pass", "a boolean"));
        };
        let signals = match verdict.get("signals") {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                let mut signals = Vec::with_capacity(items.len());
                for (index, item) in items.iter().enumerate() {
                    let Some(code) = item.get("code").and_then(Value::as_str) else {
                        return Err(malformed(
                            &format!("verdict.signals[{index}].code"),
                            "a string",
                        ));
                    };
                    let fail = item.get("severity").and_then(Value::as_str) == Some("fail");
                    signals.push(SignalView {
                        code: code.to_owned(),
                        fail,
                    });
                }
                signals
            }
            Some(_) => return Err(malformed("verdict.signals", "an array")),
        };
        build_view(result, VerdictView { pass, signals })
    }

    /// Extracts the view from a RunResult whose verdict was re-derived by the caller, and marks
    /// it `verdict_rederived` (harness-behaviour.md#verdict-source: such results MUST be marked).
    /// Any persisted verdict in `result` is ignored.
    pub fn from_result_rederived(
        result: &Value,
        verdict: VerdictView,
    ) -> Result<RunView, RunViewError> {
        if !result.is_object() {
            return Err(RunViewError::NotAnObject);
        }
        let mut view = build_view(result, verdict)?;
        view.verdict_rederived = true;
        Ok(view)
    }
}

/// The part of a verdict the reducer reads: `pass` and the signals in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerdictView {
    pub pass: bool,
    pub signals: Vec<SignalView>,
}

fn malformed(field: &str, expected: &'static str) -> RunViewError {
    RunViewError::Malformed {
        field: field.to_owned(),
        expected,
    }
}

fn build_view(result: &Value, verdict: VerdictView) -> Result<RunView, RunViewError> {
    let assertions = match result.get("assertions") {
        // `assertions` is required by the schema; absence reads as "no entries" because the
        // rollups skip results that lack a position (harness-behaviour.md#repeat-rollup).
        None => Vec::new(),
        Some(Value::Array(items)) => {
            let mut assertions = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                let Some(entry_pass) = item.get("pass").and_then(Value::as_bool) else {
                    return Err(malformed(&format!("assertions[{index}].pass"), "a boolean"));
                };
                assertions.push(AssertionView {
                    key: item
                        .get("assertion")
                        .and_then(assertion_key)
                        .map(str::to_owned),
                    pass: entry_pass,
                    message: item
                        .get("message")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                });
            }
            assertions
        }
        Some(_) => return Err(malformed("assertions", "an array")),
    };
    Ok(RunView {
        pass: verdict.pass,
        signals: verdict.signals,
        verdict_rederived: false,
        assertions,
        cost_usd: cost_usd(result),
        tokens_total: tokens_total(result),
        non_deterministic: result.get("nonDeterministic") == Some(&Value::Bool(true)),
        provenance_model: provenance_model(result),
        provenance_skill: provenance_skill(result).to_owned(),
        ablated: result.get("ablated") == Some(&Value::Bool(true)),
        duration_ms: duration_ms(result),
        effective_fidelity: string_field(result, "effectiveFidelity"),
        out_dir: string_field(result, "outDir"),
        simulated: is_simulated(result),
    })
}

/// `verdict.signals[]` as persisted, when it is an array.
pub fn verdict_signals(result: &Value) -> Option<&Vec<Value>> {
    result
        .get("verdict")
        .and_then(|verdict| verdict.get("signals"))
        .and_then(Value::as_array)
}

/// `durationMs` when it is a number.
pub fn duration_ms(result: &Value) -> Option<f64> {
    result.get("durationMs").and_then(Value::as_f64)
}

/// `simulated === true`: the result was made by the `sim` executor.
pub fn is_simulated(result: &Value) -> bool {
    result.get("simulated") == Some(&Value::Bool(true))
}

/// `result === "error"`: the agent turn itself ended with an error.
pub fn result_is_error(result: &Value) -> bool {
    result.get("result").and_then(Value::as_str) == Some("error")
}

/// `verdict.pass` when it is a boolean; `None` when the verdict or its `pass` is absent or of
/// another type.
pub fn verdict_pass(result: &Value) -> Option<bool> {
    result
        .get("verdict")
        .and_then(|verdict| verdict.get("pass"))
        .and_then(Value::as_bool)
}

fn string_field(result: &Value, key: &str) -> Option<String> {
    result.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The first defined key of a stored `assertion` object (harness-behaviour.md#repeat-rollup,
/// harness-behaviour.md#json-key-order): the first key in the file's order. `None` for `{}` and for
/// a value that is not an object.
pub fn assertion_key(assertion: &Value) -> Option<&str> {
    assertion
        .as_object()
        .and_then(|object| object.keys().next())
        .map(String::as_str)
}

/// `cost.usd` when it is a number (`budgetFields`, harness-behaviour.md#budget-fields).
pub fn cost_usd(result: &Value) -> Option<f64> {
    result
        .get("cost")
        .and_then(|cost| cost.get("usd"))
        .and_then(Value::as_f64)
}

/// `usage.input_tokens + usage.output_tokens` when both are numbers; cache tokens are not
/// counted (`budgetFields`, harness-behaviour.md#budget-fields).
pub fn tokens_total(result: &Value) -> Option<f64> {
    let usage = result.get("usage")?;
    let input = usage.get("input_tokens").and_then(Value::as_f64)?;
    let output = usage.get("output_tokens").and_then(Value::as_f64)?;
    Some(input + output)
}

/// Per-run provenance `model` (harness-behaviour.md#provenance): `models` without agent markers
/// such as `<synthetic>`, joined with `,`; `unknown` when nothing remains or `models` is absent.
pub fn provenance_model(result: &Value) -> String {
    let mut joined = String::new();
    if let Some(models) = result.get("models").and_then(Value::as_array) {
        for model in models.iter().filter_map(Value::as_str) {
            if model.starts_with('<') && model.ends_with('>') {
                continue;
            }
            if !joined.is_empty() {
                joined.push(',');
            }
            joined.push_str(model);
        }
    }
    if joined.is_empty() {
        "unknown".to_owned()
    } else {
        joined
    }
}

/// Per-run provenance `skill` (harness-behaviour.md#provenance), from `context.availableSkills` and
/// `skillsInvoked`. An absent (or non-array) inventory is `unknown`, never `not-offered`
/// (harness-behaviour.md#json-absent-keys).
pub fn provenance_skill(result: &Value) -> &'static str {
    let available = result
        .get("context")
        .and_then(|context| context.get("availableSkills"))
        .and_then(Value::as_array);
    let Some(available) = available else {
        return "unknown";
    };
    if available.is_empty() {
        return "not-offered";
    }
    match result.get("skillsInvoked").and_then(Value::as_array) {
        None => "offered,unknown",
        Some(invoked) if invoked.is_empty() => "offered,NOT-invoked",
        Some(_) => "offered,invoked",
    }
}

/// The per-run `{"model", "skill", "ablated"}` object attached to each envelope result
/// (harness-behaviour.md#provenance, harness-behaviour.md#envelope-success).
pub fn provenance_value(view: &RunView) -> Value {
    let mut object = serde_json::Map::with_capacity(3);
    object.insert(
        "model".to_owned(),
        Value::from(view.provenance_model.as_str()),
    );
    object.insert(
        "skill".to_owned(),
        Value::from(view.provenance_skill.as_str()),
    );
    object.insert("ablated".to_owned(), Value::Bool(view.ablated));
    Value::Object(object)
}

/// What `outcome` (harness-behaviour.md#run-outcome) depends on, once a verdict exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutcomeFacts {
    /// The result's `result` is `"error"`.
    pub result_is_error: bool,
    /// `verdict.pass`.
    pub pass: bool,
    /// A `stalled` or `ended_with_question` signal fired ([`NO_DELIVERABLE_CODES`]).
    pub no_deliverable_signal: bool,
}

/// `outcome` (harness-behaviour.md#run-outcome) of a result that has a verdict; the caller handles
/// "no verdict, no outcome".
pub fn outcome_for(facts: OutcomeFacts) -> &'static str {
    if facts.result_is_error {
        "errored"
    } else if facts.no_deliverable_signal {
        "no_deliverable"
    } else if facts.pass {
        "delivered_clean"
    } else {
        "delivered_with_verdict_fail"
    }
}

/// `outcome` (harness-behaviour.md#run-outcome) of a result from its persisted verdict; `None` when
/// the verdict is absent or unreadable (no value is inferred).
pub fn persisted_outcome(result: &Value) -> Option<&'static str> {
    let verdict = result.get("verdict")?.as_object()?;
    let pass = verdict.get("pass")?.as_bool()?;
    let no_deliverable = verdict
        .get("signals")
        .and_then(Value::as_array)
        .is_some_and(|signals| {
            signals.iter().any(|signal| {
                signal
                    .get("code")
                    .and_then(Value::as_str)
                    .is_some_and(|code| NO_DELIVERABLE_CODES.contains(&code))
            })
        });
    Some(outcome_for(OutcomeFacts {
        result_is_error: result_is_error(result),
        pass,
        no_deliverable_signal: no_deliverable,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn view(result: Value) -> RunView {
        RunView::from_result(&result).expect("test input is a valid result")
    }

    fn with_verdict(mut result: Value) -> Value {
        let object = result.as_object_mut().expect("test input is an object");
        object.insert("verdict".into(), json!({"pass": true, "signals": []}));
        result
    }

    fn check_provenance(result: Value, model: &str, skill: &str) {
        let run = view(with_verdict(result));
        assert_eq!(
            (run.provenance_model.as_str(), run.provenance_skill.as_str()),
            (model, skill)
        );
    }

    #[test]
    fn provenance_strings_follow_contract_4_4() {
        check_provenance(json!({}), "unknown", "unknown");
        check_provenance(
            json!({"models": ["claude-opus-5", "<synthetic>"]}),
            "claude-opus-5",
            "unknown",
        );
        check_provenance(json!({"models": ["<synthetic>"]}), "unknown", "unknown");
        check_provenance(json!({"models": ["a", "b"]}), "a,b", "unknown");
        check_provenance(json!({"models": []}), "unknown", "unknown");
        check_provenance(
            json!({"context": {"availableSkills": []}, "skillsInvoked": ["x"]}),
            "unknown",
            "not-offered",
        );
        check_provenance(
            json!({"context": {"availableSkills": [{"id": "p:s"}]}}),
            "unknown",
            "offered,unknown",
        );
        check_provenance(
            json!({"context": {"availableSkills": [{"id": "p:s"}]}, "skillsInvoked": []}),
            "unknown",
            "offered,NOT-invoked",
        );
        check_provenance(
            json!({"context": {"availableSkills": [{"id": "p:s"}]}, "skillsInvoked": ["q"]}),
            "unknown",
            "offered,invoked",
        );
    }

    fn check_budget_fields(result: Value, cost: Option<f64>, tokens: Option<f64>) {
        let run = view(with_verdict(result));
        assert_eq!((run.cost_usd, run.tokens_total), (cost, tokens));
    }

    #[test]
    fn budget_fields_need_both_token_counts_and_ignore_cache() {
        check_budget_fields(json!({}), None, None);
        check_budget_fields(
            json!({"cost": {"usd": 0.05}, "usage": {"input_tokens": 100}}),
            Some(0.05),
            None,
        );
        check_budget_fields(
            json!({"cost": {"raw": {}}, "usage": {"input_tokens": 100, "output_tokens": 50,
                "cache_read_input_tokens": 9000, "cache_creation_input_tokens": 7}}),
            None,
            Some(150.0),
        );
    }

    #[test]
    fn verdict_signals_assertions_and_flags_are_extracted() {
        let run = view(json!({
            "result": "success",
            "assertions": [
                {"assertion": {"tool_called": "X", "result": "success"}, "pass": false,
                 "message": "not called"},
                {"assertion": {}, "pass": true},
            ],
            "nonDeterministic": true,
            "ablated": true,
            "simulated": true,
            "durationMs": 12000,
            "effectiveFidelity": "container",
            "outDir": "/runs/x",
            "verdict": {"pass": false, "signals": [
                {"code": "assertion", "severity": "fail", "message": "m"},
                {"code": "scan_unavailable", "severity": "warn", "message": "m"},
            ]},
        }));
        assert!(!run.pass);
        assert!(!run.verdict_rederived);
        assert_eq!(
            run.signals,
            vec![
                SignalView {
                    code: "assertion".into(),
                    fail: true
                },
                SignalView {
                    code: "scan_unavailable".into(),
                    fail: false
                },
            ]
        );
        assert_eq!(
            run.assertions,
            vec![
                AssertionView {
                    key: Some("tool_called".into()),
                    pass: false,
                    message: Some("not called".into()),
                },
                AssertionView {
                    key: None,
                    pass: true,
                    message: None
                },
            ]
        );
        assert!(run.non_deterministic && run.ablated && run.simulated);
        assert_eq!(run.duration_ms, Some(12000.0));
        assert_eq!(run.effective_fidelity.as_deref(), Some("container"));
        assert_eq!(run.out_dir.as_deref(), Some("/runs/x"));
    }

    #[test]
    fn flags_need_literal_true() {
        let run = view(with_verdict(json!({
            "nonDeterministic": "true", "ablated": 1, "simulated": false
        })));
        assert!(!run.non_deterministic && !run.ablated && !run.simulated);
    }

    fn check_error(result: Value, expect: &str) {
        let error = RunView::from_result(&result).expect_err("input is not a valid result");
        assert_eq!(error.to_string(), expect);
    }

    #[test]
    fn unreadable_results_are_errors() {
        check_error(json!([]), "result is not a json object");
        check_error(json!({"result": "success"}), "result has no verdict");
        check_error(
            json!({"verdict": null}),
            "result field verdict is malformed: expected an object",
        );
        check_error(
            json!({"verdict": {"signals": []}}),
            "result field verdict.pass is malformed: expected a boolean",
        );
        check_error(
            json!({"verdict": {"pass": true, "signals": [{"severity": "warn"}]}}),
            "result field verdict.signals[0].code is malformed: expected a string",
        );
        check_error(
            json!({"verdict": {"pass": true}, "assertions": [{"assertion": {}}]}),
            "result field assertions[0].pass is malformed: expected a boolean",
        );
    }

    #[test]
    fn rederived_views_are_marked() {
        let verdict = VerdictView {
            pass: false,
            signals: Vec::new(),
        };
        let run = RunView::from_result_rederived(&json!({"result": "error"}), verdict)
            .expect("an object is a valid result");
        assert!(run.verdict_rederived);
        assert!(!run.pass);
    }

    #[test]
    fn provenance_value_keeps_key_order() {
        let run = view(with_verdict(json!({"models": ["m"], "ablated": true})));
        assert_eq!(
            provenance_value(&run).to_string(),
            r#"{"model":"m","skill":"unknown","ablated":true}"#
        );
    }

    fn check_outcome(result: Value, expect: Option<&str>) {
        assert_eq!(persisted_outcome(&result), expect);
    }

    #[test]
    fn persisted_outcome_follows_contract_3_6() {
        check_outcome(json!({"result": "error"}), None);
        check_outcome(
            json!({"result": "error", "verdict": {"pass": true, "signals": []}}),
            Some("errored"),
        );
        check_outcome(
            json!({"result": "success", "verdict": {"pass": true, "signals": [
                {"code": "ended_with_question", "severity": "warn"}]}}),
            Some("no_deliverable"),
        );
        check_outcome(
            json!({"result": "success", "verdict": {"pass": false, "signals": [
                {"code": "outputs_delete", "severity": "fail"}]}}),
            Some("delivered_with_verdict_fail"),
        );
        check_outcome(
            json!({"result": "success", "verdict": {"pass": true, "signals": []}}),
            Some("delivered_clean"),
        );
    }
}
