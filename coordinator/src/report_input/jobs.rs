//! Finding and reading a batch's jobs: each job's files are found through its record
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

use std::collections::BTreeMap;

use cowork_fabric::ArtifactStore;
use cowork_schema::BatchId;
use cowork_schema::event::{JobOutcome, StoredOutcome};
use cowork_schema::ids::{JobId, UnitRef};
use cowork_schema::layout::JOB_RECORD_FILE;
use serde_json::Value;

use super::{Missing, ReportError, parse, read};
use cowork_core::report::{RunOutcome, RunRecord, StoredRun};

/// The name of a run's result among its artifacts.
const RESULT_FILE: &str = "result.json";

/// The keys the store holds for one job.
#[derive(Debug, Default)]
pub(super) struct JobKeys {
    /// Files directly in the job's directory (attempt 1 of generation 0, or the older shapes).
    flat: Vec<String>,
    /// Record keys by generation.
    records: BTreeMap<u32, String>,
}

/// The jobs of a batch found under `batches/<id>/jobs/`, by (unit, repeat index).
pub(super) type JobsFound = BTreeMap<(UnitRef, Option<u32>), JobKeys>;

/// Groups every key under the batch's `jobs/` prefix by the job it belongs to. Keys that name
/// no job of this batch are ignored.
pub(super) fn locate_jobs(batch_id: &BatchId, jobs_prefix: &str, keys: Vec<String>) -> JobsFound {
    let mut found = JobsFound::new();
    for key in keys {
        let Some((unit, repeat_index, place)) = key
            .strip_prefix(jobs_prefix)
            .and_then(|rest| place_of(batch_id, rest))
        else {
            continue;
        };
        let job = found.entry((unit, repeat_index)).or_default();
        match place {
            Place::Flat { is_record } => {
                if is_record {
                    job.records.insert(0, key.clone());
                }
                job.flat.push(key);
            }
            Place::Record(generation) => {
                job.records.insert(generation, key);
            }
            Place::Other => {}
        }
    }
    for job in found.values_mut() {
        job.flat.sort();
    }
    found
}

/// Where a key lies within its job's directory.
enum Place {
    /// Directly in the job's directory; `is_record` for its `outcome.json`.
    Flat { is_record: bool },
    /// `g<G>/outcome.json`: the record of generation `G`.
    Record(u32),
    /// Anything else (an attempt directory's files are found through the record).
    Other,
}

/// The job and place of a key relative to `jobs/`: `<unit>/r<k>/…` for a repeat job,
/// `<unit>/…` without repeat.
fn place_of(batch_id: &BatchId, rest: &str) -> Option<(UnitRef, Option<u32>, Place)> {
    let segments: Vec<&str> = rest.split('/').collect();
    let repeat_job = match segments.as_slice() {
        [unit, repeat, _, ..] => JobId::parse(&format!("{batch_id}/{unit}/{repeat}"))
            .map(|(_, unit, repeat_index)| (unit, repeat_index, &segments[2..])),
        _ => None,
    };
    let (unit, repeat_index, remainder) = match repeat_job {
        Some(found) => found,
        None => match segments.as_slice() {
            [unit, _, ..] => {
                let (_, unit, repeat_index) = JobId::parse(&format!("{batch_id}/{unit}"))?;
                (unit, repeat_index, &segments[1..])
            }
            _ => return None,
        },
    };
    let place = match remainder {
        [name] => Place::Flat {
            is_record: *name == JOB_RECORD_FILE,
        },
        [dir, name] if *name == JOB_RECORD_FILE => match record_generation(dir) {
            Some(generation) => Place::Record(generation),
            None => Place::Other,
        },
        _ => Place::Other,
    };
    Some((unit, repeat_index, place))
}

/// `g<G>` (a record directory) gives `G`; attempt directories (`g<G>a<A>`) give nothing.
fn record_generation(dir: &str) -> Option<u32> {
    let digits = dir.strip_prefix('g')?;
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A job read back: the run the report shows and the outcome the reducer would fold.
pub(super) struct ReadJob {
    pub(super) run: StoredRun,
    pub(super) outcome: JobOutcome,
}

/// Reads one job through its latest record. `None` when the job left no record and no result
/// (it never finished).
pub(super) async fn read_job(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
    (unit, repeat_index): (UnitRef, Option<u32>),
    keys: &JobKeys,
) -> Result<Option<ReadJob>, ReportError> {
    let (outcome, artifacts, record) = match keys.records.last_key_value() {
        Some((_, record_key)) => {
            let bytes = read(store, batch_id, record_key, Missing::Report).await?;
            let stored = StoredOutcome::parse(&bytes).map_err(|error| ReportError::Malformed {
                key: record_key.clone(),
                what: "job record",
                message: error.to_string(),
            })?;
            match stored {
                StoredOutcome::Record(record) => {
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
                StoredOutcome::Bare(outcome) => (outcome, keys.flat.clone(), None),
            }
        }
        None => {
            let Some(result_key) = keys.flat.iter().find(|key| is_result(key)) else {
                return Ok(None);
            };
            let result = read_result(store, batch_id, result_key).await?;
            let run =
                cowork_core::verdict::view_with_rederived_verdict(&result).map_err(|error| {
                    ReportError::Malformed {
                        key: result_key.clone(),
                        what: "result",
                        message: error.to_string(),
                    }
                })?;
            let mut stored = StoredRun::completed(unit, repeat_index, result);
            stored.artifacts = keys.flat.clone();
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
                key: keys
                    .records
                    .last_key_value()
                    .map(|(_, key)| key.clone())
                    .unwrap_or_default(),
                what: "job record",
                message: "a completed job whose record names no result.json".to_owned(),
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
    key.rsplit('/').next() == Some(RESULT_FILE)
}

async fn read_result(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
    key: &str,
) -> Result<Value, ReportError> {
    let bytes = read(store, batch_id, key, Missing::Report).await?;
    let result: Value = parse(&bytes, key, "result")?;
    if !result.is_object() {
        return Err(ReportError::Malformed {
            key: key.to_owned(),
            what: "result",
            message: "not a json object".to_owned(),
        });
    }
    Ok(result)
}
