//! Re-judging stored runs with the same reducer (`cowork rollup`): a stored batch with its own
//! shape, or loose `result.json` files folded in the order given. A stored batch that was
//! interrupted is judged on the runs it has, marked as never passing, and its missing jobs are
//! named.

use std::collections::BTreeMap;

use cowork_fabric::{ArtifactError, ArtifactStore};
use cowork_schema::batch::{BatchFlags, StoredBatch};
use cowork_schema::event::JobOutcome;
use cowork_schema::ids::JobId;
use cowork_schema::run_result::RunView;
use serde_json::Value;

use crate::stored_job::{StoredJobError, read_artifact, read_stored_job};
use crate::supervisor::{shape_from_summary, unit_ref};
use cowork_core::reduce::{
    BatchReducer, BatchReduction, BatchShape, Judging, ShapeKind, StopRules, UnitShape,
};

/// Why stored runs could not be re-judged.
#[derive(Debug, thiserror::Error)]
pub enum RejudgeError {
    #[error("reading {key}")]
    Store {
        key: String,
        #[source]
        source: ArtifactError,
    },
    #[error("{key} is unreadable: {message}")]
    Unreadable { key: String, message: String },
    #[error("the stored plan cannot be reduced: {message}")]
    Shape { message: String },
}

/// A stored batch, re-judged.
#[derive(Clone, Debug)]
pub struct Rejudged {
    pub reduction: BatchReduction,
    /// The jobs the judging needed that have no stored outcome, in plan order: the batch was
    /// interrupted (or stopped early under other flags) before they ran. When any is missing,
    /// `reduction` judges the runs there are and is never a pass.
    pub never_ran: Vec<JobId>,
}

/// A failed read of a job's stored files, as a re-judging error.
fn stored_job_error(error: StoredJobError) -> RejudgeError {
    match error {
        StoredJobError::Store { key, source } => RejudgeError::Store { key, source },
        StoredJobError::Unreadable { key, message } => RejudgeError::Unreadable { key, message },
        StoredJobError::Mismatch {
            key,
            expected,
            found,
        } => RejudgeError::Unreadable {
            key,
            message: format!("sha256 {found}, its job record says {expected}"),
        },
    }
}

/// The reducer's view of a stored `result.json`, re-deriving the verdict when the file has
/// none (harness-behaviour.md#verdict-source; such views are marked `verdictRederived`).
pub fn view_of_result(result: &Value) -> Result<RunView, String> {
    cowork_core::verdict::view_with_rederived_verdict(result).map_err(|e| e.to_string())
}

/// Re-judges a stored batch: every stored job outcome is offered to a reducer shaped like the
/// batch's plan and judged with `flags` (the stored flags, or the caller's replacements).
/// Each job is read through its record (the newest generation's when the job ran again after
/// a resume), and completed runs from the `result.json` it names, checked against the digest
/// it records: the stored files are the truth. A batch with jobs missing is judged on the runs
/// it has ([`judge_what_ran`]).
pub async fn rejudge_stored(
    store: &dyn ArtifactStore,
    stored: &StoredBatch,
    flags: &BatchFlags,
) -> Result<Rejudged, RejudgeError> {
    let shape = shape_from_summary(&stored.plan, flags);
    let mut reducer = BatchReducer::new(shape).map_err(|error| RejudgeError::Shape {
        message: error.to_string(),
    })?;
    let repeats: Vec<Option<u32>> = match stored.plan.repeat {
        Some(n) => (0..n).map(Some).collect(),
        None => vec![None],
    };
    let batch = &stored.batch_id;
    let mut found: Vec<(u32, Option<u32>, JobOutcome)> = Vec::new();
    for (unit_idx, unit) in stored.plan.units.iter().enumerate() {
        if unit.cell_error.is_some() {
            continue;
        }
        let unit_idx = unit_idx as u32;
        for repeat_index in &repeats {
            if let (Some(stop), Some(repeat)) = (reducer.unit_decided(unit_idx), repeat_index)
                && *repeat > stop
            {
                break;
            }
            let job_id = JobId::new(batch, unit_ref(stored.plan.kind, unit_idx), *repeat_index);
            // The job's record names the attempt whose files count (and their digests).
            let Some(job) = read_stored_job(store, &job_id)
                .await
                .map_err(stored_job_error)?
            else {
                continue;
            };
            let outcome = match (job.outcome, job.result) {
                (JobOutcome::Completed { .. }, Some(location)) => {
                    let bytes = read_artifact(store, &location)
                        .await
                        .map_err(stored_job_error)?;
                    let result_key = location.key;
                    let result: Value =
                        serde_json::from_slice(&bytes).map_err(|e| RejudgeError::Unreadable {
                            key: result_key.clone(),
                            message: e.to_string(),
                        })?;
                    let run =
                        view_of_result(&result).map_err(|message| RejudgeError::Unreadable {
                            key: result_key,
                            message,
                        })?;
                    JobOutcome::Completed { run }
                }
                (JobOutcome::Completed { .. }, None) => {
                    return Err(RejudgeError::Unreadable {
                        key: cowork_schema::layout::job_record_key(&job_id, job.generation),
                        message: "a completed run whose record names no result.json".to_owned(),
                    });
                }
                (other, _) => other,
            };
            found.push((unit_idx, *repeat_index, outcome.clone()));
            reducer.offer(unit_idx, *repeat_index, outcome);
        }
    }
    match reducer.finish() {
        Ok(reduction) => Ok(Rejudged {
            reduction,
            never_ran: Vec::new(),
        }),
        Err(_) => judge_what_ran(stored, flags, found),
    }
}

/// Judges an interrupted batch on the runs it has (`found`: unit, repeat index, outcome).
/// Each repeat unit folds its runs in index order with the gaps closed up, so a run that
/// happened after one that never did still counts; stop rules apply as they would. Units still
/// waiting for runs are then closed ([`BatchReducer::close_incomplete`]), their missing jobs
/// are the ones that never ran, and the batch fails: an incomplete batch is never a pass.
fn judge_what_ran(
    stored: &StoredBatch,
    flags: &BatchFlags,
    found: Vec<(u32, Option<u32>, JobOutcome)>,
) -> Result<Rejudged, RejudgeError> {
    let shape = shape_from_summary(&stored.plan, flags);
    let mut reducer = BatchReducer::new(shape).map_err(|error| RejudgeError::Shape {
        message: error.to_string(),
    })?;
    // Per unit, the original repeat index of each folded position.
    let mut ran: BTreeMap<u32, Vec<Option<u32>>> = BTreeMap::new();
    for (unit_idx, repeat_index, outcome) in found {
        let positions = ran.entry(unit_idx).or_default();
        let position = repeat_index.map(|_| positions.len() as u32);
        positions.push(repeat_index);
        reducer.offer(unit_idx, position, outcome);
    }
    let closed = reducer.close_incomplete();
    let mut reduction = reducer.finish().map_err(|_| RejudgeError::Shape {
        message: "an interrupted batch did not close".into(),
    })?;
    let original = |unit: u32, position: Option<u32>| {
        position.and_then(|position| {
            ran.get(&unit)
                .and_then(|indices| indices.get(position as usize).copied().flatten())
        })
    };
    for (unit, repeat_index) in &mut reduction.results {
        *repeat_index = original(*unit, *repeat_index);
    }
    for job in &mut reduction.discarded {
        job.repeat_index = original(job.unit, job.repeat_index);
    }
    let repeats: Vec<Option<u32>> = match stored.plan.repeat {
        Some(n) => (0..n).map(Some).collect(),
        None => vec![None],
    };
    let mut never_ran = Vec::new();
    for unit in closed {
        let indices = ran.get(&unit).map(Vec::as_slice).unwrap_or_default();
        for repeat_index in &repeats {
            if !indices.contains(repeat_index) {
                let unit_ref = unit_ref(stored.plan.kind, unit);
                never_ran.push(JobId::new(&stored.batch_id, unit_ref, *repeat_index));
            }
        }
    }
    if !never_ran.is_empty() {
        reduction.ok = false;
        reduction.exit_code = reduction.exit_code.max(1);
    }
    Ok(Rejudged {
        reduction,
        never_ran,
    })
}

/// Re-judges loose runs: each group (a scenario name and its runs in repeat-index order) is one
/// repeat batch of `runs.len()` runs; the groups form one batch like the files of a directory.
pub fn rejudge_runs(
    groups: Vec<(String, Vec<RunView>)>,
    rules: StopRules,
    judging: Judging,
) -> Result<BatchReduction, RejudgeError> {
    let mut merged: Option<BatchReduction> = None;
    for (group_idx, (label, runs)) in groups.into_iter().enumerate() {
        let shape = BatchShape {
            kind: ShapeKind::Files,
            repeat: Some(runs.len() as u32),
            units: vec![UnitShape {
                label,
                axes: None,
                cell_error: None,
            }],
            requested_cells: 1,
            truncated: false,
            rules,
            judging,
        };
        let mut reducer = BatchReducer::new(shape).map_err(|error| RejudgeError::Shape {
            message: error.to_string(),
        })?;
        for (index, run) in runs.into_iter().enumerate() {
            reducer.offer(0, Some(index as u32), JobOutcome::Completed { run });
        }
        let mut part = reducer.finish().map_err(|_| RejudgeError::Shape {
            message: "a group of runs did not reduce".into(),
        })?;
        let unit = group_idx as u32;
        for entry in &mut part.results {
            entry.0 = unit;
        }
        for discarded in &mut part.discarded {
            discarded.unit = unit;
        }
        merged = Some(match merged {
            None => part,
            Some(mut all) => {
                all.rollups
                    .get_or_insert_with(Vec::new)
                    .extend(part.rollups.unwrap_or_default());
                all.results.extend(part.results);
                all.discarded.extend(part.discarded);
                all.simulated_runs += part.simulated_runs;
                all.budget_telemetry_missing
                    .extend(part.budget_telemetry_missing);
                all.ok = all.ok && part.ok;
                all.exit_code = all.exit_code.max(part.exit_code);
                all
            }
        });
    }
    merged.ok_or(RejudgeError::Shape {
        message: "no runs to re-judge".into(),
    })
}
