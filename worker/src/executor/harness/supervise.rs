//! Waiting for a harness process under the job's timeout and cancel token, stopping it the way
//! the CLI expects, and killing its whole process group so nothing outlives the job.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use cowork_schema::job::JobSpec;
use tokio::process::Child;
use tokio_util::sync::CancellationToken;

use super::HarnessExecutor;
use super::capture::{Capture, Captured, Finished, Keep, capture};
use crate::executor::classify::ProcessEnd;

impl HarnessExecutor {
    /// Waits for the process under the timeout and the cancel token while both pipes are read.
    pub(crate) async fn supervise_and_capture(
        &self,
        child: &mut Child,
        job: &JobSpec,
        cancel: &CancellationToken,
    ) -> Result<Finished, (io::Error, Captured)> {
        let group = ProcessGroup {
            pgid: child
                .id()
                .and_then(|id| libc::pid_t::try_from(id).ok())
                .expect("a child that was just spawned and not yet waited for has a pid"),
            leader_gone: CancellationToken::new(),
        };
        let mut stdout = child
            .stdout
            .take()
            .expect("stdout was configured as piped and not taken before");
        let mut stderr = child
            .stderr
            .take()
            .expect("stderr was configured as piped and not taken before");
        let limit = self.config.stdout_limit_bytes;
        let (end, stdout, mut stderr) = tokio::join!(
            group.supervise(child, job.timeout_ms, cancel, self.config.stop_grace),
            capture(
                &mut stdout,
                Capture::new(limit, Keep::Tail),
                &group.leader_gone
            ),
            capture(
                &mut stderr,
                Capture::new(limit, Keep::Head),
                &group.leader_gone
            ),
        );
        for (stream, captured) in [("stdout", &stdout), ("stderr", &stderr)] {
            if captured.abandoned {
                tracing::warn!(job_id = %job.job_id, stream, "pipe still open after the process group was killed; output abandoned");
            }
            if let Some(err) = &captured.read_error {
                tracing::warn!(job_id = %job.job_id, stream, error = %err, "reading harness output failed");
            }
        }
        let end = end.map(|(end, stop_note)| {
            if let Some(note) = stop_note {
                tracing::info!(job_id = %job.job_id, note, "stopped the harness");
                stderr
                    .bytes
                    .extend_from_slice(format!("\n[cowork-fleet: {note}]\n").as_bytes());
            }
            end
        });
        match end {
            Ok(end) => Ok(Finished {
                end,
                stdout,
                stderr,
            }),
            Err(err) => Err((err, stderr)),
        }
    }
}

/// Sends SIGKILL to every process of the group `pgid`. A group that is already gone (ESRCH) is
/// not an error.
fn kill_group(pgid: libc::pid_t) {
    send_signal(-pgid, libc::SIGKILL);
}

/// Sends `signal` to `target`: a pid, or a process group as its negated pgid. A target that is
/// already gone (ESRCH) is not an error.
#[allow(unsafe_code)]
fn send_signal(target: libc::pid_t, signal: libc::c_int) {
    // A target of 0, 1 or -1 would address our own group, init or every process; the child's
    // pid is none of them, but a wrong call here would be disastrous, so refuse outright.
    if target.unsigned_abs() <= 1 {
        return;
    }
    // SAFETY: kill(2) takes plain integers and has no memory-safety preconditions. The pid of
    // the group leader stays reserved while any member of its group lives (and the leader is
    // not reaped before this call), so the target is only the job's own processes.
    let rc = unsafe { libc::kill(target, signal) };
    if rc == -1 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!(target, signal, error = %err, "signalling the harness failed");
        }
    }
}

/// The child's process group (its pid, since it leads its own session).
#[derive(Debug)]
struct ProcessGroup {
    pgid: libc::pid_t,
    /// Cancelled once the leader has exited and the group was killed; starts the pipe readers'
    /// drain grace.
    leader_gone: CancellationToken,
}

impl ProcessGroup {
    /// Waits for the leader under the timeout and cancel token (stopping it with
    /// [`ProcessGroup::stop`] when either fires), then kills the whole group so no grandchild
    /// outlives the job, and tells the pipe readers that the leader is gone. Returns how it
    /// ended and, when it was stopped, a note saying how.
    async fn supervise(
        &self,
        child: &mut Child,
        timeout_ms: u64,
        cancel: &CancellationToken,
        grace: Duration,
    ) -> io::Result<(ProcessEnd, Option<String>)> {
        // `Child::wait` is cancel-safe: when the timer or the token wins, nothing is lost by
        // dropping it, and the process is stopped and reaped in that branch.
        let end = tokio::select! {
            status = child.wait() => status.map(|status| (process_end(status), None)),
            () = tokio::time::sleep(Duration::from_millis(timeout_ms)) => {
                let why = format!("the job's timeout of {timeout_ms} ms passed");
                self.stop(child, grace, &why)
                    .await
                    .map(|note| (ProcessEnd::TimedOut { timeout_ms }, Some(note)))
            }
            () = cancel.cancelled() => {
                self.stop(child, grace, "the job was cancelled")
                    .await
                    .map(|note| (ProcessEnd::Cancelled, Some(note)))
            }
        };
        kill_group(self.pgid);
        self.leader_gone.cancel();
        end
    }

    /// Stops the leader the way the CLI expects (real-cli facts, signals): SIGTERM, then at
    /// most `grace` for its Docker cleanup, then SIGKILL of the group. Returns what happened,
    /// in words for the job's log.
    async fn stop(&self, child: &mut Child, grace: Duration, why: &str) -> io::Result<String> {
        // Only the leader: the CLI's handler kills its own `docker run` client and removes the
        // containers itself; a guard forwards the signal to the harness.
        send_signal(self.pgid, libc::SIGTERM);
        let sent = Instant::now();
        let grace_text = format!("{} ms grace (--harness-grace)", grace.as_millis());
        match tokio::time::timeout(grace, child.wait()).await {
            Ok(status) => {
                status?;
                Ok(format!(
                    "{why}: sent SIGTERM to the harness, which exited after {} ms of its \
                     {grace_text}; then its process group was killed",
                    sent.elapsed().as_millis()
                ))
            }
            Err(_) => {
                kill_group(self.pgid);
                child.wait().await?;
                Ok(format!(
                    "{why}: sent SIGTERM to the harness, which did not exit within its \
                     {grace_text}; its process group was killed with SIGKILL, so Docker \
                     containers and networks it made may be left (the worker removes them)"
                ))
            }
        }
    }
}

fn process_end(status: ExitStatus) -> ProcessEnd {
    match (status.code(), status.signal()) {
        (Some(code), _) => ProcessEnd::Exited(code),
        (None, Some(signal)) => ProcessEnd::Signaled(signal),
        // Unix reports either a code or a signal for a terminated process; this arm exists
        // only to keep the match total.
        (None, None) => ProcessEnd::Exited(-1),
    }
}
