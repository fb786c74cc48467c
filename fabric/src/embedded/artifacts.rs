//! `DirArtifactStore`: the store layout of decisions.md#storage under a local directory (default
//! `.cowork/`).

use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use cowork_schema::event::ArtifactRef;

use crate::artifacts::{ArtifactError, ArtifactStore, PutOutcome, check_key, check_prefix};
use crate::sha256_hex;

/// An artifact store on a local directory. Writes are atomic (temporary file, then rename), so a
/// reader never sees a half-written object and a crash leaves either the old or the new bytes.
#[derive(Clone, Debug)]
pub struct DirArtifactStore {
    root: PathBuf,
}

impl DirArtifactStore {
    /// A store rooted at `root`; the directory is created on the first write.
    pub fn new(root: &Path) -> DirArtifactStore {
        DirArtifactStore {
            root: root.to_path_buf(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The local path of `key` (after validating it).
    pub fn path_of(&self, key: &str) -> Result<PathBuf, ArtifactError> {
        check_key(key)?;
        Ok(self.root.join(key))
    }
}

fn io_error(key: &str, error: &std::io::Error) -> ArtifactError {
    if error.kind() == std::io::ErrorKind::NotFound {
        return ArtifactError::NotFound {
            key: key.to_owned(),
        };
    }
    ArtifactError::Failed {
        key: key.to_owned(),
        message: error.to_string(),
    }
}

/// Writes `bytes` to a fresh temporary file next to `path` and returns the temporary's path.
fn write_temp(path: &Path, key: &str, bytes: &[u8]) -> Result<PathBuf, ArtifactError> {
    let parent = path.parent().ok_or_else(|| ArtifactError::InvalidKey {
        key: key.to_owned(),
        reason: "no parent",
    })?;
    std::fs::create_dir_all(parent).map_err(|e| io_error(key, &e))?;
    let mut temp = tempfile_in(parent, key)?;
    temp.1.write_all(bytes).map_err(|e| io_error(key, &e))?;
    temp.1.sync_all().map_err(|e| io_error(key, &e))?;
    Ok(temp.0)
}

/// A writer that hashes and counts what passes through it.
struct HashingWriter<W> {
    inner: W,
    hasher: sha2::Sha256,
    size: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf)?;
        sha2::Digest::update(&mut self.hasher, &buf[..written]);
        self.size += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Creates a uniquely named temporary file in `dir` (`.tmp-<pid>-<n>`).
fn tempfile_in(dir: &Path, key: &str) -> Result<(PathBuf, std::fs::File), ArtifactError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    // Relaxed is enough: the counter only has to hand out distinct numbers within this process.
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(".tmp-{}-{n}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_error(key, &e)),
        }
    }
}

/// [`ArtifactStore::list_page`] on the directory `root` (and [`ArtifactStore::list`], a page
/// without a bound): the walk starts at the deepest directory the prefix names, goes in key
/// order (a directory sorts as its name with a trailing `/`, as its keys do), skips unread a
/// directory whose keys all sort at or before `after` or that cannot hold a key under
/// `prefix`, and stops at `limit` keys: the page costs what it returns, not what the store
/// holds.
fn list_page_sync(
    root: &Path,
    prefix: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<String>, ArtifactError> {
    let mut keys = Vec::new();
    if limit > 0 {
        // Every key under the prefix lies below the directory its part up to the last `/`
        // names (`batches/b1/jobs/j01` → `batches/b1/jobs/`).
        let start_key = prefix.rfind('/').map_or("", |slash| &prefix[..=slash]);
        let start = root.join(start_key.trim_end_matches('/'));
        walk_sorted(&start, start_key, prefix, after, limit, &mut keys)?;
    }
    Ok(keys)
}

/// Adds to `keys` the keys below `dir` (whose keys start with `dir_key`) that the page wants;
/// `true` once the page is full.
fn walk_sorted(
    dir: &Path,
    dir_key: &str,
    prefix: &str,
    after: Option<&str>,
    limit: usize,
    keys: &mut Vec<String>,
) -> Result<bool, ArtifactError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_error(prefix, &e)),
    };
    // (key, path); a directory's key ends with `/`.
    let mut children = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(prefix, &e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".tmp-") {
            continue;
        }
        let is_dir = entry
            .file_type()
            .map_err(|e| io_error(prefix, &e))?
            .is_dir();
        let key = if is_dir {
            format!("{dir_key}{name}/")
        } else {
            format!("{dir_key}{name}")
        };
        children.push((key, entry.path()));
    }
    children.sort_unstable();
    for (key, path) in children {
        if key.ends_with('/') {
            let may_hold_prefix = key.starts_with(prefix) || prefix.starts_with(key.as_str());
            // Every key below sorts before `after` when `after` is greater than the directory
            // and does not lie inside it.
            let all_before =
                after.is_some_and(|after| after > key.as_str() && !after.starts_with(key.as_str()));
            if may_hold_prefix
                && !all_before
                && walk_sorted(&path, &key, prefix, after, limit, keys)?
            {
                return Ok(true);
            }
        } else if key.starts_with(prefix) && after.is_none_or(|after| key.as_str() > after) {
            keys.push(key);
            if keys.len() >= limit {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Runs blocking file IO off the async executor, in `spawn_blocking`.
async fn blocking<T: Send + 'static>(
    key: &str,
    work: impl FnOnce() -> Result<T, ArtifactError> + Send + 'static,
) -> Result<T, ArtifactError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ArtifactError::Failed {
            key: key.to_owned(),
            message: format!("io task failed: {e}"),
        })?
}

#[async_trait]
impl ArtifactStore for DirArtifactStore {
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<ArtifactRef, ArtifactError> {
        let path = self.path_of(key)?;
        let key_owned = key.to_owned();
        blocking(key, move || {
            let reference = ArtifactRef {
                key: key_owned.clone(),
                size: bytes.len() as u64,
                sha256: sha256_hex(&bytes),
            };
            let temp = write_temp(&path, &key_owned, &bytes)?;
            std::fs::rename(&temp, &path).map_err(|e| io_error(&key_owned, &e))?;
            Ok(reference)
        })
        .await
    }

    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<PutOutcome, ArtifactError> {
        let path = self.path_of(key)?;
        let key_owned = key.to_owned();
        blocking(key, move || {
            if path.exists() {
                return Ok(PutOutcome::AlreadyExists);
            }
            let reference = ArtifactRef {
                key: key_owned.clone(),
                size: bytes.len() as u64,
                sha256: sha256_hex(&bytes),
            };
            let temp = write_temp(&path, &key_owned, &bytes)?;
            // A hard link fails if the target exists, which makes create-if-absent atomic even
            // when two writers race.
            let linked = std::fs::hard_link(&temp, &path);
            let _ = std::fs::remove_file(&temp);
            match linked {
                Ok(()) => Ok(PutOutcome::Created(reference)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    Ok(PutOutcome::AlreadyExists)
                }
                Err(e) => Err(io_error(&key_owned, &e)),
            }
        })
        .await
    }

    async fn put_file(&self, key: &str, source: &Path) -> Result<ArtifactRef, ArtifactError> {
        let path = self.path_of(key)?;
        let key_owned = key.to_owned();
        let source = source.to_path_buf();
        blocking(key, move || {
            let parent = path.parent().ok_or_else(|| ArtifactError::InvalidKey {
                key: key_owned.clone(),
                reason: "no parent",
            })?;
            std::fs::create_dir_all(parent).map_err(|e| io_error(&key_owned, &e))?;
            let (temp, file) = tempfile_in(parent, &key_owned)?;
            // Copied through a hashing writer: the file is read once, in small pieces.
            let mut writer = HashingWriter {
                inner: std::io::BufWriter::new(file),
                hasher: <sha2::Sha256 as sha2::Digest>::new(),
                size: 0,
            };
            let mut reader = std::fs::File::open(&source).map_err(|e| io_error(&key_owned, &e))?;
            std::io::copy(&mut reader, &mut writer).map_err(|e| io_error(&key_owned, &e))?;
            let file = writer
                .inner
                .into_inner()
                .map_err(|e| io_error(&key_owned, e.error()))?;
            file.sync_all().map_err(|e| io_error(&key_owned, &e))?;
            std::fs::rename(&temp, &path).map_err(|e| io_error(&key_owned, &e))?;
            let digest = sha2::Digest::finalize(writer.hasher);
            Ok(ArtifactRef {
                key: key_owned,
                size: writer.size,
                sha256: crate::hex(&digest),
            })
        })
        .await
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, ArtifactError> {
        let path = self.path_of(key)?;
        let key_owned = key.to_owned();
        blocking(key, move || {
            std::fs::read(&path).map_err(|e| io_error(&key_owned, &e))
        })
        .await
    }

    async fn get_file(&self, key: &str, to: &Path) -> Result<u64, ArtifactError> {
        let path = self.path_of(key)?;
        tokio::fs::copy(&path, to)
            .await
            .map_err(|error| io_error(key, &error))
    }

    async fn exists(&self, key: &str) -> Result<bool, ArtifactError> {
        let path = self.path_of(key)?;
        Ok(tokio::fs::try_exists(&path).await.unwrap_or(false))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, ArtifactError> {
        self.list_page(prefix, None, usize::MAX).await
    }

    async fn list_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, ArtifactError> {
        check_prefix(prefix)?;
        let root = self.root.clone();
        let prefix_owned = prefix.to_owned();
        let after = after.map(str::to_owned);
        blocking(prefix, move || {
            list_page_sync(&root, &prefix_owned, after.as_deref(), limit)
        })
        .await
    }

    async fn list_children(&self, prefix: &str) -> Result<Vec<String>, ArtifactError> {
        check_prefix(prefix)?;
        let dir = self.root.join(prefix.trim_end_matches('/'));
        let prefix_owned = prefix.to_owned();
        blocking(prefix, move || {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(io_error(&prefix_owned, &e)),
            };
            let mut names = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|e| io_error(&prefix_owned, &e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if !name.starts_with(".tmp-") {
                    names.push(name);
                }
            }
            names.sort();
            Ok(names)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn put_get_list_and_create_if_absent() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = DirArtifactStore::new(dir.path());
        let stored = store
            .put("batches/b1/jobs/c0/r0/result.json", b"{}".to_vec())
            .await
            .expect("put");
        assert_eq!(stored.size, 2);
        assert_eq!(stored.sha256, sha256_hex(b"{}"));
        assert_eq!(
            store
                .get("batches/b1/jobs/c0/r0/result.json")
                .await
                .expect("get"),
            b"{}"
        );
        store
            .put("batches/b1/jobs/c0/r1/result.json", b"[]".to_vec())
            .await
            .expect("put");
        store
            .put("batches/b2/spec.json", b"{}".to_vec())
            .await
            .expect("put");
        assert_eq!(
            store.list("batches/b1/").await.expect("list"),
            vec![
                "batches/b1/jobs/c0/r0/result.json",
                "batches/b1/jobs/c0/r1/result.json"
            ]
        );
        assert!(matches!(
            store.get("batches/none").await,
            Err(ArtifactError::NotFound { .. })
        ));
        let first = store
            .put_if_absent("bundles/x.tar.zst", b"one".to_vec())
            .await
            .expect("put");
        assert!(matches!(first, PutOutcome::Created(_)));
        let second = store
            .put_if_absent("bundles/x.tar.zst", b"two".to_vec())
            .await
            .expect("put");
        assert_eq!(second, PutOutcome::AlreadyExists);
        assert_eq!(store.get("bundles/x.tar.zst").await.expect("get"), b"one");
        assert!(matches!(
            store.put("../escape", vec![]).await,
            Err(ArtifactError::InvalidKey { .. })
        ));
    }

    #[tokio::test]
    async fn a_file_is_stored_with_its_digest() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = DirArtifactStore::new(&dir.path().join("store"));
        let source = dir.path().join("envelope.json");
        let body: Vec<u8> = (0..200_000u32).flat_map(u32::to_le_bytes).collect();
        std::fs::write(&source, &body).expect("writing the source");
        let stored = store
            .put_file("batches/b1/envelope.json", &source)
            .await
            .expect("put_file");
        assert_eq!(stored.size, body.len() as u64);
        assert_eq!(stored.sha256, sha256_hex(&body));
        let read = store.get("batches/b1/envelope.json").await.expect("get");
        assert!(read == body, "the file came back different");
    }

    #[tokio::test]
    async fn children_are_one_level_of_names() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = DirArtifactStore::new(dir.path());
        for key in [
            "batches/b2/spec.json",
            "batches/b1/spec.json",
            "batches/b1/jobs/f0/result.json",
        ] {
            store.put(key, b"{}".to_vec()).await.expect("put");
        }
        let default_impl = store.list("batches/").await.expect("list");
        assert_eq!(default_impl.len(), 3);
        assert_eq!(
            store.list_children("batches/").await.expect("children"),
            ["b1", "b2"]
        );
        assert_eq!(
            store.list_children("batches/b1/").await.expect("children"),
            ["jobs", "spec.json"]
        );
        assert!(
            store
                .list_children("nothing/")
                .await
                .expect("children")
                .is_empty()
        );
        assert!(store.list_children("../").await.is_err());
    }
}
