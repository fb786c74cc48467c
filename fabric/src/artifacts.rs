//! The `ArtifactStore` port: bundles, job artifacts and batch documents under the keys of
//! decisions.md#storage (`bundles/<sha256>.tar.zst`, `batches/<batch>/…`).

use async_trait::async_trait;
use cowork_schema::event::ArtifactRef;

/// Reads one caller keeps in flight when it reads many stored files (every result of a batch for
/// its envelope or report, every job record of a resumed batch). Each read is a round trip: an
/// object store answers a small GET in tens of milliseconds (S3's first byte; a loopback s3s-fs,
/// whose replies wait for delayed ACKs, in ~30 ms), so the reads of a large batch are
/// latency-bound and the number in flight sets the pace: the 640 results of the scaling
/// benchmark took 0.9 s to read back 32 at a time. Each read in flight holds one file's bytes.
pub const PARALLEL_READS: usize = 128;

/// Errors of the artifact store.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("artifact {key} not found")]
    NotFound { key: String },
    /// The key is not a valid relative key (empty segment, `..`, leading `/`, …).
    #[error("invalid artifact key {key:?}: {reason}")]
    InvalidKey { key: String, reason: &'static str },
    /// The stored bytes do not match the recorded sha256.
    #[error("artifact {key} is corrupt: expected sha256 {expected}, found {found}")]
    Corrupt {
        key: String,
        expected: String,
        found: String,
    },
    /// A temporary failure (timeout, 5xx, disk busy); the caller may retry.
    #[error("artifact store is unavailable for {key}: {message}")]
    Transient { key: String, message: String },
    /// A permanent failure.
    #[error("artifact store failed for {key}: {message}")]
    Failed { key: String, message: String },
}

impl ArtifactError {
    /// `true` when retrying the same call may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, ArtifactError::Transient { .. })
    }
}

/// Result of a create-if-absent put.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    Created(ArtifactRef),
    /// An object already exists under the key; its bytes were not replaced.
    AlreadyExists,
}

/// The artifact store port.
#[async_trait]
pub trait ArtifactStore: Send + Sync {
    /// Stores `bytes` under `key`, replacing what was there; returns the key, size and sha256.
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<ArtifactRef, ArtifactError>;
    /// Stores `bytes` under `key` only if nothing is stored there yet.
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<PutOutcome, ArtifactError>;
    /// Stores the file at `path` under `key`, replacing what was there; returns the key, size
    /// and sha256. For documents too large to hold in memory (a million-job batch's envelope):
    /// stores that can stream from the file (a directory copy, an S3 multipart upload) do so;
    /// the default reads the file whole and calls [`ArtifactStore::put`].
    async fn put_file(
        &self,
        key: &str,
        path: &std::path::Path,
    ) -> Result<ArtifactRef, ArtifactError> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|error| ArtifactError::Failed {
                key: key.to_owned(),
                message: format!("reading {}: {error}", path.display()),
            })?;
        self.put(key, bytes).await
    }
    /// Reads the object under `key`.
    async fn get(&self, key: &str) -> Result<Vec<u8>, ArtifactError>;
    /// Copies the object under `key` into the file at `path`; returns its size. For documents
    /// too large to hold in memory (a big batch's envelope), read back with a streaming parser:
    /// stores that can copy without holding the object (a directory copy) do so; the default
    /// reads it whole with [`ArtifactStore::get`] and writes it.
    async fn get_file(&self, key: &str, path: &std::path::Path) -> Result<u64, ArtifactError> {
        let bytes = self.get(key).await?;
        let size = bytes.len() as u64;
        tokio::fs::write(path, bytes)
            .await
            .map_err(|error| ArtifactError::Failed {
                key: key.to_owned(),
                message: format!("writing {}: {error}", path.display()),
            })?;
        Ok(size)
    }
    /// `true` if an object exists under `key`.
    async fn exists(&self, key: &str) -> Result<bool, ArtifactError>;
    /// Every key that starts with `prefix`, sorted.
    async fn list(&self, prefix: &str) -> Result<Vec<String>, ArtifactError>;
    /// One page of [`ArtifactStore::list`]: at most `limit` keys that start with `prefix` and
    /// sort after `after` (byte order), sorted. A caller pages through a listing too long to
    /// hold (a million-job batch has millions of keys) by passing the last key it got as the
    /// next `after`; a page shorter than `limit` is the last. The default lists every key and
    /// cuts the page out; stores that can start a listing at a key (S3's `start-after`, a
    /// directory walk that skips what sorts before) do so, in memory bounded by `limit`.
    async fn list_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, ArtifactError> {
        let keys = self.list(prefix).await?;
        Ok(keys
            .into_iter()
            .filter(|key| after.is_none_or(|after| key.as_str() > after))
            .take(limit)
            .collect())
    }
    /// The names of the immediate children of the "directory" `prefix` (which ends with `/`,
    /// or is empty for the root), sorted and without duplicates: `list_children("batches/")`
    /// gives every batch id without listing their files. The default lists every key; stores
    /// that can list one level (S3's delimiter, a directory read) do so.
    async fn list_children(&self, prefix: &str) -> Result<Vec<String>, ArtifactError> {
        let keys = self.list(prefix).await?;
        let mut children: Vec<String> = keys
            .iter()
            .filter_map(|key| key.strip_prefix(prefix))
            .filter_map(|rest| rest.split('/').next())
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .collect();
        children.dedup();
        Ok(children)
    }
}

/// Checks that `key` is a relative, normalized, `/`-separated key: no empty segment, no `.` or
/// `..` segment, no leading `/`, no backslash and no NUL. Every store calls this first, because a
/// key containing `../` would be written outside the store's root on some servers.
pub fn check_key(key: &str) -> Result<(), ArtifactError> {
    let bad = |reason| {
        Err(ArtifactError::InvalidKey {
            key: key.to_owned(),
            reason,
        })
    };
    if key.is_empty() {
        return bad("empty key");
    }
    if key.contains('\\') || key.contains('\0') {
        return bad("backslash or NUL in key");
    }
    for segment in key.split('/') {
        match segment {
            "" => return bad("empty segment (leading, trailing or double '/')"),
            "." | ".." => return bad("'.' or '..' segment"),
            _ => {}
        }
    }
    Ok(())
}

/// Checks a listing prefix: empty (everything), or a valid key ([`check_key`]) with an optional
/// trailing `/`.
pub fn check_prefix(prefix: &str) -> Result<(), ArtifactError> {
    if prefix.is_empty() {
        return Ok(());
    }
    check_key(prefix.strip_suffix('/').unwrap_or(prefix)).map_err(|error| match error {
        ArtifactError::InvalidKey { reason, .. } => ArtifactError::InvalidKey {
            key: prefix.to_owned(),
            reason,
        },
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::{check_key, check_prefix};

    #[test]
    fn list_prefixes_allow_a_trailing_slash() {
        fn check(prefix: &str, ok: bool) {
            assert_eq!(check_prefix(prefix).is_ok(), ok, "{prefix:?}");
        }
        check("", true);
        check("batches/", true);
        check("batches/b1/jobs/c", true);
        check("/", false);
        check("/batches", false);
        check("batches//", false);
        check("batches/../", false);
    }

    #[test]
    fn keys_are_relative_and_normalized() {
        for good in [
            "bundles/abc.tar.zst",
            "batches/b1/jobs/c0/r1/result.json",
            "a",
        ] {
            assert!(check_key(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "/abs",
            "a//b",
            "a/../b",
            "../a",
            "a/.",
            "trailing/",
            "a\\b",
        ] {
            assert!(check_key(bad).is_err(), "{bad}");
        }
    }
}
