//! Re-judging stored runs with the same reducer (`cowork rollup`): a stored batch with its own
//! shape, or loose `result.json` files folded in the order given.

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
    #[error(
        "job {job_id} has no stored outcome, and these flags need it (the batch stopped before it ran); re-judge with the batch's own stop flags"
    )]
    Missing { job_id: String },
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
/// none (contract §3.7; such views are marked `verdictRederived`).
pub fn view_of_result(result: &Value) -> Result<RunView, String> {
    cowork_schema::verdict::view_with_rederived_verdict(result).map_err(|e| e.to_string())
}

/// Re-judges a stored batch: every stored job outcome is offered to a reducer shaped like the
/// batch's plan and judged with `flags` (the stored flags, or the caller's replacements).
/// Each job is read through its record (the newest generation's when the job ran again after
/// a resume), and completed runs from the `result.json` it names, checked against the digest
/// it records: the stored files are the truth.
pub async fn rejudge_stored(
    store: &dyn ArtifactStore,
    stored: &StoredBatch,
    flags: &BatchFlags,
) -> Result<BatchReduction, RejudgeError> {
    let shape = shape_from_summary(&stored.plan, flags);
    let mut reducer = BatchReducer::new(shape).map_err(|error| RejudgeError::Shape {
        message: error.to_string(),
    })?;
    let repeats: Vec<Option<u32>> = match stored.plan.repeat {
        Some(n) => (0..n).map(Some).collect(),
        None => vec![None],
    };
    let batch = &stored.batch_id;
    let mut first_missing: std::collections::HashMap<u32, Option<u32>> =
        std::collections::HashMap::new();
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
                first_missing.entry(unit_idx).or_insert(*repeat_index);
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
            reducer.offer(unit_idx, *repeat_index, outcome);
        }
    }
    reducer.finish().map_err(|missing| {
        let next = first_missing.get(&missing.unit).copied().flatten();
        let job_id = JobId::new(batch, unit_ref(stored.plan.kind, missing.unit), next);
        RejudgeError::Missing {
            job_id: job_id.to_string(),
        }
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
