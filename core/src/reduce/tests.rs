//! Tests of the reducer: the reference test cases it owns (named `tc_NN_…`,
//! harness-behaviour.md#test-cases), determinism, and a
//! property test against a sequential reference of harness-behaviour.md#repeat-loop.

use cowork_schema::event::JobOutcome;
use cowork_schema::job::{CellAxes, Tier};
use cowork_schema::rollup::{
    MatrixRepeatRollup, MatrixRollup, Provenance, RepeatRollup, StopReason,
};
use cowork_schema::run_result::RunView;
use indexmap::IndexMap;
use serde_json::{Value, json};

use super::*;

// ---------------------------------------------------------------------------------------------
// Builders: every run goes through `RunView::from_result` so extraction is covered too.

/// A RunResult with a persisted verdict. `extra` adds top-level keys; its `signals` key, a list
/// of `[code, severity]` pairs, becomes `verdict.signals`.
fn result(pass: bool, extra: Value) -> Value {
    let mut base = json!({
        "scenario": "s",
        "result": if pass { "success" } else { "error" },
        "assertions": [],
    });
    let mut signals = Vec::new();
    let object = base.as_object_mut().expect("base is an object");
    for (key, value) in extra.as_object().expect("extra is an object") {
        if key == "signals" {
            for pair in value.as_array().expect("signals is a list") {
                signals.push(json!({"code": pair[0], "severity": pair[1], "message": "m"}));
            }
        } else {
            object.insert(key.clone(), value.clone());
        }
    }
    object.insert(
        "verdict".into(),
        json!({"pass": pass, "exitCode": if pass { 0 } else { 1 }, "signals": signals}),
    );
    base
}

fn done(result: Value) -> JobOutcome {
    JobOutcome::Completed {
        run: RunView::from_result(&result).expect("test result is readable"),
    }
}

fn pass_run() -> JobOutcome {
    done(result(true, json!({})))
}

fn fail_run() -> JobOutcome {
    done(result(
        false,
        json!({"signals": [["result_error", "fail"]]}),
    ))
}

fn pass_cost(usd: f64) -> JobOutcome {
    done(result(true, json!({"cost": {"usd": usd}})))
}

fn fail_cost(usd: f64) -> JobOutcome {
    done(result(
        false,
        json!({"cost": {"usd": usd}, "signals": [["result_error", "fail"]]}),
    ))
}

fn unanswered() -> JobOutcome {
    JobOutcome::Unanswered {
        message: "no scripted answer for \"Proceed?\"".into(),
        hint: Some("add an answer".into()),
    }
}

fn error(category: &str) -> JobOutcome {
    JobOutcome::Error {
        category: category.into(),
        message: format!("{category} failure"),
    }
}

const NO_STOPS: StopRules = StopRules {
    stop_on_diverge: false,
    max_budget_usd: None,
};

fn diverge() -> StopRules {
    StopRules {
        stop_on_diverge: true,
        max_budget_usd: None,
    }
}

fn budget(cap: f64) -> StopRules {
    StopRules {
        stop_on_diverge: false,
        max_budget_usd: Some(cap),
    }
}

fn judging(min_pass_rate: f64) -> Judging {
    Judging {
        min_pass_rate,
        allow_budget_stop: false,
        allow_truncated_matrix: false,
    }
}

const DEFAULT_JUDGING: Judging = Judging {
    min_pass_rate: 1.0,
    allow_budget_stop: false,
    allow_truncated_matrix: false,
};

/// Offers `outcomes` in index order to a fold of `requested` runs; stops offering once final.
fn fold_in_order(requested: u32, rules: StopRules, outcomes: Vec<JobOutcome>) -> RepeatFold {
    let mut fold = RepeatFold::new("s".into(), requested, rules);
    for (index, outcome) in outcomes.into_iter().enumerate() {
        if fold.is_final() {
            break;
        }
        assert_eq!(fold.offer(index as u32, outcome), Offer::Folded);
    }
    fold
}

fn rollup_of(requested: u32, rules: StopRules, outcomes: Vec<JobOutcome>) -> RepeatRollup {
    fold_in_order(requested, rules, outcomes)
        .rollup()
        .expect("every needed outcome was offered")
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("rollup types serialize")
}

/// The area helper of the repeat rollup: folds in index order and compares the whole rollup
/// as JSON text, so key order and number formatting are checked too.
fn check_rollup(requested: u32, rules: StopRules, outcomes: Vec<JobOutcome>, expect: &str) {
    let rollup = rollup_of(requested, rules, outcomes);
    assert_eq!(to_json(&rollup), expect);
}

fn hand_rollup(
    completed: u32,
    passes: u32,
    requested: u32,
    stopped_early: Option<StopReason>,
) -> RepeatRollup {
    RepeatRollup {
        scenario: "s".into(),
        requested,
        completed,
        stopped_early,
        passes,
        pass_rate: if completed == 0 {
            0.0
        } else {
            f64::from(passes) / f64::from(completed)
        },
        signal_histogram: IndexMap::new(),
        per_assertion: Vec::new(),
        total_cost_usd: None,
        total_tokens: None,
        non_deterministic_runs: 0,
        provenance: Provenance::default(),
    }
}

// ---------------------------------------------------------------------------------------------
// Repeat rollup (TC-06 … TC-16).

#[test]
fn tc_06_pass_rate() {
    let rollup = rollup_of(3, NO_STOPS, vec![pass_run(), pass_run(), fail_run()]);
    assert_eq!((rollup.completed, rollup.passes), (3, 2));
    assert_eq!(rollup.pass_rate, 2.0 / 3.0);
    assert!(to_json(&rollup).contains(r#""passRate":0.6666666666666666,"#));
}

#[test]
fn tc_07_histogram_counts_every_signal() {
    let both = || {
        done(result(
            false,
            json!({"signals": [["result_error", "fail"], ["scan_unavailable", "warn"]]}),
        ))
    };
    check_rollup(
        3,
        NO_STOPS,
        vec![
            both(),
            both(),
            done(result(
                true,
                json!({"signals": [["scan_unavailable", "warn"]]}),
            )),
        ],
        r#"{"scenario":"s","requested":3,"completed":3,"passes":1,"passRate":0.3333333333333333,"signalHistogram":{"result_error":2,"scan_unavailable":3},"perAssertion":[],"nonDeterministicRuns":0,"provenance":{"models":["unknown"],"skills":["unknown"],"ablatedRuns":0}}"#,
    );
}

#[test]
fn tc_08_per_assertion_attribution() {
    let run_1 = done(result(
        true,
        json!({"assertions": [
            {"assertion": {"tool_called": "Write"}, "pass": true},
            {"assertion": {"result": "success"}, "pass": true},
        ]}),
    ));
    let run_2 = done(result(
        false,
        json!({
            "assertions": [
                {"assertion": {"tool_called": "Write"}, "pass": false, "message": "not called"},
                {"assertion": {"result": "success"}, "pass": true},
            ],
            "signals": [["assertion", "fail"]],
        }),
    ));
    check_rollup(
        2,
        NO_STOPS,
        vec![run_1, run_2],
        r#"{"scenario":"s","requested":2,"completed":2,"passes":1,"passRate":0.5,"signalHistogram":{"assertion":1},"perAssertion":[{"index":0,"key":"tool_called","passes":1,"fails":1,"sampleFailure":"not called"},{"index":1,"key":"result","passes":2,"fails":0}],"nonDeterministicRuns":0,"provenance":{"models":["unknown"],"skills":["unknown"],"ablatedRuns":0}}"#,
    );
}

#[test]
fn tc_09_key_order() {
    let run = done(result(
        true,
        json!({"assertions": [
            {"assertion": {"result": "success", "tool_called": "X"}, "pass": true},
            {"assertion": {"tool_called": "X", "result": "success"}, "pass": true},
            {"assertion": {}, "pass": true},
        ]}),
    ));
    let rollup = rollup_of(1, NO_STOPS, vec![run]);
    assert_eq!(
        to_json(&rollup.per_assertion),
        r#"[{"index":0,"key":"result","passes":1,"fails":0},{"index":1,"key":"tool_called","passes":1,"fails":0},{"index":2,"key":"(empty assertion)","passes":1,"fails":0}]"#
    );
    // The key comes from the last run having the position, even when that object is `{}`.
    let named = done(result(
        true,
        json!({"assertions": [{"assertion": {"result": "success"}, "pass": true}]}),
    ));
    let empty = done(result(
        true,
        json!({"assertions": [{"assertion": {}, "pass": true}]}),
    ));
    let rollup = rollup_of(2, NO_STOPS, vec![named, empty]);
    assert_eq!(rollup.per_assertion[0].key, "(empty assertion)");
}

#[test]
fn tc_10_ragged_assertion_lists() {
    let three = done(result(
        true,
        json!({"assertions": [
            {"assertion": {"a": 1}, "pass": true},
            {"assertion": {"b": 1}, "pass": true},
            {"assertion": {"c": 1}, "pass": true},
        ]}),
    ));
    let one = done(result(
        false,
        json!({"assertions": [{"assertion": {"a": 1}, "pass": false}]}),
    ));
    let rollup = rollup_of(2, NO_STOPS, vec![three, one]);
    let counts: Vec<(u32, &str, u32, u32)> = rollup
        .per_assertion
        .iter()
        .map(|row| (row.index, row.key.as_str(), row.passes, row.fails))
        .collect();
    assert_eq!(counts, [(0, "a", 1, 1), (1, "b", 1, 0), (2, "c", 1, 0)]);
    assert_eq!(rollup.per_assertion[0].sample_failure, None);
}

#[test]
fn tc_11_sample_failure_takes_the_first_non_null_message() {
    let failing = |message: Option<&str>| {
        let mut entry = json!({"assertion": {"tool_called": "X"}, "pass": false});
        if let Some(message) = message {
            entry["message"] = Value::from(message);
        }
        done(result(false, json!({"assertions": [entry]})))
    };
    let rollup = rollup_of(
        3,
        NO_STOPS,
        vec![failing(None), failing(Some("b")), failing(Some("c"))],
    );
    assert_eq!(rollup.per_assertion[0].fails, 3);
    assert_eq!(rollup.per_assertion[0].sample_failure.as_deref(), Some("b"));
}

#[test]
fn tc_12_totals() {
    let priced = |usd: f64, input: u64, output: u64| {
        done(result(
            true,
            json!({
                "cost": {"usd": usd},
                "usage": {"input_tokens": input, "output_tokens": output,
                          "cache_read_input_tokens": 100000, "cache_creation_input_tokens": 7},
            }),
        ))
    };
    let rollup = rollup_of(
        2,
        NO_STOPS,
        vec![priced(0.01, 100, 50), priced(0.02, 200, 100)],
    );
    assert_eq!(rollup.total_cost_usd, Some(0.01 + 0.02));
    assert_eq!(rollup.total_tokens, Some(450.0));
    assert!(to_json(&rollup).contains(r#""totalCostUsd":0.03,"totalTokens":450,"#));
}

#[test]
fn tc_13_missing_telemetry() {
    let rollup = rollup_of(2, NO_STOPS, vec![pass_run(), pass_run()]);
    assert_eq!((rollup.total_cost_usd, rollup.total_tokens), (None, None));
    let text = to_json(&rollup);
    assert!(!text.contains("totalCostUsd") && !text.contains("totalTokens"));

    let rollup = rollup_of(2, NO_STOPS, vec![pass_cost(0.05), pass_run()]);
    assert_eq!(rollup.total_cost_usd, Some(0.05));

    let input_only = done(result(true, json!({"usage": {"input_tokens": 10}})));
    let both = done(result(
        true,
        json!({"usage": {"input_tokens": 10, "output_tokens": 5}}),
    ));
    let rollup = rollup_of(2, NO_STOPS, vec![input_only, both]);
    assert_eq!(rollup.total_tokens, Some(15.0));
}

#[test]
fn tc_14_non_determinism() {
    let run = |flag: bool| done(result(true, json!({"nonDeterministic": flag})));
    let rollup = rollup_of(3, NO_STOPS, vec![run(true), run(false), run(true)]);
    assert_eq!(rollup.non_deterministic_runs, 2);
}

#[test]
fn tc_15_provenance() {
    let with_models = |models: Value| done(result(true, json!({"models": models})));
    let rollup = rollup_of(
        3,
        NO_STOPS,
        vec![
            with_models(json!(["claude-opus-5", "<synthetic>"])),
            with_models(json!(["claude-sonnet-5"])),
            with_models(json!([])),
        ],
    );
    assert_eq!(
        rollup.provenance.models,
        ["claude-opus-5", "claude-sonnet-5", "unknown"]
    );

    let offered = || {
        done(result(
            true,
            json!({"context": {"availableSkills": [{"id": "p:s"}]}, "skillsInvoked": []}),
        ))
    };
    let rollup = rollup_of(3, NO_STOPS, vec![offered(), offered(), offered()]);
    assert_eq!(rollup.provenance.skills, ["offered,NOT-invoked"]);

    let rollup = rollup_of(1, NO_STOPS, vec![with_models(json!(["a", "b"]))]);
    assert_eq!(rollup.provenance.models, ["a,b"]);
}

#[test]
fn tc_16_arm_label() {
    let ablated = |flag: bool| done(result(true, json!({"ablated": flag})));
    let all = rollup_of(5, NO_STOPS, (0..5).map(|_| ablated(true)).collect());
    assert_eq!(arm_label(&all), " [ABLATED — control arm]");
    let mixed = rollup_of(
        3,
        NO_STOPS,
        vec![ablated(true), ablated(false), ablated(true)],
    );
    assert_eq!(mixed.provenance.ablated_runs, 2);
    assert_eq!(arm_label(&mixed), " [MIXED ARMS: 2/3 ablated]");
    let none = rollup_of(2, NO_STOPS, vec![ablated(false), ablated(false)]);
    assert_eq!(arm_label(&none), "");
    let empty = rollup_of(3, NO_STOPS, vec![error("runtime")]);
    assert_eq!(arm_label(&empty), "");
}

// ---------------------------------------------------------------------------------------------
// Batch verdict (TC-17 … TC-19).

fn check_passes(rollup: &RepeatRollup, judging: Judging, expect: bool) {
    assert_eq!(
        rollup_passes(rollup, &judging),
        expect,
        "{rollup:?} with {judging:?}"
    );
}

#[test]
fn tc_17_threshold() {
    let three_one = rollup_of(
        4,
        NO_STOPS,
        vec![pass_run(), pass_run(), pass_run(), fail_run()],
    );
    check_passes(&three_one, judging(0.75), true);
    check_passes(&three_one, judging(0.8), false);
    check_passes(&three_one, DEFAULT_JUDGING, false);
    let mut outcomes: Vec<JobOutcome> = (0..9).map(|_| pass_run()).collect();
    outcomes.push(fail_run());
    let nine_one = rollup_of(10, NO_STOPS, outcomes);
    check_passes(&nine_one, judging(0.9), true);
}

#[test]
fn tc_18_early_stops() {
    let diverged = hand_rollup(1, 1, 10, Some(StopReason::Diverged));
    check_passes(&diverged, judging(0.5), false);
    check_passes(&diverged, judging(1.0), false);

    let budget_stopped = rollup_of(10, budget(0.10), vec![pass_cost(0.05), pass_cost(0.05)]);
    assert_eq!(budget_stopped.stopped_early, Some(StopReason::Budget));
    assert_eq!((budget_stopped.passes, budget_stopped.completed), (2, 2));
    check_passes(&budget_stopped, DEFAULT_JUDGING, false);
    let allow = Judging {
        allow_budget_stop: true,
        ..DEFAULT_JUDGING
    };
    check_passes(&budget_stopped, allow, true);

    let stopped = rollup_of(5, NO_STOPS, vec![pass_run(), pass_run(), unanswered()]);
    assert_eq!(stopped.stopped_early, Some(StopReason::Unanswered));
    check_passes(&stopped, judging(0.1), false);

    let errored = rollup_of(5, NO_STOPS, vec![pass_run(), error("runtime")]);
    assert_eq!(errored.stopped_early, Some(StopReason::Error));
    check_passes(&errored, judging(0.0), false);
}

#[test]
fn tc_19_zero_threshold() {
    let rollup = rollup_of(3, NO_STOPS, vec![fail_run(), fail_run(), fail_run()]);
    assert_eq!(rollup.pass_rate, 0.0);
    check_passes(&rollup, judging(0.0), true);
}

// ---------------------------------------------------------------------------------------------
// Reference loop / reducer (TC-20 … TC-29).

fn files_shape(
    repeat: Option<u32>,
    labels: &[&str],
    rules: StopRules,
    judging: Judging,
) -> BatchShape {
    BatchShape {
        kind: ShapeKind::Files,
        repeat,
        units: labels
            .iter()
            .map(|label| UnitShape {
                label: (*label).to_owned(),
                axes: None,
                cell_error: None,
            })
            .collect(),
        requested_cells: 0,
        truncated: false,
        rules,
        judging,
        file_errors: FileErrors::AbortBatch,
        quarantine: None,
    }
}

fn reducer(shape: BatchShape) -> BatchReducer {
    BatchReducer::new(shape).expect("test shape is valid")
}

#[test]
fn tc_20_divergence_mid_batch() {
    let mut batch = reducer(files_shape(Some(10), &["s"], diverge(), DEFAULT_JUDGING));
    for (index, outcome) in [pass_run(), pass_run(), fail_run()].into_iter().enumerate() {
        assert!(!batch.is_cancellable(0, Some(3)));
        assert_eq!(batch.offer(0, Some(index as u32), outcome), Offer::Folded);
    }
    assert_eq!(batch.unit_decided(0), Some(2));
    assert!(batch.is_complete());
    assert!((3..10).all(|index| batch.is_cancellable(0, Some(index))));
    assert!(!batch.is_cancellable(0, Some(2)));
    // Two overshoot runs completed anyway: discarded, with their cost, never folded.
    assert_eq!(batch.offer(0, Some(4), fail_cost(0.5)), Offer::Discarded);
    assert_eq!(batch.offer(0, Some(3), pass_cost(0.25)), Offer::Discarded);
    assert_eq!(batch.offer(0, Some(3), pass_run()), Offer::Duplicate);

    let reduction = batch.finish().expect("batch is complete");
    let rollup = &reduction
        .rollups
        .as_ref()
        .expect("repeat batch has rollups")[0];
    assert_eq!((rollup.completed, rollup.passes), (3, 2));
    assert_eq!(rollup.stopped_early, Some(StopReason::Diverged));
    assert_eq!(
        reduction.results,
        [(0, Some(0)), (0, Some(1)), (0, Some(2))]
    );
    assert_eq!(
        reduction.discarded,
        [
            DiscardedJob {
                unit: 0,
                repeat_index: Some(3),
                cost_usd: Some(0.25),
                completed: true
            },
            DiscardedJob {
                unit: 0,
                repeat_index: Some(4),
                cost_usd: Some(0.5),
                completed: true
            },
        ]
    );
    assert!(!reduction.ok);
    assert_eq!(reduction.exit_code, 1);
    // Overshoot depends on timing, so the deterministic rollup document leaves it out.
    let doc = serde_json::to_string(&reduction.to_rollup_doc("run")).expect("serializes");
    assert!(!doc.contains("discarded"), "{doc}");
}

#[test]
fn tc_21_divergence_on_the_last_iteration() {
    let rollup = rollup_of(3, diverge(), vec![pass_run(), pass_run(), fail_run()]);
    assert_eq!((rollup.completed, rollup.requested), (3, 3));
    assert_eq!(rollup.stopped_early, Some(StopReason::Diverged));
    check_passes(&rollup, judging(0.5), false);
}

#[test]
fn tc_22_budget_stop() {
    let fold = fold_in_order(
        5,
        budget(0.10),
        vec![pass_cost(0.04), pass_cost(0.07), pass_cost(0.01)],
    );
    assert_eq!(fold.decided(), Some(1));
    let rollup = fold.rollup().expect("budget stop is final");
    assert_eq!(rollup.completed, 2);
    assert_eq!(rollup.stopped_early, Some(StopReason::Budget));
    check_passes(&rollup, DEFAULT_JUDGING, false);
    check_passes(
        &rollup,
        Judging {
            allow_budget_stop: true,
            ..DEFAULT_JUDGING
        },
        true,
    );
}

#[test]
fn tc_23_budget_reached_on_the_last_iteration() {
    let rollup = rollup_of(2, budget(0.10), vec![pass_cost(0.06), pass_cost(0.05)]);
    assert_eq!(rollup.stopped_early, None);
    assert_eq!(rollup.completed, 2);
    check_passes(&rollup, DEFAULT_JUDGING, true);
}

#[test]
fn tc_24_budget_equality() {
    let fold = fold_in_order(3, budget(0.10), vec![pass_cost(0.10)]);
    assert_eq!(fold.decided(), Some(0));
    let rollup = fold.rollup().expect("budget stop is final");
    assert_eq!(rollup.stopped_early, Some(StopReason::Budget));
    assert_eq!(rollup.completed, 1);
}

#[test]
fn tc_25_telemetry_gap_disables_the_cap() {
    let mut batch = reducer(files_shape(Some(4), &["s"], budget(0.10), DEFAULT_JUDGING));
    let outcomes = [
        pass_cost(0.09),
        pass_run(),
        pass_cost(0.09),
        pass_cost(0.09),
    ];
    for (index, outcome) in outcomes.into_iter().enumerate() {
        batch.offer(0, Some(index as u32), outcome);
    }
    let reduction = batch.finish().expect("every run was offered");
    let rollup = &reduction
        .rollups
        .as_ref()
        .expect("repeat batch has rollups")[0];
    assert_eq!(rollup.stopped_early, None);
    assert_eq!(rollup.completed, 4);
    let total = rollup.total_cost_usd.expect("three runs were priced");
    assert_eq!(total, 0.09 + 0.09 + 0.09);
    assert!((total - 0.27).abs() < 1e-12);
    assert_eq!(reduction.budget_telemetry_missing, ["s"]);
}

#[test]
fn tc_26_precedence() {
    let rules = StopRules {
        stop_on_diverge: true,
        max_budget_usd: Some(0.10),
    };
    let rollup = rollup_of(5, rules, vec![pass_cost(0.05), fail_cost(0.06)]);
    assert_eq!(rollup.stopped_early, Some(StopReason::Diverged));
}

#[test]
fn tc_27_unanswered_mid_batch() {
    let mut batch = reducer(files_shape(Some(5), &["s"], NO_STOPS, judging(0.1)));
    // Indices 3 and 4 finish first; the partial result of index 2 is never folded.
    assert_eq!(batch.offer(0, Some(4), pass_cost(0.01)), Offer::Buffered);
    assert_eq!(batch.offer(0, Some(3), pass_cost(0.01)), Offer::Buffered);
    assert_eq!(batch.offer(0, Some(0), pass_cost(0.01)), Offer::Folded);
    assert_eq!(batch.offer(0, Some(1), pass_cost(0.01)), Offer::Folded);
    assert!(!batch.is_complete());
    assert_eq!(batch.offer(0, Some(2), unanswered()), Offer::Folded);
    assert_eq!(batch.unit_decided(0), Some(2));
    let reduction = batch
        .finish()
        .expect("the unanswered gate decides the unit");
    let rollup = &reduction
        .rollups
        .as_ref()
        .expect("repeat batch has rollups")[0];
    assert_eq!(rollup.completed, 2);
    assert_eq!(rollup.stopped_early, Some(StopReason::Unanswered));
    assert_eq!(rollup.total_cost_usd, Some(0.01 + 0.01));
    assert!(!reduction.ok);
    let discarded: Vec<Option<u32>> = reduction.discarded.iter().map(|d| d.repeat_index).collect();
    assert_eq!(discarded, [Some(3), Some(4)]);
}

#[test]
fn tc_28_error_at_index_0() {
    let mut batch = reducer(files_shape(Some(3), &["s"], NO_STOPS, DEFAULT_JUDGING));
    assert_eq!(batch.offer(0, Some(0), error("boundary")), Offer::Folded);
    let reduction = batch.finish().expect("the error decides the unit");
    let rollup = &reduction
        .rollups
        .as_ref()
        .expect("repeat batch has rollups")[0];
    assert_eq!(
        to_json(rollup),
        r#"{"scenario":"s","requested":3,"completed":0,"stoppedEarly":"error","passes":0,"passRate":0,"signalHistogram":{},"perAssertion":[],"nonDeterministicRuns":0,"provenance":{"models":[],"skills":[],"ablatedRuns":0}}"#
    );
    assert_eq!(reduction.exit_code, 1);
    assert!(reduction.error.is_none());
}

#[test]
fn tc_29_out_of_order_completion_index_order_fold() {
    let mut fold = RepeatFold::new("s".into(), 4, diverge());
    assert_eq!(fold.offer(3, fail_run()), Offer::Buffered);
    assert_eq!(fold.offer(1, pass_run()), Offer::Buffered);
    assert_eq!(fold.next_needed(), Some(0));
    assert_eq!(fold.offer(0, pass_run()), Offer::Folded);
    // A completion-order fold would have stopped here with two runs; index order waits.
    assert_eq!(fold.decided(), None);
    assert_eq!(fold.next_needed(), Some(2));
    assert_eq!(fold.offer(2, pass_run()), Offer::Folded);
    assert_eq!(fold.decided(), Some(3));
    assert_eq!(fold.n_buffered(), 0);
    let rollup = fold.rollup().expect("all four resolved");
    assert_eq!((rollup.completed, rollup.passes), (4, 3));
    assert_eq!(rollup.stopped_early, Some(StopReason::Diverged));
}

// ---------------------------------------------------------------------------------------------
// Matrix (TC-32 verdict part, TC-33, TC-34, TC-36).

fn axes(baseline: &str, model: &str) -> CellAxes {
    CellAxes {
        baseline: Some(baseline.into()),
        model: Some(model.into()),
        skill_dir: None,
    }
}

fn matrix_shape(
    repeat: Option<u32>,
    cells: Vec<(CellAxes, Option<&str>)>,
    requested_cells: u32,
    rules: StopRules,
    judging: Judging,
) -> BatchShape {
    let truncated = requested_cells as usize > cells.len();
    BatchShape {
        kind: ShapeKind::Matrix,
        repeat,
        units: cells
            .into_iter()
            .map(|(axes, cell_error)| UnitShape {
                label: format!("s [{}]", axes.label()),
                axes: Some(axes),
                cell_error: cell_error.map(str::to_owned),
            })
            .collect(),
        requested_cells,
        truncated,
        rules,
        judging,
        file_errors: FileErrors::AbortBatch,
        quarantine: None,
    }
}

fn plain_matrix(outcomes: Vec<JobOutcome>, requested_cells: u32, judging: Judging) -> MatrixRollup {
    let cells = (0..outcomes.len())
        .map(|index| (axes("a", &format!("m{index}")), None))
        .collect();
    let mut batch = reducer(matrix_shape(
        None,
        cells,
        requested_cells,
        NO_STOPS,
        judging,
    ));
    for (index, outcome) in outcomes.into_iter().enumerate() {
        assert_eq!(batch.offer(index as u32, None, outcome), Offer::Folded);
    }
    let reduction = batch.finish().expect("every cell ran");
    assert_eq!(
        reduction.ok,
        !reduction.matrix.as_ref().expect("plain matrix").any_fail
    );
    reduction
        .matrix
        .expect("plain matrix batches have a matrix")
}

#[test]
fn tc_32_cap_and_truncation_verdict() {
    let all_pass = || (0..4).map(|_| pass_run()).collect::<Vec<_>>();
    let matrix = plain_matrix(all_pass(), 9, DEFAULT_JUDGING);
    assert_eq!(
        (matrix.requested, matrix.ran_cells, matrix.truncated),
        (9, 4, true)
    );
    assert!(matrix.any_fail);
    let allow = Judging {
        allow_truncated_matrix: true,
        ..DEFAULT_JUDGING
    };
    assert!(!plain_matrix(all_pass(), 9, allow).any_fail);
    let one_failing = vec![pass_run(), fail_run(), pass_run(), pass_run()];
    assert!(plain_matrix(one_failing, 9, allow).any_fail);
    // Exactly at the cap: not truncated.
    let two = plain_matrix(vec![pass_run(), pass_run()], 2, DEFAULT_JUDGING);
    assert!(!two.truncated && !two.any_fail);
}

#[test]
fn tc_33_cell_error() {
    let cells = vec![
        (axes("a", "x"), None),
        (
            axes("a", "y"),
            Some("skill dir basename other does not match my-skill"),
        ),
        (axes("b", "x"), None),
    ];
    let mut batch = reducer(matrix_shape(None, cells, 3, NO_STOPS, DEFAULT_JUDGING));
    // No job exists for the erroring cell.
    assert_eq!(batch.offer(1, None, pass_run()), Offer::Unexpected);
    assert!(batch.is_cancellable(1, None));
    assert_eq!(batch.offer(0, None, pass_run()), Offer::Folded);
    assert!(!batch.is_complete());
    assert_eq!(batch.offer(2, None, unanswered()), Offer::Folded);
    let reduction = batch.finish().expect("every runnable cell ran");
    let matrix = reduction.matrix.as_ref().expect("plain matrix");
    assert_eq!(
        to_json(&matrix.cells[1]),
        r#"{"index":1,"axes":{"baseline":"a","model":"y"},"pass":false,"failedAssertions":[],"signals":[],"error":"skill dir basename other does not match my-skill"}"#
    );
    let unanswered_error = matrix.cells[2].error.as_deref().expect("cell 2 errored");
    assert!(unanswered_error.starts_with("unanswered question: "));
    assert!(matrix.cells[0].pass);
    assert!(matrix.any_fail);
    assert_eq!(reduction.exit_code, 1);
    // Only the completed run is a result: neither the cell error nor the partial result.
    assert_eq!(reduction.results, [(0, None)]);
}

#[test]
fn tc_34_cell_from_a_run() {
    let run = done(result(
        false,
        json!({
            "assertions": [
                {"assertion": {"result": "success"}, "pass": true},
                {"assertion": {"tool_called": "Write"}, "pass": false, "message": "not called"},
            ],
            "signals": [["assertion", "fail"], ["scan_unavailable", "warn"]],
            "cost": {"usd": 0.05},
            "durationMs": 12000,
            "effectiveFidelity": "container",
            "outDir": "/runs/s/local_1",
        }),
    ));
    let matrix = plain_matrix(vec![run], 1, DEFAULT_JUDGING);
    assert_eq!(
        to_json(&matrix.cells[0]),
        r#"{"index":0,"axes":{"baseline":"a","model":"m0"},"pass":false,"failedAssertions":["tool_called"],"signals":["assertion","scan_unavailable"],"costUsd":0.05,"durationMs":12000,"effectiveFidelity":"container","outDir":"/runs/s/local_1"}"#
    );
}

fn matrix_repeat(
    cells: Vec<(CellAxes, Option<&str>, Vec<JobOutcome>)>,
    rules: StopRules,
    judging: Judging,
) -> (MatrixRepeatRollup, BatchReduction) {
    let n_cells = cells.len() as u32;
    let repeat = cells
        .iter()
        .map(|(_, _, outcomes)| outcomes.len() as u32)
        .max()
        .unwrap_or(2)
        .max(2);
    let shape_cells = cells
        .iter()
        .map(|(axes, error, _)| (axes.clone(), *error))
        .collect();
    let mut batch = reducer(matrix_shape(
        Some(repeat),
        shape_cells,
        n_cells,
        rules,
        judging,
    ));
    for (cell, (_, _, outcomes)) in cells.into_iter().enumerate() {
        for (index, outcome) in outcomes.into_iter().enumerate() {
            batch.offer(cell as u32, Some(index as u32), outcome);
        }
    }
    let reduction = batch.finish().expect("every cell is decided");
    let matrix = reduction
        .matrix_repeat
        .clone()
        .expect("matrix + repeat batches have matrixRepeat");
    (matrix, reduction)
}

#[test]
fn tc_36_matrix_repeat() {
    let two_cells = || {
        vec![
            (axes("a", "x"), None, vec![pass_run(), pass_run()]),
            (axes("a", "y"), None, vec![pass_run(), fail_run()]),
        ]
    };
    let (matrix, reduction) = matrix_repeat(two_cells(), NO_STOPS, DEFAULT_JUDGING);
    assert!(matrix.any_fail);
    assert_eq!(reduction.exit_code, 1);
    assert_eq!(
        matrix.cells[1].rollup.as_ref().map(|r| r.scenario.as_str()),
        Some("s [baseline=a, model=y]")
    );
    let (matrix, reduction) = matrix_repeat(two_cells(), NO_STOPS, judging(0.5));
    assert!(!matrix.any_fail);
    assert_eq!((reduction.ok, reduction.exit_code), (true, 0));
    assert_eq!(
        reduction.results,
        [(0, Some(0)), (0, Some(1)), (1, Some(0)), (1, Some(1))]
    );

    // A pre-execution cell error: `{index, axes, error}`, no jobs, and the matrix fails.
    let (matrix, _) = matrix_repeat(
        vec![
            (axes("a", "x"), None, vec![pass_run(), pass_run()]),
            (axes("b", "x"), Some("basename mismatch"), Vec::new()),
        ],
        NO_STOPS,
        judging(0.5),
    );
    assert!(matrix.any_fail);
    assert_eq!(
        to_json(&matrix.cells[1]),
        r#"{"index":1,"axes":{"baseline":"b","model":"x"},"error":"basename mismatch"}"#
    );

    // A budget-stopped cell at 2/2 fails by default and passes with --allow-budget-stop; the
    // human header counts it the same way.
    let budget_cells = || {
        vec![
            (
                axes("a", "x"),
                None,
                vec![pass_cost(0.1), pass_cost(0.1), pass_cost(0.1)],
            ),
            (
                axes("a", "y"),
                None,
                vec![pass_cost(0.01), pass_cost(0.01), pass_cost(0.01)],
            ),
        ]
    };
    let (matrix, _) = matrix_repeat(budget_cells(), budget(0.15), DEFAULT_JUDGING);
    let stopped = matrix.cells[0].rollup.as_ref().expect("cell 0 ran");
    assert_eq!(stopped.stopped_early, Some(StopReason::Budget));
    assert_eq!((stopped.passes, stopped.completed), (2, 2));
    assert!(matrix.any_fail);
    assert!(
        render_matrix_repeat_human(&matrix, &DEFAULT_JUDGING)
            .starts_with("matrix: 1/2 cells passed — FAIL\n")
    );
    let allow = Judging {
        allow_budget_stop: true,
        ..DEFAULT_JUDGING
    };
    let (matrix, _) = matrix_repeat(budget_cells(), budget(0.15), allow);
    assert!(!matrix.any_fail);
    assert!(render_matrix_repeat_human(&matrix, &allow).starts_with("matrix: 2/2 cells passed\n"));

    // An unknown baseline fails inside the run: an early stop of the cell, not a cell error.
    let (matrix, reduction) = matrix_repeat(
        vec![(
            axes("nope", "x"),
            None,
            vec![JobOutcome::Error {
                category: "runtime".into(),
                message: "unknown baseline nope".into(),
            }],
        )],
        NO_STOPS,
        DEFAULT_JUDGING,
    );
    let cell = &matrix.cells[0];
    assert!(cell.error.is_none());
    let rollup = cell.rollup.as_ref().expect("the cell has a rollup");
    assert_eq!(
        (rollup.completed, rollup.stopped_early),
        (0, Some(StopReason::Error))
    );
    assert_eq!(reduction.exit_code, 1);
}

// ---------------------------------------------------------------------------------------------
// Envelope `ok` (TC-37) and plain files.

#[test]
fn tc_37_envelope_ok() {
    let mut batch = reducer(files_shape(Some(10), &["s"], NO_STOPS, judging(0.8)));
    for index in 0..10 {
        let outcome = if index == 6 { fail_run() } else { pass_run() };
        batch.offer(0, Some(index), outcome);
    }
    let reduction = batch.finish().expect("all ten ran");
    assert!(reduction.ok);
    assert_eq!(reduction.results.len(), 10);
    let rollups = reduction
        .rollups
        .as_ref()
        .expect("repeat batch has rollups");
    assert_eq!(rollups[0].pass_rate, 0.9);

    let diverged = hand_rollup(1, 1, 10, Some(StopReason::Diverged));
    let keys = EnvelopeKeys {
        results_pass: &[true],
        rollups: Some(std::slice::from_ref(&diverged)),
        matrix: None,
        matrix_repeat: None,
    };
    assert!(!envelope_ok(&keys, &judging(0.1)));

    let plain = |passes: &[bool]| {
        envelope_ok(
            &EnvelopeKeys {
                results_pass: passes,
                rollups: None,
                matrix: None,
                matrix_repeat: None,
            },
            &DEFAULT_JUDGING,
        )
    };
    assert!(plain(&[true, true]));
    assert!(!plain(&[true, false]));
    assert!(!plain(&[]));

    // Precedence when several batch keys are (abnormally) present.
    let matrix_ok = MatrixRollup {
        cells: Vec::new(),
        requested: 1,
        ran_cells: 0,
        truncated: false,
        any_fail: false,
    };
    let matrix_failing = MatrixRollup {
        any_fail: true,
        ..matrix_ok.clone()
    };
    let matrix_repeat_ok = MatrixRepeatRollup {
        cells: Vec::new(),
        requested: 1,
        ran_cells: 0,
        truncated: false,
        any_fail: false,
    };
    let all_keys = EnvelopeKeys {
        results_pass: &[false],
        rollups: Some(std::slice::from_ref(&diverged)),
        matrix: Some(&matrix_failing),
        matrix_repeat: Some(&matrix_repeat_ok),
    };
    assert!(envelope_ok(&all_keys, &DEFAULT_JUDGING));
    let matrix_wins = EnvelopeKeys {
        matrix_repeat: None,
        matrix: Some(&matrix_ok),
        ..all_keys
    };
    assert!(envelope_ok(&matrix_wins, &DEFAULT_JUDGING));
    let rollups_win = EnvelopeKeys {
        matrix_repeat: None,
        matrix: None,
        ..all_keys
    };
    assert!(!envelope_ok(&rollups_win, &DEFAULT_JUDGING));
}

#[test]
fn plain_files_judge_every_result() {
    let mut batch = reducer(files_shape(None, &["a", "b"], NO_STOPS, DEFAULT_JUDGING));
    assert_eq!(batch.offer(1, None, pass_run()), Offer::Folded);
    assert!(!batch.is_complete());
    assert_eq!(batch.finish(), Err(NotComplete { unit: 0 }));
    assert_eq!(batch.offer(0, None, fail_run()), Offer::Folded);
    assert_eq!(batch.offer(0, None, pass_run()), Offer::Duplicate);
    let reduction = batch.finish().expect("both files ran");
    assert_eq!((reduction.ok, reduction.exit_code), (false, 1));
    assert_eq!(reduction.results, [(0, None), (1, None)]);
    assert!(reduction.rollups.is_none() && reduction.error.is_none());
}

fn check_single_file_error(outcome: JobOutcome, expect_category: &str, expect_exit: i32) {
    let mut batch = reducer(files_shape(None, &["s"], NO_STOPS, DEFAULT_JUDGING));
    batch.offer(0, None, outcome);
    let reduction = batch.finish().expect("the only file ran");
    let error = reduction.error.as_ref().expect("a thrown run is an error");
    assert_eq!(error.category, expect_category);
    assert!(!reduction.ok);
    assert_eq!(reduction.exit_code, expect_exit);
    assert!(reduction.results.is_empty());
}

#[test]
fn plain_single_file_errors_mirror_the_single_run_cli() {
    check_single_file_error(unanswered(), "unanswered", 2);
    check_single_file_error(error("runtime"), "runtime", 2);
    check_single_file_error(error("boundary"), "boundary", 3);
    let mut batch = reducer(files_shape(None, &["s"], NO_STOPS, DEFAULT_JUDGING));
    batch.offer(0, None, unanswered());
    let reduction = batch.finish().expect("the only file ran");
    assert_eq!(
        reduction.error,
        Some(cowork_schema::envelope::EnvelopeError {
            category: "unanswered".into(),
            message: "no scripted answer for \"Proceed?\"".into(),
            hint: Some("add an answer".into()),
        })
    );
}

#[test]
fn plain_files_abort_at_the_first_throwing_file() {
    let mut batch = reducer(files_shape(
        None,
        &["a", "b", "c"],
        NO_STOPS,
        DEFAULT_JUDGING,
    ));
    assert_eq!(batch.offer(0, None, pass_cost(0.1)), Offer::Folded);
    assert_eq!(batch.offer(1, None, error("runtime")), Offer::Folded);
    // The CLI never reaches file c: the batch is complete without it.
    assert!(batch.is_complete());
    assert!(batch.is_cancellable(2, None));
    assert_eq!(batch.offer(2, None, pass_cost(0.2)), Offer::Discarded);
    let reduction = batch.finish().expect("the abort decides the batch");
    let error = reduction.error.as_ref().expect("file b threw");
    assert_eq!(error.message, "b: runtime failure");
    assert_eq!(reduction.exit_code, 2);
    assert!(reduction.results.is_empty());
    let discarded: Vec<(u32, Option<f64>)> = reduction
        .discarded
        .iter()
        .map(|job| (job.unit, job.cost_usd))
        .collect();
    assert_eq!(discarded, [(0, Some(0.1)), (2, Some(0.2))]);
}

#[test]
fn a_tampered_cassette_of_a_replay_batch_fails_alone() {
    // The CLI's dir replay: a corrupt cassette gets a stub result, the others still replay,
    // and the call exits 2 with `ok: false` and no error envelope.
    let replay = || BatchShape {
        file_errors: FileErrors::FailFile,
        quarantine: None,
        ..files_shape(None, &["a", "b", "c"], NO_STOPS, DEFAULT_JUDGING)
    };
    let mut batch = reducer(replay());
    assert_eq!(batch.offer(0, None, pass_run()), Offer::Folded);
    assert_eq!(batch.offer(1, None, error("usage")), Offer::Folded);
    // Nothing after the tampered cassette may be cancelled or skipped: its job is the only
    // one that fails.
    assert!(!batch.is_complete());
    assert!(!batch.is_cancellable(2, None));
    assert_eq!(batch.offer(2, None, pass_run()), Offer::Folded);
    let reduction = batch.finish().expect("every cassette replayed");
    assert_eq!(reduction.results, [(0, None), (2, None)]);
    assert!(reduction.error.is_none() && reduction.discarded.is_empty());
    assert_eq!((reduction.ok, reduction.exit_code), (false, 2));
    // Without a corrupt cassette, the verdicts decide, as for any files batch.
    let mut batch = reducer(replay());
    for (unit, outcome) in [pass_run(), fail_run(), pass_run()].into_iter().enumerate() {
        batch.offer(unit as u32, None, outcome);
    }
    let reduction = batch.finish().expect("every cassette replayed");
    assert_eq!((reduction.ok, reduction.exit_code), (false, 1));
    assert_eq!(reduction.results.len(), 3);
}

#[test]
fn only_a_batch_of_replay_units_fails_its_files_alone() {
    let summary = |tiers: &[Tier]| cowork_schema::batch::PlanSummary {
        kind: cowork_schema::batch::PlanKindName::Files,
        repeat: None,
        requested_cells: tiers.len() as u32,
        truncated: false,
        n_jobs: tiers.len() as u64,
        units: tiers
            .iter()
            .enumerate()
            .map(|(unit_idx, tier)| cowork_schema::batch::UnitSummary {
                unit: cowork_schema::ids::UnitRef::File(unit_idx as u32),
                label: format!("u{unit_idx}"),
                scenario_name: format!("u{unit_idx}"),
                axes: None,
                cell_error: None,
                tier: *tier,
            })
            .collect(),
    };
    let flags = cowork_schema::batch::BatchFlags::default();
    let shape = |tiers: &[Tier]| BatchShape::from_summary(&summary(tiers), &flags).file_errors;
    assert_eq!(shape(&[Tier::Replay, Tier::Replay]), FileErrors::FailFile);
    assert_eq!(
        shape(&[Tier::Protocol, Tier::Replay]),
        FileErrors::AbortBatch
    );
    assert_eq!(shape(&[]), FileErrors::AbortBatch);
}

#[test]
fn unexpected_offers_are_refused() {
    let mut batch = reducer(files_shape(Some(2), &["s"], NO_STOPS, DEFAULT_JUDGING));
    assert_eq!(batch.offer(1, Some(0), pass_run()), Offer::Unexpected);
    assert_eq!(batch.offer(0, None, pass_run()), Offer::Unexpected);
    assert_eq!(batch.offer(0, Some(2), pass_run()), Offer::Unexpected);
    let mut plain = reducer(files_shape(None, &["s"], NO_STOPS, DEFAULT_JUDGING));
    assert_eq!(plain.offer(0, Some(0), pass_run()), Offer::Unexpected);
    let files_with_cell_error = BatchShape {
        units: vec![UnitShape {
            label: "s".into(),
            axes: None,
            cell_error: Some("x".into()),
        }],
        ..files_shape(None, &[], NO_STOPS, DEFAULT_JUDGING)
    };
    assert_eq!(
        BatchReducer::new(files_with_cell_error).err(),
        Some(ShapeError::CellErrorInFiles { unit: 0 })
    );
}

// ---------------------------------------------------------------------------------------------
// Determinism and the property test.

/// A tiny deterministic PRNG (splitmix64) so the tests need no new dependency.
struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// A random outcome: mostly completed runs with varied signals, assertions, costs and
/// provenance; sometimes an unanswered gate or an error.
fn random_outcome(rng: &mut Prng) -> JobOutcome {
    match rng.below(100) {
        0..=6 => return unanswered(),
        7..=12 => return error("runtime"),
        _ => {}
    }
    let pass = rng.chance(60);
    let codes = [
        "assertion",
        "scan_unavailable",
        "non_deterministic",
        "result_error",
        "stalled",
    ];
    let mut signals = Vec::new();
    for _ in 0..rng.below(4) {
        let code = codes[rng.below(codes.len() as u64) as usize];
        let severity = if rng.chance(50) { "fail" } else { "warn" };
        signals.push(json!([code, severity]));
    }
    let keys = ["result", "tool_called", "file_exists"];
    let mut assertions = Vec::new();
    for _ in 0..rng.below(5) {
        let mut object = serde_json::Map::new();
        if !rng.chance(15) {
            let key = keys[rng.below(keys.len() as u64) as usize];
            object.insert(key.into(), json!("v"));
        }
        let mut entry = json!({"assertion": object, "pass": rng.chance(70)});
        if rng.chance(50) {
            entry["message"] = json!(format!("msg{}", rng.below(4)));
        }
        assertions.push(entry);
    }
    let models = [
        json!(["m1"]),
        json!(["m2", "<synthetic>"]),
        json!(["m1", "m2"]),
        json!([]),
    ][rng.below(4) as usize]
        .clone();
    let mut extra = json!({
        "signals": signals,
        "assertions": assertions,
        "nonDeterministic": rng.chance(20),
        "ablated": rng.chance(20),
        "models": models,
    });
    if !rng.chance(15) {
        // Cents and odd fractions so that float sums depend on order.
        let usd = [0.01, 0.02, 0.07, 0.1, 0.3, 1.0 / 3.0][rng.below(6) as usize];
        extra["cost"] = json!({ "usd": usd });
    }
    if !rng.chance(20) {
        extra["usage"] = json!({"input_tokens": rng.below(1000), "output_tokens": rng.below(500)});
    }
    if rng.chance(70) {
        let invoked = if rng.chance(50) {
            json!([])
        } else {
            json!(["p:s"])
        };
        extra["context"] = json!({"availableSkills": [{"id": "p:s"}]});
        extra["skillsInvoked"] = invoked;
    }
    done(result(pass, extra))
}

/// A straightforward sequential implementation of the loop of harness-behaviour.md#repeat-loop and
/// the rollup of harness-behaviour.md#repeat-rollup, written independently of `RepeatFold`. Returns
/// the rollup and the stop index.
fn reference(requested: u32, rules: StopRules, outcomes: &[JobOutcome]) -> (RepeatRollup, u32) {
    let mut folded: Vec<&RunView> = Vec::new();
    let mut spent = 0.0;
    let mut missing = false;
    let (mut saw_pass, mut saw_fail) = (false, false);
    let mut stop = None;
    let mut stop_index = requested - 1;
    for i in 0..requested {
        match &outcomes[i as usize] {
            JobOutcome::Unanswered { .. } => stop = Some(StopReason::Unanswered),
            JobOutcome::Error { .. } => stop = Some(StopReason::Error),
            JobOutcome::Completed { run } => {
                folded.push(run);
                if run.pass {
                    saw_pass = true;
                } else {
                    saw_fail = true;
                }
                if rules.stop_on_diverge && saw_pass && saw_fail {
                    stop = Some(StopReason::Diverged);
                } else if let Some(cap) = rules.max_budget_usd {
                    match run.cost_usd {
                        None => missing = true,
                        Some(cost) => spent += cost,
                    }
                    if !missing && i + 1 < requested && spent >= cap {
                        stop = Some(StopReason::Budget);
                    }
                }
            }
        }
        if stop.is_some() {
            stop_index = i;
            break;
        }
    }

    let completed = folded.len() as u32;
    let passes = folded.iter().filter(|run| run.pass).count() as u32;
    let mut histogram: IndexMap<String, u64> = IndexMap::new();
    for run in &folded {
        for signal in &run.signals {
            *histogram.entry(signal.code.clone()).or_insert(0) += 1;
        }
    }
    let width = folded
        .iter()
        .map(|run| run.assertions.len())
        .max()
        .unwrap_or(0);
    let per_assertion = (0..width)
        .map(|position| {
            let entries: Vec<_> = folded
                .iter()
                .filter_map(|run| run.assertions.get(position))
                .collect();
            let last = entries.last().expect("position < width has an entry");
            cowork_schema::rollup::PerAssertion {
                index: position as u32,
                key: last
                    .key
                    .clone()
                    .unwrap_or_else(|| "(empty assertion)".into()),
                passes: entries.iter().filter(|entry| entry.pass).count() as u32,
                fails: entries.iter().filter(|entry| !entry.pass).count() as u32,
                sample_failure: entries
                    .iter()
                    .filter(|entry| !entry.pass)
                    .find_map(|entry| entry.message.clone()),
            }
        })
        .collect();
    let costs: Vec<f64> = folded.iter().filter_map(|run| run.cost_usd).collect();
    let tokens: Vec<f64> = folded.iter().filter_map(|run| run.tokens_total).collect();
    let mut models: Vec<String> = Vec::new();
    let mut skills: Vec<String> = Vec::new();
    for run in &folded {
        if !models.contains(&run.provenance_model) {
            models.push(run.provenance_model.clone());
        }
        if !skills.contains(&run.provenance_skill) {
            skills.push(run.provenance_skill.clone());
        }
    }
    let rollup = RepeatRollup {
        scenario: "s".into(),
        requested,
        completed,
        stopped_early: stop,
        passes,
        pass_rate: if completed == 0 {
            0.0
        } else {
            f64::from(passes) / f64::from(completed)
        },
        signal_histogram: histogram,
        per_assertion,
        total_cost_usd: (!costs.is_empty()).then(|| costs.iter().fold(0.0, |sum, cost| sum + cost)),
        total_tokens: (!tokens.is_empty()).then(|| tokens.iter().fold(0.0, |sum, n| sum + n)),
        non_deterministic_runs: folded.iter().filter(|run| run.non_deterministic).count() as u32,
        provenance: Provenance {
            models,
            skills,
            ablated_runs: folded.iter().filter(|run| run.ablated).count() as u32,
        },
    };
    (rollup, stop_index)
}

#[test]
fn shuffled_folds_match_the_sequential_reference() {
    let mut rng = Prng(0x5eed_0001);
    for trial in 0..600 {
        let requested = 1 + rng.below(12) as u32;
        let rules = StopRules {
            stop_on_diverge: rng.chance(40),
            max_budget_usd: rng
                .chance(50)
                .then(|| [0.05, 0.1, 0.25, 0.5, 1.0][rng.below(5) as usize]),
        };
        let outcomes: Vec<JobOutcome> = (0..requested).map(|_| random_outcome(&mut rng)).collect();
        let (expect, stop_index) = reference(requested, rules, &outcomes);

        let mut order: Vec<u32> = (0..requested).collect();
        rng.shuffle(&mut order);
        let mut fold = RepeatFold::new("s".into(), requested, rules);
        for &index in &order {
            let before = fold.is_final();
            let offer = fold.offer(index, outcomes[index as usize].clone());
            if before {
                assert_eq!(offer, Offer::Discarded, "trial {trial}");
            }
            if let Some(decided) = fold.decided() {
                assert_eq!(decided, stop_index, "trial {trial}");
            }
        }
        assert!(fold.is_final(), "trial {trial}");
        assert_eq!(fold.decided(), Some(stop_index), "trial {trial}");
        let rollup = fold.rollup().expect("final");
        assert_eq!(
            to_json(&rollup),
            to_json(&expect),
            "trial {trial} order {order:?}"
        );
        assert_eq!(rollup, expect, "trial {trial}");
        assert_eq!(fold.folded_indices(), 0..expect.completed);
        let mut discarded: Vec<u32> = fold.discarded().iter().map(|run| run.index).collect();
        discarded.sort_unstable();
        assert_eq!(
            discarded,
            ((stop_index + 1)..requested).collect::<Vec<_>>(),
            "trial {trial}"
        );
        // Redelivered outcomes never change anything.
        for index in 0..requested {
            assert_eq!(
                fold.offer(index, fail_run()),
                Offer::Duplicate,
                "trial {trial}"
            );
        }
        assert_eq!(fold.rollup(), Some(expect));
    }
}

/// A matrix + repeat batch with stops, overshoot and a cell error, as (cell, repeat, outcome).
fn mixed_batch_outcomes(rng: &mut Prng, n_cells: u32, repeat: u32) -> Vec<(u32, u32, JobOutcome)> {
    let mut outcomes = Vec::new();
    for cell in 0..n_cells {
        if cell == 2 {
            continue;
        }
        for index in 0..repeat {
            outcomes.push((cell, index, random_outcome(rng)));
        }
    }
    outcomes
}

fn mixed_shape(n_cells: u32, repeat: u32) -> BatchShape {
    let cells = (0..n_cells)
        .map(|cell| {
            let error = (cell == 2).then_some("basename mismatch");
            (axes("a", &format!("m{cell}")), error)
        })
        .collect();
    matrix_shape(
        Some(repeat),
        cells,
        n_cells + 1,
        StopRules {
            stop_on_diverge: true,
            max_budget_usd: Some(0.25),
        },
        Judging {
            min_pass_rate: 0.5,
            allow_budget_stop: true,
            allow_truncated_matrix: true,
        },
    )
}

#[test]
fn same_outcomes_in_two_orders_give_identical_rollup_docs() {
    let mut rng = Prng(42);
    let (n_cells, repeat) = (6, 8);
    let outcomes = mixed_batch_outcomes(&mut rng, n_cells, repeat);

    let mut in_order = reducer(mixed_shape(n_cells, repeat));
    for (cell, index, outcome) in outcomes.iter().cloned() {
        in_order.offer(cell, Some(index), outcome);
    }
    let mut shuffled_outcomes = outcomes.clone();
    rng.shuffle(&mut shuffled_outcomes);
    // Redeliveries of some jobs with different outcomes: the first one offered wins, so offer
    // the originals first.
    let mut shuffled = reducer(mixed_shape(n_cells, repeat));
    for (cell, index, outcome) in shuffled_outcomes {
        shuffled.offer(cell, Some(index), outcome);
    }
    for (cell, index, _) in outcomes.iter().take(10) {
        shuffled.offer(*cell, Some(*index), pass_cost(9.0));
    }

    let first = in_order.finish().expect("all outcomes offered");
    let second = shuffled.finish().expect("all outcomes offered");
    let first_doc = serde_json::to_vec(&first.to_rollup_doc("run")).expect("doc serializes");
    let second_doc = serde_json::to_vec(&second.to_rollup_doc("run")).expect("doc serializes");
    assert_eq!(
        String::from_utf8_lossy(&first_doc),
        String::from_utf8_lossy(&second_doc)
    );
    assert_eq!(first, second);
    // The document names what makes `ok` re-derivable and nothing about timing or workers.
    let doc: Value = serde_json::from_slice(&first_doc).expect("doc is JSON");
    let fleet_keys: Vec<&str> = doc["fleet"]
        .as_object()
        .expect("fleet is an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        fleet_keys,
        [
            "minPassRate",
            "allowBudgetStop",
            "allowTruncatedMatrix",
            "stopOnDiverge",
            "maxBudgetUsd",
            "foldOrder",
            "resultsOrder",
            "simulatedRuns",
            "budgetTelemetryMissing"
        ]
    );
    assert_eq!(doc["schemaVersion"], 1);
    assert_eq!(doc["fleet"]["foldOrder"], "index");
}

#[test]
fn in_order_folding_buffers_nothing() {
    let (n_cells, repeat) = (50u32, 200u32);
    let cells = (0..n_cells)
        .map(|cell| (axes("a", &format!("m{cell}")), None))
        .collect();
    let mut batch = reducer(matrix_shape(
        Some(repeat),
        cells,
        n_cells,
        NO_STOPS,
        judging(0.0),
    ));
    let template = done(result(
        true,
        json!({"signals": [["scan_unavailable", "warn"]], "cost": {"usd": 0.01},
               "assertions": [{"assertion": {"result": "success"}, "pass": true}]}),
    ));
    for cell in 0..n_cells {
        for index in 0..repeat {
            assert_eq!(
                batch.offer(cell, Some(index), template.clone()),
                Offer::Folded
            );
        }
    }
    let reduction = batch.finish().expect("every run folded");
    assert_eq!(reduction.results.len(), (n_cells * repeat) as usize);
    let matrix = reduction.matrix_repeat.expect("matrix + repeat");
    let rollup = matrix.cells[7].rollup.as_ref().expect("cell 7 ran");
    assert_eq!(
        rollup.signal_histogram["scan_unavailable"],
        u64::from(repeat)
    );
    assert_eq!(rollup.per_assertion[0].passes, repeat);
}

// ---------------------------------------------------------------------------------------------
// Human rendering.

fn check_fixed(value: f64, digits: usize, expect: &str) {
    assert_eq!(
        js_to_fixed(value, digits),
        expect,
        "{value} to {digits} digits"
    );
}

#[test]
fn to_fixed_rounds_like_javascript() {
    check_fixed(0.5, 0, "1");
    check_fixed(1.5, 0, "2");
    check_fixed(2.5, 0, "3");
    check_fixed(0.49999999999999994, 0, "0");
    check_fixed(66.66666666666666, 0, "67");
    check_fixed(100.0, 0, "100");
    check_fixed(0.0, 0, "0");
    check_fixed(99.5, 0, "100");
    check_fixed(28.499999999999996, 0, "28");
    check_fixed(1.005, 2, "1.00");
    check_fixed(0.125, 2, "0.13");
    check_fixed(0.03, 4, "0.0300");
    check_fixed(0.30000000000000004, 4, "0.3000");
    check_fixed(9.99995, 4, "10.0000");
    check_fixed(-0.5, 0, "-1");
    check_fixed(f64::NAN, 0, "NaN");
}

#[test]
fn repeat_rendering_follows_contract_4_6() {
    let failing = done(result(
        false,
        json!({
            "assertions": [{"assertion": {"tool_called": "Write"}, "pass": false, "message": "not called"}],
            "signals": [["assertion", "fail"], ["non_deterministic", "warn"]],
            "cost": {"usd": 0.0123},
            "usage": {"input_tokens": 10, "output_tokens": 5},
            "nonDeterministic": true,
            "ablated": true,
            "models": ["m"],
        }),
    ));
    let rollup = rollup_of(10, diverge(), vec![pass_cost(0.01), failing]);
    let text = render_repeat_human(&rollup, &DEFAULT_JUDGING);
    assert_eq!(
        text,
        "repeat \"s\": FAIL [MIXED ARMS: 1/2 ablated] — 1/2 passed (50%) (stopped early: diverged, 2/10 completed)\n\
         \x20 provenance: model=unknown,m  skill=unknown  ablated=1/2\n\
         \x20 signals: assertion×1, non_deterministic×1\n\
         \x20 assertion[0] (tool_called): 1 fail / 0 pass — e.g. \"not called\"\n\
         \x20 cost: $0.0223 total, 15 tokens total\n\
         \x20 ⚠ 1/2 run(s) had a non-deterministic (llm, external, human or first) decision; the pass rate measures those decisions too\n"
    );
    let clean = rollup_of(2, NO_STOPS, vec![pass_run(), pass_run()]);
    assert_eq!(
        render_repeat_human(&clean, &DEFAULT_JUDGING),
        "repeat \"s\": PASS — 2/2 passed (100%)\n  provenance: model=unknown  skill=unknown  ablated=0/2\n"
    );
}

#[test]
fn a_batch_budget_stop_keeps_the_folded_prefix_and_discards_the_rest() {
    let mut fold = RepeatFold::new("s".into(), 5, NO_STOPS);
    assert_eq!(fold.offer(0, pass_cost(0.1)), Offer::Folded);
    assert_eq!(fold.offer(1, fail_cost(0.1)), Offer::Folded);
    // Index 3 arrived before 2: buffered, and beyond the stop it is discarded.
    assert_eq!(fold.offer(3, pass_cost(0.1)), Offer::Buffered);
    assert!(fold.stop_for_batch_budget());
    assert!(
        !fold.stop_for_batch_budget(),
        "a final fold is not stopped twice"
    );
    assert_eq!(fold.decided(), Some(1));
    let rollup = fold.rollup().expect("final");
    assert_eq!(rollup.completed, 2);
    assert_eq!(rollup.passes, 1);
    assert_eq!(rollup.stopped_early, Some(StopReason::Budget));
    assert_eq!(fold.discarded().len(), 1);
    // A late outcome of a cancelled index is discarded, not folded.
    assert_eq!(fold.offer(2, pass_cost(0.1)), Offer::Discarded);

    // A unit stopped before its first run: zero runs, every job cancellable.
    let mut empty = RepeatFold::new("t".into(), 3, NO_STOPS);
    assert!(empty.stop_for_batch_budget());
    assert_eq!(empty.decided(), None);
    let rollup = empty.rollup().expect("final");
    assert_eq!(
        (rollup.completed, rollup.stopped_early),
        (0, Some(StopReason::Budget))
    );
}

/// An interrupted batch is closed with the runs it has: open repeat units keep what they
/// folded, without a stop reason, and the closed units are named.
#[test]
fn an_interrupted_batch_closes_with_the_runs_it_has() {
    let none = StopRules {
        stop_on_diverge: false,
        max_budget_usd: None,
    };
    let mut batch = reducer(files_shape(Some(3), &["a", "b", "c"], none, judging(1.0)));
    for index in 0..3 {
        batch.offer(0, Some(index), pass_run());
    }
    batch.offer(1, Some(0), pass_run());
    batch.offer(1, Some(2), fail_run());
    assert!(batch.finish().is_err());
    assert_eq!(batch.close_incomplete(), [1, 2]);
    let reduction = batch.finish().expect("closed units finish");
    let rollups = reduction.rollups.expect("a files repeat batch has rollups");
    let got: Vec<(u32, u32, u32, Option<StopReason>)> = rollups
        .iter()
        .map(|r| (r.requested, r.completed, r.passes, r.stopped_early))
        .collect();
    // `b` folds its first run; the third waited for the second, which never came.
    assert_eq!(got, [(3, 3, 3, None), (3, 1, 1, None), (3, 0, 0, None)]);
    assert_eq!(
        reduction.results,
        [(0, Some(0)), (0, Some(1)), (0, Some(2)), (1, Some(0))]
    );
    assert_eq!(reduction.discarded.len(), 1);
    // Closing again changes nothing.
    assert!(batch.close_incomplete().is_empty());
}

#[test]
fn an_interrupted_plain_batch_closes_its_missing_jobs() {
    let none = StopRules {
        stop_on_diverge: false,
        max_budget_usd: None,
    };
    let cells = vec![
        (CellAxes::default(), None),
        (
            CellAxes {
                model: Some("m".to_owned()),
                ..CellAxes::default()
            },
            None,
        ),
    ];
    let mut matrix = reducer(matrix_shape(None, cells, 2, none, judging(1.0)));
    matrix.offer(1, None, pass_run());
    assert_eq!(matrix.close_incomplete(), [0]);
    let reduction = matrix.finish().expect("closed");
    let cells = reduction.matrix.expect("a plain matrix").cells;
    assert!(
        cells[0]
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("never ran"))
    );
    assert!(cells[1].pass && !reduction.ok);

    let mut files = reducer(files_shape(None, &["a", "b", "c"], none, judging(1.0)));
    files.offer(1, None, pass_run());
    assert_eq!(files.close_incomplete(), [0, 2]);
    let reduction = files.finish().expect("closed");
    assert_eq!(reduction.results, [(1, None)]);
}
