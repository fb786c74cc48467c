//! Per-run verdict port (harness-behaviour.md#verdict) for results that lack a persisted `verdict`.
//!
//! The persisted verdict is the source of truth (harness-behaviour.md#verdict-source); this port
//! exists only for legacy results written before the field existed. It reproduces the mirror's 19
//! signal codes in the emission order of harness-behaviour.md#signal-order, the `failures[]` of
//! harness-behaviour.md#verdict-failures, the guard roster of harness-behaviour.md#guard-roster and
//! `outcome` of harness-behaviour.md#run-outcome. Views built from a re-derived verdict are marked
//! `verdict_rederived`.
//!
//! The port reads the CLI's result.json by key, here and in `signals`: its shape is the CLI's,
//! open across CLI versions, and an absent or mistyped field must read as the JavaScript CLI
//! reads it (loosely), which a typed struct would not do.
//!
//! Gaps (harness-behaviour.md#verdict does not give the data, so this port does what it says
//! and no more):
//! - Signal messages other than `assertion`'s are not specified; ours are descriptive English.
//!   Pass/fail, codes, severities and order are what the reducer reads, and they are exact.
//! - `ended_with_question`: "an `output`-class file that counts as delivered by location" is read
//!   as a `workspaceFiles` entry with `class == "output"` on a lane other than `remote` (nothing
//!   is delivered by location on `remote`).
//! - `undelivered_deliverables`: a scratchpad file counts as presented when a `presentedFiles`
//!   entry without `leaked: true` has `from` or `to` equal to the file's path, or ending with
//!   `/<path>`. The CLI's exact path matching is not documented.
//! - `transport_error`'s message varies with the assertion count and lane in the CLI; ours does
//!   not.
//!
//! Pure: no IO, no clock, no environment.

use cowork_schema::run_result::{
    NO_DELIVERABLE_CODES, OutcomeFacts, RunView, RunViewError, SignalView, VerdictView,
    assertion_key, outcome_for, result_is_error,
};
use serde_json::{Map, Value};

mod signals;

/// Which lane judges the run (harness-behaviour.md#verdict-pass-rule). Batch members are always
/// judged on `Live`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// A live run: every check applies.
    Live,
    /// A cassette replay: the live-only guards are dropped.
    Replay,
}

/// Severity of a signal; only `Fail` affects `pass`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Fail,
    Warn,
}

impl Severity {
    /// The persisted name (`fail`, `warn`).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Fail => "fail",
            Severity::Warn => "warn",
        }
    }
}

/// One verdict signal (harness-behaviour.md#signal-catalogue).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signal {
    pub code: &'static str,
    pub severity: Severity,
    pub message: String,
}

/// Status of a guard of the roster (harness-behaviour.md#guard-roster).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardStatus {
    Ok,
    Fired,
    Na,
    Unverified,
}

impl GuardStatus {
    /// The persisted name (`ok`, `fired`, `na`, `unverified`).
    pub fn as_str(self) -> &'static str {
        match self {
            GuardStatus::Ok => "ok",
            GuardStatus::Fired => "fired",
            GuardStatus::Na => "na",
            GuardStatus::Unverified => "unverified",
        }
    }
}

/// One entry of the guard roster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guard {
    pub name: &'static str,
    pub status: GuardStatus,
}

/// One flat failure reason (harness-behaviour.md#verdict-failures).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// First key of the failing assertion; `None` for guards and for `{}`.
    pub assertion: Option<String>,
    pub message: String,
    /// `assertion`, `guard`, or the entry's `source` (`staleness`, `cassette-format`,
    /// `coverage`).
    pub kind: String,
}

/// A derived verdict, shaped like the persisted `verdict` object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub pass: bool,
    /// `0` when `pass`, else `1`.
    pub exit_code: i32,
    pub signals: Vec<Signal>,
    pub guards: Vec<Guard>,
    pub failures: Vec<Failure>,
}

impl Verdict {
    /// The verdict as the persisted JSON object (`pass`, `exitCode`, `signals`, `guards`,
    /// `failures`, in that order).
    pub fn to_value(&self) -> Value {
        let signals = self
            .signals
            .iter()
            .map(|signal| {
                let mut object = Map::new();
                object.insert("code".into(), Value::from(signal.code));
                object.insert("severity".into(), Value::from(signal.severity.as_str()));
                object.insert("message".into(), Value::from(signal.message.as_str()));
                Value::Object(object)
            })
            .collect();
        let guards = self
            .guards
            .iter()
            .map(|guard| {
                let mut object = Map::new();
                object.insert("name".into(), Value::from(guard.name));
                object.insert("status".into(), Value::from(guard.status.as_str()));
                Value::Object(object)
            })
            .collect();
        let failures = self
            .failures
            .iter()
            .map(|failure| {
                let mut object = Map::new();
                if let Some(assertion) = &failure.assertion {
                    object.insert("assertion".into(), Value::from(assertion.as_str()));
                }
                object.insert("message".into(), Value::from(failure.message.as_str()));
                object.insert("kind".into(), Value::from(failure.kind.as_str()));
                Value::Object(object)
            })
            .collect();
        let mut object = Map::new();
        object.insert("pass".into(), Value::Bool(self.pass));
        object.insert("exitCode".into(), Value::from(self.exit_code));
        object.insert("signals".into(), Value::Array(signals));
        object.insert("guards".into(), Value::Array(guards));
        object.insert("failures".into(), Value::Array(failures));
        Value::Object(object)
    }

    /// The signals as the reducer sees them.
    pub fn signal_views(&self) -> Vec<SignalView> {
        self.signals
            .iter()
            .map(|signal| SignalView {
                code: signal.code.to_owned(),
                fail: signal.severity == Severity::Fail,
            })
            .collect()
    }
}

/// The assertion objects of `assertions[]`, authored and harness-injected alike.
fn assertion_objects(result: &Value) -> impl Iterator<Item = &Map<String, Value>> {
    result
        .get("assertions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("assertion").and_then(Value::as_object))
}

/// Some assertion defines `key` (harness-behaviour.md#signal-catalogue "authored").
fn authored(result: &Value, key: &str) -> bool {
    assertion_objects(result).any(|object| object.contains_key(key))
}

/// Some assertion sets the modifier `key` to `true`.
fn modifier_on(result: &Value, key: &str) -> bool {
    assertion_objects(result).any(|object| object.get(key) == Some(&Value::Bool(true)))
}

fn is_true(value: Option<&Value>) -> bool {
    value == Some(&Value::Bool(true))
}

fn non_empty_array(value: Option<&Value>) -> Option<&Vec<Value>> {
    value
        .and_then(Value::as_array)
        .filter(|items| !items.is_empty())
}

/// Derives the verdict of `result` on `lane` (harness-behaviour.md#verdict).
pub fn derive(result: &Value, lane: Lane) -> Verdict {
    let signals = signals::signals(result, lane);
    let pass = !signals
        .iter()
        .any(|signal| signal.severity == Severity::Fail);
    let guards = guards(result, lane, &signals);
    let failures = if pass {
        Vec::new()
    } else {
        failures(result, &signals)
    };
    Verdict {
        pass,
        exit_code: if pass { 0 } else { 1 },
        signals,
        guards,
        failures,
    }
}

/// The fixed four-entry guard roster (harness-behaviour.md#guard-roster).
fn guards(result: &Value, lane: Lane, signals: &[Signal]) -> Vec<Guard> {
    let replay = lane == Lane::Replay;
    let fired = |code: &str| signals.iter().any(|signal| signal.code == code);
    let scan = result.get("scan");
    let capability_use = match result.get("capabilityProbe").and_then(Value::as_str) {
        _ if replay => GuardStatus::Na,
        None | Some("skipped") => GuardStatus::Na,
        Some("unverified") => GuardStatus::Unverified,
        Some(_) if fired("missing_capability") => GuardStatus::Fired,
        Some(_) => GuardStatus::Ok,
    };
    let permissive = if replay {
        GuardStatus::Na
    } else if fired("permissive_auto_allow") {
        GuardStatus::Fired
    } else {
        GuardStatus::Ok
    };
    let host_path = if replay {
        GuardStatus::Na
    } else if scan.is_none() {
        GuardStatus::Unverified
    } else if fired("host_path_leak") {
        GuardStatus::Fired
    } else {
        GuardStatus::Ok
    };
    let outputs_delete = if replay {
        GuardStatus::Na
    } else if scan.is_none() {
        GuardStatus::Unverified
    } else if non_empty_array(scan.and_then(|scan| scan.get("outputsDeletes"))).is_some() {
        // Fired even when the signal was suppressed (harness-behaviour.md#guard-roster).
        GuardStatus::Fired
    } else {
        GuardStatus::Ok
    };
    vec![
        Guard {
            name: "capability-use",
            status: capability_use,
        },
        Guard {
            name: "permissive-auto-allow",
            status: permissive,
        },
        Guard {
            name: "host-path",
            status: host_path,
        },
        Guard {
            name: "outputs-delete",
            status: outputs_delete,
        },
    ]
}

/// `failures[]` of a failing verdict (harness-behaviour.md#verdict-failures).
fn failures(result: &Value, signals: &[Signal]) -> Vec<Failure> {
    let mut failures = Vec::new();
    for entry in result
        .get("assertions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if entry.get("pass") == Some(&Value::Bool(true)) {
            continue;
        }
        failures.push(Failure {
            assertion: entry
                .get("assertion")
                .and_then(assertion_key)
                .map(str::to_owned),
            message: entry
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("assertion failed")
                .to_owned(),
            kind: entry
                .get("source")
                .and_then(Value::as_str)
                .unwrap_or("assertion")
                .to_owned(),
        });
    }
    let unanswered_gate = result.get("unansweredGate");
    for signal in signals {
        if signal.severity != Severity::Fail || signal.code == "assertion" {
            continue;
        }
        // The gate's own entry below replaces the generic result-error reasons.
        if unanswered_gate.is_some() && matches!(signal.code, "result_error" | "transport_error") {
            continue;
        }
        failures.push(Failure {
            assertion: None,
            message: signal.message.clone(),
            kind: "guard".to_owned(),
        });
    }
    if let Some(gate) = unanswered_gate {
        failures.push(Failure {
            assertion: None,
            message: gate
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("unanswered question")
                .to_owned(),
            kind: "guard".to_owned(),
        });
    }
    failures
}

/// `outcome` (harness-behaviour.md#run-outcome) of `result` judged by `verdict`; `None` when there
/// is no verdict.
pub fn outcome(result: &Value, verdict: Option<&Verdict>) -> Option<&'static str> {
    let verdict = verdict?;
    let no_deliverable = verdict
        .signals
        .iter()
        .any(|signal| NO_DELIVERABLE_CODES.contains(&signal.code));
    Some(outcome_for(OutcomeFacts {
        result_is_error: result_is_error(result),
        pass: verdict.pass,
        no_deliverable_signal: no_deliverable,
    }))
}

/// The reducer's view of a result: from its persisted verdict when there is one, else from a
/// verdict re-derived on the live lane (batch members are always judged live,
/// harness-behaviour.md#verdict-pass-rule) and marked `verdict_rederived`
/// (harness-behaviour.md#verdict-source).
pub fn view_with_rederived_verdict(result: &Value) -> Result<RunView, RunViewError> {
    match RunView::from_result(result) {
        Err(RunViewError::NoVerdict) => {
            let verdict = derive(result, Lane::Live);
            let view = VerdictView {
                pass: verdict.pass,
                signals: verdict.signal_views(),
            };
            RunView::from_result_rederived(result, view)
        }
        other => other,
    }
}

/// Returns `result` with a re-derived `outcome` and `verdict` appended when it has no persisted
/// verdict, so an envelope entry always carries one (harness-behaviour.md#envelope-success);
/// otherwise unchanged. The re-derivation is disclosed by the view's `verdict_rederived`, not
/// inside the result.
pub fn with_rederived_verdict(result: Value, lane: Lane) -> Value {
    if result.get("verdict").is_some() {
        return result;
    }
    let verdict = derive(&result, lane);
    let outcome = outcome(&result, Some(&verdict));
    let Value::Object(mut object) = result else {
        return result;
    };
    // Stale `outcome` without a verdict cannot be trusted; it is recomputed with the verdict.
    object.shift_remove("outcome");
    if let Some(outcome) = outcome {
        object.insert("outcome".into(), Value::from(outcome));
    }
    object.insert("verdict".into(), verdict.to_value());
    Value::Object(object)
}

#[cfg(test)]
mod tests;
