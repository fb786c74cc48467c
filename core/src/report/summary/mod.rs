//! The summary every renderer shares ([`Summary`]): the format-independent reading of a
//! [`ReportInput`], with each unit's status and numbers ([`UnitReport`]), failure reasons and
//! stop notes. [`summarize`] builds it; the renderers only format it.

mod build;
mod notes;
mod quarantine;
mod units;

use std::collections::HashMap;

use cowork_schema::batch::PlanKindName;
use cowork_schema::job::CellAxes;
use cowork_schema::rollup::StopReason;

use crate::reduce::Judging;
use crate::report::input::{ReportInput, RunBrief, RunState, StoredRun, unit_id};

pub(crate) use build::summarize;
pub(crate) use quarantine::quarantine_lines;

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
    /// The batch's bar (`--min-pass-rate`), which [`UnitReport::flaky`] judges against.
    pub(crate) min_pass_rate: f64,
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
            min_pass_rate: 1.0,
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
    /// Flaky within this batch: some runs passed and some failed, and the 95% interval of the
    /// pass rate straddles the bar (`crate::trend::flaky`, the single-batch half of the rule
    /// `cowork diff` and `cowork trend` share; one batch cannot show a verdict flip).
    pub(crate) fn flaky(&self) -> bool {
        crate::trend::flaky(self.passes, self.completed, self.min_pass_rate)
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
    /// The job path (`c1/r0`, `f2`) of the first run holding an entry: where to look first.
    pub(crate) job: String,
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

    /// The names of an eval's arms in arm order (`A`, `B` in the two-arm form); empty for any
    /// other batch.
    pub(crate) fn eval_arm_names(&self) -> Vec<String> {
        self.input
            .stored
            .spec
            .eval
            .as_ref()
            .map(|settings| {
                (0..settings.arms.len())
                    .map(|index| crate::plan::eval::spec_arm_name(settings, index))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The number of an eval's arms (at least 1, so that it divides).
    pub(crate) fn eval_arm_count(&self) -> usize {
        self.input
            .stored
            .spec
            .eval
            .as_ref()
            .map_or(2, |settings| settings.arms.len())
            .max(1)
    }

    /// The scenario file of a unit: the unit's own file, or for an eval arm the file of its
    /// scenario (one unit per arm per file).
    pub(crate) fn scenario_file(&self, unit: &UnitReport<'_>) -> &str {
        let file_index = if self.is_eval() {
            unit.index / self.eval_arm_count() as u32
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

fn sum_present(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    values
        .flatten()
        .fold(None, |sum, value| Some(sum.unwrap_or(0.0) + value))
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
    let fleet = input.envelope.fleet_view();
    if fleet.discarded.is_empty() && fleet.discarded_listed_cost_usd.is_none() {
        return from_runs();
    }
    let stored = from_runs();
    let listed_cost = sum_present(fleet.discarded.iter().map(|entry| entry.cost_usd));
    let (entries, total) = (&fleet.discarded, fleet.discarded_listed_cost_usd);
    Discarded {
        runs: (entries.len() as u64).max(stored.runs),
        cost_usd: total.or(listed_cost).or(stored.cost_usd),
    }
}
