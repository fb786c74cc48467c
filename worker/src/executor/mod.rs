//! Executors: the ways a worker runs one job (decisions.md#executors).
//!
//! Every executor sits behind the object-safe [`Executor`] trait and is used as
//! `Arc<dyn Executor>`. An executor never fails: whatever happens to the job, it returns an
//! [`ExecOutput`] whose [`Classified`] value is one of the outcomes of
//! harness-behaviour.md#outcome-classes, plus the artifacts the job loop uploads under
//! `batches/<batch>/jobs/<job>/<name>` (decisions.md#storage).
//!
//! Modules:
//! - [`harness`]: the real `cowork-harness` CLI as a child process in its own session.
//! - [`guard`]: the optional supervisor process between the worker and one harness that kills
//!   the harness's process group when the worker dies.
//! - [`job_temp`]: a job's private temp root (the harness's `TMPDIR`, a `record` job's copy
//!   of its bundle), removed after the job whatever its end.
//! - [`leftovers`]: the CLI's containers and networks a job left in Docker, chosen by their
//!   names and their mounts below the job's work dir.
//! - [`container`]: the same CLI inside one container per job, through the Docker Engine API.
//! - [`classify`]: the pure mapping from exit status and stdout to an outcome
//!   (harness-behaviour.md#outcome-classes, harness-behaviour.md#exit-codes).
//! - [`sim`]: the seeded simulator, whose results are marked simulated.
//! - [`replay_pack`]: many replay jobs through one harness process (the CLI's own dir replay),
//!   split back into one output per job; part of the harness executor, re-exported here.
//! - [`seal`]: what a harness job's artifacts become before the store: credential values
//!   scrubbed from every one, diagnostic files size-capped with a note.

pub mod classify;
pub mod container;
pub mod guard;
pub mod harness;
pub mod job_temp;
pub mod leftovers;
pub mod seal;
pub mod sim;

use std::path::{Component, Path, PathBuf};

use cowork_schema::batch::ExecutorKind;
use cowork_schema::event::{ErrorCategory, InfraClass};
use cowork_schema::job::JobSpec;
use tokio_util::sync::CancellationToken;

pub use container::{ContainerConfig, ContainerExecutor};
pub use harness::replay_pack;
pub use harness::{HarnessConfig, HarnessExecutor};
pub use sim::SimExecutor;

/// Runs one job.
///
/// Implementations are object-safe and shared between job tasks as `Arc<dyn Executor>`.
#[async_trait::async_trait]
pub trait Executor: Send + Sync {
    /// Which executor this is, for events and tracing.
    fn kind(&self) -> ExecutorKind;

    /// Runs one job. Never panics, never returns `Err`: every failure is classified.
    ///
    /// When `cancel` fires, the job is stopped at once (for the harness: the whole process
    /// group is killed) and the outcome is `Error { category: "cancelled", .. }`.
    async fn execute(&self, ctx: &JobContext, cancel: CancellationToken) -> ExecOutput;

    /// Runs the jobs of one slot, each with its own cancellation token, one output per job in
    /// the order given. The default runs them one after the other with [`Executor::execute`];
    /// the harness executor runs the replay jobs among them many to one process
    /// ([`replay_pack`]).
    async fn execute_many(&self, jobs: &[(JobContext, CancellationToken)]) -> Vec<ExecOutput> {
        let mut outputs = Vec::with_capacity(jobs.len());
        for (ctx, cancel) in jobs {
            outputs.push(self.execute(ctx, cancel.clone()).await);
        }
        outputs
    }
}

/// A scenario path that would leave the bundle.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("scenario file {path:?} of job {job_id} must be a relative path inside the bundle")]
pub struct ScenarioPathError {
    /// The job whose spec holds the path.
    pub job_id: String,
    /// `JobSpec::scenario_file` as given.
    pub path: String,
}

/// Where `job`'s scenario lies under `bundle_dir`, or why it may not be read: every executor
/// resolves the path through this one check, so a job naming an absolute path or one that
/// climbs out with `..` reads no host file, whichever executor runs it (the unpacker refuses
/// links, so a lexical check is enough inside the bundle).
pub fn scenario_in_bundle(job: &JobSpec, bundle_dir: &Path) -> Result<PathBuf, ScenarioPathError> {
    bundle_path(bundle_dir, &job.scenario_file).ok_or_else(|| ScenarioPathError {
        job_id: job.job_id.to_string(),
        path: job.scenario_file.clone(),
    })
}

/// Joins a `/`-separated bundle-relative path onto the bundle root; `None` when it is empty,
/// absolute or climbs out with `..`.
pub(crate) fn bundle_path(bundle_dir: &Path, relative: &str) -> Option<PathBuf> {
    let relative = Path::new(relative);
    let mut n_normal = 0;
    for component in relative.components() {
        match component {
            Component::Normal(_) => n_normal += 1,
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (n_normal > 0).then(|| bundle_dir.join(relative))
}

/// Everything an executor needs to run one job.
#[derive(Clone, Debug)]
pub struct JobContext {
    /// The job as published by the coordinator.
    pub job: JobSpec,
    /// Root of the unpacked bundle; `job.scenario_file` is relative to it.
    pub bundle_dir: PathBuf,
    /// An empty scratch directory owned by this job; the harness runs with it as its cwd and
    /// writes its runs root (`runs/`) and, for `record`, the cassette into it.
    pub work_dir: PathBuf,
    /// 1-based delivery attempt of this job (the simulator's fault injection keys on it).
    pub attempt: u32,
}

/// What one execution produced.
#[derive(Clone, Debug)]
pub struct ExecOutput {
    /// The outcome of the job (harness-behaviour.md#outcome-classes).
    pub classified: Classified,
    /// Process exit code of the CLI, when it exited (absent when killed or never started).
    pub exit_code: Option<i32>,
    /// `envelope.version` of the CLI that ran the job (harness-behaviour.md#cli-version-pin), when
    /// an envelope was seen.
    pub harness_version: Option<String>,
    /// `false` when the CLI never started, so nothing was spent and the job may be retried
    /// (harness-behaviour.md#choice-c8).
    pub spawned: bool,
    /// Files to upload under `batches/<batch>/jobs/<job>/<name>`.
    pub artifacts: Vec<Artifact>,
    /// Wall-clock time the executor took, in milliseconds.
    pub run_ms: u64,
}

impl ExecOutput {
    /// Looks up an artifact by name.
    pub fn artifact(&self, name: &str) -> Option<&Artifact> {
        self.artifacts.iter().find(|artifact| artifact.name == name)
    }
}

/// One file of a job's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// File name under the job's prefix, e.g. `result.json` or `harness.stderr.log`.
    pub name: String,
    /// Where its bytes are.
    pub source: ArtifactSource,
}

/// Where the bytes of an [`Artifact`] are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArtifactSource {
    /// In memory.
    Bytes(Vec<u8>),
    /// A file inside the job's work dir; it lives until the job loop removes the work dir.
    File(PathBuf),
}

/// The outcome of one job (harness-behaviour.md#outcome-classes).
#[derive(Clone, Debug, PartialEq)]
pub enum Classified {
    /// Exit 0 or 1 with exactly one result: a real sample, whatever its verdict. `result` is
    /// the RunResult, the on-disk (secret-scrubbed) copy when there is one.
    Completed { result: serde_json::Value },
    /// Exit 2 with `error.category == "unanswered"`. The salvaged partial result, if any, is
    /// uploaded as `partial-result.json` and is never folded.
    Unanswered {
        message: String,
        hint: Option<String>,
    },
    /// Any other failure of the job itself: a CLI error category, `boundary`, `crashed`,
    /// `timeout`, `cancelled` or `internal` (no parseable envelope).
    Error {
        category: ErrorCategory,
        message: String,
    },
    /// An infrastructure failure of the worker (harness-behaviour.md#choice-c8).
    Infra { class: InfraClass, message: String },
}

impl Classified {
    /// Builds [`Classified::Error`].
    pub fn error(category: ErrorCategory, message: String) -> Classified {
        Classified::Error { category, message }
    }
}
