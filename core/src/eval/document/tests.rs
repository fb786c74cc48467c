use cowork_schema::batch::{BatchMode, EvalSpec, ExecutorKind};
use cowork_schema::eval::{EvalReport, EvalVerdict};

use super::*;
use crate::eval::gate::{EXIT_NOTHING_TO_COMPARE, EvalGate, eval_exit_code, nothing_to_compare};
use crate::plan::eval::tests::{batch, eval_plan, flags, run_result};
use crate::plan::{PlanInput, plan_units};

#[test]
fn pairs_join_the_arms_by_scenario_and_repeat_index() {
    let plan = eval_plan(&["scenarios/s0.yaml"], 2, None);
    // Unit 1 (arm B) repeat 1 errored: it is absent from the folded runs.
    let folded = [(0, Some(0)), (0, Some(1)), (1, Some(0))];
    let results = [
        run_result(true, 0.5),
        run_result(false, 0.25),
        run_result(false, 1.0),
    ];
    let pairs = paired_outcomes(&plan, &folded, &results).expect("results pair");
    let done = |pass, cost| ArmOutcome {
        pass,
        completed: true,
        cost_usd: Some(cost),
    };
    assert_eq!(
        pairs,
        [
            PairedOutcome {
                scenario: "s0".to_owned(),
                repeat_index: 0,
                a: done(true, 0.5),
                b: done(false, 1.0),
            },
            PairedOutcome {
                scenario: "s0".to_owned(),
                repeat_index: 1,
                a: done(false, 0.25),
                b: ArmOutcome {
                    pass: false,
                    completed: false,
                    cost_usd: None,
                },
            },
        ]
    );
}

fn settings() -> EvalSpec {
    EvalSpec {
        arms: ["skills/v1/k".to_owned(), "skills/v2/k".to_owned()],
        model: Some("pinned-model".to_owned()),
        alpha: 0.05,
        seed: 7,
        resamples: 200,
        mde: None,
    }
}

#[test]
fn the_eval_document_labels_the_arms_and_reads_back_as_stored() {
    let plan = eval_plan(&["scenarios/s0.yaml"], 2, Some("pinned-model"));
    // A passes both runs, B fails both: two discordant pairs, too few for significance.
    let folded = [(0, Some(0)), (0, Some(1)), (1, Some(0)), (1, Some(1))];
    let results = [
        run_result(true, 0.5),
        run_result(true, 0.5),
        run_result(false, 0.25),
        run_result(false, 0.25),
    ];
    let sources = ArmSources {
        a: "skills/v1/k".to_owned(),
        b: "skills/v2/k".to_owned(),
    };
    let settings = settings();
    let document = eval_document(&EvalDocumentInput {
        plan: &plan,
        settings: &settings,
        sources: &sources,
        folded: &folded,
        results: &results,
        simulated_runs: 0,
    })
    .expect("an eval plan's results give a report");
    assert_eq!(document.batch_id, "b1");
    assert_eq!(document.executor, "sim");
    assert!(
        document.simulated,
        "the sim executor always marks the report simulated"
    );
    assert_eq!(document.model.as_deref(), Some("pinned-model"));
    assert_eq!(document.runs_per_arm, 2);
    assert_eq!(document.report.alpha, 0.05);
    assert_eq!(document.report.confidence_level, 0.95);
    let overall = &document.report.overall;
    assert_eq!(overall.discordant.a_pass_b_fail, 2);
    assert_eq!(overall.arms[0].source, "skills/v1/k");
    assert_eq!(overall.arms[1].source, "skills/v2/k");
    assert_eq!(overall.verdict, EvalVerdict::NoDetectableDifference);
    assert_eq!(eval_exit_code(&document.report, EvalGate::BWorse), 0);
    assert_eq!(nothing_to_compare(&document.report), None);

    let stored = document.to_stored_json().expect("the document serializes");
    assert!(stored.ends_with(b"}\n"));
    let read_back: EvalDocument = serde_json::from_slice(&stored).expect("eval.json reads back");
    assert_eq!(read_back, document);
    assert_eq!(
        eval_document_key(&plan.batch_id),
        "batches/b1/eval.json".to_owned()
    );
}

#[test]
fn only_an_eval_plan_has_an_eval_document() {
    let flags = flags(2);
    let layout = plan_units(&batch(&["scenarios/s0.yaml"]), &flags, BatchMode::Run)
        .expect("test batch plans");
    let plan = Plan::new(
        layout,
        PlanInput {
            batch_id: BatchId::new("b1").expect("valid batch id"),
            flags,
            mode: BatchMode::Run,
            executor: ExecutorKind::Sim,
            sim: None,
            bundle_sha256: "ab".repeat(32),
        },
    );
    let error = eval_document(&EvalDocumentInput {
        plan: &plan,
        settings: &settings(),
        sources: &ArmSources {
            a: "a".to_owned(),
            b: "b".to_owned(),
        },
        folded: &[],
        results: &[],
        simulated_runs: 0,
    })
    .expect_err("a run batch is no eval");
    assert_eq!(error.to_string(), "batch b1 is a run batch, not an eval");
}

#[test]
fn pairing_refuses_mismatched_results() {
    let plan = eval_plan(&["scenarios/s0.yaml"], 2, None);
    assert_eq!(
        paired_outcomes(&plan, &[(0, Some(0))], &[]),
        Err(EvalPairingError::ResultCount {
            folded: 1,
            results: 0
        })
    );
}

/// A report whose overall comparison has the given pairs and verdict.
fn report_with(pairs: u64, verdict: EvalVerdict) -> EvalReport {
    let sources = ArmSources {
        a: "a".to_owned(),
        b: "b".to_owned(),
    };
    let mut report = eval_report(
        &sources,
        &[],
        &EvalOptions {
            alpha: 0.05,
            mde: None,
        },
    )
    .expect("an empty report is valid");
    report.overall.pairs = pairs;
    report.overall.verdict = verdict;
    report
}

#[test]
fn the_exit_code_follows_the_gate_and_nothing_to_compare_is_an_error() {
    use EvalVerdict::{BBetter, BWorse, NoDetectableDifference};
    let cases = [
        (EvalGate::BWorse, BWorse, 1),
        (EvalGate::BWorse, BBetter, 0),
        (EvalGate::BWorse, NoDetectableDifference, 0),
        (EvalGate::AnyDifference, BWorse, 1),
        (EvalGate::AnyDifference, BBetter, 1),
        (EvalGate::AnyDifference, NoDetectableDifference, 0),
        (EvalGate::Never, BWorse, 0),
        (EvalGate::Never, BBetter, 0),
    ];
    for (gate, verdict, expected) in cases {
        assert_eq!(
            eval_exit_code(&report_with(10, verdict), gate),
            expected,
            "{gate:?} {verdict:?}"
        );
    }
    for gate in [EvalGate::Never, EvalGate::BWorse, EvalGate::AnyDifference] {
        let empty = report_with(0, NoDetectableDifference);
        assert_eq!(eval_exit_code(&empty, gate), EXIT_NOTHING_TO_COMPARE);
        let message = nothing_to_compare(&empty).expect("no pair completed");
        assert!(message.starts_with("nothing to compare: "), "{message}");
    }
}
