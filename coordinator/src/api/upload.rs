//! The parts of a submit, received as they arrive: the bundle is streamed into a file of the
//! scratch dir and hashed on the way, the spec is read into memory under a small cap. So a
//! submit costs the coordinator a few chunks of memory however large its bundle is (four
//! concurrent 250 MiB submits used to hold 2.1 GB).

use std::path::{Path, PathBuf};

use axum::extract::multipart::Field;
use cowork_schema::layout::names;
use sha2::Digest;
use tokio::io::AsyncWriteExt;

/// Largest `spec` part: a batch spec is a few KB; a large matrix's list of scenario files a
/// few MB.
pub(crate) const MAX_SPEC_BYTES: u64 = 16 * 1024 * 1024;

/// A received bundle: its file in the scratch dir (removed when this is dropped) and its
/// sha256.
pub(crate) struct UploadedBundle {
    pub(crate) path: PathBuf,
    pub(crate) sha256: String,
}

impl Drop for UploadedBundle {
    fn drop(&mut self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(path = %self.path.display(), error = %error, "uploaded bundle not removed");
            }
        }
    }
}

/// Why a part could not be received.
pub(crate) enum PartError {
    /// The body could not be read.
    Body(axum::extract::multipart::MultipartError),
    /// The part is larger than `limit` bytes: `read` bytes came before it was refused.
    TooLarge { limit: u64, read: u64 },
    /// Writing the scratch file failed.
    Io(String),
}

/// Streams the `bundle` part into a new file under `scratch`, at most `max_bytes`.
pub(crate) async fn receive_bundle(
    field: &mut Field<'_>,
    scratch: &Path,
    max_bytes: u64,
) -> Result<UploadedBundle, PartError> {
    tokio::fs::create_dir_all(scratch)
        .await
        .map_err(|error| PartError::Io(format!("creating {}: {error}", scratch.display())))?;
    // Unique within the process (the scratch dir is the process's own); beside the batches'
    // unpack dirs, whose names are batch ids and never start with a dot.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = scratch.join(format!(
        ".upload-{}-{n}{}",
        std::process::id(),
        names::BUNDLE_EXTENSION
    ));
    let mut file = tokio::fs::File::create(&path)
        .await
        .map_err(|error| PartError::Io(format!("creating {}: {error}", path.display())))?;
    // From here on the file is removed whatever happens.
    let mut upload = UploadedBundle {
        path,
        sha256: String::new(),
    };
    let mut hasher = sha2::Sha256::new();
    let mut read = 0u64;
    while let Some(chunk) = field.chunk().await.map_err(PartError::Body)? {
        read += chunk.len() as u64;
        if read > max_bytes {
            return Err(PartError::TooLarge {
                limit: max_bytes,
                read,
            });
        }
        hasher.update(&chunk);
        file.write_all(&chunk).await.map_err(|error| {
            PartError::Io(format!("writing {}: {error}", upload.path.display()))
        })?;
    }
    file.flush()
        .await
        .map_err(|error| PartError::Io(format!("writing {}: {error}", upload.path.display())))?;
    upload.sha256 = cowork_fabric::hex(&hasher.finalize());
    Ok(upload)
}

/// Reads a small part (the spec) into memory, at most `max_bytes`.
pub(crate) async fn receive_small(
    field: &mut Field<'_>,
    max_bytes: u64,
) -> Result<Vec<u8>, PartError> {
    let mut bytes = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(PartError::Body)? {
        let read = (bytes.len() + chunk.len()) as u64;
        if read > max_bytes {
            return Err(PartError::TooLarge {
                limit: max_bytes,
                read,
            });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}
