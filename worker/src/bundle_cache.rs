//! Bundles fetched by digest, verified and unpacked once per worker (workers cache bundles by
//! digest, decisions.md#job-identity).
//!
//! A bundle is unpacked into `<cache>/<sha256>/` through a temporary directory and a rename, so
//! a directory under its final name is always complete. Jobs only read the unpacked tree: the
//! harness writes its run dir, cassettes and everything else under the job's own work dir.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cowork_fabric::bundle::{UnpackLimits, unpack};
use cowork_fabric::{ArtifactError, ArtifactStore, sha256_hex};

/// Why a bundle could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum BundleCacheError {
    #[error("fetching bundle {sha256}")]
    Fetch {
        sha256: String,
        #[source]
        source: ArtifactError,
    },
    #[error("bundle {sha256} does not match its digest (got {found})")]
    DigestMismatch { sha256: String, found: String },
    #[error("unpacking bundle {sha256}: {message}")]
    Unpack { sha256: String, message: String },
    #[error("bundle cache io at {path}: {message}")]
    Io { path: PathBuf, message: String },
}

impl BundleCacheError {
    /// `true` when a later attempt may succeed (the store was unreachable).
    pub fn is_transient(&self) -> bool {
        matches!(self, BundleCacheError::Fetch { source, .. } if source.is_transient())
    }
}

/// The store key of a bundle (decisions.md#storage).
pub fn bundle_key(sha256: &str) -> String {
    format!("bundles/{sha256}.tar.zst")
}

/// A per-worker cache of unpacked bundles.
pub struct BundleCache {
    dir: PathBuf,
    store: Arc<dyn ArtifactStore>,
    limits: UnpackLimits,
    /// Serializes fills so that two jobs of a new bundle fetch and unpack it once. Held across
    /// the fetch and the unpack awaits; fills are rare (once per bundle per worker).
    fill_lock: tokio::sync::Mutex<()>,
}

impl BundleCache {
    pub fn new(dir: &Path, store: Arc<dyn ArtifactStore>, limits: UnpackLimits) -> BundleCache {
        BundleCache {
            dir: dir.to_path_buf(),
            store,
            limits,
            fill_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The directory holding the unpacked bundle `sha256`, fetching and unpacking it first if
    /// needed.
    pub async fn ensure(&self, sha256: &str) -> Result<PathBuf, BundleCacheError> {
        if !is_hex_digest(sha256) {
            return Err(BundleCacheError::DigestMismatch {
                sha256: sha256.to_owned(),
                found: "not a sha256".into(),
            });
        }
        let ready = self.dir.join(sha256);
        if tokio::fs::try_exists(&ready).await.unwrap_or(false) {
            return Ok(ready);
        }
        let _fill = self.fill_lock.lock().await;
        if tokio::fs::try_exists(&ready).await.unwrap_or(false) {
            return Ok(ready);
        }
        let bytes = self
            .store
            .get(&bundle_key(sha256))
            .await
            .map_err(|source| BundleCacheError::Fetch {
                sha256: sha256.to_owned(),
                source,
            })?;
        let dir = self.dir.clone();
        let limits = self.limits;
        let sha = sha256.to_owned();
        tokio::task::spawn_blocking(move || fill(&dir, &sha, &bytes, &limits))
            .await
            .map_err(|e| BundleCacheError::Io {
                path: ready.clone(),
                message: format!("unpack task failed: {e}"),
            })??;
        Ok(ready)
    }
}

fn is_hex_digest(value: &str) -> bool {
    value.len() == 64
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Verifies and unpacks one bundle into `<dir>/<sha256>` (blocking).
fn fill(
    dir: &Path,
    sha256: &str,
    bytes: &[u8],
    limits: &UnpackLimits,
) -> Result<(), BundleCacheError> {
    let found = sha256_hex(bytes);
    if found != sha256 {
        return Err(BundleCacheError::DigestMismatch {
            sha256: sha256.to_owned(),
            found,
        });
    }
    let io = |path: &Path, e: std::io::Error| BundleCacheError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    // Each unpacked bundle is a git work tree of its own (`index_with_git`); a cache inside
    // the user's tree (`cowork run`'s `.cowork/cache`) must not show them to the user's git,
    // where a nested repository without a commit makes `git add -A` fail.
    let ignore = dir.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(&ignore, "*\n").map_err(|e| io(&ignore, e))?;
    }
    // Unique per fill: workers sharing one cache dir (two `cowork worker` in one directory, or
    // several workers of one process) may unpack the same bundle at the same moment.
    let temp = dir.join(format!(
        ".tmp-{sha256}-{}-{}",
        std::process::id(),
        FILL_SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    if temp.exists() {
        std::fs::remove_dir_all(&temp).map_err(|e| io(&temp, e))?;
    }
    std::fs::create_dir_all(&temp).map_err(|e| io(&temp, e))?;
    if let Err(error) = unpack(bytes, &temp, limits) {
        // Nothing partial is kept: a refused archive leaves no trace in the cache.
        let _ = std::fs::remove_dir_all(&temp);
        return Err(BundleCacheError::Unpack {
            sha256: sha256.to_owned(),
            message: error.to_string(),
        });
    }
    index_with_git(&temp, sha256);
    let ready = dir.join(sha256);
    match std::fs::rename(&temp, &ready) {
        Ok(()) => Ok(()),
        // Another worker sharing this cache dir unpacked the same bundle first. Its tree is as
        // complete as ours (renamed into place whole, digest checked), so ours is dropped.
        Err(_) if ready.is_dir() => {
            let _ = std::fs::remove_dir_all(&temp);
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&temp);
            Err(io(&ready, e))
        }
    }
}

/// Numbers the fills of this process, so that no two share a temporary directory. `Relaxed`:
/// only uniqueness matters, not order against other memory.
static FILL_SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Makes the unpacked bundle a git work tree of its own with every file in its index.
///
/// The CLI stages skill and plugin dirs in git mode: only index-tracked files, and a dir with
/// none is refused. A bundle unpacked without an index inside the user's tree (`cowork run`'s
/// `.cowork/cache`) would be untracked there; unpacked outside any tree it would be copied
/// raw, and a cassette recorded in git mode would then replay as stale ("recorded in 'git'
/// file-set mode, verifying in 'raw'"). With its own index the bundle is staged exactly as the
/// CLI stages the user's committed files. Files a `.gitignore` in the bundle ignores stay out,
/// as they would locally. When git is missing or fails, the bundle stays as it is and the
/// harness executor switches git mode off for it (`COWORK_HARNESS_GITSET=0`).
fn index_with_git(dir: &Path, sha256: &str) {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if !(git(&["init", "-q"]) && git(&["add", "-A"])) {
        tracing::warn!(
            bundle_sha256 = sha256,
            "git could not index the unpacked bundle; its skill dirs are staged without git"
        );
        let _ = std::fs::remove_dir_all(dir.join(".git"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle of one file, as bytes, and its digest.
    fn one_file_bundle(dir: &Path) -> (Vec<u8>, String) {
        let source = dir.join("source");
        std::fs::create_dir_all(&source).expect("creating the bundle source");
        std::fs::write(source.join("scenario.yaml"), "name: x\n").expect("writing a file");
        let files = std::collections::BTreeSet::from(["scenario.yaml".to_owned()]);
        let bytes = cowork_fabric::bundle::pack(&source, &files, &[])
            .expect("packing the bundle")
            .bytes;
        let sha256 = sha256_hex(&bytes);
        (bytes, sha256)
    }

    // Two workers in one directory share `.cowork-worker/cache`: the one that unpacks second
    // finds the bundle already in place. That is success, not "Directory not empty".
    #[test]
    fn a_bundle_another_worker_unpacked_first_is_ready() {
        let scratch = tempfile::tempdir().expect("temp dir");
        let (bytes, sha256) = one_file_bundle(scratch.path());
        let cache = scratch.path().join("cache");
        let limits = UnpackLimits::default();
        fill(&cache, &sha256, &bytes, &limits).expect("the first fill");
        fill(&cache, &sha256, &bytes, &limits).expect("the second fill of the same bundle");
        assert!(cache.join(&sha256).join("scenario.yaml").is_file());
        let leftovers: Vec<_> = std::fs::read_dir(&cache)
            .expect("listing the cache")
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().starts_with(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "temporary dirs left: {leftovers:?}");
    }
}
