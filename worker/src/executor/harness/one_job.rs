//! One job through its own harness process: temp root, staged inputs, spawn, supervision, the
//! outcome, and the cleanup notes after it.

use std::io;
use std::path::Path;

use cowork_schema::event::{ErrorCategory, InfraClass};
use cowork_schema::job::JobSpec;
use cowork_schema::layout::JobWorkDir;
use tokio_util::sync::CancellationToken;

use super::HarnessExecutor;
use super::capture::Captured;
use super::docker_sweep::leaves_docker_resources;
use super::launch::{ChildDirs, Launch, Staged, not_started, stage_record_bundle};
use super::notes::{note_quarantined, note_removed, stderr_artifact};
use super::outcome::guard_spawn_failure;
use super::signal_death::oom_kills;
use crate::executor::job_temp::JobTemp;
use crate::executor::{Classified, ExecOutput, JobContext};

impl HarnessExecutor {
    pub(super) async fn run(&self, ctx: &JobContext, cancel: &CancellationToken) -> ExecOutput {
        let parent = std::env::temp_dir();
        let temp = match JobTemp::create(&parent).await {
            Ok(temp) => temp,
            Err(err) => {
                return not_started(Classified::Infra {
                    class: InfraClass::SandboxStart,
                    message: format!(
                        "cannot create the job's temp dir in {}: {err}",
                        parent.display()
                    ),
                });
            }
        };
        let oom_kills_before = oom_kills();
        let mut output = self.run_in(ctx, cancel, &temp).await;
        self.explain_signal_death(&mut output, ctx.job.tier, oom_kills_before);
        // A harness whose sandbox failed to start is handed back (not `spawned`), but it ran
        // and may have left containers or networks behind: it exited, so sweep after it too.
        let ran = output.spawned || output.exit_code.is_some();
        if ran && leaves_docker_resources(&ctx.job) {
            self.remove_docker_leftovers(&mut output, ctx).await;
        }
        note_quarantined(&mut output, &JobWorkDir::new(&ctx.work_dir).runs_dir());
        let removed = temp.remove().await;
        note_removed(&mut output, &ctx.job, &removed);
        output
    }

    /// The job inside its temp root: a `record` job runs on its own copy of the bundle.
    async fn run_in(
        &self,
        ctx: &JobContext,
        cancel: &CancellationToken,
        temp: &JobTemp,
    ) -> ExecOutput {
        let staged = match stage_record_bundle(ctx, temp).await {
            Ok(staged) => staged,
            Err(not_run) => return *not_run,
        };
        let Launch {
            work_dir,
            bundle_dir,
            args,
        } = match Launch::prepare(ctx, cancel, "the harness", staged.as_ref()).await {
            Ok(launch) => launch,
            Err(not_run) => return *not_run,
        };
        let job = &ctx.job;
        let tmpdir = temp.tmpdir();
        let dirs = ChildDirs {
            work_dir: &work_dir,
            bundle_dir: &bundle_dir,
            tmpdir: &tmpdir,
        };
        let mut child = match self.command(&args, &dirs).spawn() {
            Ok(child) => child,
            Err(err) => return not_started(self.spawn_failure(&err)),
        };
        tracing::debug!(job_id = %job.job_id, pid = child.id(), "harness started");
        // The guard's end of life: held until the job is over. Dropping it early, or this
        // process dying, tells the guard to kill the job's process group.
        let _guard_pipe = child.stdin.take();
        let finished = match self.supervise_and_capture(&mut child, job, cancel).await {
            Ok(finished) => finished,
            Err((err, stderr)) => return wait_failure(&err, stderr),
        };
        if self.config.guard.is_some()
            && let Some(message) = guard_spawn_failure(&finished)
        {
            return not_started(Classified::Infra {
                class: InfraClass::Spawn,
                message,
            });
        }
        if let Some(staged) = &staged {
            keep_recorded_cassette(job, staged, &work_dir).await;
        }
        self.finish(job, &work_dir, finished).await
    }
}

/// The output of a job whose process could not be waited for: spent, with what it wrote to
/// stderr.
fn wait_failure(err: &io::Error, stderr: Captured) -> ExecOutput {
    let artifacts = vec![stderr_artifact(stderr)];
    ExecOutput {
        classified: Classified::error(
            ErrorCategory::Internal,
            format!("cannot wait for the harness process: {err}"),
        ),
        exit_code: None,
        harness_version: None,
        spawned: true,
        artifacts,
        run_ms: 0,
    }
}

/// Copies a `record` job's cassette out of its bundle copy: the copy is removed with the temp
/// root, and the cassette is kept where the upload looks for it.
async fn keep_recorded_cassette(job: &JobSpec, staged: &Staged, work_dir: &Path) {
    let kept = JobWorkDir::new(work_dir).cassette();
    if let Err(err) = tokio::fs::copy(&staged.cassette, &kept).await
        && err.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(job_id = %job.job_id, error = %err, "keeping the recorded cassette failed");
    }
}
