//! A job's stored outcome and result, found through the job's record (`schema::layout`).
//!
//! Every attempt of a job writes its artifacts under a directory of its own; the job's record
//! (`outcome.json`, one per generation, written create-if-absent by the first attempt that
//! stored everything) names the attempt's artifacts with their digests. Readers go through the
//! record, never by guessing a path, and check each artifact against the digest the record
//! gives. Stores written before records existed hold a bare `JobOutcome` in `outcome.json`;
//! its artifacts are at the job's own directory.

use cowork_fabric::{ArtifactError, ArtifactStore};
use cowork_schema::event::{JobOutcome, StoredOutcome};
use cowork_schema::ids::JobId;
use cowork_schema::layout::{JobKey, names};

/// Why a job's stored files could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StoredJobError {
    #[error("reading {key}")]
    Store {
        key: String,
        #[source]
        source: ArtifactError,
    },
    #[error("{key} is unreadable: {message}")]
    Unreadable { key: String, message: String },
    #[error("{key} does not match its job record: sha256 {found}, the record says {expected}")]
    Mismatch {
        key: String,
        expected: String,
        found: String,
    },
}

impl StoredJobError {
    /// `true` when reading again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoredJobError::Store { source, .. } if source.is_transient())
    }
}

/// Where one stored artifact is, and the digest it must have when the record gives one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactLocation {
    pub key: String,
    pub sha256: Option<String>,
}

/// What the store holds about one job.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredJob {
    /// The generation whose record this is.
    pub generation: u32,
    /// The delivery attempt whose files the record names (0 for the bare shape written before
    /// job records, whose files are in the job's own directory).
    pub attempt: u32,
    /// The harness version the attempt reported, when its record says.
    pub harness_version: Option<String>,
    pub outcome: JobOutcome,
    /// The completed run's `result.json`, when the outcome is a completed run.
    pub result: Option<ArtifactLocation>,
}

/// One job record as stored: its generation and key, and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct FoundRecord {
    pub generation: u32,
    pub key: String,
    pub stored: StoredOutcome,
}

/// Reads the record of `job` for `generation`; `None` when there is none.
async fn read_record(
    store: &dyn ArtifactStore,
    job: &JobId,
    generation: u32,
) -> Result<Option<FoundRecord>, StoredJobError> {
    let key = JobKey::new(job).record(generation).into_string();
    let bytes = match store.get(&key).await {
        Ok(bytes) => bytes,
        Err(ArtifactError::NotFound { .. }) => return Ok(None),
        Err(source) => return Err(StoredJobError::Store { key, source }),
    };
    let stored = StoredOutcome::parse(&bytes).map_err(|error| StoredJobError::Unreadable {
        key: key.clone(),
        message: error.to_string(),
    })?;
    Ok(Some(FoundRecord {
        generation,
        key,
        stored,
    }))
}

/// What the record says of the job and where its result is.
fn stored_job(job: &JobId, found: FoundRecord) -> StoredJob {
    let generation = found.generation;
    let outcome = match found.stored {
        StoredOutcome::Record(record) => {
            let result = matches!(record.outcome, JobOutcome::Completed { .. })
                .then(|| record.artifact(names::RESULT))
                .flatten()
                .map(|artifact| ArtifactLocation {
                    key: artifact.key.clone(),
                    sha256: Some(artifact.sha256.clone()),
                });
            return StoredJob {
                generation,
                attempt: record.attempt,
                harness_version: record.harness_version,
                outcome: record.outcome,
                result,
            };
        }
        StoredOutcome::Bare(outcome) => outcome,
    };
    // The shape written before job records: a bare outcome, artifacts in the job's directory.
    let result = matches!(outcome, JobOutcome::Completed { .. }).then(|| ArtifactLocation {
        key: JobKey::new(job).result().into_string(),
        sha256: None,
    });
    StoredJob {
        generation,
        attempt: 0,
        harness_version: None,
        outcome,
        result,
    }
}

/// The generations of `job` that have a record besides generation 0, newest first.
async fn later_generations(
    store: &dyn ArtifactStore,
    job: &JobId,
) -> Result<Vec<u32>, StoredJobError> {
    let job_key = JobKey::new(job);
    let prefix = job_key.prefix();
    let keys = store
        .list(prefix.as_str())
        .await
        .map_err(|source| StoredJobError::Store {
            key: prefix.into_string(),
            source,
        })?;
    let mut generations: Vec<u32> = keys
        .iter()
        .filter_map(|key| job_key.record_generation(key))
        .filter(|generation| *generation > 0)
        .collect();
    generations.sort_unstable_by(|a, b| b.cmp(a));
    Ok(generations)
}

/// The job's stored outcome: generation 0's record when it holds a completed run (the usual
/// case, one read), else the newest generation's record — a job runs again after `cowork
/// resume` only when it had no result. `None` when the job has no record at all.
pub async fn read_stored_job(
    store: &dyn ArtifactStore,
    job: &JobId,
) -> Result<Option<StoredJob>, StoredJobError> {
    Ok(read_job_record(store, job)
        .await?
        .map(|found| stored_job(job, found)))
}

/// The record that counts for `job`, by the rule of [`read_stored_job`]: generation 0's when
/// it holds a completed run (one read, no listing), else the newest generation's. `None` when
/// the job has no record at all.
pub async fn read_job_record(
    store: &dyn ArtifactStore,
    job: &JobId,
) -> Result<Option<FoundRecord>, StoredJobError> {
    let first = read_record(store, job, 0).await?;
    if let Some(found) = &first
        && matches!(found.stored.outcome(), JobOutcome::Completed { .. })
    {
        return Ok(first);
    }
    for generation in later_generations(store, job).await? {
        if let Some(found) = read_record(store, job, generation).await? {
            return Ok(Some(found));
        }
    }
    Ok(first)
}

/// Reads a stored artifact and checks it against the digest its record gives.
pub async fn read_artifact(
    store: &dyn ArtifactStore,
    location: &ArtifactLocation,
) -> Result<Vec<u8>, StoredJobError> {
    let bytes = store
        .get(&location.key)
        .await
        .map_err(|source| StoredJobError::Store {
            key: location.key.clone(),
            source,
        })?;
    if let Some(expected) = &location.sha256 {
        let found = cowork_fabric::sha256_hex(&bytes);
        if &found != expected {
            return Err(StoredJobError::Mismatch {
                key: location.key.clone(),
                expected: expected.clone(),
                found,
            });
        }
    }
    Ok(bytes)
}

/// The completed run's `result.json` of `job` and its key: through the job's record, or at the
/// job's own directory when no record names one.
pub async fn read_result(
    store: &dyn ArtifactStore,
    job: &JobId,
) -> Result<(String, Vec<u8>), StoredJobError> {
    let location = read_stored_job(store, job)
        .await?
        .and_then(|stored| stored.result)
        .unwrap_or_else(|| ArtifactLocation {
            key: JobKey::new(job).result().into_string(),
            sha256: None,
        });
    let bytes = read_artifact(store, &location).await?;
    Ok((location.key, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_fabric::embedded::DirArtifactStore;
    use cowork_schema::event::{ArtifactRef, ErrorCategory, JobRecord};
    use cowork_schema::ids::{BatchId, UnitRef};
    use cowork_schema::layout;
    use cowork_schema::run_result::RunView;

    fn run() -> RunView {
        serde_json::from_value(serde_json::json!({
            "pass": true, "signals": [], "assertions": [], "nonDeterministic": false,
            "provenanceModel": "m", "provenanceSkill": "s", "ablated": false
        }))
        .expect("a minimal run view")
    }

    async fn put_record(
        store: &DirArtifactStore,
        job: &JobId,
        generation: u32,
        attempt: u32,
        outcome: JobOutcome,
    ) -> String {
        let key = layout::artifact_key(job, generation, attempt, "result.json");
        let body = format!("{{\"attempt\":{attempt}}}");
        let stored = store.put(&key, body.into_bytes()).await.expect("put");
        let record = JobRecord {
            outcome,
            artifacts: vec![stored],
            attempt,
            generation,
            worker_id: "w".into(),
            harness_version: None,
            exit_code: Some(0),
            run_ms: 1,
        };
        store
            .put(
                &layout::job_record_key(job, generation),
                serde_json::to_vec(&record).expect("serializes"),
            )
            .await
            .expect("put");
        key
    }

    #[tokio::test]
    async fn results_are_found_through_the_record_of_the_right_generation() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = DirArtifactStore::new(dir.path());
        let batch = BatchId::new("b1").expect("valid literal");
        let job = JobId::new(&batch, UnitRef::Cell(0), Some(3));

        // Nothing stored: no record, and no result.
        assert_eq!(read_stored_job(&store, &job).await.expect("read"), None);
        assert!(read_result(&store, &job).await.is_err());

        // Attempt 2 of generation 0 won (attempt 1's result stays at the short path).
        store
            .put(
                "batches/b1/jobs/c0/r3/result.json",
                b"{\"attempt\":1}".to_vec(),
            )
            .await
            .expect("put");
        let key = put_record(&store, &job, 0, 2, JobOutcome::Completed { run: run() }).await;
        assert_eq!(key, "batches/b1/jobs/c0/r3/g0a2/result.json");
        let (read_key, bytes) = read_result(&store, &job).await.expect("read");
        assert_eq!(
            (read_key.as_str(), bytes.as_slice()),
            (key.as_str(), &b"{\"attempt\":2}"[..])
        );

        // A job that ended in error in generation 0 and ran again after a resume.
        let other = JobId::new(&batch, UnitRef::Cell(1), Some(0));
        let error = JobOutcome::Error {
            category: ErrorCategory::Infra,
            message: "lost".into(),
        };
        put_record(&store, &other, 0, 1, error).await;
        let key = put_record(&store, &other, 2, 1, JobOutcome::Completed { run: run() }).await;
        let stored = read_stored_job(&store, &other)
            .await
            .expect("read")
            .expect("a record");
        assert_eq!(stored.generation, 2);
        assert_eq!(read_result(&store, &other).await.expect("read").0, key);
    }

    #[tokio::test]
    async fn a_result_that_does_not_match_its_record_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = DirArtifactStore::new(dir.path());
        let batch = BatchId::new("b1").expect("valid literal");
        let job = JobId::new(&batch, UnitRef::File(0), None);
        let record = JobRecord {
            outcome: JobOutcome::Completed { run: run() },
            artifacts: vec![ArtifactRef {
                key: "batches/b1/jobs/f0/result.json".into(),
                size: 2,
                sha256: "0".repeat(64),
            }],
            attempt: 1,
            generation: 0,
            worker_id: "w".into(),
            harness_version: None,
            exit_code: None,
            run_ms: 0,
        };
        store
            .put("batches/b1/jobs/f0/result.json", b"{}".to_vec())
            .await
            .expect("put");
        store
            .put(
                "batches/b1/jobs/f0/outcome.json",
                serde_json::to_vec(&record).expect("serializes"),
            )
            .await
            .expect("put");
        let error = read_result(&store, &job).await.expect_err("a mismatch");
        assert!(matches!(error, StoredJobError::Mismatch { .. }), "{error}");
    }

    #[tokio::test]
    async fn a_bare_outcome_means_artifacts_at_the_job_directory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = DirArtifactStore::new(dir.path());
        let batch = BatchId::new("b1").expect("valid literal");
        let job = JobId::new(&batch, UnitRef::File(1), None);
        store
            .put(
                "batches/b1/jobs/f1/outcome.json",
                serde_json::to_vec(&JobOutcome::Completed { run: run() }).expect("serializes"),
            )
            .await
            .expect("put");
        store
            .put("batches/b1/jobs/f1/result.json", b"{\"legacy\":1}".to_vec())
            .await
            .expect("put");
        let stored = read_stored_job(&store, &job)
            .await
            .expect("read")
            .expect("a record");
        assert_eq!(
            stored.result,
            Some(ArtifactLocation {
                key: "batches/b1/jobs/f1/result.json".into(),
                sha256: None
            })
        );
        assert_eq!(
            read_result(&store, &job).await.expect("read").1,
            b"{\"legacy\":1}"
        );
    }
}
