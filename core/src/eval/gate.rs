//! The exit code of `cowork eval`: which overall verdicts fail the gate (`--fail-on`), and the
//! separate exit when no pair of runs completed in both arms, so that a CI gate never reads
//! "nothing ran" as a pass.

use cowork_schema::eval::{EvalReport, EvalVerdict};

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
    let fails = match (gate, report.overall.verdict) {
        (EvalGate::Never, _) | (_, EvalVerdict::NoDetectableDifference) => false,
        (EvalGate::BWorse, verdict) => verdict == EvalVerdict::BWorse,
        (EvalGate::AnyDifference, _) => true,
    };
    if fails { EXIT_B_WORSE } else { 0 }
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
