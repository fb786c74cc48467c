//! Watching a job's container: waiting for it under the job's timeout and cancel token (killing
//! it on either), reading its exit code as the harness's would read, and following its logs
//! into bounded captures.

use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::{KillContainerOptions, LogsOptions, WaitContainerOptions};
use cowork_fabric::error_chain;
use futures::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::ContainerError;
use crate::executor::classify::ProcessEnd;
use crate::executor::harness::{Capture, Captured, Keep};

/// After the container was stopped, how long its log stream is still read. The engine ends the
/// stream when the container stops; this only bounds a stream the engine fails to end.
const LOG_DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Exit codes above this are `128 + signal`: how the engine (and its init) report a process
/// killed by a signal.
const SIGNAL_EXIT_BASE: i64 = 128;

/// The highest signal number on Linux; exit codes beyond `128 + 64` are ordinary codes.
const MAX_SIGNAL: i64 = 64;

/// SIGKILL, the signal the kernel's OOM killer sends.
pub(super) const SIGKILL: i32 = 9;

/// How a container's exit code reads: `128 + n` is a process killed by signal `n`.
fn container_end(exit_code: i64) -> ProcessEnd {
    if exit_code > SIGNAL_EXIT_BASE && exit_code <= SIGNAL_EXIT_BASE + MAX_SIGNAL {
        let signal = i32::try_from(exit_code - SIGNAL_EXIT_BASE).unwrap_or(SIGKILL);
        return ProcessEnd::Signaled(signal);
    }
    ProcessEnd::Exited(i32::try_from(exit_code).unwrap_or(-1))
}

/// Waits for the container to stop under the timeout and the cancel token, kills it on either,
/// and then tells the log reader that it stopped.
pub(super) async fn supervise(
    docker: &Docker,
    id: &str,
    timeout_ms: u64,
    cancel: &CancellationToken,
    stopped: &CancellationToken,
) -> Result<ProcessEnd, ContainerError> {
    let wait = docker.wait_container(id, Some(WaitContainerOptions::default()));
    tokio::pin!(wait);
    // `next()` on a stream is cancel-safe: when the timer or the token wins, the stream keeps
    // its state and is polled again below for the exit after the kill.
    let end = tokio::select! {
        exited = wait.next() => wait_result(exited).map(container_end),
        () = tokio::time::sleep(Duration::from_millis(timeout_ms)) => {
            kill_and_wait(docker, id, &mut wait).await.map(|()| ProcessEnd::TimedOut { timeout_ms })
        }
        () = cancel.cancelled() => {
            kill_and_wait(docker, id, &mut wait).await.map(|()| ProcessEnd::Cancelled)
        }
    };
    stopped.cancel();
    end
}

/// Kills the container and waits until the engine reports it stopped.
async fn kill_and_wait(
    docker: &Docker,
    id: &str,
    wait: &mut (
             impl Stream<Item = Result<bollard::models::ContainerWaitResponse, bollard::errors::Error>>
             + Unpin
         ),
) -> Result<(), ContainerError> {
    match docker
        .kill_container(id, Some(KillContainerOptions::default()))
        .await
    {
        // 409: it stopped on its own in the meantime.
        Ok(())
        | Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => {}
        Err(source) => {
            return Err(ContainerError::Engine {
                operation: "kill a container",
                source,
            });
        }
    }
    wait_result(wait.next().await).map(|_| ())
}

/// The exit code from one item of the wait stream. bollard reports a non-zero exit as an error
/// carrying the code.
fn wait_result(
    item: Option<Result<bollard::models::ContainerWaitResponse, bollard::errors::Error>>,
) -> Result<i64, ContainerError> {
    match item {
        Some(Ok(response)) => Ok(response.status_code),
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
        Some(Err(source)) => Err(ContainerError::Engine {
            operation: "wait for a container",
            source,
        }),
        None => Err(ContainerError::Engine {
            operation: "wait for a container",
            source: bollard::errors::Error::DockerStreamError {
                error: "the wait stream ended without an exit code".to_owned(),
            },
        }),
    }
}

/// Follows the container's stdout and stderr into bounded captures until the stream ends, or
/// until [`LOG_DRAIN_GRACE`] after the container stopped.
pub(super) async fn capture_logs(
    docker: &Docker,
    id: &str,
    limit: usize,
    stopped: &CancellationToken,
) -> (Captured, Captured) {
    let options = LogsOptions {
        follow: true,
        stdout: true,
        stderr: true,
        ..LogsOptions::default()
    };
    let logs = docker.logs(id, Some(options));
    tokio::pin!(logs);
    let deadline = async {
        stopped.cancelled().await;
        tokio::time::sleep(LOG_DRAIN_GRACE).await;
    };
    tokio::pin!(deadline);
    let mut stdout = Capture::new(limit, Keep::Tail);
    let mut stderr = Capture::new(limit, Keep::Head);
    let mut abandoned = false;
    let mut read_error = None;
    loop {
        // Dropping a pending `next()` loses only output we are giving up anyway.
        tokio::select! {
            item = logs.next() => match item {
                None => break,
                Some(Ok(LogOutput::StdOut { message })) => stdout.push(&message),
                Some(Ok(LogOutput::StdErr { message })) => stderr.push(&message),
                Some(Ok(LogOutput::StdIn { .. } | LogOutput::Console { .. })) => {}
                Some(Err(err)) => {
                    read_error = Some(std::io::Error::other(error_chain(&err)));
                    break;
                }
            },
            () = &mut deadline => {
                abandoned = true;
                break;
            }
        }
    }
    let mut stdout = stdout.finish();
    let mut stderr = stderr.finish();
    for captured in [&mut stdout, &mut stderr] {
        captured.abandoned = abandoned;
    }
    stderr.read_error = read_error;
    (stdout, stderr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_above_128_are_signals() {
        let check =
            |code: i64, expect: ProcessEnd| assert_eq!(container_end(code), expect, "{code}");
        check(0, ProcessEnd::Exited(0));
        check(1, ProcessEnd::Exited(1));
        check(3, ProcessEnd::Exited(3));
        check(128, ProcessEnd::Exited(128));
        check(134, ProcessEnd::Signaled(6));
        check(137, ProcessEnd::Signaled(9));
        check(192, ProcessEnd::Signaled(64));
        check(255, ProcessEnd::Exited(255));
    }
}
