//! [`BatchReducer`]: every unit of a batch, folded into the envelope's batch key, `ok` and exit
//! code (harness-behaviour.md#batch-verdict, harness-behaviour.md#matrix,
//! harness-behaviour.md#envelope-success, harness-behaviour.md#exit-codes).
//!
//! Four modes, chosen by the [`BatchShape`]:
//! - files + repeat: one [`RepeatRollup`] per file → `rollups`; ok iff every rollup passes.
//! - plain files: ok iff there are results and every one passes. An unanswered or erroring job
//!   mirrors the CLI, which runs the files of a directory in order and aborts the whole
//!   invocation at the first file that throws (harness-behaviour.md#independent-units,
//!   harness-behaviour.md#dir-target-yaml): the batch gets `error` (naming the file when there are
//!   several), `results: []` like the CLI's error envelope, and exit 2 (3 for a `boundary` error,
//!   as on a single run). Outcomes of later files are reported as discarded. A replay batch
//!   ([`FileErrors::FailFile`]) mirrors the CLI's dir replay instead: a corrupt or tampered
//!   cassette fails alone, every other cassette keeps its result, and the batch exits 2 with
//!   `ok: false` and no `error`.
//! - plain matrix: one [`MatrixCellResult`] per cell → `matrix`
//!   (harness-behaviour.md#matrix-cell, harness-behaviour.md#matrix-rollup).
//! - matrix + repeat: one [`RepeatRollup`] or pre-execution error per cell → `matrixRepeat`
//!   (harness-behaviour.md#matrix-repeat). An exception inside an iteration is an early stop of
//!   that cell, not a cell error.
//!
//! Inside repeat and matrix batches every in-run exception becomes an early stop or a cell
//! error, so those batches exit 0 or 1, never 3 (harness-behaviour.md#outcome-classes,
//! harness-behaviour.md#matrix-exit-codes). `results` lists the folded completed runs in (unit
//! index, repeat index) order (harness-behaviour.md#choice-c3).

use cowork_schema::batch::{BatchFlags, PlanKindName, PlanSummary};
use cowork_schema::envelope::EnvelopeError;
use cowork_schema::event::JobOutcome;
use cowork_schema::job::{CellAxes, Tier};
use cowork_schema::quarantine::QuarantineRecord;
use cowork_schema::rollup::{
    FleetJudging, FoldOrder, MatrixRepeatRollup, MatrixRollup, ROLLUP_DOC_VERSION, RepeatRollup,
    RollupDoc,
};

use super::quarantine::{QuarantinePlan, UnitKey};
use super::repeat::RepeatFold;
use super::{Judging, Offer, StopRules};

mod finish;

/// Whether the batch's units are scenario files or matrix cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeKind {
    Files,
    Matrix,
}

/// One unit (file or cell) of a batch, as planned.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitShape {
    /// Scenario name for a file; `"<name> [<axesLabel>]"` for a cell
    /// (harness-behaviour.md#matrix-naming). It is the rollup's `scenario`.
    pub label: String,
    /// The cell's axes (matrix batches).
    pub axes: Option<CellAxes>,
    /// A pre-execution cell error (harness-behaviour.md#matrix-repeat): the cell's overrides could
    /// not be applied, so no job exists for it.
    pub cell_error: Option<String>,
}

/// What a file that throws (an unanswered or erroring job) does to a plain files batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileErrors {
    /// The CLI's `run <dir>`: the first such file in order aborts the batch; the envelope is
    /// an error envelope without results, and later files are discarded.
    AbortBatch,
    /// The CLI's `replay <dir>`: such a cassette fails alone (the CLI gives it a stub result
    /// and replays the others), the others keep their results, and the batch exits 2.
    FailFile,
}

/// What the reducer needs to know about a planned batch.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchShape {
    pub kind: ShapeKind,
    /// `--repeat N`.
    pub repeat: Option<u32>,
    /// Files in plan order, or kept cells in index order.
    pub units: Vec<UnitShape>,
    /// Matrix `totalBeforeCap` (ignored for files).
    pub requested_cells: u32,
    /// Matrix truncated by `--max-cells` (ignored for files).
    pub truncated: bool,
    pub rules: StopRules,
    pub judging: Judging,
    /// What a throwing file does to a plain files batch (ignored with `--repeat` and for a
    /// matrix, whose in-run exceptions are early stops or cell errors).
    pub file_errors: FileErrors,
    /// The quarantine the verdict honours, matched against `units`.
    pub quarantine: Option<QuarantinePlan>,
}

impl BatchShape {
    /// The reducer's view of a planned batch, from its stored summary and flags, so that a live
    /// batch and a re-judged stored batch are shaped by the same code.
    pub fn from_summary(summary: &PlanSummary, flags: &BatchFlags) -> BatchShape {
        BatchShape {
            kind: match summary.kind {
                PlanKindName::Files => ShapeKind::Files,
                PlanKindName::Matrix => ShapeKind::Matrix,
            },
            repeat: summary.repeat,
            units: summary
                .units
                .iter()
                .map(|unit| UnitShape {
                    label: unit.label.clone(),
                    axes: unit.axes.clone(),
                    cell_error: unit.cell_error.clone(),
                })
                .collect(),
            requested_cells: summary.requested_cells,
            truncated: summary.truncated,
            rules: StopRules {
                stop_on_diverge: flags.stop_on_diverge,
                max_budget_usd: flags.max_budget_usd,
            },
            judging: Judging::of(flags),
            // Only replay batches put their jobs on the replay tier (one unit per cassette).
            file_errors: if !summary.units.is_empty()
                && summary.units.iter().all(|unit| unit.tier == Tier::Replay)
            {
                FileErrors::FailFile
            } else {
                FileErrors::AbortBatch
            },
            quarantine: flags.quarantine.as_ref().map(|spec| {
                let keys: Vec<UnitKey<'_>> = summary
                    .units
                    .iter()
                    .map(|unit| UnitKey {
                        scenario: &unit.scenario_name,
                        axes: unit.axes.as_ref(),
                        label: &unit.label,
                    })
                    .collect();
                QuarantinePlan::new(spec, &keys)
            }),
        }
    }
}

impl Judging {
    /// The judging flags of a batch.
    pub fn of(flags: &BatchFlags) -> Judging {
        Judging {
            min_pass_rate: flags.min_pass_rate,
            allow_budget_stop: flags.allow_budget_stop,
            allow_truncated_matrix: flags.allow_truncated_matrix,
        }
    }
}

/// A shape the reducer refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("unit {unit} of a files batch has a cell error; only matrix cells can")]
    CellErrorInFiles { unit: u32 },
    #[error("batch has more than u32::MAX units")]
    TooManyUnits,
}

/// `finish` was called before every needed outcome arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("batch reduction is not complete: unit {unit} is still waiting for an outcome")]
pub struct NotComplete {
    /// The first unit still waiting.
    pub unit: u32,
}

/// A job whose outcome was left out of every rollup (harness-behaviour.md#safe-cancellation).
#[derive(Clone, Debug, PartialEq)]
pub struct DiscardedJob {
    pub unit: u32,
    pub repeat_index: Option<u32>,
    /// Spend of a discarded completed run, disclosed beside the rollup.
    pub cost_usd: Option<f64>,
    pub completed: bool,
}

/// The reduction of a complete batch.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchReduction {
    pub rollups: Option<Vec<RepeatRollup>>,
    pub matrix: Option<MatrixRollup>,
    pub matrix_repeat: Option<MatrixRepeatRollup>,
    /// The envelope's `ok` (harness-behaviour.md#envelope-success).
    pub ok: bool,
    /// The batch's exit code (harness-behaviour.md#exit-codes).
    pub exit_code: i32,
    /// The envelope's `results[]`: (unit index, repeat index) of every folded completed run,
    /// in that order (harness-behaviour.md#choice-c3).
    pub results: Vec<(u32, Option<u32>)>,
    /// Overshoot and outcomes after an aborting file, in (unit, repeat index) order.
    pub discarded: Vec<DiscardedJob>,
    /// The envelope's `error` (plain files batches only).
    pub error: Option<EnvelopeError>,
    /// Folded runs made by the `sim` executor.
    pub simulated_runs: u64,
    /// (unit label, category, why) of every repeat unit stopped by a run that ended without
    /// a result, in unit order.
    pub stop_errors: Vec<(String, String, String)>,
    /// Labels of units whose budget stop was disabled by a run without `cost.usd`.
    pub budget_telemetry_missing: Vec<String>,
    pub rules: StopRules,
    pub judging: Judging,
    /// The quarantine `ok` and `exit_code` honour and what it did.
    pub quarantine: Option<QuarantineRecord>,
}

impl BatchReduction {
    /// The deterministic `rollup.json` of the batch. The judging settings are the ones the
    /// reduction was computed with, so `ok` can always be re-derived from the document.
    pub fn to_rollup_doc(&self, command: &str) -> RollupDoc {
        RollupDoc {
            schema_version: ROLLUP_DOC_VERSION,
            command: command.to_owned(),
            ok: self.ok,
            exit_code: self.exit_code,
            rollups: self.rollups.clone(),
            matrix: self.matrix.clone(),
            matrix_repeat: self.matrix_repeat.clone(),
            fleet: FleetJudging {
                min_pass_rate: self.judging.min_pass_rate,
                allow_budget_stop: self.judging.allow_budget_stop,
                allow_truncated_matrix: self.judging.allow_truncated_matrix,
                stop_on_diverge: self.rules.stop_on_diverge,
                max_budget_usd: self.rules.max_budget_usd,
                fold_order: FoldOrder::Index,
                results_order: FoldOrder::Index,
                simulated_runs: self.simulated_runs,
                budget_telemetry_missing: self.budget_telemetry_missing.clone(),
            },
            quarantine: self.quarantine.clone(),
        }
    }
}

/// The state of one unit.
#[derive(Clone, Debug)]
enum UnitState {
    /// A repeat batch over this unit.
    Repeat(Box<RepeatFold>),
    /// One job; `None` until its outcome arrives.
    Plain(Option<JobOutcome>),
    /// A cell with a pre-execution error: no jobs.
    CellError(String),
}

/// The reducer of one batch.
#[derive(Clone, Debug)]
pub struct BatchReducer {
    shape: BatchShape,
    units: Vec<UnitState>,
    /// Units whose state can still change (counted so `is_complete` is O(1)).
    n_open: usize,
    /// Plain files: every file below this index is resolved.
    plain_prefix: u32,
    /// Plain files: the first file (in order) that threw; the CLI stops there.
    aborted_at: Option<u32>,
    /// Set by [`BatchReducer::close_incomplete`] on a plain files batch: finish with the files
    /// that ran.
    closed_incomplete: bool,
}

impl BatchReducer {
    /// A reducer for `shape`, with no outcome yet.
    pub fn new(shape: BatchShape) -> Result<BatchReducer, ShapeError> {
        if u32::try_from(shape.units.len()).is_err() {
            return Err(ShapeError::TooManyUnits);
        }
        let mut units = Vec::with_capacity(shape.units.len());
        let mut n_open = 0;
        for (unit_idx, unit) in shape.units.iter().enumerate() {
            let state = match (&unit.cell_error, shape.kind, shape.repeat) {
                (Some(_), ShapeKind::Files, _) => {
                    return Err(ShapeError::CellErrorInFiles {
                        unit: unit_idx as u32,
                    });
                }
                (Some(error), ShapeKind::Matrix, _) => UnitState::CellError(error.clone()),
                (None, _, Some(n_repeat)) => UnitState::Repeat(Box::new(RepeatFold::new(
                    unit.label.clone(),
                    n_repeat,
                    shape.rules,
                ))),
                (None, _, None) => UnitState::Plain(None),
            };
            if !unit_final(&state) {
                n_open += 1;
            }
            units.push(state);
        }
        Ok(BatchReducer {
            shape,
            units,
            n_open,
            plain_prefix: 0,
            aborted_at: None,
            closed_incomplete: false,
        })
    }

    /// The shape this reducer was built from.
    pub fn shape(&self) -> &BatchShape {
        &self.shape
    }

    /// The index-order fold of a repeat unit (`None` for a plain unit, a cell error or an
    /// unknown unit): admission reads where it stands (the lowest index it waits for, whether
    /// its budget is still live).
    pub fn repeat_fold(&self, unit_idx: u32) -> Option<&RepeatFold> {
        match self.units.get(unit_idx as usize)? {
            UnitState::Repeat(fold) => Some(fold),
            UnitState::Plain(_) | UnitState::CellError(_) => None,
        }
    }

    /// Offers the outcome of the job at `unit_idx` and `repeat_index` (`None` without
    /// `--repeat`). The first outcome of a job wins.
    pub fn offer(
        &mut self,
        unit_idx: u32,
        repeat_index: Option<u32>,
        outcome: JobOutcome,
    ) -> Offer {
        let aborted_at = self.aborted_at;
        let Some(state) = self.units.get_mut(unit_idx as usize) else {
            return Offer::Unexpected;
        };
        let was_final = unit_final(state);
        let offer = match (state, repeat_index) {
            (UnitState::Repeat(fold), Some(index)) => fold.offer(index, outcome),
            (UnitState::Plain(slot), None) => {
                if slot.is_some() {
                    Offer::Duplicate
                } else {
                    *slot = Some(outcome);
                    if aborted_at.is_some_and(|aborted| unit_idx > aborted) {
                        Offer::Discarded
                    } else {
                        Offer::Folded
                    }
                }
            }
            _ => Offer::Unexpected,
        };
        if !was_final && unit_final(&self.units[unit_idx as usize]) {
            self.n_open -= 1;
        }
        if self.shape.kind == ShapeKind::Files && self.shape.repeat.is_none() {
            self.advance_plain_prefix();
        }
        offer
    }

    /// Plain files: moves the resolved prefix forward and notices the first throwing file
    /// (which aborts the batch unless its files fail alone).
    fn advance_plain_prefix(&mut self) {
        while self.aborted_at.is_none() {
            let Some(UnitState::Plain(Some(outcome))) = self.units.get(self.plain_prefix as usize)
            else {
                break;
            };
            if self.shape.file_errors == FileErrors::AbortBatch
                && !matches!(outcome, JobOutcome::Completed { .. })
            {
                self.aborted_at = Some(self.plain_prefix);
            }
            self.plain_prefix += 1;
        }
    }

    /// The stop index of a unit once it is decided: jobs of that unit with a higher repeat
    /// index may be cancelled (harness-behaviour.md#safe-cancellation). A plain unit is decided
    /// (`Some(0)`) once its job's outcome arrived; a cell with a pre-execution error never is (it
    /// has no jobs).
    pub fn unit_decided(&self, unit_idx: u32) -> Option<u32> {
        match self.units.get(unit_idx as usize)? {
            UnitState::Repeat(fold) => fold.decided(),
            UnitState::Plain(Some(_)) => Some(0),
            UnitState::Plain(None) | UnitState::CellError(_) => None,
        }
    }

    /// `true` when the outcome of this job can no longer change the reduction, so the job may
    /// be cancelled or never admitted: beyond its unit's stop index, after the file that
    /// aborted a plain files batch, or in a unit without jobs.
    pub fn is_cancellable(&self, unit_idx: u32, repeat_index: Option<u32>) -> bool {
        if self.aborted_at.is_some_and(|aborted| unit_idx > aborted) {
            return true;
        }
        match (self.units.get(unit_idx as usize), repeat_index) {
            // A fold stopped before its first index (the batch budget) cancels every job.
            (Some(UnitState::Repeat(fold)), Some(index)) => {
                fold.is_final() && fold.decided().is_none_or(|stop_index| index > stop_index)
            }
            (Some(UnitState::Plain(_)), None) => false,
            _ => true,
        }
    }

    /// Stops every open repeat unit as a budget stop, keeping what each folded (the batch-wide
    /// budget, harness-behaviour.md#choice-c6). Returns the labels of the units it stopped. Plain
    /// units (no `--repeat`) are not affected: a batch budget needs `--repeat`.
    pub fn stop_for_batch_budget(&mut self) -> Vec<String> {
        let mut stopped = Vec::new();
        for state in &mut self.units {
            if let UnitState::Repeat(fold) = state
                && fold.stop_for_batch_budget()
            {
                stopped.push(fold.label().to_owned());
                self.n_open -= 1;
            }
        }
        stopped
    }

    /// Closes every unit still waiting for outcomes, for re-judging an interrupted batch on
    /// the runs it has: an open repeat unit keeps what it folded (no stop reason), an open cell
    /// of a plain matrix becomes a cell error, and a plain files batch folds the files that
    /// ran. [`BatchReducer::finish`] then succeeds. Returns the indices of the units closed;
    /// the caller must not present the result as a complete batch.
    pub fn close_incomplete(&mut self) -> Vec<u32> {
        let plain_files = self.shape.kind == ShapeKind::Files && self.shape.repeat.is_none();
        let mut closed = Vec::new();
        for (unit_idx, state) in self.units.iter_mut().enumerate() {
            let unit = unit_idx as u32;
            match state {
                UnitState::Repeat(fold) => {
                    if fold.close_incomplete() {
                        self.n_open -= 1;
                        closed.push(unit);
                    }
                }
                UnitState::Plain(None) if plain_files => {
                    // Files after the one that aborted the batch are skipped, as the CLI
                    // skips them; the others never ran.
                    if self.aborted_at.is_none_or(|aborted| unit <= aborted) {
                        closed.push(unit);
                    }
                }
                UnitState::Plain(None) => {
                    *state = UnitState::CellError(
                        "never ran: the batch ended before this cell's job ran".to_owned(),
                    );
                    self.n_open -= 1;
                    closed.push(unit);
                }
                UnitState::Plain(Some(_)) | UnitState::CellError(_) => {}
            }
        }
        self.closed_incomplete = plain_files;
        closed
    }

    /// `true` once [`BatchReducer::finish`] succeeds.
    pub fn is_complete(&self) -> bool {
        if self.closed_incomplete {
            return true;
        }
        if self.shape.kind == ShapeKind::Files && self.shape.repeat.is_none() {
            return self.aborted_at.is_some() || self.plain_prefix as usize == self.units.len();
        }
        self.n_open == 0
    }

    /// The first unit still waiting for an outcome, if any.
    fn first_open_unit(&self) -> Option<u32> {
        self.units
            .iter()
            .position(|state| !unit_final(state))
            .map(|unit_idx| unit_idx as u32)
    }
}

fn unit_final(state: &UnitState) -> bool {
    match state {
        UnitState::Repeat(fold) => fold.is_final(),
        UnitState::Plain(slot) => slot.is_some(),
        UnitState::CellError(_) => true,
    }
}
