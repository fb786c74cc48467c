//! The exit code of `cowork eval`: which overall verdicts fail the gate (`--fail-on`), and the
//! separate exit when no pair of runs completed in both arms, so that a CI gate never reads
//! "nothing ran" as a pass.

use cowork_schema::eval::{EvalDocument, EvalReport, EvalVerdict};

/// Exit code of `cowork eval` when the gate fails (by default: the overall verdict is "B worse").
pub const EXIT_B_WORSE: i32 = 1;

/// Exit code of `cowork eval` when no pair of runs completed in both arms: there is nothing to
/// compare, and a CI gate must not read that as a pass.
pub const EXIT_NOTHING_TO_COMPARE: i32 = 2;

/// Which overall verdicts make `cowork eval` exit 1 (`--fail-on`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EvalGate {
    /// Never: the eval exits 0 whatever the verdict (it still exits 2 with nothing to compare).
    Never,
    /// "B worse" (the default).
    #[default]
    BWorse,
    /// Any detectable difference, better or worse: B must behave like A.
    AnyDifference,
}

/// The exit code of an eval: [`EXIT_NOTHING_TO_COMPARE`] when no pair completed, else
/// [`EXIT_B_WORSE`] when the overall verdict fails the `gate`, else 0. Per-scenario verdicts do
/// not count: they are not corrected for multiple comparisons.
pub fn eval_exit_code(report: &EvalReport, gate: EvalGate) -> i32 {
    if report.overall.pairs == 0 {
        return EXIT_NOTHING_TO_COMPARE;
    }
    if gate_fails(gate, report.overall.verdict) {
        EXIT_B_WORSE
    } else {
        0
    }
}

/// Whether `verdict` fails the `gate`.
fn gate_fails(gate: EvalGate, verdict: EvalVerdict) -> bool {
    match (gate, verdict) {
        (EvalGate::Never, _) | (_, EvalVerdict::NoDetectableDifference) => false,
        (EvalGate::BWorse, verdict) => verdict == EvalVerdict::BWorse,
        (EvalGate::AnyDifference, _) => true,
    }
}

/// The exit code of an eval document: [`eval_exit_code`] of its report in the two-arm form;
/// with several arms, [`EXIT_NOTHING_TO_COMPARE`] when some candidate has no complete pair
/// with the control, else [`EXIT_B_WORSE`] when any candidate's Holm-adjusted verdict fails
/// the `gate`, else 0.
pub fn document_exit_code(document: &EvalDocument, gate: EvalGate) -> i32 {
    if document.comparisons.is_empty() {
        return eval_exit_code(&document.report, gate);
    }
    if document
        .comparisons
        .iter()
        .any(|comparison| comparison.report.overall.pairs == 0)
    {
        return EXIT_NOTHING_TO_COMPARE;
    }
    let fails = document
        .comparisons
        .iter()
        .any(|comparison| gate_fails(gate, comparison.verdict));
    if fails { EXIT_B_WORSE } else { 0 }
}

/// The verdict of an eval document in words: [`verdict_words`] in the two-arm form; with
/// several arms, each candidate that differs from the control (`v2 better than base, v3 worse
/// than base`), or `no detectable difference from base`.
pub fn document_verdict_words(document: &EvalDocument) -> String {
    let Some(first) = document.comparisons.first() else {
        return verdict_words(&document.report).to_owned();
    };
    if document
        .comparisons
        .iter()
        .any(|comparison| comparison.report.overall.pairs == 0)
    {
        return "nothing to compare".to_owned();
    }
    let control = &first.control.name;
    let differing: Vec<String> = document
        .comparisons
        .iter()
        .filter(|comparison| comparison.verdict != EvalVerdict::NoDetectableDifference)
        .map(|comparison| {
            format!(
                "{} {} than {control}",
                comparison.candidate.name,
                comparison.verdict.candidate_word()
            )
        })
        .collect();
    if differing.is_empty() {
        format!("no detectable difference from {control}")
    } else {
        differing.join(", ")
    }
}

/// The overall verdict in words, as every view of an eval batch names it: `nothing to compare`
/// when no pair completed, else the verdict's label (`no detectable difference`, `B worse`,
/// `B better`).
pub fn verdict_words(report: &EvalReport) -> &'static str {
    if report.overall.pairs == 0 {
        "nothing to compare"
    } else {
        report.overall.verdict.label()
    }
}

/// Why there is nothing to compare, when no pair of runs completed in both arms; `None` when
/// some pair did.
pub fn nothing_to_compare(report: &EvalReport) -> Option<String> {
    let overall = &report.overall;
    if overall.pairs > 0 {
        return None;
    }
    let [arm_a, arm_b] = &overall.arms;
    Some(format!(
        "nothing to compare: no run completed in both arms ({} pairs left out; arm A completed \
         {} of {} runs, arm B {} of {}: the others errored or stopped at an unanswered gate)",
        overall.excluded_pairs, arm_a.completed, arm_a.runs, arm_b.completed, arm_b.runs
    ))
}
