//! What an upload sends: the bodies a multipart upload reads its parts from, the part size, and
//! the sha256 of a body or file (on a blocking thread when it is large).

use cowork_schema::event::ArtifactRef;

use crate::artifacts::{ArtifactError, check_key};
use crate::sha256_hex;

/// Bodies larger than this are hashed on a blocking thread: sha256 runs at roughly 0.5–2 GB/s,
/// so 1 MiB is about the 0.5 ms of CPU the project allows on the async runtime before work moves to
/// `spawn_blocking`.
const BLOCKING_DIGEST_BYTES: usize = 1024 * 1024;
/// S3's limit on the number of parts of one multipart upload.
const MAX_PARTS: u64 = 10_000;

/// What a multipart upload reads its parts from.
#[derive(Clone, Copy)]
pub(super) enum Body<'a> {
    Bytes(&'a [u8]),
    /// A file too large to hold in memory: each part is read when it goes up.
    File(&'a std::path::Path),
}

impl Body<'_> {
    /// The `len` bytes at `offset`.
    pub(super) async fn part(
        &self,
        key: &str,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, ArtifactError> {
        let failed = |message: String| ArtifactError::Failed {
            key: key.to_owned(),
            message,
        };
        let len = usize::try_from(len).map_err(|_| failed("part too large".to_owned()))?;
        match self {
            Body::Bytes(bytes) => {
                let start = usize::try_from(offset).unwrap_or(usize::MAX);
                bytes
                    .get(start..start.saturating_add(len))
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| failed(format!("no part at offset {offset}")))
            }
            Body::File(path) => {
                use tokio::io::{AsyncReadExt, AsyncSeekExt};
                let read =
                    |error: std::io::Error| failed(format!("reading {}: {error}", path.display()));
                let mut file = tokio::fs::File::open(path).await.map_err(read)?;
                file.seek(std::io::SeekFrom::Start(offset))
                    .await
                    .map_err(read)?;
                let mut part = vec![0; len];
                file.read_exact(&mut part).await.map_err(read)?;
                Ok(part)
            }
        }
    }
}

/// The size and sha256 of the file at `path`, read in pieces on a blocking thread.
pub(super) async fn file_digest(
    key: &str,
    path: &std::path::Path,
) -> Result<(u64, String), ArtifactError> {
    let path = path.to_path_buf();
    let task_key = key.to_owned();
    tokio::task::spawn_blocking(move || {
        use sha2::Digest;
        let key = task_key;
        use std::io::Read;
        let failed = |error: std::io::Error| ArtifactError::Failed {
            key: key.clone(),
            message: format!("reading {}: {error}", path.display()),
        };
        let mut file = std::fs::File::open(&path).map_err(failed)?;
        let mut hasher = sha2::Sha256::new();
        let mut buffer = vec![0; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buffer).map_err(failed)?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            size += n as u64;
        }
        let sha256 = crate::hex(&hasher.finalize());
        Ok((size, sha256))
    })
    .await
    .map_err(|error| ArtifactError::Failed {
        key: key.to_owned(),
        message: format!("hashing task failed: {error}"),
    })?
}

/// The part size for an object of `len` bytes: the configured size, raised when the object
/// would otherwise need more than S3's 10,000 parts.
pub(super) fn effective_part_size(len: u64, configured: u64) -> u64 {
    configured.max(len.div_ceil(MAX_PARTS))
}

/// Computes the sha256 of `bytes`, on a blocking thread (`spawn_blocking`) when the body is large,
/// and hands the bytes back.
pub(super) async fn digest(key: &str, bytes: Vec<u8>) -> Result<(Vec<u8>, String), ArtifactError> {
    if bytes.len() <= BLOCKING_DIGEST_BYTES {
        let sha256 = sha256_hex(&bytes);
        return Ok((bytes, sha256));
    }
    tokio::task::spawn_blocking(move || {
        let sha256 = sha256_hex(&bytes);
        (bytes, sha256)
    })
    .await
    .map_err(|error| ArtifactError::Failed {
        key: key.to_owned(),
        message: format!("hashing task failed: {error}"),
    })
}

/// Checks `key` and computes the reference (size, sha256) of `bytes` stored under it.
pub(super) async fn checked_reference(
    key: &str,
    bytes: Vec<u8>,
) -> Result<(Vec<u8>, ArtifactRef), ArtifactError> {
    check_key(key)?;
    let (bytes, sha256) = digest(key, bytes).await?;
    let reference = ArtifactRef {
        key: key.to_owned(),
        size: bytes.len() as u64,
        sha256,
    };
    Ok((bytes, reference))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_size_grows_to_stay_within_ten_thousand_parts() {
        fn check(len: u64, configured: u64, expected: u64) {
            let size = effective_part_size(len, configured);
            assert_eq!(size, expected, "len {len}, configured {configured}");
            assert!(len.div_ceil(size.max(1)) <= MAX_PARTS);
        }
        const MIB: u64 = 1024 * 1024;
        check(12 * MIB, 5 * MIB, 5 * MIB);
        check(10_000 * 8 * MIB, 8 * MIB, 8 * MIB);
        check(10_000 * 8 * MIB + 1, 8 * MIB, 8 * MIB + 1);
        check(0, 8 * MIB, 8 * MIB);
    }
}
