//! A job's private temp root, removed after the job whatever its end.
//!
//! The harness gets `<root>/tmp` as its `TMPDIR`: `cowork-harness replay` materializes a
//! cassette's artifacts into `$TMPDIR/cwh-replay-*` and leaves that directory behind when it
//! is signalled (it installs no handler outside container and hostloop) or when an artifact's
//! digest does not match. A shared `TMPDIR` would collect those on every worker; a private one
//! is removed as a whole, and what the harness left in it is reported.
//!
//! A `record` job also gets its own copy of the bundle under `<root>/bundle`, and writes its
//! cassette into that copy at `cassettes/<scenario stem>.cassette.json`. The CLI stores the
//! cassette's session and scenario paths relative to the cassette's own directory, so a
//! cassette written beside the worker's bundle cache names paths into that cache; written
//! inside a copy of the bundle, it names them relative to the bundle root, the way it would
//! from the root of the user's tree, and replays wherever it is put back at that place. The
//! root lies in the worker's temp dir, outside any git work tree, because the CLI refuses to
//! record at protocol and hostloop into a path a git work tree can see.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cowork_schema::layout::local::recorded_cassette;
use cowork_schema::layout::names;

/// Prefix of every job temp root's name.
pub const JOB_TEMP_PREFIX: &str = "cowork-job-";

/// Makes the names of one process's temp roots unique; with the pid they are unique on the
/// host. Only uniqueness matters, so relaxed ordering is enough.
static NEXT_TEMP: AtomicU64 = AtomicU64::new(0);

/// A job's temp root; [`JobTemp::remove`] deletes it.
#[derive(Debug)]
pub struct JobTemp {
    root: PathBuf,
}

/// What [`JobTemp::remove`] found and did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Removed {
    /// The temp root that was removed.
    pub root: PathBuf,
    /// Names of what the harness left in its `TMPDIR`, sorted.
    pub leftovers: Vec<String>,
    /// Why the root could not be removed, if it could not.
    pub error: Option<String>,
}

impl JobTemp {
    /// Creates a fresh temp root with an empty `tmp/` below `parent`.
    pub async fn create(parent: &Path) -> io::Result<JobTemp> {
        let n = NEXT_TEMP.fetch_add(1, Ordering::Relaxed);
        let root = parent.join(format!("{JOB_TEMP_PREFIX}{}-{n}", std::process::id()));
        // A root of the same name can only be the leftover of an earlier process that had
        // this pid and was killed before it cleaned up: it is removed, so no job shares one.
        if tokio::fs::try_exists(&root).await.unwrap_or(false) {
            tokio::fs::remove_dir_all(&root).await?;
        }
        tokio::fs::create_dir(&root).await?;
        let temp = JobTemp { root };
        tokio::fs::create_dir(temp.tmpdir()).await?;
        Ok(temp)
    }

    /// The harness's `TMPDIR`.
    pub fn tmpdir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// Where a replay pack's view of its bundle goes (see `replay_pack`).
    pub fn pack_view(&self) -> PathBuf {
        self.root.join("view")
    }

    /// Where a `record` job's copy of its bundle goes.
    pub fn bundle_copy(&self) -> PathBuf {
        self.root.join("bundle")
    }

    /// Lists what is left in `TMPDIR`, then removes the whole root.
    pub async fn remove(self) -> Removed {
        let root = self.root;
        let task = {
            let root = root.clone();
            tokio::task::spawn_blocking(move || {
                let mut leftovers: Vec<String> = std::fs::read_dir(root.join("tmp"))
                    .map(|entries| {
                        entries
                            .filter_map(Result::ok)
                            .map(|entry| entry.file_name().to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                leftovers.sort();
                let error = std::fs::remove_dir_all(&root)
                    .err()
                    .map(|err| err.to_string());
                (leftovers, error)
            })
        };
        match task.await {
            Ok((leftovers, error)) => Removed {
                root,
                leftovers,
                error,
            },
            Err(err) => Removed {
                root,
                leftovers: Vec::new(),
                error: Some(format!("removal task failed: {err}")),
            },
        }
    }
}

/// Copies the tree `from` to `to` (which must not exist): directories, regular files with
/// their permissions, and symlinks as symlinks (the bundle's unpacking refused escaping ones).
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::create_dir(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Keeps the copy's git index (see `bundle_cache`) from seeing the new cassette: the CLI
/// refuses to record at protocol and hostloop into a path a git work tree can see, and an
/// ignored path is not seen. Only untracked files are ignored, so cassettes the bundle ships
/// stay as they are. A copy without an index needs nothing.
pub fn ignore_new_cassettes(bundle_copy: &Path) -> io::Result<()> {
    let info = bundle_copy.join(".git").join("info");
    if !bundle_copy.join(".git").is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(&info)?;
    use std::io::Write as _;
    let mut exclude = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(info.join("exclude"))?;
    // `cassettes/` is where a `record` job writes inside its bundle copy: the CLI's own
    // default for `record` run from the root of a tree.
    writeln!(exclude, "/{}/", names::CASSETTES_DIR)
}

/// The cassette path of a `record` job inside its bundle copy: `cassettes/<stem>.cassette.json`
/// where `<stem>` is the scenario file's name without its extension.
pub fn cassette_in_copy(bundle_copy: &Path, scenario_file: &str) -> PathBuf {
    let stem = Path::new(scenario_file)
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .filter(|stem| !stem.is_empty())
        .unwrap_or_else(|| "scenario".to_owned());
    recorded_cassette(bundle_copy, &stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cassettes_go_to_the_cli_default_place_of_the_copy() {
        let check = |scenario: &str, expect: &str| {
            assert_eq!(
                cassette_in_copy(Path::new("/t/bundle"), scenario),
                PathBuf::from(expect),
                "{scenario}"
            );
        };
        check(
            "e2e/scenarios/smoke-multiselect.yaml",
            "/t/bundle/cassettes/smoke-multiselect.cassette.json",
        );
        check("a.yml", "/t/bundle/cassettes/a.cassette.json");
    }
}
