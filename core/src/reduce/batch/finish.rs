//! [`BatchReducer::finish`]: a complete batch turned into its [`BatchReduction`], one routine
//! per mode (files or matrix, with or without repeat), each setting the batch key, `ok` and the
//! exit code the way the module doc of [`super`] describes.

use cowork_schema::envelope::EnvelopeError;
use cowork_schema::event::{ErrorCategory, JobOutcome};
use cowork_schema::job::CellAxes;
use cowork_schema::rollup::{
    MatrixCellRepeatResult, MatrixCellResult, MatrixRepeatRollup, MatrixRollup, RepeatRollup,
};
use cowork_schema::run_result::{EMPTY_ASSERTION_KEY, RunView};

use super::{
    BatchReducer, BatchReduction, DiscardedJob, FileErrors, NotComplete, ShapeKind, UnitState,
};
use crate::reduce::quarantine::waive;
use crate::reduce::{EnvelopeKeys, envelope_ok, rollup_passes};

impl BatchReducer {
    /// The reduction, once every needed outcome has arrived.
    pub fn finish(&self) -> Result<BatchReduction, NotComplete> {
        if !self.is_complete() {
            let unit = if self.shape.kind == ShapeKind::Files && self.shape.repeat.is_none() {
                self.plain_prefix
            } else {
                self.first_open_unit().unwrap_or_default()
            };
            return Err(NotComplete { unit });
        }
        let mut reduction = BatchReduction {
            rollups: None,
            matrix: None,
            matrix_repeat: None,
            ok: false,
            exit_code: 1,
            results: Vec::new(),
            discarded: Vec::new(),
            error: None,
            simulated_runs: 0,
            stop_errors: Vec::new(),
            budget_telemetry_missing: Vec::new(),
            rules: self.shape.rules,
            judging: self.shape.judging,
            quarantine: None,
        };
        match (self.shape.kind, self.shape.repeat.is_some()) {
            (ShapeKind::Files, true) => self.finish_files_repeat(&mut reduction),
            (ShapeKind::Files, false) => self.finish_files_plain(&mut reduction),
            (ShapeKind::Matrix, false) => self.finish_matrix_plain(&mut reduction),
            (ShapeKind::Matrix, true) => self.finish_matrix_repeat(&mut reduction),
        }
        self.apply_quarantine(&mut reduction);
        Ok(reduction)
    }

    /// Sets the failures of quarantined units aside in `ok` and the exit code, and records what
    /// the quarantine did. Unit verdicts and rollups stay as they are.
    fn apply_quarantine(&self, reduction: &mut BatchReduction) {
        let Some(plan) = &self.shape.quarantine else {
            return;
        };
        let failing: Vec<bool> = (0..self.units.len())
            .map(|unit_idx| self.unit_fails(unit_idx))
            .collect();
        let truncation_fails = self.shape.kind == ShapeKind::Matrix
            && self.shape.truncated
            && !self.shape.judging.allow_truncated_matrix;
        (reduction.ok, reduction.exit_code) = waive(
            reduction.ok,
            reduction.exit_code,
            &failing,
            plan,
            truncation_fails,
        );
        reduction.quarantine = Some(plan.record(&failing));
    }

    /// `true` when the unit's own verdict is a failure (a failing run or rollup, a cell error,
    /// a run without a result).
    fn unit_fails(&self, unit_idx: usize) -> bool {
        match &self.units[unit_idx] {
            UnitState::Repeat(fold) => fold
                .rollup()
                .is_some_and(|rollup| !rollup_passes(&rollup, &self.shape.judging)),
            UnitState::Plain(Some(JobOutcome::Completed { run })) => !run.pass,
            UnitState::Plain(Some(_)) | UnitState::CellError(_) => true,
            UnitState::Plain(None) => false,
        }
    }

    /// Results, discards, simulated counts and telemetry labels of the repeat folds.
    fn collect_folds(&self, reduction: &mut BatchReduction) {
        for (unit_idx, state) in self.units.iter().enumerate() {
            let UnitState::Repeat(fold) = state else {
                continue;
            };
            let unit = unit_idx as u32;
            reduction
                .results
                .extend(fold.folded_indices().map(|index| (unit, Some(index))));
            let mut discarded: Vec<DiscardedJob> = fold
                .discarded()
                .iter()
                .map(|run| DiscardedJob {
                    unit,
                    repeat_index: Some(run.index),
                    cost_usd: run.cost_usd,
                    completed: run.completed,
                })
                .collect();
            // Discards arrive in completion order; report them in index order so the
            // reduction depends only on the set of outcomes.
            discarded.sort_by_key(|job| job.repeat_index);
            reduction.discarded.extend(discarded);
            reduction.simulated_runs += u64::from(fold.simulated_runs());
            if let Some((category, message)) = fold.stop_message() {
                reduction.stop_errors.push((
                    fold.label().to_owned(),
                    category.to_owned(),
                    message.to_owned(),
                ));
            }
            if fold.telemetry_missing_warned() {
                reduction
                    .budget_telemetry_missing
                    .push(fold.label().to_owned());
            }
        }
    }

    fn finish_files_repeat(&self, reduction: &mut BatchReduction) {
        self.collect_folds(reduction);
        let rollups: Vec<RepeatRollup> = self
            .units
            .iter()
            .filter_map(|state| match state {
                UnitState::Repeat(fold) => fold.rollup(),
                _ => None,
            })
            .collect();
        reduction.ok = envelope_ok(
            &EnvelopeKeys {
                results_pass: &[],
                rollups: Some(&rollups),
                matrix: None,
                matrix_repeat: None,
            },
            &self.shape.judging,
        );
        reduction.exit_code = if reduction.ok { 0 } else { 1 };
        reduction.rollups = Some(rollups);
    }

    fn finish_files_plain(&self, reduction: &mut BatchReduction) {
        if self.shape.file_errors == FileErrors::FailFile {
            self.finish_files_failing_alone(reduction);
            return;
        }
        let n_files = self.units.len();
        let mut results_pass = Vec::new();
        for (unit_idx, state) in self.units.iter().enumerate() {
            let unit = unit_idx as u32;
            let UnitState::Plain(Some(outcome)) = state else {
                continue;
            };
            if self.aborted_at.is_some_and(|aborted| unit > aborted) {
                reduction.discarded.push(discarded_plain(unit, outcome));
                continue;
            }
            match outcome {
                JobOutcome::Completed { run } => {
                    results_pass.push(run.pass);
                    reduction.results.push((unit, None));
                    reduction.simulated_runs += u64::from(run.simulated);
                }
                JobOutcome::Unanswered { message, hint } => {
                    reduction.error = Some(EnvelopeError {
                        category: "unanswered".to_owned(),
                        message: file_message(&self.shape.units[unit_idx].label, n_files, message),
                        hint: hint.clone(),
                    });
                }
                JobOutcome::Error { category, message } => {
                    reduction.error = Some(EnvelopeError {
                        category: category.to_string(),
                        message: file_message(&self.shape.units[unit_idx].label, n_files, message),
                        hint: None,
                    });
                }
            }
        }
        if let Some(error) = &reduction.error {
            // The CLI's error envelope has no results (harness-behaviour.md#envelope-error).
            for (unit, _) in std::mem::take(&mut reduction.results) {
                if let UnitState::Plain(Some(outcome)) = &self.units[unit as usize] {
                    reduction.discarded.push(discarded_plain(unit, outcome));
                }
            }
            reduction.discarded.sort_by_key(|job| job.unit);
            reduction.simulated_runs = 0;
            reduction.ok = false;
            reduction.exit_code = if error.category == ErrorCategory::Boundary.as_str() {
                3
            } else {
                2
            };
            return;
        }
        self.judge_plain_results(reduction, &results_pass);
    }

    /// `ok` and the exit code of plain files from their results' verdicts.
    fn judge_plain_results(&self, reduction: &mut BatchReduction, results_pass: &[bool]) {
        reduction.ok = envelope_ok(
            &EnvelopeKeys {
                results_pass,
                rollups: None,
                matrix: None,
                matrix_repeat: None,
            },
            &self.shape.judging,
        );
        // The CLI's exit code follows every result's verdict, so an (unreachable) empty batch
        // exits 0 with `ok: false` (harness-behaviour.md#empty-results-ok).
        reduction.exit_code = if results_pass.iter().all(|pass| *pass) {
            0
        } else {
            1
        };
    }

    /// Plain files that fail alone (a replay batch, as the CLI's dir replay): every completed
    /// file keeps its result; a throwing one fails the batch with exit 2 but no `error`.
    fn finish_files_failing_alone(&self, reduction: &mut BatchReduction) {
        let mut results_pass = Vec::new();
        let mut n_thrown = 0usize;
        for (unit_idx, state) in self.units.iter().enumerate() {
            match state {
                UnitState::Plain(Some(JobOutcome::Completed { run })) => {
                    results_pass.push(run.pass);
                    reduction.results.push((unit_idx as u32, None));
                    reduction.simulated_runs += u64::from(run.simulated);
                }
                UnitState::Plain(Some(outcome)) => {
                    n_thrown += 1;
                    // Why the cassette failed is said under the summary, as for a stopped
                    // unit: the envelope keeps only the other cassettes' results.
                    let (category, message) = match outcome {
                        JobOutcome::Error { category, message } => {
                            (category.to_string(), message.clone())
                        }
                        JobOutcome::Unanswered { message, .. } => {
                            ("unanswered".to_owned(), message.clone())
                        }
                        JobOutcome::Completed { .. } => continue,
                    };
                    reduction.stop_errors.push((
                        self.shape.units[unit_idx].label.clone(),
                        category,
                        message,
                    ));
                }
                UnitState::Plain(None) | UnitState::Repeat(_) | UnitState::CellError(_) => {}
            }
        }
        self.judge_plain_results(reduction, &results_pass);
        // The CLI's dir replay exits with its worst cassette's code: 2 for a corrupt one.
        if n_thrown > 0 {
            reduction.ok = false;
            reduction.exit_code = 2;
        }
    }

    fn finish_matrix_plain(&self, reduction: &mut BatchReduction) {
        let mut cells = Vec::with_capacity(self.units.len());
        for (unit_idx, state) in self.units.iter().enumerate() {
            let unit = unit_idx as u32;
            let axes = self.shape.units[unit_idx].axes.clone().unwrap_or_default();
            let cell = match state {
                UnitState::Plain(Some(JobOutcome::Completed { run })) => {
                    reduction.results.push((unit, None));
                    reduction.simulated_runs += u64::from(run.simulated);
                    cell_from_run(unit, axes, run)
                }
                UnitState::Plain(Some(JobOutcome::Unanswered { message, .. })) => {
                    cell_error(unit, axes, format!("unanswered question: {message}"))
                }
                UnitState::Plain(Some(JobOutcome::Error { message, .. })) => {
                    cell_error(unit, axes, message.clone())
                }
                UnitState::CellError(message) => cell_error(unit, axes, message.clone()),
                UnitState::Plain(None) | UnitState::Repeat(_) => {
                    unreachable!("finish checked that every plain cell is resolved")
                }
            };
            cells.push(cell);
        }
        let truncation_fails = self.shape.truncated && !self.shape.judging.allow_truncated_matrix;
        let any_fail = cells.iter().any(|cell| !cell.pass) || truncation_fails;
        let matrix = MatrixRollup {
            ran_cells: cells.len() as u32,
            cells,
            requested: self.shape.requested_cells,
            truncated: self.shape.truncated,
            any_fail,
        };
        reduction.ok = !any_fail;
        reduction.exit_code = if any_fail { 1 } else { 0 };
        reduction.matrix = Some(matrix);
    }

    fn finish_matrix_repeat(&self, reduction: &mut BatchReduction) {
        self.collect_folds(reduction);
        let judging = &self.shape.judging;
        let mut cells = Vec::with_capacity(self.units.len());
        for (unit_idx, state) in self.units.iter().enumerate() {
            let axes = self.shape.units[unit_idx].axes.clone().unwrap_or_default();
            let (rollup, error) = match state {
                UnitState::Repeat(fold) => (fold.rollup(), None),
                UnitState::CellError(message) => (None, Some(message.clone())),
                UnitState::Plain(_) => unreachable!("a repeat batch has no plain units"),
            };
            cells.push(MatrixCellRepeatResult {
                index: unit_idx as u32,
                axes,
                rollup,
                error,
            });
        }
        let truncation_fails = self.shape.truncated && !judging.allow_truncated_matrix;
        let any_fail = cells.iter().any(|cell| {
            cell.error.is_some()
                || cell
                    .rollup
                    .as_ref()
                    .is_some_and(|rollup| !rollup_passes(rollup, judging))
        }) || truncation_fails;
        reduction.ok = !any_fail;
        reduction.exit_code = if any_fail { 1 } else { 0 };
        reduction.matrix_repeat = Some(MatrixRepeatRollup {
            ran_cells: cells.len() as u32,
            cells,
            requested: self.shape.requested_cells,
            truncated: self.shape.truncated,
            any_fail,
        });
    }
}

/// With several files the CLI's message alone would not say which file aborted the batch.
fn file_message(label: &str, n_files: usize, message: &str) -> String {
    if n_files > 1 {
        format!("{label}: {message}")
    } else {
        message.to_owned()
    }
}

fn discarded_plain(unit: u32, outcome: &JobOutcome) -> DiscardedJob {
    let (cost_usd, completed) = match outcome {
        JobOutcome::Completed { run } => (run.cost_usd, true),
        JobOutcome::Unanswered { .. } | JobOutcome::Error { .. } => (None, false),
    };
    DiscardedJob {
        unit,
        repeat_index: None,
        cost_usd,
        completed,
    }
}

/// A plain-matrix cell from its run (harness-behaviour.md#matrix-cell).
fn cell_from_run(index: u32, axes: CellAxes, run: &RunView) -> MatrixCellResult {
    MatrixCellResult {
        index,
        axes,
        pass: run.pass,
        failed_assertions: run
            .assertions
            .iter()
            .filter(|entry| !entry.pass)
            .map(|entry| {
                entry
                    .key
                    .clone()
                    .unwrap_or_else(|| EMPTY_ASSERTION_KEY.to_owned())
            })
            .collect(),
        signals: run
            .signals
            .iter()
            .map(|signal| signal.code.clone())
            .collect(),
        cost_usd: run.cost_usd,
        duration_ms: run.duration_ms,
        effective_fidelity: run.effective_fidelity.clone(),
        out_dir: run.out_dir.clone(),
        error: None,
    }
}

/// A cell that produced no RunResult (harness-behaviour.md#matrix-cell).
fn cell_error(index: u32, axes: CellAxes, message: String) -> MatrixCellResult {
    MatrixCellResult {
        index,
        axes,
        pass: false,
        failed_assertions: Vec::new(),
        signals: Vec::new(),
        cost_usd: None,
        duration_ms: None,
        effective_fidelity: None,
        out_dir: None,
        error: Some(message),
    }
}
