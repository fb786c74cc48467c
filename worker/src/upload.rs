//! Storing a job's artifacts under `batches/<batch>/jobs/<job>/` (brief §5).

use cowork_fabric::{ArtifactError, ArtifactStore};
use cowork_schema::JobId;
use cowork_schema::event::ArtifactRef;
use tokio_util::sync::CancellationToken;

use crate::executor::{Artifact, ArtifactSource};
use cowork_fabric::backoff::Backoff;

/// The store key of artifact `name` of `job`.
pub fn job_key(job: &JobId, name: &str) -> String {
    let batch = job.as_str().split('/').next().unwrap_or_default();
    format!("batches/{batch}/jobs/{}/{name}", job.local_part())
}

/// Stores `bytes` under `key`, retrying transient failures with `backoff` until `give_up` is
/// cancelled. A permanent failure is returned at once.
pub async fn put_with_retry(
    store: &dyn ArtifactStore,
    key: &str,
    bytes: Vec<u8>,
    backoff: Backoff,
    give_up: &CancellationToken,
) -> Result<ArtifactRef, ArtifactError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match store.put(key, bytes.clone()).await {
            Ok(reference) => return Ok(reference),
            Err(error) if error.is_transient() => {
                tracing::warn!(s3_key = %key, attempt, error = %error, "artifact upload failed, retrying");
                // Cancellation here only abandons the retry loop; nothing was acked yet, so the
                // job is redelivered and its artifacts written again.
                tokio::select! {
                    _ = give_up.cancelled() => return Err(error),
                    _ = tokio::time::sleep(backoff.delay(attempt)) => {}
                }
            }
            Err(error) => return Err(error),
        }
    }
}

/// Uploads every artifact of a job and returns their references in the artifacts' order. The
/// uploads overlap: each is a round trip to the store, and a job has several.
pub async fn upload_artifacts(
    store: &dyn ArtifactStore,
    job: &JobId,
    artifacts: &[Artifact],
    backoff: Backoff,
    give_up: &CancellationToken,
) -> Result<Vec<ArtifactRef>, ArtifactError> {
    let uploads = artifacts.iter().map(|artifact| async move {
        let key = job_key(job, &artifact.name);
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
        put_with_retry(store, &key, bytes, backoff, give_up).await
    });
    futures::future::try_join_all(uploads).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_schema::ids::{BatchId, UnitRef};

    #[test]
    fn job_keys_follow_the_storage_layout() {
        let batch = BatchId::new("b1").expect("valid literal");
        let job = JobId::new(&batch, UnitRef::Cell(2), Some(5));
        assert_eq!(
            job_key(&job, "result.json"),
            "batches/b1/jobs/c2/r5/result.json"
        );
        let job = JobId::new(&batch, UnitRef::File(0), None);
        assert_eq!(
            job_key(&job, "outcome.json"),
            "batches/b1/jobs/f0/outcome.json"
        );
    }
}
