//! The upstream-compatible JSON envelope plus the additive `fleet` key
//! (harness-behaviour.md#envelope, harness-behaviour.md#choice-c15).
//!
//! An [`Envelope`] serialises with the CLI's key order: `tool`, `version`, `command`, `ok`,
//! `results`, the batch key (`rollups` | `matrix` | `matrixRepeat`), command-specific extras,
//! `error` (always present, `null` on success) and finally `fleet`, which the CLI does not have
//! and which a consumer of the CLI's envelope can ignore. Results are kept as
//! `serde_json::Value` so their key order and unknown keys survive untouched
//! (harness-behaviour.md#json-key-order).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::fleet_key::{FleetKey, FleetView};
use crate::rollup::{MatrixRepeatRollup, MatrixRollup, RepeatRollup};
use crate::run_result::{RunView, persisted_outcome, provenance_value};

/// The `tool` value of every envelope.
pub const TOOL: &str = "cowork-harness";

/// A thrown failure (harness-behaviour.md#envelope-error).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvelopeError {
    /// `usage`, `unanswered`, `boundary`, `runtime` or `internal` (an open string: workers add
    /// their own, e.g. `infra`).
    pub category: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// One envelope: the single stdout line of a CLI invocation, or the batch's `envelope.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// Always [`TOOL`].
    pub tool: String,
    /// The (uniform) worker CLI version (harness-behaviour.md#choice-c15).
    pub version: String,
    pub command: String,
    pub ok: bool,
    /// Results with `outcome`, `verdict` and `provenance` attached ([`decorate_result`]).
    pub results: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollups: Option<Vec<RepeatRollup>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix: Option<MatrixRollup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix_repeat: Option<MatrixRepeatRollup>,
    /// Command-specific keys (`record`: `artifacts`, `cassette`), kept in their order and
    /// emitted before `error` as the CLI does.
    #[serde(flatten)]
    pub extras: Map<String, Value>,
    /// `null` on success: the one optional key that is always present.
    pub error: Option<EnvelopeError>,
    /// Orchestrator metadata (harness-behaviour.md#choice-c15); absent in a CLI envelope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetKey>,
    /// The quarantine the verdict applied and what it did; absent when none was applied (and
    /// in a CLI envelope).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<crate::quarantine::QuarantineRecord>,
}

impl Envelope {
    /// An envelope with `ok: false`, no results, no batch key, no error and no `fleet`, for the
    /// caller to fill in.
    pub fn new(version: &str, command: &str) -> Envelope {
        Envelope {
            tool: TOOL.to_owned(),
            version: version.to_owned(),
            command: command.to_owned(),
            ok: false,
            results: Vec::new(),
            rollups: None,
            matrix: None,
            matrix_repeat: None,
            extras: Map::new(),
            error: None,
            fleet: None,
            quarantine: None,
        }
    }

    /// `true` when the envelope's results are its units, one run each (a plain batch of files,
    /// one result a file; a plain matrix, one a cell), so there are no more of them than units
    /// and a summary names its units from them; `false` for a repeat batch, whose results are
    /// every run of every unit. A reader that keeps only an envelope's head keeps the results
    /// too where this holds.
    pub fn results_are_units(&self) -> bool {
        self.rollups.is_none() && self.matrix_repeat.is_none()
    }

    /// What the envelope's `fleet` key says (all absent for a CLI envelope).
    pub fn fleet_view(&self) -> FleetView {
        self.fleet.as_ref().map(FleetKey::view).unwrap_or_default()
    }

    /// The envelope as one compact line of JSON, without a trailing newline, numbers as the
    /// CLI writes them.
    pub fn to_line(&self) -> String {
        crate::json_number::to_string(self)
            .expect("an envelope has only string keys and finite numbers, so it serializes")
    }
}

/// Reads an envelope from `reader` without its `results[]`, each result skipped as it streams
/// by (the returned `results` is empty). What a summary, a status line or a report reads of a
/// big batch's envelope, whose results would not fit in memory: a million-run envelope is
/// 1.5 GB, its head a few MB.
pub fn read_head(reader: impl std::io::Read) -> Result<Envelope, String> {
    struct Head;
    impl<'de> serde::de::Visitor<'de> for Head {
        type Value = Map<String, Value>;
        fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
            formatter.write_str("an envelope object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut head = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                if key == "results" {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    head.insert(key, Value::Array(Vec::new()));
                } else {
                    let value = map.next_value::<Value>()?;
                    head.insert(key, value);
                }
            }
            Ok(head)
        }
    }
    use serde::Deserializer as _;
    let mut deserializer = serde_json::Deserializer::from_reader(reader);
    let head = deserializer
        .deserialize_map(Head)
        .map_err(|error| error.to_string())?;
    deserializer.end().map_err(|error| error.to_string())?;
    serde_json::from_value(Value::Object(head)).map_err(|error| error.to_string())
}

/// Returns a stored result as an envelope entry (harness-behaviour.md#envelope-success):
/// `provenance` (from `view`) is appended as the last key, replacing any stored one, and a missing
/// `outcome` is computed from the persisted verdict (harness-behaviour.md#run-outcome) and inserted
/// just before `verdict`.
///
/// A result without a persisted verdict gets no outcome here: the coordinator attaches its
/// re-derived verdict first. A value that is not an object is returned unchanged.
pub fn decorate_result(result: Value, view: &RunView) -> Value {
    let outcome = match result.get("outcome") {
        Some(_) => None,
        None => persisted_outcome(&result),
    };
    let Value::Object(mut object) = result else {
        return result;
    };
    object.shift_remove("provenance");
    if let Some(outcome) = outcome {
        // `persisted_outcome` is `Some` only when `verdict` exists, so the position is found.
        if let Some(position) = object.keys().position(|key| key == "verdict") {
            object.shift_insert(position, "outcome".to_owned(), Value::from(outcome));
        }
    }
    object.insert("provenance".to_owned(), provenance_value(view));
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN_ENVELOPE: &str = include_str!("../tests/fixtures/envelopes/sample-run-envelope.json");
    const REPLAY_ENVELOPE: &str =
        include_str!("../tests/fixtures/envelopes/sample-replay-envelope-example-pdf-skill.json");
    const RUN_RESULT: &str = include_str!("../tests/fixtures/envelopes/sample-run-result.json");

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("fixture is valid JSON")
    }

    fn check_round_trip(text: &str) {
        let original = parse(text);
        let envelope: Envelope =
            serde_json::from_value(original.clone()).expect("fixture is a valid envelope");
        assert_eq!(envelope.tool, TOOL);
        assert!(envelope.error.is_none());
        assert!(envelope.fleet.is_none());
        // String comparison, not `Value` equality: map equality ignores key order.
        assert_eq!(envelope.to_line(), original.to_string());
    }

    #[test]
    fn sample_envelopes_round_trip_with_key_order() {
        check_round_trip(RUN_ENVELOPE);
        check_round_trip(REPLAY_ENVELOPE);
    }

    #[test]
    fn error_is_null_and_fleet_comes_last() {
        let mut envelope = Envelope::new("2.0.0", "run");
        assert_eq!(
            envelope.to_line(),
            r#"{"tool":"cowork-harness","version":"2.0.0","command":"run","ok":false,"results":[],"error":null}"#
        );
        envelope
            .extras
            .insert("cassette".into(), Value::from("c.json"));
        envelope.error = Some(EnvelopeError {
            category: "unanswered".into(),
            message: "G".into(),
            hint: None,
        });
        envelope.fleet = Some(
            serde_json::from_value(serde_json::json!({"foldOrder": "index"}))
                .expect("any object is a fleet key"),
        );
        assert_eq!(
            envelope.to_line(),
            r#"{"tool":"cowork-harness","version":"2.0.0","command":"run","ok":false,"results":[],"cassette":"c.json","error":{"category":"unanswered","message":"G"},"fleet":{"foldOrder":"index"}}"#
        );
    }

    #[test]
    fn error_and_record_envelopes_round_trip() {
        check_round_trip_text(
            r#"{"tool":"cowork-harness","version":"2.0.0","command":"run","ok":false,"results":[],"error":{"category":"unanswered","message":"no answer","hint":"script it"}}"#,
        );
        check_round_trip_text(
            r#"{"tool":"cowork-harness","version":"2.0.0","command":"record","ok":true,"results":[{"b":1,"a":2}],"artifacts":["x"],"cassette":"c.json","error":null}"#,
        );
        check_round_trip_text(
            r#"{"tool":"cowork-harness","version":"2.0.0","command":"run","ok":true,"results":[],"rollups":[],"error":null,"fleet":{"z":1,"a":0.5}}"#,
        );
    }

    #[test]
    fn the_head_is_the_envelope_without_its_results() {
        for text in [RUN_ENVELOPE, REPLAY_ENVELOPE] {
            let mut whole: Envelope = serde_json::from_str(text).expect("fixture is an envelope");
            assert!(!whole.results.is_empty(), "the fixture has results to skip");
            let head = read_head(text.as_bytes()).expect("the head reads");
            whole.results.clear();
            assert_eq!(head, whole);
        }
        let truncated = &RUN_ENVELOPE[..RUN_ENVELOPE.len() / 2];
        assert!(read_head(truncated.as_bytes()).is_err());
        assert!(read_head(&b"{} trailing"[..]).is_err());
    }

    fn check_round_trip_text(text: &str) {
        let envelope: Envelope = serde_json::from_str(text).expect("test envelope parses");
        assert_eq!(envelope.to_line(), text);
    }

    #[test]
    fn decorating_the_stored_result_gives_the_envelope_entry() {
        let stored = parse(RUN_RESULT);
        let view = RunView::from_result(&stored).expect("sample result is readable");
        let decorated = decorate_result(stored, &view);
        let envelope = parse(RUN_ENVELOPE);
        assert_eq!(decorated.to_string(), envelope["results"][0].to_string());
    }

    #[test]
    fn missing_outcome_is_inserted_before_verdict() {
        let mut stored = parse(RUN_RESULT);
        let object = stored.as_object_mut().expect("sample result is an object");
        object.shift_remove("outcome");
        object.insert("provenance".into(), Value::from("stale"));
        let view = RunView::from_result(&stored).expect("sample result is readable");
        let decorated = decorate_result(stored, &view);
        let keys: Vec<&str> = decorated
            .as_object()
            .expect("decorated result is an object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys[keys.len() - 3..], ["outcome", "verdict", "provenance"]);
        assert_eq!(decorated["outcome"], "delivered_clean");
        assert_eq!(decorated["provenance"]["skill"], "offered,NOT-invoked");
    }

    #[test]
    fn no_verdict_means_no_outcome() {
        let stored = serde_json::json!({"result": "success", "models": ["m"]});
        let verdict = crate::run_result::VerdictView {
            pass: true,
            signals: Vec::new(),
        };
        let view =
            RunView::from_result_rederived(&stored, verdict).expect("an object is a valid result");
        let decorated = decorate_result(stored, &view);
        assert_eq!(
            decorated.to_string(),
            r#"{"result":"success","models":["m"],"provenance":{"model":"m","skill":"unknown","ablated":false}}"#
        );
    }

    #[test]
    fn a_result_read_from_the_cli_is_written_back_with_its_own_number_text() {
        let result =
            r#"{"totalCostUsd":0.000003,"durationMs":12,"rate":1e-7,"big":100000000000000000000}"#;
        let mut envelope = Envelope::new("2.0.0", "run");
        envelope.results.push(parse(result));
        let line = envelope.to_line();
        assert!(line.contains(result), "{line}");
    }
}
