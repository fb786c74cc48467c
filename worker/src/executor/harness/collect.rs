//! Finding a job's run dir and collecting its result and diagnostic files
//! (harness-behaviour.md#uploads); blocking IO, run off the async threads.

use std::io;
use std::path::{Path, PathBuf};

use cowork_schema::layout::{RunDir, names};
use serde_json::Value;

use crate::executor::{Artifact, ArtifactSource};

/// `outDir` of a result that has no run dir (`replay`, harness-behaviour.md#real-cli).
const REPLAY_OUT_DIR: &str = "(replay)";

/// Run-dir files uploaded when present (the "should" list of harness-behaviour.md#uploads), by
/// their artifact names.
const RUN_DIR_ARTIFACTS: &[&str] = &[
    names::RUN_EVENTS,
    names::RUN_CONTROL_OUT,
    names::AGENT_STDERR,
    names::RUN_STATUS,
];

/// What to look for in the run dir.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Want {
    /// The completed result: the highest `turns/<N>/result.json`.
    Result,
    /// The salvaged partial result of an unanswered run (diagnostic only).
    PartialResult,
    /// Only the diagnostic files.
    Diagnostics,
}

/// What to collect for one job, and where.
#[derive(Debug)]
pub(super) struct CollectRequest {
    pub(super) job_id: String,
    pub(super) runs_root: PathBuf,
    pub(super) cassette: Option<PathBuf>,
    /// `results[0].outDir` of the envelope, when there was one.
    pub(super) out_dir: Option<String>,
    pub(super) want: Want,
}

/// What was found in the run dir.
#[derive(Debug, Default)]
pub(super) struct Collected {
    /// The result file and its parsed content (Want::Result) or the partial result file
    /// (Want::PartialResult; the value is then unused).
    pub(super) result: Option<(PathBuf, Value)>,
    pub(super) artifacts: Vec<Artifact>,
}

/// Finds the run dir and collects the result and the diagnostic files of
/// harness-behaviour.md#uploads.
pub(super) fn collect(request: &CollectRequest) -> Collected {
    let mut collected = Collected::default();
    let run_dir = match request.out_dir.as_deref() {
        // `replay` writes no run dir; its envelope result is the record.
        Some(REPLAY_OUT_DIR) => None,
        out_dir => locate_run_dir(&request.runs_root, out_dir, &request.job_id),
    };
    if let Some(run_dir) = &run_dir {
        match request.want {
            Want::Result | Want::PartialResult => {
                if let Some(path) = highest_turn_file(run_dir, names::RESULT) {
                    match read_json(&path) {
                        Ok(value) => collected.result = Some((path, value)),
                        Err(err) => tracing::warn!(
                            job_id = %request.job_id,
                            path = %path.display(),
                            error = %err,
                            "result file unreadable; using the envelope's copy"
                        ),
                    }
                }
            }
            Want::Diagnostics => {}
        }
        let mut named: Vec<PathBuf> = collected
            .result
            .iter()
            .map(|(path, _)| path.clone())
            .collect();
        for name in RUN_DIR_ARTIFACTS {
            let path = run_dir.join(name);
            if is_regular_file(&path) {
                named.push(path.clone());
                collected.artifacts.push(Artifact {
                    name: (*name).to_owned(),
                    source: ArtifactSource::File(path),
                });
            }
        }
        if let Some(path) = highest_turn_file(run_dir, names::TRACE) {
            named.push(path.clone());
            collected.artifacts.push(Artifact {
                name: names::TRACE.to_owned(),
                source: ArtifactSource::File(path),
            });
        }
        // Every other file the CLI wrote into the run dir (timeline, mounts, per-turn run
        // logs, its agent config, staged work files, …) is kept under `run/` at its place in
        // the run dir: it is what a person debugging a run opens.
        let mut rest = Vec::new();
        run_dir_files(run_dir, Path::new(""), &mut rest);
        for (relative, path) in rest {
            if named.contains(&path) {
                continue;
            }
            collected.artifacts.push(Artifact {
                name: format!("{}/{relative}", names::RUN_FILES_DIR),
                source: ArtifactSource::File(path),
            });
        }
    }
    if let Some(cassette) = &request.cassette
        && is_regular_file(cassette)
    {
        collected.artifacts.push(Artifact {
            name: names::CASSETTE.to_owned(),
            source: ArtifactSource::File(cassette.clone()),
        });
    }
    collected
}

/// Every regular file below `dir`, with its `/`-separated path relative to the run dir, sorted;
/// symlinks are not followed and names a store key cannot hold are skipped.
fn run_dir_files(dir: &Path, relative: &Path, out: &mut Vec<(String, PathBuf)>) {
    for path in sorted_entries(dir) {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
            continue;
        };
        if name.contains('\\') {
            continue;
        }
        let relative = relative.join(name);
        if meta.is_dir() {
            run_dir_files(&path, &relative, out);
        } else if meta.is_file()
            && let Some(key) = relative.to_str()
        {
            out.push((key.to_owned(), path));
        }
    }
}

/// The entries of `dir`, sorted; empty when unreadable.
pub(super) fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .collect();
    paths.sort();
    paths
}

/// The run dir: the envelope's `outDir` when it lies inside our runs root, else the last run dir
/// found there (`<runs_root>/<slug>/<runId>/`; a per-job runs root holds one).
fn locate_run_dir(runs_root: &Path, out_dir: Option<&str>, job_id: &str) -> Option<PathBuf> {
    if let Some(out_dir) = out_dir {
        let candidate = Path::new(out_dir);
        if is_inside(candidate, runs_root) {
            return Some(candidate.to_path_buf());
        }
        // Reading a path we do not own could upload files that are not this job's.
        tracing::warn!(
            job_id,
            out_dir,
            "outDir is not inside the job's runs root; scanning it instead"
        );
    }
    let mut run_dirs = Vec::new();
    for slug_dir in sorted_subdirs(runs_root) {
        run_dirs.extend(sorted_subdirs(&slug_dir));
    }
    run_dirs.pop()
}

/// `true` when `path` is an existing directory inside `root` once symlinks are resolved.
fn is_inside(path: &Path, root: &Path) -> bool {
    match (path.canonicalize(), root.canonicalize()) {
        (Ok(path), Ok(root)) => path != root && path.starts_with(&root) && path.is_dir(),
        _ => false,
    }
}

/// Real (not symlinked) subdirectories of `dir`, sorted by name; empty when unreadable.
fn sorted_subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .map(|entry| entry.path())
        .collect();
    dirs.sort();
    dirs
}

/// `<run_dir>/turns/<N>/<file_name>` with the highest numeric `N` for which it is a regular file.
fn highest_turn_file(run_dir: &Path, file_name: &str) -> Option<PathBuf> {
    let entries = std::fs::read_dir(RunDir::new(run_dir).turns_dir()).ok()?;
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let turn: u32 = entry.file_name().to_str()?.parse().ok()?;
            let path = entry.path().join(file_name);
            is_regular_file(&path).then_some((turn, path))
        })
        .max_by_key(|(turn, _)| *turn)
        .map(|(_, path)| path)
}

/// `true` for a regular file that is not a symlink (a link could point outside the run dir).
fn is_regular_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file())
}

#[derive(Debug, thiserror::Error)]
enum ReadJsonError {
    #[error("cannot read: {0}")]
    Io(#[from] io::Error),
    #[error("invalid json: {0}")]
    Json(#[from] serde_json::Error),
}

fn read_json(path: &Path) -> Result<Value, ReadJsonError> {
    let bytes = std::fs::read(path)?;
    Ok(serde_json::from_slice(&bytes)?)
}
