//! Bundles fetched by digest, verified and unpacked once per worker (workers cache bundles by
//! digest, decisions.md#job-identity).
//!
//! A bundle is unpacked into `<cache>/<sha256>/` through a temporary directory and a rename, so
//! a directory under its final name is always complete. Jobs only read the unpacked tree: the
//! harness writes its run dir, cassettes and everything else under the job's own work dir.
//!
//! The cache is bounded (`--cache-max-mib`): after each fill, the least recently used bundles
//! that no running job holds are removed until the unpacked trees fit. A job holds its bundle
//! ([`BundleHold`]) from `ensure` until its run ends, so eviction never pulls a tree from under
//! a running harness; an evicted bundle is fetched again by its next job.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use cowork_fabric::bundle::{UnpackLimits, unpack};
use cowork_fabric::{ArtifactError, ArtifactStore, sha256_hex};
use cowork_schema::layout::StoreKey;

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

/// A per-worker cache of unpacked bundles.
pub struct BundleCache {
    dir: PathBuf,
    store: Arc<dyn ArtifactStore>,
    limits: UnpackLimits,
    /// Most bytes of unpacked trees kept; `None` = unbounded.
    max_bytes: Option<u64>,
    /// Serializes fills so that two jobs of a new bundle fetch and unpack it once. Held across
    /// the fetch and the unpack awaits; fills are rare (once per bundle per worker).
    fill_lock: tokio::sync::Mutex<()>,
    /// Holds and last use of every bundle this process used. Taken for every hold, release and
    /// eviction decision, never across an await.
    uses: Arc<Mutex<HashMap<String, Use>>>,
}

/// One bundle's holds and last use.
#[derive(Clone, Copy, Debug)]
struct Use {
    holds: usize,
    last: Instant,
}

/// A bundle held by a job: it is not evicted until this is dropped.
pub struct BundleHold {
    path: PathBuf,
    sha256: String,
    uses: Arc<Mutex<HashMap<String, Use>>>,
}

impl BundleHold {
    /// The unpacked tree.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for BundleHold {
    fn drop(&mut self) {
        let mut uses = self.uses.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = uses.get_mut(&self.sha256) {
            entry.holds = entry.holds.saturating_sub(1);
            entry.last = Instant::now();
        }
    }
}

impl BundleCache {
    pub fn new(dir: &Path, store: Arc<dyn ArtifactStore>, limits: UnpackLimits) -> BundleCache {
        BundleCache {
            dir: dir.to_path_buf(),
            store,
            limits,
            max_bytes: None,
            fill_lock: tokio::sync::Mutex::new(()),
            uses: Arc::default(),
        }
    }

    /// Keeps at most `max_bytes` of unpacked trees (see the module docs).
    pub fn bounded(mut self, max_bytes: Option<u64>) -> BundleCache {
        self.max_bytes = max_bytes;
        self
    }

    /// Holds `sha256`'s tree if it is in the cache.
    fn hold_ready(&self, sha256: &str) -> Option<BundleHold> {
        let ready = self.dir.join(sha256);
        // Under the lock: an eviction decides under it too, so a tree found here is not
        // removed before the hold counts.
        let mut uses = self.uses.lock().unwrap_or_else(PoisonError::into_inner);
        if !ready.is_dir() {
            return None;
        }
        let entry = uses.entry(sha256.to_owned()).or_insert(Use {
            holds: 0,
            last: Instant::now(),
        });
        entry.holds += 1;
        entry.last = Instant::now();
        Some(BundleHold {
            path: ready,
            sha256: sha256.to_owned(),
            uses: Arc::clone(&self.uses),
        })
    }
    /// The directory holding the unpacked bundle `sha256`, fetching and unpacking it first if
    /// needed.
    pub async fn ensure(&self, sha256: &str) -> Result<BundleHold, BundleCacheError> {
        if !is_hex_digest(sha256) {
            return Err(BundleCacheError::DigestMismatch {
                sha256: sha256.to_owned(),
                found: "not a sha256".into(),
            });
        }
        let ready = self.dir.join(sha256);
        if let Some(hold) = self.hold_ready(sha256) {
            return Ok(hold);
        }
        let _fill = self.fill_lock.lock().await;
        if let Some(hold) = self.hold_ready(sha256) {
            return Ok(hold);
        }
        let bytes = self
            .store
            .get(StoreKey::bundle(sha256).as_str())
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
        let hold = self
            .hold_ready(sha256)
            .ok_or_else(|| BundleCacheError::Io {
                path: ready.clone(),
                message: "the unpacked bundle vanished from the cache".to_owned(),
            })?;
        // Held first, so this fill's tree is never its own eviction's victim. A failed eviction
        // task only leaves the cache larger until the next fill.
        if let Some(max_bytes) = self.max_bytes {
            let dir = self.dir.clone();
            let uses = Arc::clone(&self.uses);
            let _ = tokio::task::spawn_blocking(move || evict(&dir, max_bytes, &uses)).await;
        }
        Ok(hold)
    }
}

/// Removes the least recently used trees under `dir` no job holds until the rest fit in
/// `max_bytes` (blocking: it walks the cache).
fn evict(dir: &Path, max_bytes: u64, uses: &Mutex<HashMap<String, Use>>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut trees: Vec<(String, u64, Option<Instant>, std::time::SystemTime)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let meta = entry.metadata().ok()?;
            (is_hex_digest(&name) && meta.is_dir()).then(|| {
                let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                (name, tree_bytes(&entry.path()), None, modified)
            })
        })
        .collect();
    let mut total: u64 = trees.iter().map(|(_, bytes, _, _)| bytes).sum();
    if total <= max_bytes {
        return;
    }
    let mut doomed_trees = Vec::new();
    let mut uses = uses.lock().unwrap_or_else(PoisonError::into_inner);
    for tree in &mut trees {
        tree.2 = uses.get(&tree.0).map(|entry| entry.last);
    }
    // Oldest first: trees this process never used (left by an earlier run) by their
    // mtime, before every tree it used, which go by their last use.
    trees.sort_by(|a, b| match (a.2, b.2) {
        (None, None) => a.3.cmp(&b.3),
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        (Some(x), Some(y)) => x.cmp(&y),
    });
    for (sha256, bytes, _, _) in trees {
        if total <= max_bytes {
            break;
        }
        if uses.get(&sha256).is_some_and(|entry| entry.holds > 0) {
            continue;
        }
        // Renamed away under the lock, removed after: no hold can find a half-removed tree.
        let doomed = dir.join(format!(
            ".evict-{sha256}-{}-{}",
            std::process::id(),
            FILL_SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        if std::fs::rename(dir.join(&sha256), &doomed).is_ok() {
            uses.remove(&sha256);
            total = total.saturating_sub(bytes);
            tracing::info!(bundle_sha256 = %sha256, bytes, "bundle evicted from the cache");
            doomed_trees.push(doomed);
        }
    }
    drop(uses);
    for doomed in doomed_trees {
        let _ = std::fs::remove_dir_all(&doomed);
    }
}

/// Bytes of the files under `dir` (links not followed).
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => tree_bytes(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |meta| meta.len()),
            _ => 0,
        })
        .sum()
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
