//! The `harness` executor: the real `cowork-harness` CLI as a child process
//! (decisions.md#executors, harness-behaviour.md#job-invocation,
//! harness-behaviour.md#outcome-classes, harness-behaviour.md#run-dir,
//! harness-behaviour.md#uploads).
//!
//! One job is one process:
//! `<program> --run-dir <work_dir>/runs <cmd> <bundle_dir>/<scenario> --output-format json [flags]`.
//! The process runs in its own session and process group, because the CLI kills its own group
//! (`kill(0, SIGKILL)`) when an agent fails to start, and the worker must survive that. Its
//! environment is cleared and rebuilt from an allow-list, so secrets reach only the harness, and
//! its cwd is the job's empty work dir, so no stray `./.env` can supply credentials.
//!
//! The job's hard timeout (harness-behaviour.md#choice-c13) and cancellation stop the harness
//! the way the CLI expects: SIGTERM first (its handler removes its proxy container and Docker
//! networks, which SIGKILL would leak), up to [`HarnessConfig::stop_grace`] for that cleanup,
//! then SIGKILL of the whole process group; the job's `harness.stderr.log` says which it took.
//! The group is also killed after the leader exits, so no grandchild outlives the job. With
//! [`HarnessConfig::guard`] set, the process is the harness guard ([`super::guard`]), which also
//! kills the group when this process dies, so no harness outlives the worker. Stdout and stderr
//! are read concurrently and bounded, so a chatty child can neither deadlock on a full pipe nor
//! exhaust memory. Classification itself is the pure [`super::classify`].
//!
//! Modules, in the order of one job:
//! - `config`: the settings and their defaults (which variables reach the harness, which are
//!   credentials).
//! - `launch`: the arguments and dirs a process starts with; a `record` job's bundle copy.
//! - `spawn`: the child command (cleared environment, own session, optional guard).
//! - `supervise`: timeout, cancel, SIGTERM then SIGKILL of the process group.
//! - `capture`: bounded, concurrent reading of stdout and stderr.
//! - `outcome`: the outcome class and the artifacts; `collect` finds them in the run dir.
//! - `notes`, `signal_death`, `docker_sweep`: what the worker says and cleans up after a job.
//! - `sealing`: credential values scrubbed and diagnostics cut before the store.
//! - `one_job`: one job through its own process; [`replay_pack`]: many replay jobs through one.

mod capture;
mod collect;
mod config;
mod docker_sweep;
mod launch;
mod notes;
mod one_job;
mod outcome;
pub mod replay_pack;
mod sealing;
mod signal_death;
mod spawn;
mod supervise;

use std::time::Instant;

use cowork_schema::batch::ExecutorKind;
use tokio_util::sync::CancellationToken;

pub(crate) use self::capture::{Capture, Captured, Finished, Keep};
pub use self::config::{
    DEFAULT_PASSTHROUGH_ENV, DEFAULT_STDOUT_LIMIT_BYTES, DEFAULT_STOP_GRACE,
    DEFAULT_UPLOAD_LIMIT_BYTES, HarnessConfig, SECRET_ENV,
};
pub use self::launch::harness_args;
pub(crate) use self::launch::{Launch, not_started};
pub use super::ScenarioPathError;
use super::{ExecOutput, Executor, JobContext};

/// Runs jobs with the real CLI.
#[derive(Debug)]
pub struct HarnessExecutor {
    config: HarnessConfig,
}

impl HarnessExecutor {
    /// Creates the executor.
    pub fn new(config: HarnessConfig) -> HarnessExecutor {
        HarnessExecutor { config }
    }

    /// The settings it runs with.
    pub fn config(&self) -> &HarnessConfig {
        &self.config
    }
}

#[async_trait::async_trait]
impl Executor for HarnessExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Harness
    }

    #[tracing::instrument(skip_all, fields(job_id = %ctx.job.job_id, executor = "harness"))]
    async fn execute(&self, ctx: &JobContext, cancel: CancellationToken) -> ExecOutput {
        let started = Instant::now();
        let mut output = self.run(ctx, &cancel).await;
        output.run_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.seal(output).await
    }

    async fn execute_many(&self, jobs: &[(JobContext, CancellationToken)]) -> Vec<ExecOutput> {
        let outputs = replay_pack::execute_many(self, jobs).await;
        let mut sealed = Vec::with_capacity(outputs.len());
        for output in outputs {
            sealed.push(self.seal(output).await);
        }
        sealed
    }
}
