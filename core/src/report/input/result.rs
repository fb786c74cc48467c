//! What a report reads from a stored `result.json`: its verdict, failing assertions, verdict
//! signals, failure lines and duration. A field a result lacks reads as absent, never as a pass.
//! Read by key: the result is the CLI's document, its shape open across CLI versions (see
//! `cowork_schema::run_result`).

use cowork_schema::run_result::{
    EMPTY_ASSERTION_KEY, assertion_key, verdict_pass, verdict_signals,
};
use serde_json::Value;

pub(super) use cowork_schema::run_result::duration_ms;

/// `verdict.pass` as persisted; a result without one never counts as a pass
/// (harness-behaviour.md#runresult-fields).
pub(super) fn run_passes(result: &Value) -> bool {
    verdict_pass(result).unwrap_or(false)
}

/// The failing entries of a run's `assertions[]`: (key, message).
pub(super) fn failing_assertions(result: &Value) -> Vec<(String, String)> {
    let Some(entries) = result.get("assertions").and_then(Value::as_array) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|entry| entry.get("pass") == Some(&Value::Bool(false)))
        .map(|entry| {
            let key = entry
                .get("assertion")
                .and_then(assertion_key)
                .unwrap_or(EMPTY_ASSERTION_KEY)
                .to_owned();
            let message = entry
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("assertion failed")
                .to_owned();
            (key, message)
        })
        .collect()
}

/// A run's verdict signals other than `assertion` (those repeat the failing assertions):
/// (code, fail severity, message).
pub(super) fn non_assertion_signals(result: &Value) -> Vec<(String, bool, String)> {
    let Some(signals) = verdict_signals(result) else {
        return Vec::new();
    };
    signals
        .iter()
        .filter_map(|signal| {
            let code = signal.get("code").and_then(Value::as_str)?;
            if code == "assertion" {
                return None;
            }
            let fail = signal.get("severity").and_then(Value::as_str) == Some("fail");
            let message = signal
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or(code)
                .to_owned();
            Some((code.to_owned(), fail, message))
        })
        .collect()
}

/// The failure lines of one failing run, for JUnit bodies: `verdict.failures[]` as persisted
/// (harness-behaviour.md#verdict-failures), else its failing assertions and fail signals.
pub(super) fn run_failure_lines(result: &Value) -> Vec<String> {
    let persisted = result
        .get("verdict")
        .and_then(|verdict| verdict.get("failures"))
        .and_then(Value::as_array);
    if let Some(failures) = persisted.filter(|failures| !failures.is_empty()) {
        return failures
            .iter()
            .map(|failure| {
                let message = failure
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("(no message)");
                match failure.get("assertion").and_then(Value::as_str) {
                    Some(key) => format!("[{key}] {message}"),
                    None => {
                        let kind = failure
                            .get("kind")
                            .and_then(Value::as_str)
                            .unwrap_or("failure");
                        format!("[{kind}] {message}")
                    }
                }
            })
            .collect();
    }
    let mut lines: Vec<String> = failing_assertions(result)
        .into_iter()
        .map(|(key, message)| format!("[{key}] {message}"))
        .collect();
    lines.extend(
        non_assertion_signals(result)
            .into_iter()
            .filter(|(_, fail, _)| *fail)
            .map(|(code, _, message)| format!("[{code}] {message}")),
    );
    lines
}
