use serde_json::{Value, json};

use super::*;

const SAMPLE_RUN: &str = include_str!("../../tests/fixtures/verdict/sample-run-result.json");
const SAMPLE_REPLAY: &str = include_str!("../../tests/fixtures/verdict/sample-replay-result.json");

/// A clean live result: `scan` present so that `scan_unavailable` does not fire
/// (harness-behaviour.md#test-cases).
fn clean() -> Value {
    json!({
        "scenario": "s",
        "result": "success",
        "assertions": [],
        "scan": {"outputsDeletes": [], "hostPathLeaked": false},
        "capabilityProbe": "definitive",
    })
}

fn with(mut base: Value, extra: Value) -> Value {
    let object = base.as_object_mut().expect("base is an object");
    for (key, value) in extra.as_object().expect("extra is an object") {
        if value.is_null() {
            object.shift_remove(key);
        } else {
            object.insert(key.clone(), value.clone());
        }
    }
    base
}

/// Checks codes with severities, in order, and `pass` on the live lane.
fn check(result: Value, expect_signals: &[(&str, Severity)], expect_pass: bool) -> Verdict {
    let verdict = derive(&result, Lane::Live);
    let got: Vec<(&str, Severity)> = verdict
        .signals
        .iter()
        .map(|signal| (signal.code, signal.severity))
        .collect();
    assert_eq!(got, expect_signals, "signals of {result}");
    assert_eq!(verdict.pass, expect_pass, "pass of {result}");
    assert_eq!(verdict.exit_code, if expect_pass { 0 } else { 1 });
    verdict
}

use Severity::{Fail, Warn};

#[test]
fn tc_01_pass_rule() {
    check(
        with(clean(), json!({"scan": null, "nonDeterministic": true})),
        &[("scan_unavailable", Warn), ("non_deterministic", Warn)],
        true,
    );
    check(
        with(
            clean(),
            json!({"assertions": [{"assertion": {"result": "success"}, "pass": false}]}),
        ),
        &[("assertion", Fail)],
        false,
    );
    check(
        with(
            clean(),
            json!({"result": "error", "resultErrorKind": "usage_limit"}),
        ),
        &[("usage_limit", Fail)],
        false,
    );
    check(
        with(
            clean(),
            json!({"result": "error", "resultErrorKind": "transport"}),
        ),
        &[("transport_error", Fail)],
        false,
    );
    check(
        with(
            clean(),
            json!({"result": "error", "resultErrorKind": "agent"}),
        ),
        &[("result_error", Fail)],
        false,
    );
}

#[test]
fn tc_02_failures_for_an_unanswered_salvage() {
    let verdict = check(
        json!({
            "result": "error",
            "partial": true,
            "unansweredGate": {"message": "G"},
            "assertions": [],
        }),
        &[("result_error", Fail), ("scan_unavailable", Warn)],
        false,
    );
    assert_eq!(
        verdict.failures,
        vec![Failure {
            assertion: None,
            message: "G".into(),
            kind: "guard".into(),
        }]
    );
}

#[test]
fn tc_03_infra_split() {
    let exec_only = with(
        clean(),
        json!({"infraErrors": [{"source": "hostloop-exec", "message": "exec failed"}]}),
    );
    check(exec_only.clone(), &[("exec_infra_error", Warn)], true);
    let both = with(
        exec_only,
        json!({"infraErrors": [
            {"source": "hostloop-exec", "message": "exec failed"},
            {"source": "hostloop-sidecar", "message": "died"},
        ]}),
    );
    let verdict = check(
        both,
        &[("infra_error", Fail), ("exec_infra_error", Warn)],
        false,
    );
    let message = &verdict.signals[0].message;
    assert!(message.contains("died"), "{message}");
    assert!(!message.contains("exec failed"), "{message}");
}

fn check_outcome(result: Value, expect: Option<&str>) {
    let verdict = derive(&result, Lane::Live);
    assert_eq!(
        outcome(&result, Some(&verdict)),
        expect,
        "outcome of {result}"
    );
}

#[test]
fn tc_04_outcome() {
    // (a) `result: "error"` with a passing verdict: a persisted verdict can pass on an error
    // result only through the outcome function itself, so build that verdict by hand.
    let errored = with(clean(), json!({"result": "error"}));
    let passing = Verdict {
        pass: true,
        exit_code: 0,
        signals: Vec::new(),
        guards: Vec::new(),
        failures: Vec::new(),
    };
    assert_eq!(outcome(&errored, Some(&passing)), Some("errored"));
    // (b) stalled.
    check_outcome(
        with(clean(), json!({"stalledOnQuestion": true})),
        Some("no_deliverable"),
    );
    // (c) only ended_with_question (warn): still a pass.
    let asked = with(
        clean(),
        json!({"workspaceFiles": [], "finalMessage": "Which format do you want?"}),
    );
    check(asked.clone(), &[("ended_with_question", Warn)], true);
    check_outcome(asked, Some("no_deliverable"));
    // (d) outputs_delete.
    check_outcome(
        with(
            clean(),
            json!({"scan": {"outputsDeletes": ["outputs/a.md"], "hostPathLeaked": false}}),
        ),
        Some("delivered_with_verdict_fail"),
    );
    // (e) clean.
    check_outcome(clean(), Some("delivered_clean"));
    // (f) no verdict.
    assert_eq!(outcome(&clean(), None), None);
}

#[test]
fn tc_05_host_path_guard_depends_on_tier() {
    for (fidelity, expect_leak) in [
        ("hostloop", false),
        ("protocol", false),
        ("container", true),
    ] {
        let result = with(
            clean(),
            json!({
                "effectiveFidelity": fidelity,
                "scan": {"outputsDeletes": [], "hostPathLeaked": true},
            }),
        );
        let verdict = derive(&result, Lane::Live);
        let leaked = verdict.signals.iter().any(|s| s.code == "host_path_leak");
        assert_eq!(leaked, expect_leak, "{fidelity}");
        assert_eq!(verdict.pass, !expect_leak, "{fidelity}");
        let guard = if expect_leak {
            GuardStatus::Fired
        } else {
            GuardStatus::Ok
        };
        assert_eq!(verdict.guards[2].status, guard, "{fidelity}");
    }
    let authored = with(
        clean(),
        json!({
            "effectiveFidelity": "container",
            "scan": {"outputsDeletes": [], "hostPathLeaked": true},
            "assertions": [{"assertion": {"transcript_no_host_path": true}, "pass": false}],
        }),
    );
    check(authored, &[("assertion", Fail)], false);
}

#[test]
fn every_code_fires_in_emission_order() {
    let result = json!({
        "result": "error",
        "lane": "local",
        "assertions": [
            {"assertion": {"tool_called": "X"}, "pass": false, "message": "not called"},
            {"assertion": {}, "pass": false, "source": "staleness"},
        ],
        "requiresCapabilityUnmet": {"caps": ["pdf"], "reason": "omitted"},
        "infraErrors": [
            {"source": "egress-sidecar", "message": "died"},
            {"source": "hostloop-exec", "message": "exec"},
        ],
        "stalledOnQuestion": true,
        "permissiveAutoAllow": ["Bash(curl)"],
        "missingCapabilityUse": ["ocr"],
        "scan": {
            "outputsDeletes": ["outputs/x"],
            "hostPathLeaked": true,
            "mountDeletes": [{"mount": "outputs", "command": "rm"}, {"mount": "data", "command": "rm"}],
        },
        "effectiveFidelity": "container",
        "l0PluginDivergence": true,
        "nonDeterministic": true,
        "fidelityWarnings": ["prompt: referenced asset not found: x.md"],
        "capabilityProbe": "definitive",
    });
    let verdict = check(
        result.clone(),
        &[
            ("assertion", Fail),
            ("assertion", Fail),
            ("result_error", Fail),
            ("missing_capability", Fail),
            ("infra_error", Fail),
            ("exec_infra_error", Warn),
            ("stalled", Fail),
            ("permissive_auto_allow", Fail),
            ("missing_capability", Fail),
            ("outputs_delete", Fail),
            ("mount_delete", Warn),
            ("host_path_leak", Fail),
            ("l0_plugin_divergence", Fail),
            ("non_deterministic", Warn),
            ("prompt_asset_missing", Warn),
        ],
        false,
    );
    let statuses: Vec<&str> = verdict.guards.iter().map(|g| g.status.as_str()).collect();
    assert_eq!(statuses, ["fired", "fired", "fired", "fired"]);
    assert_eq!(verdict.failures.len(), 2 + 9);
    assert_eq!(
        verdict.failures[0],
        Failure {
            assertion: Some("tool_called".into()),
            message: "not called".into(),
            kind: "assertion".into(),
        }
    );
    assert_eq!(
        verdict.failures[1],
        Failure {
            assertion: None,
            message: "assertion failed".into(),
            kind: "staleness".into(),
        }
    );
    assert!(verdict.failures[2..].iter().all(|f| f.kind == "guard"));

    // The replay lane drops the live-only checks and marks their guards `na`.
    let replay = derive(&result, Lane::Replay);
    let codes: Vec<&str> = replay.signals.iter().map(|s| s.code).collect();
    assert_eq!(
        codes,
        [
            "assertion",
            "assertion",
            "result_error",
            "missing_capability",
            "infra_error",
            "exec_infra_error",
            "stalled",
            "non_deterministic",
            "prompt_asset_missing",
        ]
    );
    assert!(replay.guards.iter().all(|g| g.status == GuardStatus::Na));
}

#[test]
fn modifiers_suppress_their_signals() {
    let modifiers = json!([{"assertion": {
        "allow_permissive_auto_allow": true,
        "allow_missing_capability": true,
        "allow_l0_plugin_divergence": true,
        "allow_stall": true,
        "allow_outputs_delete": true,
        "allow_delete_in": ["data"],
    }, "pass": true}]);
    let result = with(
        clean(),
        json!({
            "assertions": modifiers,
            "requiresCapabilityUnmet": {"caps": ["pdf"]},
            "stalledOnQuestion": true,
            "permissiveAutoAllow": ["x"],
            "missingCapabilityUse": ["ocr"],
            "scan": {
                "outputsDeletes": ["outputs/x"],
                "hostPathLeaked": false,
                "mountDeletes": [{"mount": "data", "command": "rm"}],
            },
            "l0PluginDivergence": true,
        }),
    );
    let verdict = check(result, &[], true);
    // The outputs-delete guard fires on the evidence even when the signal is suppressed.
    assert_eq!(verdict.guards[3].status, GuardStatus::Fired);
    assert!(verdict.failures.is_empty());
}

#[test]
fn delivery_signals() {
    let scratch = json!([
        {"path": "notes.md", "bytes": 3, "class": "scratchpad"},
        {"path": "report.md", "bytes": 3, "class": "scratchpad"},
    ]);
    let evidence = with(
        clean(),
        json!({
            "workspaceFiles": scratch,
            "scratchpadEvidenceComplete": true,
            "presentedFiles": [{"from": "/s/report.md", "to": "/o/report.md", "promoted": true}],
            "turn": 1,
        }),
    );
    let verdict = check(
        evidence.clone(),
        &[("undelivered_deliverables", Warn)],
        true,
    );
    assert!(verdict.signals[0].message.contains("notes.md"));
    assert!(!verdict.signals[0].message.contains("report.md"));
    // Cannot tell: incomplete walk, a resumed turn, or no delivery telemetry.
    check(
        with(
            evidence.clone(),
            json!({"scratchpadEvidenceComplete": false}),
        ),
        &[],
        true,
    );
    check(with(evidence.clone(), json!({"turn": 2})), &[], true);
    check(
        with(evidence.clone(), json!({"presentedFiles": null})),
        &[],
        true,
    );
    // Remote lane: delivery is unobservable instead.
    check(
        with(evidence.clone(), json!({"lane": "remote"})),
        &[("delivery_unobservable", Warn)],
        true,
    );
    check(
        with(
            evidence,
            json!({"lane": "remote", "workspaceFiles": [{"path": "a", "bytes": 1, "class": "input"}]}),
        ),
        &[],
        true,
    );
}

#[test]
fn ended_with_question_needs_an_open_ended_scenario_without_a_deliverable() {
    let asked = with(
        clean(),
        json!({"workspaceFiles": [], "finalMessage": "Done. Shall I continue?"}),
    );
    check(asked.clone(), &[("ended_with_question", Warn)], true);
    // A URL query is not a question.
    check(
        with(
            asked.clone(),
            json!({"finalMessage": "See https://x.test/a?b=1 and ?c and ?= and ?#"}),
        ),
        &[],
        true,
    );
    // A file in outputs is a deliverable by location, except on the remote lane.
    let delivered = with(
        asked.clone(),
        json!({"workspaceFiles": [{"path": "o.md", "bytes": 1, "class": "output"}]}),
    );
    check(delivered.clone(), &[], true);
    check(
        with(delivered, json!({"lane": "remote"})),
        &[
            ("ended_with_question", Warn),
            ("delivery_unobservable", Warn),
        ],
        true,
    );
    // An assertion beyond `result` makes the scenario not open-ended.
    check(
        with(
            asked.clone(),
            json!({"assertions": [{"assertion": {"tool_called": "Write"}, "pass": true}]}),
        ),
        &[],
        true,
    );
    check(
        with(
            asked.clone(),
            json!({"assertions": [{"assertion": {"result": "success", "allow_stall": false}, "pass": true}]}),
        ),
        &[("ended_with_question", Warn)],
        true,
    );
    // No workspace walk: cannot tell.
    check(with(asked, json!({"workspaceFiles": null})), &[], true);
}

#[test]
fn capability_guard_reads_the_probe() {
    for (probe, unmet, expect) in [
        (None, false, GuardStatus::Na),
        (Some("skipped"), true, GuardStatus::Na),
        (Some("unverified"), true, GuardStatus::Unverified),
        (Some("definitive"), true, GuardStatus::Fired),
        (Some("definitive"), false, GuardStatus::Ok),
    ] {
        let mut result = with(clean(), json!({"capabilityProbe": probe}));
        if unmet {
            result = with(
                result,
                json!({"requiresCapabilityUnmet": {"caps": ["pdf"]}}),
            );
        }
        let verdict = derive(&result, Lane::Live);
        assert_eq!(verdict.guards[0].status, expect, "{probe:?} {unmet}");
    }
}

#[test]
fn samples_rederive_to_their_persisted_verdicts() {
    for (text, lane) in [(SAMPLE_RUN, Lane::Live), (SAMPLE_REPLAY, Lane::Replay)] {
        let result: Value = serde_json::from_str(text).expect("fixture is valid JSON");
        let verdict = derive(&result, lane);
        assert_eq!(
            verdict.to_value().to_string(),
            result["verdict"].to_string()
        );
        assert_eq!(outcome(&result, Some(&verdict)), result["outcome"].as_str());
    }
}

#[test]
fn views_of_legacy_results_are_rederived_and_marked() {
    let persisted: Value = serde_json::from_str(SAMPLE_RUN).expect("fixture is valid JSON");
    let view = view_with_rederived_verdict(&persisted).expect("sample is readable");
    assert!(!view.verdict_rederived);

    let mut legacy = persisted.clone();
    let object = legacy.as_object_mut().expect("sample is an object");
    object.shift_remove("verdict");
    object.shift_remove("outcome");
    let rederived = view_with_rederived_verdict(&legacy).expect("legacy result is readable");
    assert!(rederived.verdict_rederived);
    assert_eq!(rederived.pass, view.pass);
    assert_eq!(rederived.signals, view.signals);

    let restored = with_rederived_verdict(legacy, Lane::Live);
    assert_eq!(restored.to_string(), persisted.to_string());
    // A persisted verdict is left alone.
    assert_eq!(
        with_rederived_verdict(persisted.clone(), Lane::Replay).to_string(),
        persisted.to_string()
    );
}
