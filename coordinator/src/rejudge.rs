//! Re-judging stored runs with the same reducer (`cowork rollup`): a stored batch with its own
//! shape, or loose `result.json` files folded in the order given. A stored batch that was
//! interrupted is judged on the runs it has, marked as never passing, and its missing jobs are
//! named.

use std::collections::BTreeMap;

use cowork_fabric::{ArtifactError, ArtifactStore};
use cowork_schema::batch::{BatchFlags, StoredBatch};
use cowork_schema::event::{ArtifactRef, JobOutcome};
use cowork_schema::ids::JobId;
use cowork_schema::layout::{JobKey, names};
use cowork_schema::run_result::RunView;
use serde_json::Value;

use crate::stored_job::{StoredJobError, read_artifact, read_stored_job};
use crate::supervisor::{shape_from_summary, unit_ref};
use cowork_core::admission::{JobRef, ResultIndex, ResultLocation};
use cowork_core::reduce::{
    BatchReducer, BatchReduction, BatchShape, FileErrors, Judging, ShapeKind, StopRules, UnitShape,
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
    /// Where each folded run's `result.json` is and its digest, as its job record says.
    pub locations: ResultIndex,
    /// The harness versions the records of the runs read name, in first-seen order.
    pub harness_versions: Vec<String>,
}

impl Rejudged {
    /// The version an envelope of these runs names: the one harness version their records
    /// report, `mixed`, or `unknown` (the rule of the live batch's envelope).
    pub fn envelope_version(&self) -> String {
        match self.harness_versions.as_slice() {
            [one] => one.clone(),
            [] => "unknown".to_owned(),
            _ => "mixed".to_owned(),
        }
    }

    /// Where the folded run `job` of the batch `stored` has its result, for the envelope.
    pub fn result_location(&self, stored: &StoredBatch, job: JobRef) -> Option<ResultLocation> {
        let job_id = JobId::new(
            &stored.batch_id,
            unit_ref(stored.plan.kind, job.unit),
            job.repeat_index,
        );
        self.locations
            .location((job.unit, job.repeat_index.unwrap_or(0)), &job_id)
    }
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
/// it has ([`WhatRan`]).
///
/// One pass, and no outcome is kept after it is offered: a second reducer folds the same runs
/// with the gaps closed up as they arrive, in case the first one cannot finish, and the
/// results' locations are kept compactly ([`ResultIndex`], 44 bytes a run) for the envelope.
pub async fn rejudge_stored(
    store: &dyn ArtifactStore,
    stored: &StoredBatch,
    flags: &BatchFlags,
) -> Result<Rejudged, RejudgeError> {
    let shape = shape_from_summary(&stored.plan, flags);
    let mut reducer = BatchReducer::new(shape).map_err(|error| RejudgeError::Shape {
        message: error.to_string(),
    })?;
    let mut what_ran = WhatRan::new(stored, flags)?;
    let mut locations = ResultIndex::new(stored.plan.units.len());
    let mut harness_versions: Vec<String> = Vec::new();
    let repeats = stored.plan.repeat_indices();
    let batch = &stored.batch_id;
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
            if let Some(version) = job.harness_version
                && !harness_versions.contains(&version)
            {
                harness_versions.push(version);
            }
            let outcome = match (job.outcome, job.result) {
                (JobOutcome::Completed { .. }, Some(location)) => {
                    let bytes = read_artifact(store, &location)
                        .await
                        .map_err(stored_job_error)?;
                    let run = view_of_bytes(&location.key, &bytes)?;
                    // The bare shape names no digest: its result is read from the job's
                    // directory, unverified, as it was here.
                    let artifacts: Vec<ArtifactRef> = location
                        .sha256
                        .map(|sha256| ArtifactRef {
                            key: location.key,
                            size: bytes.len() as u64,
                            sha256,
                        })
                        .into_iter()
                        .collect();
                    locations.record(
                        (unit_idx, repeat_index.unwrap_or(0)),
                        &job_id,
                        (job.generation, job.attempt),
                        &artifacts,
                    );
                    JobOutcome::Completed { run }
                }
                (JobOutcome::Completed { .. }, None) => {
                    return Err(RejudgeError::Unreadable {
                        key: JobKey::new(&job_id).record(job.generation).into_string(),
                        message: format!("a completed run whose record names no {}", names::RESULT),
                    });
                }
                (other, _) => other,
            };
            what_ran.offer(unit_idx, *repeat_index, outcome.clone());
            reducer.offer(unit_idx, *repeat_index, outcome);
        }
    }
    match reducer.finish() {
        Ok(reduction) => Ok(Rejudged {
            reduction,
            never_ran: Vec::new(),
            locations,
            harness_versions,
        }),
        Err(_) => what_ran.judge(stored, locations, harness_versions),
    }
}

/// The reducer's view of the stored `result.json` at `key`.
fn view_of_bytes(key: &str, bytes: &[u8]) -> Result<RunView, RejudgeError> {
    let unreadable = |message: String| RejudgeError::Unreadable {
        key: key.to_owned(),
        message,
    };
    let result: Value = serde_json::from_slice(bytes).map_err(|e| unreadable(e.to_string()))?;
    view_of_result(&result).map_err(unreadable)
}

/// An interrupted batch judged on the runs it has, folded as they are read. Each repeat unit
/// folds its runs in index order with the gaps closed up, so a run that happened after one
/// that never did still counts; stop rules apply as they would. Units still waiting for runs
/// are then closed ([`BatchReducer::close_incomplete`]), their missing jobs are the ones that
/// never ran, and the batch fails: an incomplete batch is never a pass.
struct WhatRan {
    reducer: BatchReducer,
    /// Per unit, the original repeat index of each folded position.
    ran: BTreeMap<u32, Vec<Option<u32>>>,
}

impl WhatRan {
    fn new(stored: &StoredBatch, flags: &BatchFlags) -> Result<WhatRan, RejudgeError> {
        let shape = shape_from_summary(&stored.plan, flags);
        let reducer = BatchReducer::new(shape).map_err(|error| RejudgeError::Shape {
            message: error.to_string(),
        })?;
        Ok(WhatRan {
            reducer,
            ran: BTreeMap::new(),
        })
    }

    fn offer(&mut self, unit_idx: u32, repeat_index: Option<u32>, outcome: JobOutcome) {
        let positions = self.ran.entry(unit_idx).or_default();
        let position = repeat_index.map(|_| positions.len() as u32);
        positions.push(repeat_index);
        self.reducer.offer(unit_idx, position, outcome);
    }

    fn judge(
        self,
        stored: &StoredBatch,
        locations: ResultIndex,
        harness_versions: Vec<String>,
    ) -> Result<Rejudged, RejudgeError> {
        let WhatRan { mut reducer, ran } = self;
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
        let repeats = stored.plan.repeat_indices();
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
            locations,
            harness_versions,
        })
    }
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
            file_errors: FileErrors::AbortBatch,
            quarantine: None,
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
