//! The start-up check of every directory a process writes: `cowork worker` (its bundle cache,
//! job scratch dirs and temp dir), `cowork coordinator` (its scratch dir and temp dir) and the
//! embedded run of `cowork run`, `eval` and `resume` (the local store and the work and cache
//! dirs inside it). A directory the process cannot write is refused before it connects,
//! advertises itself or takes a job: otherwise every job fails later on `Permission denied`.
//! The check creates each directory when it is missing and writes and removes a probe file.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use cowork_schema::layout::StoreRoot;

use crate::exit::CliError;

/// A directory a process writes, what it holds, and the setting that moves it.
#[derive(Clone, Debug)]
pub struct WritableDir {
    pub path: PathBuf,
    /// What the process keeps there, for the message ("the bundle cache: …").
    pub purpose: &'static str,
    /// The flag or variable that points it elsewhere ("--cache-dir (COWORK_CACHE_DIR)").
    pub setting: &'static str,
}

/// The process's own temp dir (`TMPDIR`), where harness runs and spool files are made.
fn temp_dir(purpose: &'static str) -> WritableDir {
    WritableDir {
        path: std::env::temp_dir(),
        purpose,
        setting: "the TMPDIR environment variable",
    }
}

/// What `cowork worker` writes; `harness`: its executor runs the harness (not `sim`).
pub fn worker_dirs(cache_dir: &Path, work_dir: &Path, harness: bool) -> Vec<WritableDir> {
    let mut dirs = vec![
        WritableDir {
            path: cache_dir.to_path_buf(),
            purpose: "the bundle cache: each job's bundle is unpacked here",
            setting: "--cache-dir (COWORK_CACHE_DIR)",
        },
        WritableDir {
            path: work_dir.to_path_buf(),
            purpose: "each job's scratch directory, where the harness writes its runs",
            setting: "--work-dir (COWORK_WORK_DIR)",
        },
    ];
    if harness {
        dirs.push(temp_dir("each harness run's temp directory"));
    }
    dirs
}

/// What `cowork coordinator` writes.
pub fn coordinator_dirs(scratch_dir: &Path) -> Vec<WritableDir> {
    vec![
        WritableDir {
            path: scratch_dir.to_path_buf(),
            purpose: "submitted bundles, unpacked here while they are validated",
            setting: "--scratch-dir (COWORK_SCRATCH_DIR)",
        },
        temp_dir("the spool files of uploads and stored documents"),
    ]
}

/// What an embedded run (`cowork run`, `eval`, `resume`) writes in its local store `store`;
/// `harness`: its executor runs the harness (not `sim`).
pub fn store_dirs(store: &Path, harness: bool) -> Vec<WritableDir> {
    let root = StoreRoot::new(store);
    let setting = "--store (COWORK_STORE)";
    let mut dirs = vec![
        WritableDir {
            path: store.to_path_buf(),
            purpose: "the local store: each batch's spec, results and report",
            setting,
        },
        WritableDir {
            path: root.work_dir(),
            purpose: "each job's scratch directory, where the harness writes its runs",
            setting,
        },
        WritableDir {
            path: root.bundle_cache_dir(),
            purpose: "the bundle cache: each job's bundle is unpacked here",
            setting,
        },
    ];
    if harness {
        dirs.push(temp_dir("each harness run's temp directory"));
    }
    dirs
}

/// Creates each of `dirs` when missing and writes and removes a probe file in it. Every
/// directory that fails is named, with the user this process runs as, what the directory is
/// for and how to fix it; the error is a usage error (exit 2).
pub fn check_writable(dirs: &[WritableDir]) -> Result<(), CliError> {
    let problems: Vec<String> = dirs
        .iter()
        .filter_map(|dir| probe(&dir.path).err().map(|error| refusal(dir, &error)))
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::Usage(problems))
    }
}

/// Creates `dir` when missing, then writes, syncs and removes a probe file in it.
fn probe(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|error| format!("creating it failed: {error}"))?;
    if !dir.is_dir() {
        return Err("it is not a directory".to_owned());
    }
    let file = dir.join(format!(".cowork-write-probe-{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&file)
        .and_then(|mut opened| opened.write_all(b"probe\n"));
    let removed = std::fs::remove_file(&file);
    written.map_err(|error| format!("writing a file in it failed: {error}"))?;
    removed.map_err(|error| format!("removing a file from it failed: {error}"))
}

/// The message for `dir`, which failed its probe with `error`.
fn refusal(dir: &WritableDir, error: &str) -> String {
    // Absolute: a relative default (`.cowork-worker/cache`) depends on the working directory.
    let absolute = std::path::absolute(&dir.path).unwrap_or_else(|_| dir.path.clone());
    let path = absolute.display();
    let user = current_user();
    let who = user.name.clone().unwrap_or_else(|| user.id.clone());
    let fix = match in_the_way(&dir.path) {
        Some(file) => format!(
            "{} is a file, not a directory: move it away, or point {} at a directory {who} can write",
            file.display(),
            dir.setting
        ),
        None => format!(
            "as an administrator, run `mkdir -p {path} && chown -R {who} {path}`, or point {} at a directory {who} can write",
            dir.setting
        ),
    };
    format!(
        "{setting} {path}: not writable by {user}: {error}. It holds {purpose}. Fix: {fix}",
        setting = dir.setting,
        user = user.describe(),
        purpose = dir.purpose,
    )
}

/// `path` or its nearest ancestor that exists, when that is not a directory.
fn in_the_way(path: &Path) -> Option<PathBuf> {
    let existing = path.ancestors().find(|ancestor| ancestor.exists())?;
    (!existing.is_dir()).then(|| existing.to_path_buf())
}

/// The user this process runs as.
struct User {
    /// `uid 1000`, or `$USER` where the uid cannot be read.
    id: String,
    name: Option<String>,
}

impl User {
    /// `uid 1000 (alice)`.
    fn describe(&self) -> String {
        match &self.name {
            Some(name) if name != &self.id => format!("{} ({name})", self.id),
            _ => self.id.clone(),
        }
    }
}

/// The effective uid from `/proc/self/status` and its name from `/etc/passwd`; `$USER` where
/// those cannot be read (not Linux).
fn current_user() -> User {
    let env_name = std::env::var("USER").ok().filter(|name| !name.is_empty());
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| effective_uid(&status));
    match uid {
        Some(uid) => User {
            id: format!("uid {uid}"),
            name: std::fs::read_to_string("/etc/passwd")
                .ok()
                .and_then(|passwd| user_name(&passwd, &uid))
                .or(env_name),
        },
        None => User {
            id: env_name.clone().unwrap_or_else(|| "this user".to_owned()),
            name: env_name,
        },
    }
}

/// The effective uid of a `/proc/<pid>/status` text (`Uid: real effective saved fs`).
fn effective_uid(status: &str) -> Option<String> {
    let line = status.lines().find_map(|line| line.strip_prefix("Uid:"))?;
    line.split_whitespace().nth(1).map(str::to_owned)
}

/// The name of `uid` in an `/etc/passwd` text.
fn user_name(passwd: &str, uid: &str) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)? == uid).then(|| name.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(path: PathBuf) -> WritableDir {
        WritableDir {
            path,
            purpose: "the bundle cache",
            setting: "--cache-dir (COWORK_CACHE_DIR)",
        }
    }

    fn problems(dirs: &[WritableDir]) -> Vec<String> {
        match check_writable(dirs) {
            Err(CliError::Usage(problems)) => problems,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_directory_is_created_and_left_without_the_probe() {
        let temp = tempfile::tempdir().expect("temp dir");
        let cache = temp.path().join("a/b/cache");
        check_writable(&[dir(cache.clone())]).expect("writable");
        assert!(cache.is_dir());
        let left: Vec<_> = std::fs::read_dir(&cache).expect("read").collect();
        assert!(left.is_empty(), "the probe file is removed: {left:?}");
    }

    #[test]
    fn a_file_in_place_of_the_directory_is_refused_with_who_what_and_the_fix() {
        let temp = tempfile::tempdir().expect("temp dir");
        let file = temp.path().join("cache");
        std::fs::write(&file, "not a dir").expect("write");
        let below = temp.path().join("cache/bundles");
        let problems = problems(&[dir(file.clone()), dir(below.clone())]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        let user = current_user().describe();
        for (problem, path) in problems.iter().zip([&file, &below]) {
            for part in [
                format!(
                    "--cache-dir (COWORK_CACHE_DIR) {}: not writable by {user}",
                    path.display()
                ),
                "It holds the bundle cache. Fix:".to_owned(),
                format!("Fix: {} is a file, not a directory", file.display()),
            ] {
                assert!(problem.contains(&part), "{part:?} in {problem}");
            }
        }
    }

    #[test]
    fn the_user_is_read_from_proc_status_and_passwd() {
        let status = "Name:\tcowork\nUid:\t1000\t1001\t1001\t1001\nGid:\t5\t5\t5\t5\n";
        assert_eq!(effective_uid(status).as_deref(), Some("1001"));
        let passwd = "root:x:0:0:root:/root:/bin/sh\nbob:x:1001:1001::/home/bob:/bin/sh\n";
        assert_eq!(user_name(passwd, "1001").as_deref(), Some("bob"));
        assert_eq!(user_name(passwd, "7"), None);
        let user = User {
            id: "uid 1001".to_owned(),
            name: Some("bob".to_owned()),
        };
        assert_eq!(user.describe(), "uid 1001 (bob)");
    }
}
