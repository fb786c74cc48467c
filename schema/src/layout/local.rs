//! Local paths of the layout: a local store directory ([`StoreRoot`], `.cowork` by default,
//! which holds the store's keys as files plus the embedded run's work and cache), a stored
//! batch's directory ([`BatchDir`]), and a job's work directory and the harness's run
//! directories inside it ([`JobWorkDir`], [`RunDir`]).

use std::path::{Path, PathBuf};

use super::keys::StoreKey;
use super::names;
use crate::ids::BatchId;

/// `<store>/work/replan`: the scratch directory a local resume plans in.
const REPLAN_DIR: &str = "replan";

/// A local store directory: the root of a directory artifact store, where the file of key `k`
/// is `<root>/k`, plus the embedded run's `work/` and `cache/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreRoot {
    root: PathBuf,
}

impl StoreRoot {
    pub fn new(root: impl Into<PathBuf>) -> StoreRoot {
        StoreRoot { root: root.into() }
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// `<root>/<key>`: the file of a store key.
    pub fn key_path(&self, key: &StoreKey) -> PathBuf {
        self.root.join(key.as_str())
    }

    /// `<root>/batches`.
    pub fn batches_dir(&self) -> PathBuf {
        self.root.join(names::BATCHES_DIR)
    }

    /// `<root>/batches/<batch>`: the stored batch's directory.
    pub fn batch_dir(&self, batch: &BatchId) -> BatchDir {
        BatchDir::new(self.batches_dir().join(batch.as_str()))
    }

    /// `<root>/work`: the embedded run's scratch directories.
    pub fn work_dir(&self) -> PathBuf {
        self.root.join(names::WORK_DIR)
    }

    /// `<root>/work/<batch>`: the scratch tree of one batch's jobs.
    pub fn batch_work_dir(&self, batch: &BatchId) -> PathBuf {
        self.work_dir().join(batch.as_str())
    }

    /// `<root>/work/replan`: where a local resume plans the batch again.
    pub fn replan_dir(&self) -> PathBuf {
        self.work_dir().join(REPLAN_DIR)
    }

    /// `<root>/cache/bundles`: the embedded worker's unpacked bundles.
    pub fn bundle_cache_dir(&self) -> PathBuf {
        self.root.join(names::CACHE_DIR).join(names::BUNDLES_DIR)
    }
}

/// A stored batch's directory (`<store>/batches/<batch>`): a batch is stored once its
/// `spec.json` is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchDir {
    dir: PathBuf,
}

impl BatchDir {
    pub fn new(dir: impl Into<PathBuf>) -> BatchDir {
        BatchDir { dir: dir.into() }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/spec.json`.
    pub fn spec_file(&self) -> PathBuf {
        self.dir.join(names::SPEC)
    }

    /// `<dir>/<name>`: a batch-level file.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// A job's work directory on a worker: the harness writes its run directories under
/// `runs/`, and a recording job's cassette is kept as `cassette.json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobWorkDir {
    dir: PathBuf,
}

impl JobWorkDir {
    pub fn new(dir: impl Into<PathBuf>) -> JobWorkDir {
        JobWorkDir { dir: dir.into() }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/runs`: the root of the harness's run directories.
    pub fn runs_dir(&self) -> PathBuf {
        self.dir.join(names::RUNS_DIR)
    }

    /// `<dir>/cassette.json`: the cassette a recording job keeps.
    pub fn cassette(&self) -> PathBuf {
        self.dir.join(names::CASSETTE)
    }
}

/// One run directory the harness wrote: files at its top, and per-turn files under
/// `turns/<N>/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunDir {
    dir: PathBuf,
}

impl RunDir {
    pub fn new(dir: impl Into<PathBuf>) -> RunDir {
        RunDir { dir: dir.into() }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/<name>`: a file at the run's top.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `<dir>/turns`: the parent of every turn's directory.
    pub fn turns_dir(&self) -> PathBuf {
        self.dir.join(names::TURNS_DIR)
    }

    /// `<dir>/turns/<turn>/<name>`: a file of one turn.
    pub fn turn_file(&self, turn: u32, name: &str) -> PathBuf {
        self.turns_dir().join(turn.to_string()).join(name)
    }
}

/// `<bundle root>/cassettes/<stem>.cassette.json`: where `record` writes the cassette of a
/// scenario file of stem `stem`, relative to the root of the bundle it runs in.
pub fn recorded_cassette(bundle_root: &Path, stem: &str) -> PathBuf {
    bundle_root
        .join(names::CASSETTES_DIR)
        .join(names::cassette_file_name(stem))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::keys::BatchKey;

    #[test]
    fn local_paths_follow_the_layout() {
        let batch = BatchId::new("b1").expect("valid literal");
        let store = StoreRoot::new(".cowork");
        assert_eq!(store.path(), Path::new(".cowork"));
        assert_eq!(
            store.key_path(&BatchKey::new(&batch).spec()),
            Path::new(".cowork/batches/b1/spec.json")
        );
        assert_eq!(store.batches_dir(), Path::new(".cowork/batches"));
        let dir = store.batch_dir(&batch);
        assert_eq!(dir.path(), Path::new(".cowork/batches/b1"));
        assert_eq!(dir.spec_file(), Path::new(".cowork/batches/b1/spec.json"));
        assert_eq!(
            dir.file("rollup.json"),
            Path::new(".cowork/batches/b1/rollup.json")
        );
        assert_eq!(store.work_dir(), Path::new(".cowork/work"));
        assert_eq!(store.batch_work_dir(&batch), Path::new(".cowork/work/b1"));
        assert_eq!(store.replan_dir(), Path::new(".cowork/work/replan"));
        assert_eq!(store.bundle_cache_dir(), Path::new(".cowork/cache/bundles"));
    }

    #[test]
    fn work_and_run_dirs_follow_the_layout() {
        let work = JobWorkDir::new("/w/job");
        assert_eq!(work.path(), Path::new("/w/job"));
        assert_eq!(work.runs_dir(), Path::new("/w/job/runs"));
        assert_eq!(work.cassette(), Path::new("/w/job/cassette.json"));
        let run = RunDir::new("/w/job/runs/s/1");
        assert_eq!(
            run.file("status.json"),
            Path::new("/w/job/runs/s/1/status.json")
        );
        assert_eq!(run.turns_dir(), Path::new("/w/job/runs/s/1/turns"));
        assert_eq!(
            run.turn_file(3, "result.json"),
            Path::new("/w/job/runs/s/1/turns/3/result.json")
        );
        assert_eq!(
            recorded_cassette(Path::new("/t/bundle"), "smoke-multiselect"),
            Path::new("/t/bundle/cassettes/smoke-multiselect.cassette.json")
        );
    }
}
