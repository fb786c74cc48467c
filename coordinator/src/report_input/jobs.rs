//! Finding and reading a batch's jobs: the jobs are those of the stored plan (no listing of the
//! store), and each job's files are found through its record
//! (`outcome.json`, a [`JobRecord`] naming the keys of the attempt's artifacts), never by
//! guessing a path. Two older shapes are read too: a bare [`JobOutcome`] as the record (the
//! files are then beside it, at the job's flat path) and no record at all (a `result.json` at
//! the flat path).
//!
//! ```text
//! batches/<id>/jobs/<job>/outcome.json          record of generation 0 (or a bare outcome)
//! batches/<id>/jobs/<job>/g<G>/outcome.json     record of generation G ≥ 1
//! batches/<id>/jobs/<job>/<name>                attempt 1 of generation 0
//! batches/<id>/jobs/<job>/g<G>a<A>/<name>       any other attempt
//! ```

use cowork_fabric::ArtifactStore;
use cowork_schema::BatchId;
use cowork_schema::batch::StoredBatch;
use cowork_schema::event::{JobOutcome, StoredOutcome};
use cowork_schema::ids::{JobId, UnitRef};
use cowork_schema::layout::{JobKey, names};
use serde_json::Value;

use super::{Missing, ReportError, parse, read, read_optional};
use crate::stored_job::{FoundRecord, StoredJobError, read_job_record};
use cowork_core::report::{RunOutcome, RunRecord, StoredRun};

/// Every job of the batch's plan, in (unit, repeat index) order, computed from the stored plan
/// rather than found by listing the store: a listing of a million-run batch is two million
/// keys to hold, and some S3 servers (s3s-fs) walk the whole bucket for every page of it.
pub(super) fn planned_jobs(
    stored: &StoredBatch,
) -> impl Iterator<Item = (UnitRef, Option<u32>)> + Send + '_ {
    let kind = stored.plan.kind;
    let repeats = stored.plan.repeat_indices();
    stored
        .plan
        .units
        .iter()
        .enumerate()
        .filter(|(_, unit)| unit.cell_error.is_none())
        .flat_map(move |(index, _)| {
            let unit = crate::supervisor::unit_ref(kind, index as u32);
            repeats
                .clone()
                .into_iter()
                .map(move |repeat_index| (unit, repeat_index))
        })
}

/// The files directly in `job`'s directory (attempt 1 of generation 0, or an older shape's):
/// listed only for the older shapes, whose record names no files.
async fn flat_files(store: &dyn ArtifactStore, job: &JobId) -> Result<Vec<String>, ReportError> {
    let prefix = JobKey::new(job).prefix();
    let keys = store
        .list(prefix.as_str())
        .await
        .map_err(|source| ReportError::Store {
            key: prefix.to_string(),
            source,
        })?;
    Ok(keys
        .into_iter()
        .filter(|key| prefix.direct_child(key).is_some())
        .collect())
}

fn record_error(error: StoredJobError) -> ReportError {
    match error {
        StoredJobError::Store { key, source } => ReportError::Store { key, source },
        StoredJobError::Unreadable { key, message } => ReportError::Malformed {
            key,
            what: "job record",
            message,
        },
        StoredJobError::Mismatch {
            key,
            expected,
            found,
        } => ReportError::Malformed {
            key,
            what: "job artifact",
            message: format!("sha256 {found}, the record says {expected}"),
        },
    }
}

/// A job read back: the run the report shows and the outcome the reducer would fold.
pub(super) struct ReadJob {
    pub(super) run: StoredRun,
    pub(super) outcome: JobOutcome,
}

/// Reads one job through the record that counts (`stored_job::read_job_record`). `None` when
/// the job left no record and no result (it never finished).
pub(super) async fn read_job(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
    (unit, repeat_index): (UnitRef, Option<u32>),
) -> Result<Option<ReadJob>, ReportError> {
    let job = JobId::new(batch_id, unit, repeat_index);
    let found = read_job_record(store, &job).await.map_err(record_error)?;
    let record_key = found.as_ref().map(|found| found.key.clone());
    let (outcome, artifacts, record) = match found {
        Some(FoundRecord {
            stored: StoredOutcome::Record(record),
            ..
        }) => {
            let artifacts = record.artifacts.iter().map(|a| a.key.clone()).collect();
            let info = RunRecord {
                attempt: record.attempt,
                generation: record.generation,
                worker_id: record.worker_id.clone(),
                harness_version: record.harness_version.clone(),
                exit_code: record.exit_code,
                run_ms: record.run_ms,
            };
            (record.outcome, artifacts, Some(info))
        }
        // The older shape: a bare outcome, its files at the job's flat path.
        Some(FoundRecord {
            stored: StoredOutcome::Bare(outcome),
            ..
        }) => (outcome, flat_files(store, &job).await?, None),
        None => {
            // The oldest shape: no record, a result at the job's flat path.
            let result_key = JobKey::new(&job).result().into_string();
            let Some(bytes) = read_optional(store, &result_key).await? else {
                return Ok(None);
            };
            let result = result_value(&bytes, &result_key)?;
            let run =
                cowork_core::verdict::view_with_rederived_verdict(&result).map_err(|error| {
                    ReportError::Malformed {
                        key: result_key.clone(),
                        what: "result",
                        message: error.to_string(),
                    }
                })?;
            let mut stored = StoredRun::completed(unit, repeat_index, result);
            stored.artifacts = flat_files(store, &job).await?;
            return Ok(Some(ReadJob {
                run: stored,
                outcome: JobOutcome::Completed { run },
            }));
        }
    };
    let mut artifacts: Vec<String> = artifacts;
    artifacts.sort();
    let result_key = artifacts.iter().find(|key| is_result(key)).cloned();
    let result = match &result_key {
        Some(key) => read_result(store, batch_id, key).await?,
        None => Value::Null,
    };
    let run_outcome = match &outcome {
        JobOutcome::Completed { .. } if result.is_null() => {
            return Err(ReportError::Malformed {
                key: record_key.unwrap_or_default(),
                what: "job record",
                message: format!("a completed job whose record names no {}", names::RESULT),
            });
        }
        JobOutcome::Completed { .. } => RunOutcome::Completed,
        JobOutcome::Unanswered { message, .. } => RunOutcome::Unanswered {
            message: message.clone(),
        },
        JobOutcome::Error { category, message } => RunOutcome::Error {
            category: category.to_string(),
            message: message.clone(),
        },
    };
    // The stored result is the truth for a completed run (as `cowork rollup` reads it).
    // (Should the result not read as a run, the record's own view stands.)
    let outcome = match outcome {
        JobOutcome::Completed { run } => JobOutcome::Completed {
            run: cowork_core::verdict::view_with_rederived_verdict(&result).unwrap_or(run),
        },
        other => other,
    };
    Ok(Some(ReadJob {
        run: StoredRun {
            unit,
            repeat_index,
            result,
            discarded: false,
            outcome: run_outcome,
            artifacts,
            record,
        },
        outcome,
    }))
}

fn is_result(key: &str) -> bool {
    key.rsplit('/').next() == Some(names::RESULT)
}

async fn read_result(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
    key: &str,
) -> Result<Value, ReportError> {
    let bytes = read(store, batch_id, key, Missing::Report).await?;
    result_value(&bytes, key)
}

/// A stored `result.json` as a JSON object.
fn result_value(bytes: &[u8], key: &str) -> Result<Value, ReportError> {
    let result: Value = parse(bytes, key, "result")?;
    if !result.is_object() {
        return Err(ReportError::Malformed {
            key: key.to_owned(),
            what: "result",
            message: "not a json object".to_owned(),
        });
    }
    Ok(result)
}
