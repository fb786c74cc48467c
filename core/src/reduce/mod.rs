//! The reducer: job outcomes to rollups, batch verdict and exit code (harness-behaviour.md#repeat,
//! harness-behaviour.md#matrix, harness-behaviour.md#index-order-reducer,
//! harness-behaviour.md#envelope).
//!
//! Outcomes arrive in any order (workers finish when they finish, events are redelivered), but
//! every repeat batch is folded in repeat-index order (harness-behaviour.md#index-order-reducer,
//! harness-behaviour.md#choice-c2 "index"), so the rollup is the one the CLI would have computed
//! from the same runs: same `sampleFailure`, same first-seen orders, same floating-point sums. Each
//! outcome is folded as soon as every lower index is resolved and then dropped; only outcomes
//! waiting for a lower index are buffered, so memory is O(units + out-of-order window), not
//! O(outcomes).
//!
//! Modules:
//! - [`repeat`]: [`RepeatFold`], the incremental harness-behaviour.md#repeat-loop /
//!   harness-behaviour.md#index-order-reducer loop for one file or cell.
//! - [`batch`]: [`BatchReducer`], the whole batch (files or matrix, with or without repeat).
//! - [`quarantine`]: units a quarantine covers, and the batch verdict that sets their failures
//!   aside.
//! - [`human`]: the stderr renderings of harness-behaviour.md#repeat-human and
//!   harness-behaviour.md#matrix-repeat and JavaScript's `toFixed`.
//!
//! Pure: no IO, no clock, no environment, no async.

pub mod batch;
pub mod human;
pub mod quarantine;
pub mod repeat;

use cowork_schema::rollup::{MatrixRepeatRollup, MatrixRollup, RepeatRollup, StopReason};

pub use batch::{
    BatchReducer, BatchReduction, BatchShape, DiscardedJob, FileErrors, NotComplete, ShapeError,
    ShapeKind, UnitShape,
};
pub use human::{js_to_fixed, render_matrix_repeat_human, render_repeat_human};
pub use repeat::{DiscardedRun, RepeatFold};

/// The stop rules of one repeat batch (harness-behaviour.md#repeat-flags,
/// harness-behaviour.md#repeat-loop). They apply per file and per cell.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StopRules {
    /// `--stop-on-diverge`.
    pub stop_on_diverge: bool,
    /// `--max-budget-usd`, per file / per cell (harness-behaviour.md#choice-c6).
    pub max_budget_usd: Option<f64>,
}

/// How rollups and matrices are judged (harness-behaviour.md#batch-verdict,
/// harness-behaviour.md#matrix-rollup).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Judging {
    /// `--min-pass-rate` (default 1.0).
    pub min_pass_rate: f64,
    /// `--allow-budget-stop`.
    pub allow_budget_stop: bool,
    /// `--allow-truncated-matrix`.
    pub allow_truncated_matrix: bool,
}

/// What happened to an offered outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Accepted and folded (or, for a plain run, recorded).
    Folded,
    /// Accepted and kept until every lower index is resolved.
    Buffered,
    /// This index was already offered; the first outcome wins.
    Duplicate,
    /// The index lies beyond its unit's stop index (overshoot,
    /// harness-behaviour.md#safe-cancellation): it is reported, never folded.
    Discarded,
    /// No job of this batch has this unit and repeat index (a caller bug); ignored.
    Unexpected,
}

/// `rollupPasses` (harness-behaviour.md#batch-verdict).
pub fn rollup_passes(rollup: &RepeatRollup, judging: &Judging) -> bool {
    match rollup.stopped_early {
        Some(StopReason::Diverged | StopReason::Unanswered | StopReason::Error) => false,
        Some(StopReason::Budget) if !judging.allow_budget_stop => false,
        _ => rollup.pass_rate >= judging.min_pass_rate,
    }
}

/// `armLabel` (harness-behaviour.md#provenance): the suffix of the human verdict line.
pub fn arm_label(rollup: &RepeatRollup) -> String {
    let ablated = rollup.provenance.ablated_runs;
    if rollup.completed == 0 || ablated == 0 {
        String::new()
    } else if ablated == rollup.completed {
        " [ABLATED — control arm]".to_owned()
    } else {
        format!(" [MIXED ARMS: {ablated}/{} ablated]", rollup.completed)
    }
}

/// The batch keys of an envelope and the verdicts of its results, for [`envelope_ok`].
#[derive(Clone, Copy, Debug)]
pub struct EnvelopeKeys<'a> {
    /// `verdict.pass` of each entry of `results[]`.
    pub results_pass: &'a [bool],
    pub rollups: Option<&'a [RepeatRollup]>,
    pub matrix: Option<&'a MatrixRollup>,
    pub matrix_repeat: Option<&'a MatrixRepeatRollup>,
}

/// The envelope's `ok` (harness-behaviour.md#envelope-success): `matrixRepeat` wins over `matrix`,
/// which wins over `rollups`; without a batch key, every result must pass and there must be one.
pub fn envelope_ok(keys: &EnvelopeKeys<'_>, judging: &Judging) -> bool {
    if let Some(matrix_repeat) = keys.matrix_repeat {
        return !matrix_repeat.any_fail;
    }
    if let Some(matrix) = keys.matrix {
        return !matrix.any_fail;
    }
    if let Some(rollups) = keys.rollups {
        return rollups.iter().all(|rollup| rollup_passes(rollup, judging));
    }
    !keys.results_pass.is_empty() && keys.results_pass.iter().all(|pass| *pass)
}

#[cfg(test)]
mod tests;
