//! Reports people read: one stored batch rendered as a self-contained HTML page, JUnit XML, a
//! Markdown summary or a compact JSON summary (`cowork report`, `GET /v1/batches/{id}/report`).
//!
//! Modules, in reading order:
//! - this module: [`ReportInput`] (every stored run in brief, [`RunBrief`], and the runs the
//!   page details with their outcome, artifacts and job record), the eval hook [`EvalSection`], and [`summarize`], the pure step every renderer
//!   shares (units with pass rates, flakiness, cost and duration, each unit's runs in index
//!   order, failure reasons grouped by assertion key and signal code, stop reasons, discarded
//!   runs and their cost, wall time); plus [`render_json`].
//! - [`html`]: [`render_html`] (one file, inline CSS, no script, no URL; a section per unit
//!   and per run, reachable from the heatmap, with links to the run's stored artifacts) and the
//!   coordinator's batch list page.
//! - [`junit`]: [`render_junit`], one `<testsuite>` per batch, one `<testcase>` per unit.
//! - [`live`]: the live page of a running batch, a static shell and its script (`live.js`).
//! - [`markdown`]: [`render_markdown`], a CI job summary or PR comment.
//!
//! Reading a stored batch into a [`ReportInput`] is the coordinator's `report` module.
//!
//! Every renderer is a pure function of its input: no IO, no clock, and the same input gives the
//! same bytes, so tests compare exact fragments. Simulated runs are never presented as real
//! (decisions.md#executors): each format says so at the top when any run of the batch was
//! simulated.
//!
//! Rollups are the source of truth for counts and verdicts (harness-behaviour.md#repeat-rollup,
//! harness-behaviour.md#matrix); results are read only for what rollups do not hold: durations,
//! per-run failure messages and signal messages. A run counts as folded when the rollup folded its
//! repeat index (index order, harness-behaviour.md#index-order-reducer) and the envelope does not
//! list it as discarded.
//!
//! A batch that never finished (interrupted, cancelled) has no stored rollup; its loader judges
//! the runs that finished with the same reducer and marks the report [`Incomplete`], naming
//! the jobs that never ran.

pub mod html;
pub mod junit;
pub mod live;
pub mod markdown;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::OnceLock;

use cowork_schema::batch::{PlanKindName, StoredBatch};
use cowork_schema::envelope::Envelope;
use cowork_schema::ids::UnitRef;
use cowork_schema::job::CellAxes;
use cowork_schema::json_number;
use cowork_schema::rollup::{MatrixCellResult, RepeatRollup, RollupDoc, StopReason};
use cowork_schema::run_result::{EMPTY_ASSERTION_KEY, assertion_key};
use indexmap::IndexMap;
use serde_json::{Map, Value, json};

pub use html::{
    ArtifactLinks, BatchListLive, HtmlOptions, render_batch_list, render_batch_list_live,
    render_html,
};
pub use junit::render_junit;
pub use live::{LIVE_PAGE_SCRIPT, render_live_page};
pub use markdown::render_markdown;

use crate::reduce::{Judging, arm_label, js_to_fixed, rollup_passes};

/// Everything a report is rendered from: the stored documents of one decided batch.
#[derive(Clone, Debug)]
pub struct ReportInput {
    /// `batches/<id>/spec.json`: the submitted spec and the planner's layout.
    pub stored: StoredBatch,
    /// `batches/<id>/rollup.json`: rollups and verdict.
    pub rollup: RollupDoc,
    /// `batches/<id>/envelope.json`: harness version, `error` and the `fleet` key.
    pub envelope: Envelope,
    /// The stored runs the report details (a `result.json`, or a job record whose outcome was
    /// an error), in (unit, repeat index) order: every stored run of a batch of up to
    /// [`MAX_RUN_SECTIONS`] runs; above that, the ones [`DetailedRuns`] picks. The rest are
    /// known only by their [`RunBrief`].
    pub runs: Vec<StoredRun>,
    /// Every stored run of the batch in brief, in (unit, repeat index) order. Left unset, it is
    /// made from `runs` (which must then hold every stored run); a loader of a big batch sets
    /// it, so that nothing holds every result.
    pub briefs: OnceLock<Vec<RunBrief>>,
    /// Eval A/B statistics, when the batch is an eval and they were computed.
    pub eval: Option<EvalSection>,
    /// Wall time of the batch, from first admission to decision (`stats.json`, or the
    /// envelope's `fleet` key); `None` when neither recorded it.
    pub wall_ms: Option<u64>,
    /// Set when the batch never finished: the rollup judges only the runs that did.
    pub incomplete: Option<Incomplete>,
}

/// What an unfinished batch is missing.
#[derive(Clone, Debug, PartialEq)]
pub struct Incomplete {
    /// Why the batch has no decided rollup, in words.
    pub reason: String,
    /// The jobs that never finished and that the verdicts needed, as `c<k>/r<i>` (the job ids'
    /// local parts), in unit and repeat order.
    pub never_ran: Vec<String>,
}

/// How a stored run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum RunOutcome {
    /// The harness produced a result (whatever its verdict).
    Completed,
    /// The run stopped at a question nobody answered (exit 2, `unanswered`).
    Unanswered { message: String },
    /// The run ended without a result: a harness error, a timeout, a crash, an infrastructure
    /// failure (`category` as stored: `runtime`, `timeout`, `infra_after_spend`, …).
    Error { category: String, message: String },
}

/// The job record of a stored run: which attempt made it, where and how long it took.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    pub attempt: u32,
    pub generation: u32,
    pub worker_id: String,
    pub harness_version: Option<String>,
    pub exit_code: Option<i32>,
    /// Wall-clock time the executor took, in milliseconds.
    pub run_ms: u64,
}

/// One stored run of a job.
#[derive(Clone, Debug)]
pub struct StoredRun {
    pub unit: UnitRef,
    pub repeat_index: Option<u32>,
    /// The result as stored (key order kept); `null` when the run ended without one.
    pub result: Value,
    /// Listed in the envelope's `fleet.discarded`: stored, but left out of every rollup
    /// (overshoot after an early stop, harness-behaviour.md#safe-cancellation).
    pub discarded: bool,
    /// How the run ended.
    pub outcome: RunOutcome,
    /// Store keys of the attempt's stored files (`batches/<id>/jobs/…`), as its job record
    /// lists them (or as found beside a record of the older, bare shape), sorted.
    pub artifacts: Vec<String>,
    /// The job record, when the store holds one in the current shape.
    pub record: Option<RunRecord>,
}

impl StoredRun {
    /// A completed run with its result and nothing else known (no record, no artifact list).
    pub fn completed(unit: UnitRef, repeat_index: Option<u32>, result: Value) -> Self {
        Self {
            unit,
            repeat_index,
            result,
            discarded: false,
            outcome: RunOutcome::Completed,
            artifacts: Vec::new(),
            record: None,
        }
    }

    /// `true` when the run produced a result.
    pub fn is_completed(&self) -> bool {
        self.outcome == RunOutcome::Completed
    }

    /// The job id's local part: `c0/r3`, or `f1` without repeat.
    pub fn job_path(&self) -> String {
        job_path(self.unit, self.repeat_index)
    }

    /// The anchor of the run's section in the HTML report: `run-c0-r3`.
    pub fn anchor(&self) -> String {
        anchor_of(&self.job_path())
    }
}

/// Runs that get a section of their own in the HTML page (and the most runs a loader keeps
/// whole). Above this, failing and errored runs come first and the rest are only squares of
/// their strip: a page of a 100 000-job sweep must still open, and its loader must not hold
/// every result (16 KiB a run).
pub const MAX_RUN_SECTIONS: usize = 2000;

/// Runs detailed in a batch of more than [`MAX_RUN_SECTIONS`] runs: a run's section is about
/// 2 KB, so that the page of a sweep of any size stays within a few MB.
pub const SECTIONS_OF_A_BIG_BATCH: usize = 300;

/// Picks which of a batch's runs the report details, offered one by one in (unit, repeat
/// index) order: all of them up to [`MAX_RUN_SECTIONS`]; above, every run that did not pass
/// (up to [`SECTIONS_OF_A_BIG_BATCH`]), then passing ones, each in unit and index order. It holds at most twice
/// the limit, so a loader applies it as it streams a batch of any size.
#[derive(Debug)]
pub struct DetailedRuns<T> {
    not_passing: Vec<(usize, T)>,
    passing: Vec<(usize, T)>,
    offered: usize,
}

impl<T> Default for DetailedRuns<T> {
    fn default() -> Self {
        Self {
            not_passing: Vec::new(),
            passing: Vec::new(),
            offered: 0,
        }
    }
}

impl<T> DetailedRuns<T> {
    /// Offers the next run, in state `state`.
    pub fn offer(&mut self, state: RunState, run: T) {
        let bucket = if state == RunState::Pass {
            &mut self.passing
        } else {
            &mut self.not_passing
        };
        if bucket.len() < MAX_RUN_SECTIONS {
            bucket.push((self.offered, run));
        }
        self.offered += 1;
    }

    /// The runs picked, in the order they were offered.
    pub fn finish(self) -> Vec<T> {
        let limit = if self.offered > MAX_RUN_SECTIONS {
            SECTIONS_OF_A_BIG_BATCH
        } else {
            MAX_RUN_SECTIONS
        };
        let mut chosen = self.not_passing;
        chosen.truncate(limit);
        let room = limit.saturating_sub(chosen.len());
        chosen.extend(self.passing.into_iter().take(room));
        chosen.sort_unstable_by_key(|(position, _)| *position);
        chosen.into_iter().map(|(_, run)| run).collect()
    }
}

/// What every report keeps of each stored run: its state and the few numbers the aggregates
/// read, 40 bytes for a clean run, so that a batch of a million runs is summarized in flat
/// memory. The whole result is kept only for the runs the page details
/// ([`ReportInput::runs`]). The fields are packed (flags in a byte, absent numbers as NaN, the
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
                    result.get("simulated") == Some(&Value::Bool(true)),
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

impl ReportInput {
    /// Every stored run in brief (made from [`ReportInput::runs`] when the loader left them
    /// unset).
    pub fn run_briefs(&self) -> &[RunBrief] {
        self.briefs.get_or_init(|| {
            let mut briefs: Vec<RunBrief> = self.runs.iter().map(RunBrief::of).collect();
            sort_briefs(&mut briefs);
            briefs
        })
    }
}

/// Puts briefs in (unit, repeat index) order, the order [`ReportInput::briefs`] promises and the
/// summary relies on to find a unit's runs without grouping them (a loader that reads jobs in
/// plan order has them so already, which the sort checks in one pass).
pub fn sort_briefs(briefs: &mut [RunBrief]) {
    briefs.sort_unstable_by_key(|brief| (brief.unit, brief.repeat_index()));
}

fn job_path(unit: UnitRef, repeat_index: Option<u32>) -> String {
    match repeat_index {
        Some(index) => format!("{}/r{index}", unit_id(unit)),
        None => unit_id(unit),
    }
}

fn anchor_of(job_path: &str) -> String {
    format!("run-{}", job_path.replace('/', "-"))
}

// ---------------------------------------------------------------------------------------------
// Eval hook.
// ---------------------------------------------------------------------------------------------

/// EVAL HOOK: the A/B statistics of an eval batch, rendered as the report's lead section.
///
/// The report only renders these values; the statistics themselves (exact interval, exact
/// McNemar test, sensitivity, verdict) are computed elsewhere and converted into this plain
/// struct by the caller that builds the [`ReportInput`].
#[derive(Clone, Debug, PartialEq)]
pub struct EvalSection {
    /// Label of arm A's source (skill dir or plugin), as the user gave it.
    pub arm_a: String,
    /// Label of arm B's source.
    pub arm_b: String,
    /// Significance level of the verdicts (e.g. 0.05).
    pub alpha: f64,
    /// Confidence level of the intervals (e.g. 0.95).
    pub confidence: f64,
    /// How the verdict is decided, shown verbatim (the rule is ours, not upstream's).
    pub decision_rule: String,
    /// How the intervals are computed, shown verbatim.
    pub interval_method: String,
    /// What the overall p-value means, in one plain line.
    pub p_sentence: String,
    /// How small a difference the runs could detect, in one plain line; `None` for reports
    /// stored before these figures existed.
    pub sensitivity_sentence: Option<String>,
    /// One row per scenario, then the overall row.
    pub rows: Vec<EvalRow>,
}

/// One row of the eval table: a scenario, or the overall pool.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalRow {
    /// Scenario name, or `overall`.
    pub scope: String,
    pub arm_a: EvalArm,
    pub arm_b: EvalArm,
    /// pass rate(B) − pass rate(A) over the paired outcomes.
    pub diff: f64,
    /// Lower end of the interval of `diff`.
    pub ci_low: f64,
    /// Upper end of the interval of `diff`.
    pub ci_high: f64,
    /// Pairs where A passed and B failed (McNemar's b).
    pub a_only_passes: u64,
    /// Pairs where A failed and B passed (McNemar's c).
    pub b_only_passes: u64,
    /// Exact two-sided McNemar p-value.
    pub p_value: f64,
    /// `B better`, `B worse` or `no detectable difference`.
    pub verdict: String,
    /// Pairs left out because one side did not complete.
    pub excluded_pairs: u64,
    /// Complete pairs the row's statistics use.
    pub pairs: u64,
    /// The smallest difference the test could detect with these pairs; `None` when it could
    /// detect none (or the report predates the figure).
    pub min_detectable_diff: Option<f64>,
}

/// One arm's tally within an [`EvalRow`].
#[derive(Clone, Debug, PartialEq)]
pub struct EvalArm {
    pub passes: u64,
    pub completed: u64,
    pub pass_rate: f64,
    /// Sum of `cost.usd` over the arm's runs that had it.
    pub cost_usd: Option<f64>,
}

// ---------------------------------------------------------------------------------------------
// The summary every renderer shares.
// ---------------------------------------------------------------------------------------------

/// How a unit (scenario file or matrix cell) ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum UnitStatus {
    /// The unit's verdict passed.
    Passed,
    /// The unit's verdict failed (assertions, guards, pass rate or an early stop).
    Failed,
    /// The unit produced no run: a cell error, or the file a plain batch aborted at.
    Error(String),
    /// The unit was never run (a plain files batch stopped at an earlier file).
    NotRun,
    /// The batch ended before the unit was decided: a job it needed never ran. Its numbers
    /// cover the runs folded before that job.
    Incomplete,
}

impl UnitStatus {
    /// `pass`, `fail`, `error`, `not-run` or `incomplete`: CSS classes, `data-state` and JSON
    /// values.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            UnitStatus::Passed => "pass",
            UnitStatus::Failed => "fail",
            UnitStatus::Error(_) => "error",
            UnitStatus::NotRun => "not-run",
            UnitStatus::Incomplete => "incomplete",
        }
    }
}

/// How one run of a unit ended, as the per-cell strip shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Folded, and its verdict passed.
    Pass,
    /// Folded, and its verdict failed.
    Fail,
    /// Ended without a result (error, timeout, unanswered gate, infrastructure failure).
    Error,
    /// Finished after its unit was decided: stored, paid for, never folded.
    Discarded,
    /// Never ran (not admitted after an early stop, or the batch ended first).
    NotRun,
}

impl RunState {
    /// `pass`, `fail`, `error`, `discarded` or `not-run`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunState::Pass => "pass",
            RunState::Fail => "fail",
            RunState::Error => "error",
            RunState::Discarded => "discarded",
            RunState::NotRun => "not-run",
        }
    }

    /// The state of a stored run (as [`RunBrief::state`] gives it).
    pub fn of(run: &StoredRun) -> Self {
        if run.discarded {
            RunState::Discarded
        } else if !run.is_completed() {
            RunState::Error
        } else if run_passes(&run.result) {
            RunState::Pass
        } else {
            RunState::Fail
        }
    }
}

/// One scenario file or matrix cell, with what every format shows about it.
#[derive(Clone, Debug)]
pub(crate) struct UnitReport<'a> {
    pub(crate) index: u32,
    /// `c<k>` or `f<k>`: the unit part of its job ids.
    pub(crate) id: String,
    /// The rollup's `scenario`: the name, or `<name> [<axes label>]` for a cell.
    pub(crate) label: &'a str,
    pub(crate) scenario_name: &'a str,
    pub(crate) axes: Option<&'a CellAxes>,
    /// Runs asked for (N of `--repeat N`, else 1).
    pub(crate) requested: u32,
    /// The batch ran with `--repeat` (runs have repeat indices).
    pub(crate) repeated: bool,
    pub(crate) completed: u32,
    pub(crate) passes: u32,
    /// `passes / completed` as the rollup computed it; `None` when nothing completed.
    pub(crate) pass_rate: Option<f64>,
    pub(crate) status: UnitStatus,
    pub(crate) stopped_early: Option<StopReason>,
    /// The arm label of harness-behaviour.md#provenance (`""`, ` [ABLATED — control arm]`, ` [MIXED
    /// ARMS: …]`).
    pub(crate) arm_label: String,
    /// What the unit spent: `$0` for a replay, which re-judges recordings.
    pub(crate) cost_usd: Option<f64>,
    /// For a replay, what the recorded runs cost when they were recorded; `None` otherwise.
    pub(crate) recorded_cost_usd: Option<f64>,
    pub(crate) tokens: Option<f64>,
    /// Sum of `durationMs` over the folded runs that have it.
    pub(crate) duration_ms: Option<f64>,
    pub(crate) models: Vec<String>,
    pub(crate) skills: Vec<String>,
    /// Which of `all_runs` were folded ([`UnitReport::runs`]).
    pub(crate) folded: Folded,
    /// Every stored run of the unit (folded, discarded, ended without a result), in repeat
    /// order: a slice of [`ReportInput::briefs`], so that the summary adds nothing per run.
    pub(crate) all_runs: &'a [RunBrief],
    /// The unit's runs the report details (all of them in a small batch), in repeat order.
    pub(crate) detailed: Vec<&'a StoredRun>,
}

/// Which of a unit's stored runs its verdict folded: of the runs that completed and were not
/// discarded, none, the first (a plain unit's one run), or those below the rollup's
/// `completed` (the reducer folds in index order without gaps,
/// harness-behaviour.md#index-order-reducer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Folded {
    None,
    First,
    RepeatsBelow(u32),
}

impl<'a> UnitReport<'a> {
    /// The folded runs, in repeat order.
    pub(crate) fn runs(&self) -> impl Iterator<Item = &'a RunBrief> + use<'a> {
        let folded = self.folded;
        let limit = match folded {
            Folded::None => 0,
            Folded::First => 1,
            Folded::RepeatsBelow(_) => usize::MAX,
        };
        self.all_runs
            .iter()
            .filter(|run| !run.discarded() && run.completed())
            .filter(move |run| match folded {
                Folded::RepeatsBelow(completed) => {
                    run.repeat_index().is_some_and(|index| index < completed)
                }
                Folded::None | Folded::First => true,
            })
            .take(limit)
    }

    /// A unit with nothing folded yet: `NotRun`, no numbers.
    fn empty(
        unit: &'a cowork_schema::batch::UnitSummary,
        repeat: Option<u32>,
        all_runs: &'a [RunBrief],
        detailed: Vec<&'a StoredRun>,
    ) -> Self {
        UnitReport {
            index: unit.unit.index(),
            id: unit_id(unit.unit),
            label: &unit.label,
            scenario_name: &unit.scenario_name,
            axes: unit.axes.as_ref(),
            requested: repeat.unwrap_or(1),
            repeated: repeat.is_some(),
            completed: 0,
            passes: 0,
            pass_rate: None,
            status: UnitStatus::NotRun,
            stopped_early: None,
            arm_label: String::new(),
            cost_usd: None,
            recorded_cost_usd: None,
            tokens: None,
            duration_ms: None,
            models: Vec::new(),
            skills: Vec::new(),
            folded: Folded::None,
            all_runs,
            detailed,
        }
    }
}

impl UnitReport<'_> {
    /// Runs that both passed and failed: the unit is flaky (`crate::trend::flaky`, the one
    /// definition every view shares).
    pub(crate) fn flaky(&self) -> bool {
        crate::trend::flaky(self.passes, self.completed)
    }

    /// Mean duration of a folded run, in milliseconds.
    pub(crate) fn mean_duration_ms(&self) -> Option<f64> {
        let n_timed = self
            .runs()
            .filter(|run| run.duration_ms().is_some())
            .count();
        self.duration_ms
            .filter(|_| n_timed > 0)
            .map(|total| total / n_timed as f64)
    }

    /// `PASS`, `FAIL`, `ERROR`, `NOT RUN` or `INCOMPLETE`, with the arm label.
    pub(crate) fn verdict_text(&self) -> String {
        let word = match self.status {
            UnitStatus::Passed => "PASS",
            UnitStatus::Failed => "FAIL",
            UnitStatus::Error(_) => "ERROR",
            UnitStatus::NotRun => "NOT RUN",
            UnitStatus::Incomplete => "INCOMPLETE",
        };
        format!("{word}{}", self.arm_label)
    }
}

impl<'a> UnitReport<'a> {
    /// The state of each run the unit asked for, in index order: its repeat index (`None`
    /// without `--repeat`), its state and its stored run, if any.
    pub(crate) fn strip(&self) -> Vec<(Option<u32>, RunState, Option<&'a RunBrief>)> {
        let indices: Vec<Option<u32>> = if self.repeated {
            (0..self.requested).map(Some).collect()
        } else {
            vec![None]
        };
        let by_index: HashMap<Option<u32>, &'a RunBrief> = self
            .all_runs
            .iter()
            .map(|run| (run.repeat_index(), run))
            .collect();
        indices
            .into_iter()
            .map(|index| {
                let run = by_index.get(&index).copied();
                (index, run.map_or(RunState::NotRun, RunBrief::state), run)
            })
            .collect()
    }
}

/// Whether a failure reason is a failing assertion or a verdict signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum ReasonKind {
    /// A failing `assertions[]` entry, grouped by its first key.
    Assertion,
    /// A verdict signal other than `assertion`, grouped by its code.
    Signal,
}

impl ReasonKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReasonKind::Assertion => "assertion",
            ReasonKind::Signal => "signal",
        }
    }
}

/// Failures that share an assertion key or a signal code, over every folded run.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FailureReason {
    pub(crate) kind: ReasonKind,
    /// The assertion's first key, or the signal's code.
    pub(crate) key: String,
    /// `true` for assertions and fail-severity signals; warnings are listed but do not fail.
    pub(crate) fail: bool,
    /// Entries counted (a run can hold the same signal twice).
    pub(crate) occurrences: u64,
    /// Runs holding at least one entry.
    pub(crate) runs: u64,
    /// Ids (`c<k>`/`f<k>`) of the units whose runs hold an entry, in unit order.
    pub(crate) units: Vec<String>,
    /// Distinct messages with their counts, most frequent first (first seen on ties).
    pub(crate) messages: Vec<(String, u64)>,
}

/// A stop, truncation, discard or error worth a line under "Stop reasons".
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StopNote {
    /// The unit id, or `batch` for batch-level notes.
    pub(crate) scope: String,
    pub(crate) text: String,
}

/// The shared, format-independent reading of a [`ReportInput`].
#[derive(Clone, Debug)]
pub(crate) struct Summary<'a> {
    pub(crate) input: &'a ReportInput,
    pub(crate) batch_id: &'a str,
    pub(crate) kind: PlanKindName,
    pub(crate) units: Vec<UnitReport<'a>>,
    /// Matrix cells cut by `--max-cells`: (first index, count); they have no axes on record.
    pub(crate) truncated_cells: Option<(u32, u32)>,
    pub(crate) reasons: Vec<FailureReason>,
    pub(crate) stops: Vec<StopNote>,
    /// Folded runs made by the `sim` executor.
    pub(crate) simulated_runs: u64,
    /// `true` when anything says the batch was simulated: its executor, the `fleet` key, a run.
    pub(crate) simulated: bool,
    pub(crate) judging: Judging,
    pub(crate) total_runs: u64,
    pub(crate) total_passes: u64,
    /// What the folded runs spent: `$0` for a replay.
    pub(crate) total_cost_usd: Option<f64>,
    /// For a replay, what its folded runs cost when they were recorded; `None` otherwise.
    pub(crate) recorded_cost_usd: Option<f64>,
    pub(crate) total_duration_ms: Option<f64>,
    /// Runs that finished after their unit was decided, and what they cost.
    pub(crate) discarded: Discarded,
    /// Every stored run (folded, discarded, ended without a result).
    pub(crate) stored_runs: u64,
    /// Summed `durationMs` of every stored run, and how many had one.
    pub(crate) summed_run_ms: (Option<f64>, u64),
}

/// Discarded runs: finished (and paid for) after their unit was decided, never folded.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Discarded {
    pub(crate) runs: u64,
    /// Their summed cost; `None` when none reported one.
    pub(crate) cost_usd: Option<f64>,
}

impl Summary<'_> {
    /// `PASS` or `FAIL`, from the stored verdict.
    pub(crate) fn verdict_word(&self) -> &'static str {
        if self.input.rollup.ok { "PASS" } else { "FAIL" }
    }

    /// `cell` for matrix batches, `scenario` for file batches.
    pub(crate) fn unit_noun(&self) -> &'static str {
        match self.kind {
            PlanKindName::Matrix => "cell",
            PlanKindName::Files => "scenario",
        }
    }

    /// The harness version of the envelope (`sim-…` for simulated batches).
    pub(crate) fn harness_version(&self) -> &str {
        &self.input.envelope.version
    }

    /// The warning every format shows at the top of a simulated batch. It counts every stored
    /// run, discarded ones included, so that it agrees with the progress line's count of runs.
    pub(crate) fn simulated_warning(&self) -> String {
        let mut folded = format!("{} folded into the verdicts", self.total_runs);
        if self.discarded.runs > 0 {
            let _ = std::fmt::Write::write_fmt(
                &mut folded,
                format_args!(", {} discarded", self.discarded.runs),
            );
        }
        format!(
            "SIMULATED — {} of {} run(s) came from the sim executor, not from cowork-harness \
             ({folded}): these are not real results",
            self.simulated_runs,
            self.stored_runs.max(self.total_runs)
        )
    }

    /// `true` for an eval batch: its units are arms, judged by the A/B comparison, not by the
    /// minimum pass rate.
    pub(crate) fn is_eval(&self) -> bool {
        self.input.stored.spec.mode == cowork_schema::batch::BatchMode::Eval
    }

    /// The scenario file of a unit: the unit's own file, or for an eval arm the file of its
    /// scenario (two arm units per file).
    pub(crate) fn scenario_file(&self, unit: &UnitReport<'_>) -> &str {
        let file_index = if self.is_eval() {
            unit.index / 2
        } else {
            unit.index
        };
        self.input
            .stored
            .spec
            .scenario_files
            .get(file_index as usize)
            .map_or("", String::as_str)
    }

    /// `PASS`, `FAIL` or `INCOMPLETE` for the batch.
    pub(crate) fn batch_word(&self) -> &'static str {
        if self.input.incomplete.is_some() {
            "INCOMPLETE"
        } else {
            self.verdict_word()
        }
    }
}

/// The id of a unit as in its job ids: `c<k>` or `f<k>`.
fn unit_id(unit: UnitRef) -> String {
    match unit {
        UnitRef::File(index) => format!("f{index}"),
        UnitRef::Cell(index) => format!("c{index}"),
    }
}

fn duration_ms(result: &Value) -> Option<f64> {
    result.get("durationMs").and_then(Value::as_f64)
}

fn sum_present(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    values
        .flatten()
        .fold(None, |sum, value| Some(sum.unwrap_or(0.0) + value))
}

/// Reads a stored batch into the summary every renderer shares.
pub(crate) fn summarize(input: &ReportInput) -> Summary<'_> {
    let plan = &input.stored.plan;
    let fleet = &input.rollup.fleet;
    let judging = Judging {
        min_pass_rate: fleet.min_pass_rate,
        allow_budget_stop: fleet.allow_budget_stop,
        allow_truncated_matrix: fleet.allow_truncated_matrix,
    };
    let kind = plan.kind;
    let mut units = Vec::with_capacity(plan.units.len());
    // A plain files batch stops at the first file that threw (harness-behaviour.md#envelope-error):
    // that file gets the envelope's error, later files were never run.
    let mut plain_error = input
        .envelope
        .error
        .as_ref()
        .map(|error| error.message.clone());
    // Grouped once: a sweep has thousands of units and runs.
    // In (unit, repeat index) order: a unit's runs are the slice found by two binary searches.
    let briefs = input.run_briefs();
    let mut detailed_by_unit: HashMap<UnitRef, Vec<&StoredRun>> = HashMap::new();
    for run in &input.runs {
        detailed_by_unit.entry(run.unit).or_default().push(run);
    }
    let incomplete_units: HashSet<&str> = input
        .incomplete
        .iter()
        .flat_map(|incomplete| incomplete.never_ran.iter())
        .map(|job| job.split('/').next().unwrap_or(job))
        .collect();
    for (position, unit) in plan.units.iter().enumerate() {
        let index = unit.unit.index();
        let start = briefs.partition_point(|run| run.unit < unit.unit);
        let end = start + briefs[start..].partition_point(|run| run.unit == unit.unit);
        let all_runs = &briefs[start..end];
        let first_folded = all_runs
            .iter()
            .find(|run| !run.discarded() && run.completed());
        let detailed = detailed_by_unit.remove(&unit.unit).unwrap_or_default();
        let mut report = UnitReport::empty(unit, plan.repeat, all_runs, detailed);
        if let Some(error) = &unit.cell_error {
            report.status = UnitStatus::Error(error.clone());
        } else if let Some(rollup) = repeat_rollup_of(&input.rollup, kind, position, index) {
            fill_from_repeat(&mut report, rollup, &judging);
        } else if let Some(error) = repeat_cell_error(&input.rollup, index) {
            report.status = UnitStatus::Error(error.to_owned());
        } else if let Some(cell) = plain_cell_of(&input.rollup, index) {
            fill_from_plain_cell(&mut report, cell, first_folded);
        } else if let Some(run) = first_folded {
            fill_from_plain_run(&mut report, run);
        } else if let Some(error) = plain_error.take() {
            report.status = UnitStatus::Error(error);
        }
        if incomplete_units.contains(report.id.as_str()) {
            mark_incomplete(&mut report);
        }
        units.push(report);
    }
    let truncated_cells = match (kind, plan.truncated) {
        (PlanKindName::Matrix, true) => {
            let ran = u32::try_from(plan.units.len()).unwrap_or(u32::MAX);
            Some((ran, plan.requested_cells.saturating_sub(ran)))
        }
        _ => None,
    };
    let reasons = failure_reasons(&units);
    let stops = stop_notes(input, &units, truncated_cells);
    // Every stored run counts, discarded ones too: they ran (and were paid for) like the rest.
    let stored_simulated = briefs.iter().filter(|run| run.simulated()).count() as u64;
    let simulated_runs = fleet.simulated_runs.max(stored_simulated);
    let (mut timed_sum, mut timed_count) = (0.0, 0u64);
    for run_ms in briefs.iter().filter_map(RunBrief::duration_ms) {
        timed_sum += run_ms;
        timed_count += 1;
    }
    let summed_run_ms = ((timed_count > 0).then_some(timed_sum), timed_count);
    let simulated = simulated_runs > 0
        || input.stored.spec.executor == cowork_schema::batch::ExecutorKind::Sim
        || input.envelope.fleet.get("simulated") == Some(&Value::Bool(true));
    let total_runs = units.iter().map(|unit| u64::from(unit.completed)).sum();
    let total_passes = units.iter().map(|unit| u64::from(unit.passes)).sum();
    // A replay spends nothing: the cost in its results is what the recorded runs cost, shown
    // as such beside the $0 it spent (decisions.md#replay-spends-nothing).
    let replay = input.stored.spec.mode.spends_nothing();
    if replay {
        for unit in &mut units {
            unit.recorded_cost_usd = unit.cost_usd.take();
            unit.cost_usd = Some(0.0);
        }
    }
    let total_cost_usd = sum_present(units.iter().map(|unit| unit.cost_usd));
    let recorded_cost_usd = sum_present(units.iter().map(|unit| unit.recorded_cost_usd));
    let total_duration_ms = sum_present(units.iter().map(|unit| unit.duration_ms));
    Summary {
        input,
        batch_id: input.stored.batch_id.as_str(),
        kind,
        units,
        truncated_cells,
        reasons,
        stops,
        simulated_runs,
        simulated,
        judging,
        total_runs,
        total_passes,
        total_cost_usd,
        recorded_cost_usd,
        total_duration_ms,
        discarded: discarded_of(input),
        stored_runs: briefs.len() as u64,
        summed_run_ms,
    }
}

/// A unit with a job that never ran is incomplete, whatever its stop looks like (the reducer
/// saw the missing job as an error at that index).
fn mark_incomplete(report: &mut UnitReport<'_>) {
    if !matches!(report.status, UnitStatus::Error(_)) {
        report.status = UnitStatus::Incomplete;
        if report.stopped_early == Some(StopReason::Error) {
            report.stopped_early = None;
        }
    }
}

/// The discarded runs the envelope's `fleet.discarded` lists — either a list of
/// `{job, costUsd}` entries or `{runs: [...], costUsd}` — else the stored runs marked
/// discarded, with their cost from their results.
fn discarded_of(input: &ReportInput) -> Discarded {
    let from_runs = || {
        let discarded: Vec<&RunBrief> = input
            .run_briefs()
            .iter()
            .filter(|run| run.discarded())
            .collect();
        Discarded {
            runs: discarded.len() as u64,
            cost_usd: sum_present(discarded.iter().map(|run| run.cost_usd())),
        }
    };
    let field = input.envelope.fleet.get("discarded");
    let (entries, total) = match field {
        Some(Value::Array(entries)) => (entries.as_slice(), None),
        Some(Value::Object(object)) => (
            object
                .get("runs")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice),
            object.get("costUsd").and_then(Value::as_f64),
        ),
        _ => return from_runs(),
    };
    let stored = from_runs();
    let listed_cost = sum_present(
        entries
            .iter()
            .map(|entry| entry.get("costUsd").and_then(Value::as_f64)),
    );
    Discarded {
        runs: (entries.len() as u64).max(stored.runs),
        cost_usd: total.or(listed_cost).or(stored.cost_usd),
    }
}

/// The repeat rollup of a unit: the `matrixRepeat` cell with its index, or the files batch's
/// rollup at the unit's position.
fn repeat_rollup_of(
    rollup: &RollupDoc,
    kind: PlanKindName,
    position: usize,
    index: u32,
) -> Option<&RepeatRollup> {
    match kind {
        PlanKindName::Matrix => rollup
            .matrix_repeat
            .as_ref()?
            .cells
            .iter()
            .find(|cell| cell.index == index)?
            .rollup
            .as_ref(),
        PlanKindName::Files => rollup.rollups.as_ref()?.get(position),
    }
}

fn repeat_cell_error(rollup: &RollupDoc, index: u32) -> Option<&str> {
    rollup
        .matrix_repeat
        .as_ref()?
        .cells
        .iter()
        .find(|cell| cell.index == index)?
        .error
        .as_deref()
}

fn plain_cell_of(rollup: &RollupDoc, index: u32) -> Option<&MatrixCellResult> {
    rollup
        .matrix
        .as_ref()?
        .cells
        .iter()
        .find(|cell| cell.index == index)
}

fn fill_from_repeat(report: &mut UnitReport<'_>, rollup: &RepeatRollup, judging: &Judging) {
    report.requested = rollup.requested;
    report.completed = rollup.completed;
    report.passes = rollup.passes;
    report.pass_rate = (rollup.completed > 0).then_some(rollup.pass_rate);
    report.stopped_early = rollup.stopped_early;
    report.arm_label = arm_label(rollup);
    report.cost_usd = rollup.total_cost_usd;
    report.tokens = rollup.total_tokens;
    report.models = rollup.provenance.models.clone();
    report.skills = rollup.provenance.skills.clone();
    report.status = if rollup_passes(rollup, judging) {
        UnitStatus::Passed
    } else {
        UnitStatus::Failed
    };
    // The reducer folds in index order without gaps, so the folded runs are exactly the
    // repeat indices below `completed` (harness-behaviour.md#index-order-reducer).
    report.folded = Folded::RepeatsBelow(rollup.completed);
    report.duration_ms = sum_present(report.runs().map(RunBrief::duration_ms));
}

fn fill_from_plain_cell(
    report: &mut UnitReport<'_>,
    cell: &MatrixCellResult,
    first_folded: Option<&RunBrief>,
) {
    if let Some(error) = &cell.error {
        report.status = UnitStatus::Error(error.clone());
        return;
    }
    report.completed = 1;
    report.passes = u32::from(cell.pass);
    report.pass_rate = Some(if cell.pass { 1.0 } else { 0.0 });
    report.status = if cell.pass {
        UnitStatus::Passed
    } else {
        UnitStatus::Failed
    };
    report.cost_usd = cell.cost_usd;
    report.duration_ms = cell.duration_ms;
    report.folded = Folded::First;
    if let Some(run) = first_folded {
        report.tokens = run.single().and_then(|single| single.tokens);
        provenance_of_run(report, run);
    }
}

fn fill_from_plain_run(report: &mut UnitReport<'_>, run: &RunBrief) {
    let pass = run.pass();
    report.completed = 1;
    report.passes = u32::from(pass);
    report.pass_rate = Some(if pass { 1.0 } else { 0.0 });
    report.status = if pass {
        UnitStatus::Passed
    } else {
        UnitStatus::Failed
    };
    report.cost_usd = run.cost_usd();
    report.tokens = run.single().and_then(|single| single.tokens);
    report.duration_ms = run.duration_ms();
    report.folded = Folded::First;
    provenance_of_run(report, run);
}

/// The models and skills of a unit's only run (a run with a repeat index keeps none: its
/// unit's rollup has them).
fn provenance_of_run(report: &mut UnitReport<'_>, run: &RunBrief) {
    if let Some(single) = run.single() {
        report.models = vec![single.model.clone()];
        report.skills = vec![single.skill.clone()];
    }
}

/// `verdict.pass` as persisted; a result without one never counts as a pass
/// (harness-behaviour.md#runresult-fields).
fn run_passes(result: &Value) -> bool {
    result
        .get("verdict")
        .and_then(|verdict| verdict.get("pass"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The failing entries of a run's `assertions[]`: (key, message).
pub(crate) fn failing_assertions(result: &Value) -> Vec<(String, String)> {
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
pub(crate) fn non_assertion_signals(result: &Value) -> Vec<(String, bool, String)> {
    let Some(signals) = result
        .get("verdict")
        .and_then(|verdict| verdict.get("signals"))
        .and_then(Value::as_array)
    else {
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
pub(crate) fn run_failure_lines(result: &Value) -> Vec<String> {
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

#[derive(Default)]
struct ReasonTally {
    fail: bool,
    occurrences: u64,
    runs: u64,
    units: BTreeSet<(u32, String)>,
    messages: IndexMap<String, u64>,
}

/// Failures of every folded run, grouped by assertion key and by signal code.
fn failure_reasons(units: &[UnitReport<'_>]) -> Vec<FailureReason> {
    let mut tallies: IndexMap<(ReasonKind, String), ReasonTally> = IndexMap::new();
    for unit in units {
        for run in unit.runs() {
            let Some(findings) = run.findings() else {
                continue;
            };
            let mut seen_in_run: HashSet<(ReasonKind, &str)> = HashSet::new();
            let assertions = findings
                .assertions
                .iter()
                .map(|(key, message)| (ReasonKind::Assertion, key, true, message));
            let signals = findings
                .signals
                .iter()
                .map(|(code, fail, message)| (ReasonKind::Signal, code, *fail, message));
            for (kind, key, fail, message) in assertions.chain(signals) {
                let tally = tallies.entry((kind, key.clone())).or_default();
                tally.fail |= fail;
                tally.occurrences += 1;
                if seen_in_run.insert((kind, key.as_str())) {
                    tally.runs += 1;
                }
                tally.units.insert((unit.index, unit.id.clone()));
                *tally.messages.entry(message.clone()).or_default() += 1;
            }
        }
    }
    let mut reasons: Vec<FailureReason> = tallies
        .into_iter()
        .map(|((kind, key), tally)| {
            let mut messages: Vec<(String, u64)> = tally.messages.into_iter().collect();
            // Stable: equal counts keep their first-seen order.
            messages.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
            FailureReason {
                kind,
                key,
                fail: tally.fail,
                occurrences: tally.occurrences,
                runs: tally.runs,
                units: tally.units.into_iter().map(|(_, id)| id).collect(),
                messages,
            }
        })
        .collect();
    // Failures before warnings, then the most frequent; ties by kind and key, so the order
    // never depends on hashing.
    reasons.sort_by(|a, b| {
        b.fail
            .cmp(&a.fail)
            .then(b.occurrences.cmp(&a.occurrences))
            .then(a.kind.cmp(&b.kind))
            .then(a.key.cmp(&b.key))
    });
    reasons
}

/// Early stops, cell errors, truncation, discarded overshoot and missing budget telemetry.
fn stop_notes(
    input: &ReportInput,
    units: &[UnitReport<'_>],
    truncated_cells: Option<(u32, u32)>,
) -> Vec<StopNote> {
    let mut notes = Vec::new();
    for unit in units {
        if let Some(stop) = unit.stopped_early {
            notes.push(StopNote {
                scope: unit.id.clone(),
                text: format!(
                    "{}: stopped early ({}) after {}/{} runs",
                    unit.label,
                    stop.as_str(),
                    unit.completed,
                    unit.requested
                ),
            });
        }
        match &unit.status {
            UnitStatus::Error(error) => notes.push(StopNote {
                scope: unit.id.clone(),
                text: format!("{}: error, no run: {error}", unit.label),
            }),
            UnitStatus::NotRun => notes.push(StopNote {
                scope: unit.id.clone(),
                text: format!("{}: not run", unit.label),
            }),
            UnitStatus::Incomplete => notes.push(StopNote {
                scope: unit.id.clone(),
                text: format!(
                    "{}: incomplete, the batch ended before it was decided ({} of {} runs \
                     folded)",
                    unit.label, unit.completed, unit.requested
                ),
            }),
            UnitStatus::Passed | UnitStatus::Failed => {}
        }
    }
    if let Some((first, count)) = truncated_cells {
        let judged = if input.rollup.fleet.allow_truncated_matrix {
            "judged on the executed cells (--allow-truncated-matrix)"
        } else {
            "the batch fails because of it"
        };
        notes.push(StopNote {
            scope: "batch".to_owned(),
            text: format!(
                "matrix truncated by --max-cells: ran {first} of {} cells, {count} not run; {judged}",
                first + count
            ),
        });
    }
    let discarded = discarded_of(input);
    if discarded.runs > 0 {
        notes.push(StopNote {
            scope: "batch".to_owned(),
            text: format!(
                "{} run(s) finished after their unit was decided and were discarded \
                 (not folded; spend {})",
                discarded.runs,
                usd(discarded.cost_usd)
            ),
        });
    }
    if let Some(incomplete) = &input.incomplete {
        notes.push(StopNote {
            scope: "batch".to_owned(),
            text: format!(
                "incomplete: {}; {} job(s) never ran",
                incomplete.reason,
                incomplete.never_ran.len()
            ),
        });
    }
    for label in &input.rollup.fleet.budget_telemetry_missing {
        notes.push(StopNote {
            scope: "batch".to_owned(),
            text: format!("{label}: budget stop disabled, a run reported no cost.usd"),
        });
    }
    notes
}

// ---------------------------------------------------------------------------------------------
// Number formatting shared by the renderers.
// ---------------------------------------------------------------------------------------------

/// A rate as a whole percent, rounded like JavaScript's `toFixed(0)` (as the CLI prints it).
pub fn percent(rate: f64) -> String {
    format!("{}%", js_to_fixed(rate * 100.0, 0))
}

/// Dollars with four decimals, or `-`.
/// A cost as every format shows it: `$0.0000 (recorded $0.2154)` for a replay, else [`usd`].
pub(crate) fn cost_text(spent: Option<f64>, recorded: Option<f64>) -> String {
    match recorded {
        Some(_) => format!("{} (recorded {})", usd(spent), usd(recorded)),
        None => usd(spent),
    }
}

pub fn usd(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |usd| format!("${usd:.4}"))
}

/// Milliseconds as seconds with one decimal, or `-`.
pub fn seconds(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".to_owned(), |ms| format!("{:.1} s", ms / 1000.0))
}

/// A number as JavaScript's `String(n)` prints it (harness-behaviour.md#json-numbers): `0.8`, `1`.
pub(crate) fn js_number(value: f64) -> String {
    json_number::to_value(value).to_string()
}

// ---------------------------------------------------------------------------------------------
// JSON summary.
// ---------------------------------------------------------------------------------------------

fn opt_number(object: &mut Map<String, Value>, key: &str, value: Option<f64>) {
    if let Some(value) = value {
        object.insert(key.to_owned(), json_number::to_value(value));
    }
}

fn eval_json(eval: &EvalSection) -> Value {
    let arm = |arm: &EvalArm| {
        let mut object = Map::new();
        object.insert("passes".into(), Value::from(arm.passes));
        object.insert("completed".into(), Value::from(arm.completed));
        object.insert("passRate".into(), json_number::to_value(arm.pass_rate));
        opt_number(&mut object, "costUsd", arm.cost_usd);
        Value::Object(object)
    };
    let rows: Vec<Value> = eval
        .rows
        .iter()
        .map(|row| {
            json!({
                "scope": row.scope,
                "a": arm(&row.arm_a),
                "b": arm(&row.arm_b),
                "diff": json_number::to_value(row.diff),
                "ciLow": json_number::to_value(row.ci_low),
                "ciHigh": json_number::to_value(row.ci_high),
                "aOnlyPasses": row.a_only_passes,
                "bOnlyPasses": row.b_only_passes,
                "pValue": json_number::to_value(row.p_value),
                "verdict": row.verdict,
                "pairs": row.pairs,
                "excludedPairs": row.excluded_pairs,
                "minDetectableDiff": row.min_detectable_diff.map(json_number::to_value),
            })
        })
        .collect();
    json!({
        "armA": eval.arm_a,
        "armB": eval.arm_b,
        "alpha": json_number::to_value(eval.alpha),
        "confidence": json_number::to_value(eval.confidence),
        "decisionRule": eval.decision_rule,
        "intervalMethod": eval.interval_method,
        "pValueMeaning": eval.p_sentence,
        "sensitivity": eval.sensitivity_sentence,
        "rows": rows,
    })
}

/// A compact machine summary of the batch: one line of JSON (plus a newline) with the verdict,
/// one entry per unit (status, counts, pass rate, flakiness, cost, duration), the grouped
/// failure reasons, stop notes and, for eval batches, the A/B table.
pub fn render_json(input: &ReportInput) -> String {
    let summary = summarize(input);
    let spec = &input.stored.spec;
    let mut head = Map::new();
    head.insert("batchId".into(), Value::from(summary.batch_id));
    head.insert("command".into(), Value::from(input.rollup.command.clone()));
    head.insert(
        "executor".into(),
        Value::from(spec.executor.as_str().to_owned()),
    );
    head.insert("simulated".into(), Value::from(summary.simulated));
    head.insert("simulatedRuns".into(), Value::from(summary.simulated_runs));
    head.insert("ok".into(), Value::from(input.rollup.ok));
    head.insert("exitCode".into(), Value::from(input.rollup.exit_code));
    head.insert("unitKind".into(), Value::from(summary.unit_noun()));
    if let Some(repeat) = input.stored.plan.repeat {
        head.insert("repeat".into(), Value::from(repeat));
    }
    head.insert(
        "minPassRate".into(),
        json_number::to_value(summary.judging.min_pass_rate),
    );
    let mut totals = Map::new();
    totals.insert("units".into(), Value::from(summary.units.len()));
    totals.insert("runs".into(), Value::from(summary.total_runs));
    totals.insert("passes".into(), Value::from(summary.total_passes));
    opt_number(&mut totals, "costUsd", summary.total_cost_usd);
    opt_number(&mut totals, "recordedCostUsd", summary.recorded_cost_usd);
    opt_number(&mut totals, "durationMs", summary.total_duration_ms);
    totals.insert("storedRuns".into(), Value::from(summary.stored_runs));
    totals.insert("discardedRuns".into(), Value::from(summary.discarded.runs));
    opt_number(&mut totals, "discardedCostUsd", summary.discarded.cost_usd);
    opt_number(&mut totals, "summedRunMs", summary.summed_run_ms.0);
    if let Some(wall_ms) = input.wall_ms {
        totals.insert("wallMs".into(), Value::from(wall_ms));
    }
    head.insert("totals".into(), Value::Object(totals));
    if let Some(incomplete) = &input.incomplete {
        head.insert(
            "incomplete".into(),
            json!({ "reason": incomplete.reason, "neverRan": incomplete.never_ran }),
        );
    }
    let units: Vec<Value> = summary
        .units
        .iter()
        .map(|unit| {
            let mut object = Map::new();
            object.insert("unit".into(), Value::from(unit.id.clone()));
            object.insert("label".into(), Value::from(unit.label));
            if let Some(axes) = unit.axes {
                object.insert(
                    "axes".into(),
                    serde_json::to_value(axes).unwrap_or(Value::Null),
                );
            }
            object.insert("status".into(), Value::from(unit.status.as_str()));
            object.insert("requested".into(), Value::from(unit.requested));
            object.insert("completed".into(), Value::from(unit.completed));
            object.insert("passes".into(), Value::from(unit.passes));
            opt_number(&mut object, "passRate", unit.pass_rate);
            object.insert("flaky".into(), Value::from(unit.flaky()));
            if let Some(stop) = unit.stopped_early {
                object.insert("stoppedEarly".into(), Value::from(stop.as_str()));
            }
            opt_number(&mut object, "costUsd", unit.cost_usd);
            opt_number(&mut object, "recordedCostUsd", unit.recorded_cost_usd);
            opt_number(&mut object, "durationMs", unit.duration_ms);
            if let UnitStatus::Error(error) = &unit.status {
                object.insert("error".into(), Value::from(error.clone()));
            }
            Value::Object(object)
        })
        .collect();
    head.insert("units".into(), Value::from(units));
    if let Some((first, count)) = summary.truncated_cells {
        head.insert(
            "truncated".into(),
            json!({ "ranCells": first, "notRun": count }),
        );
    }
    let reasons: Vec<Value> = summary
        .reasons
        .iter()
        .map(|reason| {
            let mut object = Map::new();
            object.insert("kind".into(), Value::from(reason.kind.as_str()));
            object.insert("key".into(), Value::from(reason.key.clone()));
            object.insert(
                "severity".into(),
                Value::from(if reason.fail { "fail" } else { "warn" }),
            );
            object.insert("occurrences".into(), Value::from(reason.occurrences));
            object.insert("runs".into(), Value::from(reason.runs));
            object.insert("units".into(), Value::from(reason.units.clone()));
            if let Some((message, _)) = reason.messages.first() {
                object.insert("sample".into(), Value::from(message.clone()));
            }
            Value::Object(object)
        })
        .collect();
    head.insert("failureReasons".into(), Value::from(reasons));
    let stops: Vec<Value> = summary
        .stops
        .iter()
        .map(|note| json!({ "scope": note.scope, "text": note.text }))
        .collect();
    head.insert("stops".into(), Value::from(stops));
    if let Some(eval) = &input.eval {
        head.insert("eval".into(), eval_json(eval));
    }
    let mut text = Value::Object(head).to_string();
    text.push('\n');
    text
}

#[cfg(test)]
mod detailed_runs_tests {
    use super::{DetailedRuns, MAX_RUN_SECTIONS, RunState, SECTIONS_OF_A_BIG_BATCH};

    /// A sweep bigger than the page details: every failing run is kept whole (up to the
    /// limit), then the first passing ones, in the order offered, and never more than the
    /// limit, whatever the number of runs offered.
    #[test]
    fn a_big_batch_keeps_its_failing_runs_whole_then_the_first_passing_up_to_the_limit() {
        let mut picker = DetailedRuns::default();
        let failing: Vec<usize> = (0..100_000).step_by(997).collect();
        for position in 0..100_000 {
            let state = if failing.contains(&position) {
                RunState::Fail
            } else {
                RunState::Pass
            };
            picker.offer(state, position);
        }
        let kept = picker.finish();
        assert_eq!(kept.len(), SECTIONS_OF_A_BIG_BATCH);
        assert!(failing.iter().all(|position| kept.contains(position)));
        assert!(
            kept.windows(2).all(|pair| pair[0] < pair[1]),
            "offered order"
        );
        let passing_kept = SECTIONS_OF_A_BIG_BATCH - failing.len();
        let first_passing: Vec<usize> = (0..100_000)
            .filter(|position| !failing.contains(position))
            .take(passing_kept)
            .collect();
        assert!(first_passing.iter().all(|position| kept.contains(position)));
    }

    /// A batch the page details whole keeps every run.
    #[test]
    fn a_small_batch_keeps_every_run_whole() {
        let mut picker = DetailedRuns::default();
        for position in 0..MAX_RUN_SECTIONS {
            picker.offer(RunState::Pass, position);
        }
        assert_eq!(picker.finish(), (0..MAX_RUN_SECTIONS).collect::<Vec<_>>());
    }
}

#[cfg(test)]
mod tests {
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
