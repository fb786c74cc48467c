//! [`ApiArtifactReader`]: the read side of an [`ArtifactStore`] over a coordinator's API, for
//! reports of batches only the coordinator can read.

use async_trait::async_trait;
use cowork_fabric::{ArtifactError, ArtifactStore, PutOutcome};
use cowork_schema::BatchId;
use cowork_schema::event::ArtifactRef;
use cowork_schema::layout::{BatchKey, StorePrefix};

use crate::{ClientError, CoordinatorClient};

/// The read side of an [`ArtifactStore`] over a coordinator's API: one batch's stored objects
/// (`GET /v1/batches/{id}/artifacts[/{path}]`), for reports of batches only the coordinator
/// can read. Writes are refused.
#[derive(Debug)]
pub struct ApiArtifactReader {
    client: CoordinatorClient,
    batch_id: BatchId,
    /// `batches/<id>/`: the only keys this reader serves.
    prefix: StorePrefix,
}

impl ApiArtifactReader {
    /// A reader of `batch_id`'s objects through `client`.
    pub fn new(client: CoordinatorClient, batch_id: BatchId) -> ApiArtifactReader {
        let prefix = BatchKey::new(&batch_id).prefix();
        ApiArtifactReader {
            client,
            batch_id,
            prefix,
        }
    }

    fn refused(key: &str) -> ArtifactError {
        ArtifactError::Failed {
            key: key.to_owned(),
            message: "the coordinator's artifacts are read-only here".to_owned(),
        }
    }
}

/// Maps a client error about `key` to the store's vocabulary.
fn artifact_error(key: &str, error: ClientError) -> ArtifactError {
    match error {
        ClientError::NotFound { .. } => ArtifactError::NotFound {
            key: key.to_owned(),
        },
        error if error.is_transient() => ArtifactError::Transient {
            key: key.to_owned(),
            message: error.to_string(),
        },
        error => ArtifactError::Failed {
            key: key.to_owned(),
            message: error.to_string(),
        },
    }
}

#[async_trait]
impl ArtifactStore for ApiArtifactReader {
    async fn put(&self, key: &str, _bytes: Vec<u8>) -> Result<ArtifactRef, ArtifactError> {
        Err(ApiArtifactReader::refused(key))
    }

    async fn put_if_absent(&self, key: &str, _bytes: Vec<u8>) -> Result<PutOutcome, ArtifactError> {
        Err(ApiArtifactReader::refused(key))
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, ArtifactError> {
        let Some(path) = self.prefix.relative(key) else {
            return Err(ArtifactError::NotFound {
                key: key.to_owned(),
            });
        };
        self.client
            .artifact(&self.batch_id, path)
            .await
            .map_err(|error| artifact_error(key, error))
    }

    async fn get_file(&self, key: &str, path: &std::path::Path) -> Result<u64, ArtifactError> {
        let Some(relative) = self.prefix.relative(key) else {
            return Err(ArtifactError::NotFound {
                key: key.to_owned(),
            });
        };
        self.client
            .download_artifact(&self.batch_id, relative, path)
            .await
            .map_err(|error| artifact_error(key, error))
    }

    async fn exists(&self, key: &str) -> Result<bool, ArtifactError> {
        match self.get(key).await {
            Ok(_) => Ok(true),
            Err(ArtifactError::NotFound { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, ArtifactError> {
        // The coordinator lists only under the prefix when it can (a job's directory, not the
        // whole batch); one that cannot lists everything, and the filter below still holds.
        let under = self.prefix.relative(prefix).unwrap_or("");
        let paths = self
            .client
            .artifacts_under(&self.batch_id, under)
            .await
            .map_err(|error| artifact_error(prefix, error))?;
        let mut keys: Vec<String> = paths
            .into_iter()
            .map(|path| self.prefix.key(&path).into_string())
            .filter(|key| key.starts_with(prefix))
            .collect();
        keys.sort();
        Ok(keys)
    }
}
