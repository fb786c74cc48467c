//! Judging a finished harness process: its outcome class, with the reasons the CLI gave, and the
//! artifacts that go with it.

use std::path::{Path, PathBuf};

use cowork_schema::event::{ErrorCategory, InfraClass};
use cowork_schema::job::{JobCommand, JobSpec};
use cowork_schema::layout::{JobWorkDir, names};
use serde_json::Value;

use super::HarnessExecutor;
use super::capture::{Captured, Finished};
use super::collect::{CollectRequest, Collected, Want, collect};
use super::notes::stderr_artifact;
use crate::executor::classify::{Envelope, ProcessEnd, classify, find_envelope};
use crate::executor::{Artifact, ArtifactSource, Classified, ExecOutput};

impl HarnessExecutor {
    /// Classifies the finished process and collects its artifacts.
    pub(crate) async fn finish(
        &self,
        job: &JobSpec,
        work_dir: &Path,
        finished: Finished,
    ) -> ExecOutput {
        let Finished {
            end,
            stdout,
            stderr,
        } = finished;
        let envelope = find_envelope(&stdout.bytes);
        let mut classified = self.judge(job, end, envelope.as_ref(), &stdout, &stderr);
        let mut collected = collect_run_dir(job, work_dir, envelope.as_ref(), &classified).await;
        keep_a_run_whose_agent_started(&mut classified, &collected.artifacts);
        judge_failed_record_by_its_result(&mut classified, &mut collected);
        let mut artifacts = Vec::new();
        if let Some(envelope) = &envelope {
            artifacts.push(Artifact {
                name: names::ENVELOPE.to_owned(),
                source: ArtifactSource::Bytes(envelope.line.clone()),
            });
        }
        artifacts.extend(result_artifact(&mut classified, collected.result));
        artifacts.extend(collected.artifacts);
        artifacts.extend(log_artifacts(envelope.is_some(), stdout, stderr));

        // A sandbox that never started spent nothing: the job is handed back.
        let spawned = !matches!(
            classified,
            Classified::Infra {
                class: InfraClass::SandboxStart,
                ..
            }
        );
        ExecOutput {
            classified,
            exit_code: match end {
                ProcessEnd::Exited(code) => Some(code),
                _ => None,
            },
            harness_version: envelope.as_ref().and_then(Envelope::version),
            spawned,
            artifacts,
            run_ms: 0,
        }
    }

    /// The outcome class of the process, with the reasons the CLI gave beyond its exit code.
    fn judge(
        &self,
        job: &JobSpec,
        end: ProcessEnd,
        envelope: Option<&Envelope>,
        stdout: &Captured,
        stderr: &Captured,
    ) -> Classified {
        let mut classified = classify(end, envelope, &stdout.bytes);
        // A corrupt or tampered cassette's stub result carries no reason; the CLI prints it on
        // stderr as `replay: <path>: <reason>`, which says more than "exit 2".
        if job.command == JobCommand::Replay
            && end == ProcessEnd::Exited(2)
            && let Classified::Error { message, .. } = &mut classified
            && let Some(refusal) = crate::executor::classify::replay_refusal(&stderr.bytes)
        {
            *message = refusal;
        }
        if envelope.is_none()
            && stdout.dropped_bytes > 0
            && let Classified::Error { message, .. } = &mut classified
        {
            message.push_str(&format!(
                " (stdout exceeded {} bytes; {} bytes were dropped)",
                self.config.stdout_limit_bytes, stdout.dropped_bytes
            ));
        }
        classified
    }
}

/// Collects what the outcome calls for from the job's run dir (and a `record` job's cassette).
async fn collect_run_dir(
    job: &JobSpec,
    work_dir: &Path,
    envelope: Option<&Envelope>,
    classified: &Classified,
) -> Collected {
    let request = CollectRequest {
        job_id: job.job_id.to_string(),
        runs_root: JobWorkDir::new(work_dir).runs_dir(),
        cassette: (job.command == JobCommand::Record).then(|| JobWorkDir::new(work_dir).cassette()),
        out_dir: envelope.and_then(envelope_out_dir),
        want: match classified {
            Classified::Completed { .. } => Want::Result,
            Classified::Unanswered { .. } => Want::PartialResult,
            // A failed `record` may still have paid for a whole run: its result is kept.
            Classified::Error { .. } if job.command == JobCommand::Record => Want::PartialResult,
            Classified::Error { .. } | Classified::Infra { .. } => Want::Diagnostics,
        },
    };
    // Directory walks and reading a result file are blocking IO, so they run in
    // `spawn_blocking`.
    match tokio::task::spawn_blocking(move || collect(&request)).await {
        Ok(collected) => collected,
        Err(err) => {
            tracing::warn!(job_id = %job.job_id, error = %err, "collecting the run dir failed");
            Collected::default()
        }
    }
}

/// `record` ran the scenario to the end and refused to freeze a cassette of a failing verdict:
/// the run is a sample like any other, judged by its on-disk result.
fn judge_failed_record_by_its_result(classified: &mut Classified, collected: &mut Collected) {
    if matches!(&classified, Classified::Error { category, .. }
        if category.as_str() == crate::executor::classify::RECORD_VERDICT_FAIL)
        && let Some((path, on_disk)) = collected.result.take()
    {
        *classified = Classified::Completed {
            result: on_disk.clone(),
        };
        collected.result = Some((path, on_disk));
    }
}

/// A harness error that names Docker, Lima or a full disk is read as a sandbox that did not
/// start, and such a job is handed back to run again. The agent's own logs say otherwise: the
/// CLI opens them when it spawns the agent, so a run dir holding them had an agent that may
/// have been paid for. That run stays this job's internal error and is never run twice.
fn keep_a_run_whose_agent_started(classified: &mut Classified, artifacts: &[Artifact]) {
    let Classified::Infra {
        class: InfraClass::SandboxStart,
        message,
    } = classified
    else {
        return;
    };
    let agent_started = artifacts
        .iter()
        .any(|artifact| artifact.name == names::RUN_EVENTS || artifact.name == names::AGENT_STDERR);
    if agent_started {
        *classified = Classified::error(ErrorCategory::Internal, std::mem::take(message));
    }
}

/// `result.json` of a completed job (the on-disk copy, which then also becomes the result
/// value, else the envelope's), or `partial-result.json` of any other with a result file.
fn result_artifact(
    classified: &mut Classified,
    result_file: Option<(PathBuf, Value)>,
) -> Option<Artifact> {
    if let Classified::Completed { result } = classified {
        match result_file {
            Some((path, on_disk)) => {
                *result = on_disk;
                Some(Artifact {
                    name: names::RESULT.to_owned(),
                    source: ArtifactSource::File(path),
                })
            }
            None => {
                let bytes = cowork_schema::json_number::to_vec(result)
                    .expect("serializing a json value to memory cannot fail");
                Some(Artifact {
                    name: names::RESULT.to_owned(),
                    source: ArtifactSource::Bytes(bytes),
                })
            }
        }
    } else {
        result_file.map(|(path, _)| Artifact {
            name: names::PARTIAL_RESULT.to_owned(),
            source: ArtifactSource::File(path),
        })
    }
}

/// The CLI's own output as logs: `harness.stderr.log`, and `harness.stdout.log` when there
/// was no envelope.
fn log_artifacts(envelope_seen: bool, stdout: Captured, stderr: Captured) -> Vec<Artifact> {
    let mut artifacts = Vec::new();
    // Kept whenever the CLI wrote anything (harness-behaviour.md#uploads); an empty log is one
    // stored object per job that says nothing.
    if !stderr.bytes.is_empty() || stderr.dropped_bytes > 0 {
        artifacts.push(stderr_artifact(stderr));
    }
    if !envelope_seen && !stdout.bytes.is_empty() {
        // Without an envelope the raw stdout is the only clue to what the CLI did.
        artifacts.push(Artifact {
            name: names::HARNESS_STDOUT.to_owned(),
            source: ArtifactSource::Bytes(stdout.bytes),
        });
    }
    artifacts
}

/// The guard's message when it could not start the harness (the harness never ran), else
/// `None`.
pub(crate) fn guard_spawn_failure(finished: &Finished) -> Option<String> {
    if finished.end != ProcessEnd::Exited(crate::executor::guard::SPAWN_FAILED_EXIT_CODE) {
        return None;
    }
    let stderr = String::from_utf8_lossy(&finished.stderr.bytes);
    let message = stderr.strip_prefix(crate::executor::guard::SPAWN_FAILED_PREFIX)?;
    Some(format!(
        "cannot start harness program {}",
        message.lines().next().unwrap_or_default()
    ))
}

/// `results[0].outDir` of an envelope, read by key: the envelope is the CLI's (see
/// [`crate::executor::classify`]).
fn envelope_out_dir(envelope: &Envelope) -> Option<String> {
    envelope
        .value
        .get("results")?
        .get(0)?
        .get("outDir")?
        .as_str()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox_start() -> Classified {
        Classified::Infra {
            class: InfraClass::SandboxStart,
            message: "failed to build cowork-egress-proxy:5 (docker exited 1)".to_owned(),
        }
    }

    fn file(name: &str) -> Artifact {
        Artifact {
            name: name.to_owned(),
            source: ArtifactSource::Bytes(Vec::new()),
        }
    }

    #[test]
    fn a_sandbox_failure_after_the_agent_started_is_never_handed_back() {
        let mut before_the_agent = sandbox_start();
        keep_a_run_whose_agent_started(&mut before_the_agent, &[file(names::RUN_STATUS)]);
        assert_eq!(
            before_the_agent,
            sandbox_start(),
            "nothing ran: handed back"
        );
        for log in [names::RUN_EVENTS, names::AGENT_STDERR] {
            let mut after_the_agent = sandbox_start();
            keep_a_run_whose_agent_started(&mut after_the_agent, &[file(log)]);
            assert_eq!(
                after_the_agent,
                Classified::error(
                    ErrorCategory::Internal,
                    "failed to build cowork-egress-proxy:5 (docker exited 1)".to_owned()
                ),
                "{log}: the agent ran"
            );
        }
    }
}
