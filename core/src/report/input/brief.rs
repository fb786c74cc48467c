//! What every report keeps of each stored run ([`RunBrief`]): its state and the few numbers the
//! aggregates read, packed so that a batch of a million runs is summarized in flat memory.

use cowork_schema::ids::UnitRef;

use super::result::{
    duration_ms, failing_assertions, non_assertion_signals, run_failure_lines, run_passes,
};
use super::run::{RunState, StoredRun, anchor_of, job_path};

/// What every report keeps of each stored run: its state and the few numbers the aggregates
/// read, 40 bytes for a clean run, so that a batch of a million runs is summarized in flat
/// memory. The whole result is kept only for the runs the page details
/// ([`ReportInput::runs`](super::ReportInput::runs)). The fields are packed (flags in a byte, absent numbers as NaN, the
/// rare facts behind one box) and read through the methods below: at a million runs each
/// byte here is a megabyte of the report's peak.
#[derive(Clone, Debug, PartialEq)]
pub struct RunBrief {
    pub unit: UnitRef,
    /// The repeat index plus one; `None` without `--repeat`.
    repeat: Option<std::num::NonZeroU32>,
    /// [`BRIEF_DISCARDED`], [`BRIEF_COMPLETED`], [`BRIEF_PASS`], [`BRIEF_SIMULATED`].
    flags: u8,
    /// `durationMs` of the result; NaN when it has none (JSON has no NaN).
    duration_ms: f64,
    /// `cost.usd` of the result; NaN when it has none.
    cost_usd: f64,
    /// What failed or warned and what a plain cell shows; `None` for a clean run with a repeat
    /// index (most runs of a sweep).
    rare: Option<Box<RareRunFacts>>,
}

/// Listed in the envelope's `fleet.discarded` (see [`StoredRun::discarded`]).
const BRIEF_DISCARDED: u8 = 1;
/// The run produced a result.
const BRIEF_COMPLETED: u8 = 2;
/// `verdict.pass` as persisted (never without a result).
const BRIEF_PASS: u8 = 4;
/// The result says `simulated: true`.
const BRIEF_SIMULATED: u8 = 8;

/// The facts of a run few runs have: findings (a failing or warning run) and what a plain
/// unit's only run shows.
#[derive(Clone, Debug, PartialEq)]
struct RareRunFacts {
    findings: Option<RunFindings>,
    single: Option<SingleRunFacts>,
}

/// The failures and warnings of one run, as the failure reasons and JUnit bodies show them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunFindings {
    /// Failing `assertions[]` entries: (key, message).
    pub assertions: Vec<(String, String)>,
    /// Verdict signals other than `assertion`: (code, fail severity, message).
    pub signals: Vec<(String, bool, String)>,
    /// The run's failure lines ([`run_failure_lines`]).
    pub failure_lines: Vec<String>,
}

/// What a plain (unrepeated) unit shows of its one run.
#[derive(Clone, Debug, PartialEq)]
pub struct SingleRunFacts {
    pub tokens: Option<f64>,
    pub model: String,
    pub skill: String,
}

impl RunBrief {
    /// The brief of a stored run.
    pub fn of(run: &StoredRun) -> Self {
        let result = &run.result;
        let findings = RunFindings {
            assertions: failing_assertions(result),
            signals: non_assertion_signals(result),
            failure_lines: run_failure_lines(result),
        };
        let clean = findings.assertions.is_empty()
            && findings.signals.is_empty()
            && findings.failure_lines.is_empty();
        let findings = (!clean).then_some(findings);
        let single = run.repeat_index.is_none().then(|| SingleRunFacts {
            tokens: cowork_schema::run_result::tokens_total(result),
            model: cowork_schema::run_result::provenance_model(result),
            skill: cowork_schema::run_result::provenance_skill(result).to_owned(),
        });
        let flag = |set: bool, flag: u8| if set { flag } else { 0 };
        Self {
            unit: run.unit,
            repeat: run
                .repeat_index
                .and_then(|index| std::num::NonZeroU32::new(index.saturating_add(1))),
            flags: flag(run.discarded, BRIEF_DISCARDED)
                | flag(run.is_completed(), BRIEF_COMPLETED)
                | flag(run_passes(result), BRIEF_PASS)
                | flag(
                    cowork_schema::run_result::is_simulated(result),
                    BRIEF_SIMULATED,
                ),
            duration_ms: duration_ms(result).unwrap_or(f64::NAN),
            cost_usd: cowork_schema::run_result::cost_usd(result).unwrap_or(f64::NAN),
            rare: (findings.is_some() || single.is_some())
                .then(|| Box::new(RareRunFacts { findings, single })),
        }
    }

    /// The run's repeat index; `None` without `--repeat`.
    pub fn repeat_index(&self) -> Option<u32> {
        self.repeat.map(|plus_one| plus_one.get() - 1)
    }

    /// Listed in the envelope's `fleet.discarded` (see [`StoredRun::discarded`]).
    pub fn discarded(&self) -> bool {
        self.flags & BRIEF_DISCARDED != 0
    }

    /// The run produced a result.
    pub fn completed(&self) -> bool {
        self.flags & BRIEF_COMPLETED != 0
    }

    /// `verdict.pass` as persisted (`false` without a result).
    pub fn pass(&self) -> bool {
        self.flags & BRIEF_PASS != 0
    }

    /// The result says `simulated: true`.
    pub fn simulated(&self) -> bool {
        self.flags & BRIEF_SIMULATED != 0
    }

    /// `durationMs` of the result.
    pub fn duration_ms(&self) -> Option<f64> {
        (!self.duration_ms.is_nan()).then_some(self.duration_ms)
    }

    /// `cost.usd` of the result.
    pub fn cost_usd(&self) -> Option<f64> {
        (!self.cost_usd.is_nan()).then_some(self.cost_usd)
    }

    /// What failed or warned; `None` for a clean run.
    pub fn findings(&self) -> Option<&RunFindings> {
        self.rare.as_ref()?.findings.as_ref()
    }

    /// Tokens and provenance of a run without a repeat index (its unit's only run), which a
    /// plain cell shows.
    pub fn single(&self) -> Option<&SingleRunFacts> {
        self.rare.as_ref()?.single.as_ref()
    }

    /// How the run ended, as its strip square shows it.
    pub fn state(&self) -> RunState {
        if self.discarded() {
            RunState::Discarded
        } else if !self.completed() {
            RunState::Error
        } else if self.pass() {
            RunState::Pass
        } else {
            RunState::Fail
        }
    }

    /// The job id's local part: `c0/r3`, or `f1` without repeat.
    pub fn job_path(&self) -> String {
        job_path(self.unit, self.repeat_index())
    }

    /// The anchor of the run's section in the HTML report: `run-c0-r3`.
    pub fn anchor(&self) -> String {
        anchor_of(&self.job_path())
    }
}

/// Puts briefs in (unit, repeat index) order, the order [`ReportInput::briefs`](super::ReportInput::briefs) promises and the
/// summary relies on to find a unit's runs without grouping them (a loader that reads jobs in
/// plan order has them so already, which the sort checks in one pass).
pub fn sort_briefs(briefs: &mut [RunBrief]) {
    briefs.sort_unstable_by_key(|brief| (brief.unit, brief.repeat_index()));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A million briefs are the report's floor: 40 MB at 40 bytes each. A field added here
    /// grows every big report by a megabyte per byte; this says so before a benchmark does.
    #[test]
    fn a_run_brief_is_forty_bytes() {
        assert_eq!(std::mem::size_of::<RunBrief>(), 40);
    }

    #[test]
    fn a_brief_reads_back_what_its_run_said() {
        let run =
            |repeat_index, result| StoredRun::completed(UnitRef::Cell(3), repeat_index, result);
        let clean = RunBrief::of(&run(
            Some(0),
            json!({"verdict": {"pass": true}, "durationMs": 1500.0, "cost": {"usd": 0.25}}),
        ));
        assert_eq!(clean.repeat_index(), Some(0));
        assert!(clean.pass() && clean.completed() && !clean.discarded() && !clean.simulated());
        assert_eq!(clean.duration_ms(), Some(1500.0));
        assert_eq!(clean.cost_usd(), Some(0.25));
        assert!(clean.findings().is_none() && clean.single().is_none());
        let bare = RunBrief::of(&run(None, json!({"simulated": true})));
        assert_eq!(bare.repeat_index(), None);
        assert!(!bare.pass() && bare.simulated());
        assert_eq!((bare.duration_ms(), bare.cost_usd()), (None, None));
        assert!(
            bare.single().is_some(),
            "a plain run keeps what its cell shows"
        );
    }
}
