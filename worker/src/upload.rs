//! Storing a job's artifacts and its record (decisions.md#storage, keys from `schema::layout`).
//!
//! Each attempt writes its artifacts under its own directory (`layout::AttemptKey::dir`), so two
//! deliveries of one job never overwrite each other's files. The job's record is written last
//! and create-if-absent: the first attempt that stores one wins, and a later attempt reads it
//! back instead of claiming the job for itself.
//!
//! Every retry loop here stops at a deadline. A store that stays down must not hold a job (and
//! the lease on it) forever: the caller then decides what the failure means — hand the job back
//! when nothing was spent, or report the run as paid but unstored when the harness ran.

use cowork_fabric::backoff::Backoff;
use cowork_fabric::{ArtifactError, ArtifactStore, PutOutcome};
use cowork_schema::event::{ArtifactRef, JobRecord};
use cowork_schema::ids::JobId;
use cowork_schema::layout::{AttemptKey, JobKey};
use tokio::time::Instant;

use crate::executor::{Artifact, ArtifactSource};

/// How long retries may go on, and how they back off.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub backoff: Backoff,
    /// Past this instant no new attempt starts; the last error is returned.
    pub deadline: Instant,
}

impl RetryPolicy {
    /// The wait before the next attempt, or `None` when it would end past the deadline.
    pub fn next_wait(&self, failed_attempts: u32) -> Option<std::time::Duration> {
        let wait = self.backoff.delay(failed_attempts);
        (Instant::now() + wait <= self.deadline).then_some(wait)
    }
}

/// Where one attempt of a job stores its files.
#[derive(Clone, Copy, Debug)]
pub struct AttemptKeys<'a> {
    pub job: &'a JobId,
    pub generation: u32,
    pub attempt: u32,
}

impl AttemptKeys<'_> {
    /// The key of artifact `name` of this attempt.
    pub fn artifact(&self, name: &str) -> String {
        self.attempt_key().artifact(name).into_string()
    }

    /// The key of the job's record for this attempt's generation.
    pub fn record(&self) -> String {
        self.attempt_key().record().into_string()
    }

    fn attempt_key(&self) -> AttemptKey<'_> {
        JobKey::new(self.job).attempt(self.generation, self.attempt)
    }
}

/// Runs `operation` until it succeeds, fails permanently, or `policy`'s deadline leaves no
/// room for another attempt. `what` and `key` name the operation in the retry warnings.
async fn with_retries<T, F, Fut>(
    policy: RetryPolicy,
    what: &str,
    key: &str,
    mut operation: F,
) -> Result<T, ArtifactError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ArtifactError>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match operation().await {
            Ok(value) => return Ok(value),
            Err(error) if error.is_transient() => {
                let Some(wait) = policy.next_wait(attempt) else {
                    tracing::warn!(s3_key = %key, operation = what, attempt, error = %error, "store operation failed, giving up at the deadline");
                    return Err(error);
                };
                tracing::warn!(s3_key = %key, operation = what, attempt, error = %error, "store operation failed, retrying");
                tokio::time::sleep(wait).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Stores `bytes` under `key`, retrying transient failures until `policy`'s deadline.
pub async fn put_with_retry(
    store: &dyn ArtifactStore,
    key: &str,
    bytes: Vec<u8>,
    policy: RetryPolicy,
) -> Result<ArtifactRef, ArtifactError> {
    with_retries(policy, "artifact upload", key, || {
        store.put(key, bytes.clone())
    })
    .await
}

/// Uploads every artifact of one attempt and returns their references in the artifacts'
/// order. The uploads overlap: each is a round trip to the store, and a job has several.
pub async fn upload_artifacts(
    store: &dyn ArtifactStore,
    keys: AttemptKeys<'_>,
    artifacts: &[Artifact],
    policy: RetryPolicy,
) -> Result<Vec<ArtifactRef>, ArtifactError> {
    let uploads = artifacts.iter().map(|artifact| async move {
        let key = keys.artifact(&artifact.name);
        let bytes = match &artifact.source {
            ArtifactSource::Bytes(bytes) => bytes.clone(),
            ArtifactSource::File(path) => {
                tokio::fs::read(path)
                    .await
                    .map_err(|e| ArtifactError::Failed {
                        key: key.clone(),
                        message: format!("reading {}: {e}", path.display()),
                    })?
            }
        };
        put_with_retry(store, &key, bytes, policy).await
    });
    futures::future::try_join_all(uploads).await
}

/// What writing a job's record found.
#[derive(Clone, Debug, PartialEq)]
pub enum RecordWrite {
    /// This attempt's record is the job's record.
    Created,
    /// Another attempt stored the job's record first; it is returned as stored.
    Taken(Box<JobRecord>),
}

/// Writes `record` as the job's record, create-if-absent. When another attempt's record is
/// already there, that one is read back and returned: the first attempt that stored a record
/// owns the job.
pub async fn store_record(
    store: &dyn ArtifactStore,
    key: &str,
    record: &JobRecord,
    policy: RetryPolicy,
) -> Result<RecordWrite, ArtifactError> {
    let bytes = cowork_schema::json_number::to_vec(record).expect("a job record always serializes");
    let outcome = with_retries(policy, "storing the job record", key, || {
        store.put_if_absent(key, bytes.clone())
    })
    .await?;
    match outcome {
        PutOutcome::Created(_) => Ok(RecordWrite::Created),
        PutOutcome::AlreadyExists => {
            let stored = read_record(store, key, policy).await?;
            // A record vanishing between the conditional put and the read is not something the
            // layout allows; report it as a failed read rather than claiming the job.
            stored
                .map(|record| RecordWrite::Taken(Box::new(record)))
                .ok_or_else(|| ArtifactError::Failed {
                    key: key.to_owned(),
                    message: "the record existed a moment ago and is gone".to_owned(),
                })
        }
    }
}

/// Reads the job record under `key`; `None` when there is none. A record that does not parse
/// is an error: it names artifacts nobody can trust.
pub async fn read_record(
    store: &dyn ArtifactStore,
    key: &str,
    policy: RetryPolicy,
) -> Result<Option<JobRecord>, ArtifactError> {
    let bytes = with_retries(policy, "reading the job record", key, || async {
        match store.get(key).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(ArtifactError::NotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    })
    .await?;
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|error| ArtifactError::Failed {
            key: key.to_owned(),
            message: format!("unreadable job record: {error}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_schema::ids::{BatchId, UnitRef};

    #[test]
    fn attempts_write_under_their_own_directory() {
        let batch = BatchId::new("b1").expect("valid literal");
        let job = JobId::new(&batch, UnitRef::Cell(2), Some(5));
        let check = |generation, attempt, artifact: &str, record: &str| {
            let keys = AttemptKeys {
                job: &job,
                generation,
                attempt,
            };
            assert_eq!(keys.artifact("result.json"), artifact);
            assert_eq!(keys.record(), record);
        };
        check(
            0,
            1,
            "batches/b1/jobs/c2/r5/result.json",
            "batches/b1/jobs/c2/r5/outcome.json",
        );
        check(
            0,
            3,
            "batches/b1/jobs/c2/r5/g0a3/result.json",
            "batches/b1/jobs/c2/r5/outcome.json",
        );
        check(
            2,
            1,
            "batches/b1/jobs/c2/r5/g2a1/result.json",
            "batches/b1/jobs/c2/r5/g2/outcome.json",
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_at_the_deadline() {
        let policy = RetryPolicy {
            backoff: Backoff::new(
                std::time::Duration::from_secs(1),
                std::time::Duration::from_secs(4),
            ),
            deadline: Instant::now() + std::time::Duration::from_secs(10),
        };
        let calls = std::sync::atomic::AtomicU32::new(0);
        let counter = &calls;
        let started = Instant::now();
        let result: Result<(), ArtifactError> =
            with_retries(policy, "test", "k", move || async move {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Err(ArtifactError::Transient {
                    key: "k".into(),
                    message: "down".into(),
                })
            })
            .await;
        assert!(matches!(result, Err(ArtifactError::Transient { .. })));
        // No wait ever ends past the deadline, so giving up happens at or before it.
        assert!(started.elapsed() <= std::time::Duration::from_secs(10));
        assert!(calls.load(std::sync::atomic::Ordering::Relaxed) >= 3);

        let permanent: Result<(), ArtifactError> = with_retries(policy, "test", "k", || async {
            Err(ArtifactError::Failed {
                key: "k".into(),
                message: "denied".into(),
            })
        })
        .await;
        assert!(matches!(permanent, Err(ArtifactError::Failed { .. })));
    }
}
