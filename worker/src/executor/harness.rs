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
//! The group is also killed after the leader exits, so no grandchild outlives the job. With [`HarnessConfig::guard`] set, the process is the harness guard
//! ([`super::guard`]), which also kills the group when this process dies, so no harness outlives
//! the worker. Stdout and stderr are read concurrently and bounded, so a chatty child can neither
//! deadlock on a full pipe nor exhaust memory. Classification itself is the pure
//! [`super::classify`].

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use cowork_schema::batch::ExecutorKind;
use cowork_schema::event::{ErrorCategory, InfraClass};
use cowork_schema::job::{JobCommand, JobSpec};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

pub use super::ScenarioPathError;
pub(crate) use super::bundle_path;
use super::classify::{Envelope, ProcessEnd, classify, find_envelope};
use super::job_temp::{JobTemp, Removed, cassette_in_copy, copy_tree, ignore_new_cassettes};
use super::{
    Artifact, ArtifactSource, Classified, ExecOutput, Executor, JobContext, scenario_in_bundle,
};
use crate::capabilities::{AGENT_BINARY, find_on_path};
use cowork_schema::job::Tier;

/// Name of the per-job runs root inside the work dir (passed as `--run-dir`).
pub const RUNS_DIR_NAME: &str = "runs";

/// Name of the cassette a `record` job writes inside the work dir (passed as `--out`).
pub const CASSETTE_FILE_NAME: &str = "cassette.json";

/// Default for [`HarnessConfig::stdout_limit_bytes`]: 64 MiB. The envelope of one run is
/// typically tens of kilobytes; anything near this size is a runaway process.
pub const DEFAULT_STDOUT_LIMIT_BYTES: usize = 64 * 1024 * 1024;

/// Environment variables copied from the worker by default: every variable cowork-harness
/// 2.0.0 reads for the tiers a worker serves (operations/settings.md#harness-environment: what each
/// does), grouped as the CLI uses them. Not here on purpose: `COWORK_HARNESS_OUTPUT_FORMAT` and
/// `COWORK_HARNESS_RUNS_DIR` (the executor passes `--output-format` and `--run-dir`, which
/// must win), `COWORK_HARNESS_DEBUG` (it adds lines to stderr) and `COWORK_HARNESS_MODEL` /
/// `COWORK_HARNESS_FIDELITY` (read only by `skill` and `chat`). More names come from
/// `--harness-env`.
pub const DEFAULT_PASSTHROUGH_ENV: &[&str] = &[
    // The process itself: where its tools, its home (`~/.cowork-harness`) and its locale are.
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "TMPDIR",
    // Model credentials (the secret set: scrubbed from everything stored). Which of them reach
    // the agent depends on the tier (operations/settings.md#harness-environment).
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_CUSTOM_HEADERS",
    // The docker client the CLI spawns inherits its environment.
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CONTEXT",
    "DOCKER_TLS_VERIFY",
    "DOCKER_CERT_PATH",
    // Images, binaries and tiers.
    "COWORK_AGENT_IMAGE",
    "COWORK_CONTAINER_RUNTIME",
    "COWORK_PROXY_IMAGE",
    "COWORK_AGENT_BINARY",
    "COWORK_HARNESS_VERIFY_AGENT_SHA",
    "COWORK_HARNESS_ALLOW_AGENT_FALLBACK",
    "COWORK_HOST_AGENT_BINARY",
    "COWORK_LIMACTL",
    "COWORK_LIMA_INSTANCE",
    "COWORK_VM_GATEWAY",
    "COWORK_VM_PROXY_PORT",
    "COWORK_LOCKDOWN",
    "COWORK_SKIP_CAPABILITY_PROBE",
    "CLAUDE_FORCE_HOST_LOOP",
    // Deciders and judges.
    "COWORK_HARNESS_DECIDER_MODEL",
    "COWORK_HARNESS_JUDGE_MODEL",
    "COWORK_HARNESS_CLAUDE_BIN",
    "COWORK_HARNESS_LLM_TIMEOUT_MS",
    "COWORK_HARNESS_LLM_MAX_BYTES",
    "COWORK_HARNESS_LLM_RETRIES",
    "COWORK_HARNESS_DIALOG_TIMEOUT_MS",
    "COWORK_HARNESS_DECIDER_DIR_TIMEOUT_MS",
    "COWORK_HARNESS_DECIDER_DIR_POLL_MS",
    "COWORK_HARNESS_DECIDER_CMD_TIMEOUT_MS",
    // Scrubbing, redaction and staging.
    "COWORK_HARNESS_SCRUB_KEYS",
    "COWORK_HARNESS_SCRUB_VALUES",
    "COWORK_HARNESS_REDACT_PATTERNS",
    "COWORK_HARNESS_REDACT_KEYS",
    "COWORK_HARNESS_MAX_ARTIFACT_BYTES",
    "COWORK_HARNESS_SOFT_MISSING",
    "COWORK_HARNESS_GITSET",
];

/// Allow-listed variables whose values are credentials: scrubbed from the envelope, the stored
/// stderr and every uploaded run-dir file before anything reaches the store (the CLI itself
/// never scrubs its stdout, stderr or several run-dir files).
pub const SECRET_ENV: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_CUSTOM_HEADERS",
];

/// Default for [`HarnessConfig::upload_limit_bytes`]: 16 MiB, far above a normal run's logs
/// (kilobytes to a few megabytes) and small enough that a runaway log cannot fill the store.
pub const DEFAULT_UPLOAD_LIMIT_BYTES: usize = 16 * 1024 * 1024;

/// Default for [`HarnessConfig::stop_grace`]: 30 s. On SIGTERM the CLI runs `docker rm -f` of
/// its agent container and its proxy and removes two networks, one blocking call after another
/// with no timeout of their own; on a healthy daemon that takes a few seconds, so 30 s leaves
/// room for a loaded one while a hung daemon still cannot hold a slot for long.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(30);

/// After the process group was killed, how long the pipes are still read. Only a process that
/// left the group (its own `setsid`) can keep them open that long; its output is then given up
/// rather than letting it hold the job forever.
const PIPE_DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Size of one read from a pipe.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// The variable that switches the CLI's git-tracked staging (`0`: copy every file).
const GITSET_VAR: &str = "COWORK_HARNESS_GITSET";

/// Lines of the harness's stderr quoted when it died by a signal without an envelope.
const STDERR_TAIL_LINES: usize = 3;

/// `outDir` of a result that has no run dir (`replay`, harness-behaviour.md#real-cli).
const REPLAY_OUT_DIR: &str = "(replay)";

/// Artifact-name prefix of the run-dir files that have no name of their own: `run/<path in
/// the run dir>`.
pub const RUN_DIR_PREFIX: &str = "run/";

/// Run-dir files uploaded when present (the "should" list of harness-behaviour.md#uploads), by
/// their artifact names.
const RUN_DIR_ARTIFACTS: &[&str] = &[
    "events.jsonl",
    "control-out.jsonl",
    "agent.stderr.log",
    "status.json",
];

/// Settings of the [`HarnessExecutor`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HarnessConfig {
    /// The CLI to run; a bare name is looked up on the child's `PATH`. Default `cowork-harness`.
    pub program: PathBuf,
    /// Names of worker environment variables copied into the child's otherwise empty
    /// environment; unset names are skipped. Default [`DEFAULT_PASSTHROUGH_ENV`].
    pub passthrough_env: Vec<String>,
    /// Variables set in the child after the passthrough ones (they win). Default none.
    pub extra_env: Vec<(String, String)>,
    /// Most bytes of stdout kept (the tail: the envelope is the last line) and of stderr kept
    /// (the head). Default [`DEFAULT_STDOUT_LIMIT_BYTES`].
    pub stdout_limit_bytes: usize,
    /// A program that runs [`super::guard::run_guard`] when given
    /// [`GUARD_SUBCOMMAND`](super::guard::GUARD_SUBCOMMAND) first (the `cowork` binary). When
    /// set, every harness runs under a guard that kills the job's whole process group if this
    /// process dies, even by SIGKILL. Default none: the harness is started directly and is
    /// killed only on timeout, cancel or a clean shutdown.
    pub guard: Option<PathBuf>,
    /// How long a harness sent SIGTERM (timeout, cancel, the worker's death) may take to exit
    /// before its process group is killed. Default [`DEFAULT_STOP_GRACE`].
    pub stop_grace: Duration,
    /// Most bytes of each diagnostic artifact stored (logs and run-dir files; never the
    /// result, envelope or cassette); a longer one is cut with a note. Default
    /// [`DEFAULT_UPLOAD_LIMIT_BYTES`].
    pub upload_limit_bytes: usize,
}

impl HarnessConfig {
    /// The defaults with another program, e.g. a pinned install path.
    pub fn new(program: &Path) -> HarnessConfig {
        HarnessConfig {
            program: program.to_path_buf(),
            ..HarnessConfig::default()
        }
    }
}

impl Default for HarnessConfig {
    fn default() -> Self {
        HarnessConfig {
            program: PathBuf::from("cowork-harness"),
            passthrough_env: DEFAULT_PASSTHROUGH_ENV
                .iter()
                .map(|name| (*name).to_owned())
                .collect(),
            extra_env: Vec::new(),
            stdout_limit_bytes: DEFAULT_STDOUT_LIMIT_BYTES,
            guard: None,
            stop_grace: DEFAULT_STOP_GRACE,
            upload_limit_bytes: DEFAULT_UPLOAD_LIMIT_BYTES,
        }
    }
}

/// Builds the CLI's arguments for `job` (harness-behaviour.md#job-invocation,
/// harness-behaviour.md#recording).
///
/// `--run-dir` is a global flag and comes before the subcommand; `record` writes its cassette to
/// `cassette`; `replay` takes the cassette as its file argument.
pub fn harness_args(
    job: &JobSpec,
    bundle_dir: &Path,
    work_dir: &Path,
    cassette: &Path,
) -> Result<Vec<OsString>, ScenarioPathError> {
    let scenario = scenario_in_bundle(job, bundle_dir)?;
    let mut args: Vec<OsString> = vec![
        "--run-dir".into(),
        work_dir.join(RUNS_DIR_NAME).into(),
        job.command.as_str().into(),
        scenario.into(),
    ];
    if job.command == JobCommand::Record {
        args.push("--out".into());
        args.push(cassette.into());
    }
    args.push("--output-format".into());
    args.push("json".into());
    args.extend(job.forwarded_flags.iter().map(OsString::from));
    Ok(args)
}

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

    /// Builds the child command: cleared environment, empty cwd, piped output, own session.
    /// With a guard, the child is the guard and its stdin is the pipe it watches.
    pub(crate) fn command(&self, args: &[OsString], dirs: &ChildDirs<'_>) -> Command {
        let ChildDirs {
            work_dir,
            bundle_dir,
            tmpdir,
        } = *dirs;
        let program = &self.config.program;
        // A bare name is looked up on PATH; a relative path with a directory part would be
        // ambiguous once the cwd is the work dir, so it is made absolute against ours.
        let program = if program.is_relative() && program.components().count() > 1 {
            std::path::absolute(program).unwrap_or_else(|_| program.clone())
        } else {
            program.clone()
        };
        let mut command = match &self.config.guard {
            None => {
                let mut command = Command::new(program);
                command.stdin(Stdio::null());
                command
            }
            Some(guard) => {
                let mut command = Command::new(guard);
                command.arg(super::guard::GUARD_SUBCOMMAND).arg(format!(
                    "{}{}",
                    super::guard::GRACE_OPTION,
                    self.config.stop_grace.as_millis()
                ));
                if let Some(temp_root) = tmpdir.parent() {
                    let mut option = OsString::from(super::guard::TEMP_ROOT_OPTION);
                    option.push(temp_root);
                    command.arg(option);
                }
                command.arg(program).stdin(Stdio::piped());
                command
            }
        };
        command
            .args(args)
            .current_dir(work_dir)
            .env_clear()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A safety net only: the group is killed explicitly on every path below.
            .kill_on_drop(true);
        for name in &self.config.passthrough_env {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        // The CLI stages only git-tracked skill and plugin files when they lie in a git work
        // tree, and refuses a dir with none. The bundle cache gives each unpacked bundle an
        // index of its own (`bundle_cache::index_with_git`); a bundle without one (git was
        // missing) may lie inside the user's tree, where git would see it as untracked, so git
        // mode is switched off for it, unless the operator set the variable themselves.
        if std::env::var_os(GITSET_VAR).is_none() && !bundle_dir.join(".git").is_dir() {
            command.env(GITSET_VAR, "0");
        }
        for (name, value) in &self.config.extra_env {
            command.env(name, value);
        }
        // Each job's own temp dir (see `job_temp`): set last, so nothing shares it.
        command.env("TMPDIR", tmpdir);
        start_new_session(&mut command);
        command
    }

    /// The `PATH` the harness gets: an extra variable, else the worker's own when it is
    /// passed through.
    pub fn child_path(&self) -> Option<OsString> {
        if let Some((_, value)) = self
            .config
            .extra_env
            .iter()
            .find(|(name, _)| name == "PATH")
        {
            return Some(OsString::from(value));
        }
        self.config
            .passthrough_env
            .iter()
            .any(|name| name == "PATH")
            .then(|| std::env::var_os("PATH"))
            .flatten()
    }

    async fn run(&self, ctx: &JobContext, cancel: &CancellationToken) -> ExecOutput {
        let parent = std::env::temp_dir();
        let temp = match JobTemp::create(&parent).await {
            Ok(temp) => temp,
            Err(err) => {
                return not_started(Classified::Infra {
                    class: InfraClass::Spawn,
                    message: format!(
                        "cannot create the job's temp dir in {}: {err}",
                        parent.display()
                    ),
                });
            }
        };
        let oom_kills_before = oom_kills();
        let mut output = self.run_in(ctx, cancel, &temp).await;
        if let Classified::Error { message, .. } = &mut output.classified
            && output.exit_code.is_none()
            && output.spawned
            && message.starts_with("killed by signal")
        {
            let stderr_tail = output
                .artifacts
                .iter()
                .find(|artifact| artifact.name == "harness.stderr.log")
                .and_then(|artifact| match &artifact.source {
                    ArtifactSource::Bytes(bytes) => Some(last_lines(bytes, STDERR_TAIL_LINES)),
                    ArtifactSource::File(_) => None,
                })
                .unwrap_or_default();
            let oom = matches!((oom_kills_before, oom_kills()), (Some(before), Some(after)) if after > before);
            *message = describe_signal_death(&SignalDeath {
                message,
                tier: ctx.job.tier,
                agent_on_path: find_on_path(AGENT_BINARY, self.child_path().as_deref()).is_some(),
                stderr_tail: &stderr_tail,
                oom,
            });
        }
        if output.spawned && leaves_docker_resources(&ctx.job) {
            self.remove_docker_leftovers(&mut output, ctx).await;
        }
        note_quarantined(&mut output, &ctx.work_dir.join(RUNS_DIR_NAME));
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
        let staged = if ctx.job.command == JobCommand::Record {
            let (from, to) = (ctx.bundle_dir.clone(), temp.bundle_copy());
            let copied = tokio::task::spawn_blocking(move || {
                copy_tree(&from, &to)?;
                ignore_new_cassettes(&to)
            })
            .await;
            if let Err(err) = copied
                .map_err(|err| err.to_string())
                .and_then(|copied| copied.map_err(|err| err.to_string()))
            {
                return not_started(Classified::Infra {
                    class: InfraClass::Spawn,
                    message: format!(
                        "cannot copy bundle {} for the record job: {err}",
                        ctx.bundle_dir.display()
                    ),
                });
            }
            let bundle_dir = temp.bundle_copy();
            Some(Staged {
                cassette: cassette_in_copy(&bundle_dir, &ctx.job.scenario_file),
                bundle_dir,
            })
        } else {
            None
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
            Err(err) => {
                let message = match &self.config.guard {
                    None => format!(
                        "cannot start harness program {}: {err}",
                        self.config.program.display()
                    ),
                    Some(guard) => format!(
                        "cannot start the harness guard {} (for harness program {}): {err}",
                        guard.display(),
                        self.config.program.display()
                    ),
                };
                return not_started(Classified::Infra {
                    class: InfraClass::Spawn,
                    message,
                });
            }
        };
        tracing::debug!(job_id = %job.job_id, pid = child.id(), "harness started");
        // The guard's end of life: held until the job is over. Dropping it early, or this
        // process dying, tells the guard to kill the job's process group.
        let _guard_pipe = child.stdin.take();
        let finished = match self.supervise_and_capture(&mut child, job, cancel).await {
            Ok(finished) => finished,
            Err((err, stderr)) => {
                let artifacts = vec![stderr_artifact(stderr)];
                return ExecOutput {
                    classified: Classified::error(
                        ErrorCategory::Internal,
                        format!("cannot wait for the harness process: {err}"),
                    ),
                    exit_code: None,
                    harness_version: None,
                    spawned: true,
                    artifacts,
                    run_ms: 0,
                };
            }
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
            // The copy is removed with the temp root; the cassette is kept where the upload
            // looks for it.
            let kept = work_dir.join(CASSETTE_FILE_NAME);
            if let Err(err) = tokio::fs::copy(&staged.cassette, &kept).await
                && err.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(job_id = %job.job_id, error = %err, "keeping the recorded cassette failed");
            }
        }
        self.finish(job, &work_dir, finished).await
    }

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
        let mut classified = classify(end, envelope.as_ref(), &stdout.bytes);
        // A corrupt or tampered cassette's stub result carries no reason; the CLI prints it on
        // stderr as `replay: <path>: <reason>`, which says more than "exit 2".
        if job.command == JobCommand::Replay
            && end == ProcessEnd::Exited(2)
            && let Classified::Error { message, .. } = &mut classified
            && let Some(refusal) = super::classify::replay_refusal(&stderr.bytes)
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

        let request = CollectRequest {
            job_id: job.job_id.to_string(),
            runs_root: work_dir.join(RUNS_DIR_NAME),
            cassette: (job.command == JobCommand::Record)
                .then(|| work_dir.join(CASSETTE_FILE_NAME)),
            out_dir: envelope.as_ref().and_then(envelope_out_dir),
            want: match &classified {
                Classified::Completed { .. } => Want::Result,
                Classified::Unanswered { .. } => Want::PartialResult,
                // A failed `record` may still have paid for a whole run: its result is kept.
                Classified::Error { .. } if job.command == JobCommand::Record => {
                    Want::PartialResult
                }
                Classified::Error { .. } | Classified::Infra { .. } => Want::Diagnostics,
            },
        };
        // Directory walks and reading a result file are blocking IO, so they run in
        // `spawn_blocking`.
        let collected = match tokio::task::spawn_blocking(move || collect(&request)).await {
            Ok(collected) => collected,
            Err(err) => {
                tracing::warn!(job_id = %job.job_id, error = %err, "collecting the run dir failed");
                Collected::default()
            }
        };

        let mut collected = collected;
        // `record` ran the scenario to the end and refused to freeze a cassette of a failing
        // verdict: the run is a sample like any other, judged by its on-disk result.
        if matches!(&classified, Classified::Error { category, .. }
            if category.as_str() == super::classify::RECORD_VERDICT_FAIL)
            && let Some((path, on_disk)) = collected.result.take()
        {
            classified = Classified::Completed {
                result: on_disk.clone(),
            };
            collected.result = Some((path, on_disk));
        }
        let mut artifacts = Vec::new();
        if let Some(envelope) = &envelope {
            artifacts.push(Artifact {
                name: "envelope.json".to_owned(),
                source: ArtifactSource::Bytes(envelope.line.clone()),
            });
        }
        if let Classified::Completed { result } = &mut classified {
            match collected.result {
                Some((path, on_disk)) => {
                    *result = on_disk;
                    artifacts.push(Artifact {
                        name: "result.json".to_owned(),
                        source: ArtifactSource::File(path),
                    });
                }
                None => {
                    let bytes = serde_json::to_vec(result)
                        .expect("serializing a json value to memory cannot fail");
                    artifacts.push(Artifact {
                        name: "result.json".to_owned(),
                        source: ArtifactSource::Bytes(bytes),
                    });
                }
            }
        } else if let Some((path, _)) = collected.result {
            artifacts.push(Artifact {
                name: "partial-result.json".to_owned(),
                source: ArtifactSource::File(path),
            });
        }
        artifacts.extend(collected.artifacts);
        // Kept whenever the CLI wrote anything (harness-behaviour.md#uploads); an empty log is one
        // stored object per job that says nothing.
        if !stderr.bytes.is_empty() || stderr.dropped_bytes > 0 {
            artifacts.push(stderr_artifact(stderr));
        }
        if envelope.is_none() && !stdout.bytes.is_empty() {
            // Without an envelope the raw stdout is the only clue to what the CLI did.
            artifacts.push(Artifact {
                name: "harness.stdout.log".to_owned(),
                source: ArtifactSource::Bytes(stdout.bytes),
            });
        }

        ExecOutput {
            classified,
            exit_code: match end {
                ProcessEnd::Exited(code) => Some(code),
                _ => None,
            },
            harness_version: envelope.as_ref().and_then(Envelope::version),
            spawned: true,
            artifacts,
            run_ms: 0,
        }
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
        let outputs = super::replay_pack::execute_many(self, jobs).await;
        let mut sealed = Vec::with_capacity(outputs.len());
        for output in outputs {
            sealed.push(self.seal(output).await);
        }
        sealed
    }
}

impl HarnessExecutor {
    /// The credential values this worker passes to the harness (see [`SECRET_ENV`]).
    fn secret_values(&self) -> Vec<String> {
        SECRET_ENV
            .iter()
            .filter(|name| self.config.passthrough_env.iter().any(|kept| kept == *name))
            .filter_map(|name| std::env::var(name).ok())
            .chain(
                self.config
                    .extra_env
                    .iter()
                    .filter(|(name, _)| SECRET_ENV.contains(&name.as_str()))
                    .map(|(_, value)| value.clone()),
            )
            .collect()
    }

    /// `output` as it may reach the store ([`super::seal`]): every artifact read into memory
    /// scrubbed of this worker's credential values, diagnostic ones cut at the upload limit,
    /// and the result value scrubbed alike.
    async fn seal(&self, mut output: ExecOutput) -> ExecOutput {
        let forms = super::seal::secret_forms(&self.secret_values());
        let limit = self.config.upload_limit_bytes;
        let artifacts = std::mem::take(&mut output.artifacts);
        let sealed = tokio::task::spawn_blocking(move || {
            let mut n_scrubbed = 0;
            let artifacts: Vec<Artifact> = artifacts
                .into_iter()
                .map(|artifact| {
                    let (artifact, n_replaced) = seal_artifact(artifact, &forms, limit);
                    n_scrubbed += n_replaced;
                    artifact
                })
                .collect();
            (artifacts, n_scrubbed, forms)
        })
        .await;
        let forms = match sealed {
            Ok((artifacts, n_scrubbed, forms)) => {
                if n_scrubbed > 0 {
                    tracing::info!(
                        n_scrubbed,
                        "scrubbed credential values from the job's artifacts"
                    );
                }
                output.artifacts = artifacts;
                forms
            }
            Err(err) => {
                // Nothing unscrubbed may be stored: without the sealed copies, nothing is.
                tracing::error!(error = %err, "sealing the job's artifacts failed; none are stored");
                return output;
            }
        };
        if let Classified::Completed { result } = &mut output.classified
            && !forms.is_empty()
        {
            let bytes =
                serde_json::to_vec(result).expect("serializing a json value to memory cannot fail");
            let (scrubbed, n_replaced) = super::seal::scrub(&bytes, &forms);
            if n_replaced > 0
                && let Ok(value) = serde_json::from_slice(&scrubbed)
            {
                *result = value;
            }
        }
        output
    }
}

/// One artifact as it may be stored: in memory, scrubbed and, unless the fleet parses it back,
/// cut at `limit` bytes. An unreadable file is stored as a note saying why.
fn seal_artifact(artifact: Artifact, forms: &[Vec<u8>], limit: usize) -> (Artifact, usize) {
    let cuttable = !super::seal::NEVER_CUT.contains(&artifact.name.as_str());
    let (bytes, total) = match artifact.source {
        ArtifactSource::Bytes(bytes) => {
            let total = bytes.len() as u64;
            (bytes, total)
        }
        ArtifactSource::File(path) => match read_head(&path, cuttable.then_some(limit)) {
            Ok(read) => read,
            Err(err) => (
                format!(
                    "[cowork-fleet: {} could not be read: {err}]\n",
                    path.display()
                )
                .into_bytes(),
                0,
            ),
        },
    };
    let (bytes, n_replaced) = if forms.is_empty() {
        (bytes, 0)
    } else {
        super::seal::scrub(&bytes, forms)
    };
    let bytes = if cuttable {
        super::seal::cut(bytes, limit, total)
    } else {
        bytes
    };
    (
        Artifact {
            name: artifact.name,
            source: ArtifactSource::Bytes(bytes),
        },
        n_replaced,
    )
}

/// The first `limit` bytes of the file (all of it without a limit) and its length.
fn read_head(path: &Path, limit: Option<usize>) -> io::Result<(Vec<u8>, u64)> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    let total = file.metadata()?.len();
    let mut bytes = Vec::new();
    match limit {
        Some(limit) => {
            file.take(limit as u64).read_to_end(&mut bytes)?;
        }
        None => {
            let mut file = file;
            file.read_to_end(&mut bytes)?;
        }
    }
    Ok((bytes, total))
}

/// Whether the job's tier starts Docker containers and networks the CLI may leave behind.
fn leaves_docker_resources(job: &JobSpec) -> bool {
    job.command != JobCommand::Replay && matches!(job.tier, Tier::Container | Tier::Hostloop)
}

/// How long one `docker` call of the leftover sweep may take before it is given up (a hung
/// daemon must not hold the slot).
const DOCKER_CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl HarnessExecutor {
    /// Removes the CLI's containers and networks that mount this job's work dir (see
    /// `leftovers`), and says what it removed in the log and the job's `harness.stderr.log`.
    async fn remove_docker_leftovers(&self, output: &mut ExecOutput, ctx: &JobContext) {
        let Ok(work_dir) = std::path::absolute(&ctx.work_dir) else {
            return;
        };
        let Some(docker) = find_on_path("docker", self.child_path().as_deref()) else {
            return;
        };
        let mut list = vec!["ps".to_owned(), "-aq".to_owned()];
        for prefix in super::leftovers::CONTAINER_PREFIXES {
            list.extend(["--filter".to_owned(), format!("name={prefix}")]);
        }
        let Some(ids) = self.docker(&docker, &list).await else {
            return;
        };
        let ids: Vec<String> = ids.split_whitespace().map(str::to_owned).collect();
        if ids.is_empty() {
            return;
        }
        let mut inspect = vec![
            "inspect".to_owned(),
            "--format".to_owned(),
            "{{.Name}} {{range .Mounts}}{{.Source}} {{end}}".to_owned(),
        ];
        inspect.extend(ids);
        let Some(lines) = self.docker(&docker, &inspect).await else {
            return;
        };
        let leftovers = super::leftovers::select(&lines, &work_dir);
        if leftovers.containers.is_empty() {
            return;
        }
        let mut removed = Vec::new();
        let mut rm = vec!["rm".to_owned(), "-f".to_owned()];
        rm.extend(leftovers.containers.iter().cloned());
        if self.docker(&docker, &rm).await.is_some() {
            removed.extend(
                leftovers
                    .containers
                    .iter()
                    .map(|name| format!("container {name}")),
            );
        }
        for network in &leftovers.networks {
            let rm_network = vec!["network".to_owned(), "rm".to_owned(), network.clone()];
            if self.docker(&docker, &rm_network).await.is_some() {
                removed.push(format!("network {network}"));
            }
        }
        if removed.is_empty() {
            return;
        }
        tracing::info!(job_id = %ctx.job.job_id, removed = ?removed, "removed what the harness left in Docker");
        append_stderr_note(
            output,
            &format!(
                "[cowork-fleet: removed what the harness left in Docker: {}]",
                removed.join(", ")
            ),
        );
    }

    /// Runs `docker <args>` with the harness's environment; its stdout when it succeeded.
    async fn docker(&self, docker: &Path, args: &[String]) -> Option<String> {
        let mut command = Command::new(docker);
        command
            .args(args)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        for name in &self.config.passthrough_env {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        for (name, value) in &self.config.extra_env {
            command.env(name, value);
        }
        match tokio::time::timeout(DOCKER_CALL_TIMEOUT, command.output()).await {
            Ok(Ok(out)) if out.status.success() => {
                Some(String::from_utf8_lossy(&out.stdout).into_owned())
            }
            Ok(Ok(_)) => None,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "running docker for the leftover sweep failed");
                None
            }
            Err(_) => {
                tracing::warn!(args = ?args, "docker did not answer within 30 s; leftovers not removed");
                None
            }
        }
    }
}

/// Appends `note` as its own line to the job's `harness.stderr.log`, creating it if needed.
fn append_stderr_note(output: &mut ExecOutput, note: &str) {
    match output
        .artifacts
        .iter_mut()
        .find(|artifact| artifact.name == "harness.stderr.log")
    {
        Some(Artifact {
            source: ArtifactSource::Bytes(bytes),
            ..
        }) => bytes.extend_from_slice(format!("\n{note}\n").as_bytes()),
        _ => output.artifacts.push(Artifact {
            name: "harness.stderr.log".to_owned(),
            source: ArtifactSource::Bytes(format!("{note}\n").into_bytes()),
        }),
    }
}

/// An output for a job whose CLI never started: nothing was spent.
pub(crate) fn not_started(classified: Classified) -> ExecOutput {
    ExecOutput {
        classified,
        exit_code: None,
        harness_version: None,
        spawned: false,
        artifacts: Vec::new(),
        run_ms: 0,
    }
}

/// The directories a harness process is started with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChildDirs<'a> {
    /// Its cwd.
    pub(crate) work_dir: &'a Path,
    /// The bundle it reads (decides its git mode).
    pub(crate) bundle_dir: &'a Path,
    /// Its `TMPDIR`.
    pub(crate) tmpdir: &'a Path,
}

/// A job's own inputs, when they are not the shared bundle: a `record` job's copy of the
/// bundle and where its cassette goes inside it (see `job_temp`).
#[derive(Debug)]
pub(crate) struct Staged {
    pub(crate) bundle_dir: PathBuf,
    pub(crate) cassette: PathBuf,
}

/// What both process executors need before they start the harness: the job's work and bundle
/// dirs as absolute paths (the child runs in the work dir, a container mounts them at the same
/// paths, and the CLI's `outDir` is checked against the runs root) and the harness's
/// arguments; the runs root is created.
pub(crate) struct Launch {
    pub(crate) work_dir: PathBuf,
    pub(crate) bundle_dir: PathBuf,
    pub(crate) args: Vec<std::ffi::OsString>,
}

impl Launch {
    /// The launch of `ctx`'s job; the output of a job that did not start when it was cancelled
    /// first (`what` names what never started), when a dir cannot be resolved or created (a
    /// spawn failure: nothing spent, retried), or when the job's arguments are refused.
    pub(crate) async fn prepare(
        ctx: &JobContext,
        cancel: &CancellationToken,
        what: &str,
        staged: Option<&Staged>,
    ) -> Result<Launch, Box<ExecOutput>> {
        let refuse = |classified| Err(Box::new(not_started(classified)));
        if cancel.is_cancelled() {
            return refuse(Classified::error(
                ErrorCategory::Cancelled,
                format!("job was cancelled before {what} started"),
            ));
        }
        let source_bundle = staged.map_or(&ctx.bundle_dir, |staged| &staged.bundle_dir);
        let (work_dir, bundle_dir) = match (
            std::path::absolute(&ctx.work_dir),
            std::path::absolute(source_bundle),
        ) {
            (Ok(work_dir), Ok(bundle_dir)) => (work_dir, bundle_dir),
            (Err(err), _) | (_, Err(err)) => {
                return refuse(Classified::Infra {
                    class: InfraClass::Spawn,
                    message: format!(
                        "cannot resolve work dir {} or bundle dir {}: {err}",
                        ctx.work_dir.display(),
                        ctx.bundle_dir.display()
                    ),
                });
            }
        };
        let cassette = staged.map_or_else(
            || work_dir.join(CASSETTE_FILE_NAME),
            |staged| staged.cassette.clone(),
        );
        let args = match harness_args(&ctx.job, &bundle_dir, &work_dir, &cassette) {
            Ok(args) => args,
            Err(err) => return refuse(Classified::error(ErrorCategory::Usage, err.to_string())),
        };
        let runs_root = work_dir.join(RUNS_DIR_NAME);
        if let Err(err) = tokio::fs::create_dir_all(&runs_root).await {
            return refuse(Classified::Infra {
                class: InfraClass::Spawn,
                message: format!("cannot create runs root {}: {err}", runs_root.display()),
            });
        }
        Ok(Launch {
            work_dir,
            bundle_dir,
            args,
        })
    }
}

/// The guard's message when it could not start the harness (the harness never ran), else
/// `None`.
pub(crate) fn guard_spawn_failure(finished: &Finished) -> Option<String> {
    if finished.end != ProcessEnd::Exited(super::guard::SPAWN_FAILED_EXIT_CODE) {
        return None;
    }
    let stderr = String::from_utf8_lossy(&finished.stderr.bytes);
    let message = stderr.strip_prefix(super::guard::SPAWN_FAILED_PREFIX)?;
    Some(format!(
        "cannot start harness program {}",
        message.lines().next().unwrap_or_default()
    ))
}

/// What is known about a harness that died by a signal before it printed an envelope.
struct SignalDeath<'a> {
    /// The classifier's message (`killed by signal N`).
    message: &'a str,
    tier: Tier,
    /// Whether the agent binary the CLI spawns at protocol is on the harness's `PATH`.
    agent_on_path: bool,
    /// The last lines of its stderr.
    stderr_tail: &'a str,
    /// Whether the kernel's OOM killer acted in this process's cgroup during the job.
    oom: bool,
}

/// A message that says what is known about a death by signal, never only its number.
fn describe_signal_death(death: &SignalDeath<'_>) -> String {
    let mut parts = vec![format!("{} before it printed an envelope", death.message)];
    if death.tier == Tier::Protocol && !death.agent_on_path {
        parts.push(format!(
            "the agent binary `{AGENT_BINARY}` is not on the PATH the harness gets: at fidelity \
             protocol cowork-harness spawns it from PATH and, when it cannot, kills its own \
             process group"
        ));
    }
    if death.oom {
        parts.push(
            "the kernel's out-of-memory killer killed a process of this worker's cgroup meanwhile"
                .to_owned(),
        );
    }
    if death.stderr_tail.is_empty() {
        parts.push("it wrote nothing to stderr".to_owned());
    } else {
        parts.push(format!("last stderr: {}", death.stderr_tail));
    }
    parts.join("; ")
}

/// The last `n` non-empty lines of `bytes`, joined with ` | `.
fn last_lines(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("[cowork-fleet:"))
        .collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// The `oom_kill` count of this process's cgroup (v2), when the system exposes it.
fn oom_kills() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cgroup.lines().find_map(|line| line.strip_prefix("0::"))?;
    let events = std::fs::read_to_string(
        Path::new("/sys/fs/cgroup")
            .join(path.trim_start_matches('/'))
            .join("memory.events"),
    )
    .ok()?;
    events
        .lines()
        .find_map(|line| line.strip_prefix("oom_kill "))
        .and_then(|count| count.trim().parse().ok())
}

/// Says so when the CLI quarantined a recording (it carries host inventory and its target was
/// repo-visible): the quarantined file is never stored, since host inventory is what the
/// quarantine keeps from spreading, and it goes with the job's work dir.
fn note_quarantined(output: &mut ExecOutput, runs_root: &Path) {
    let names: Vec<String> = sorted_entries(&runs_root.join("quarantine"))
        .iter()
        .filter_map(|path| path.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        return;
    }
    append_stderr_note(
        output,
        &format!(
            "[cowork-fleet: the harness quarantined {} (a recording carrying host inventory); \
             not stored, and removed with the job's work dir]",
            names.join(", ")
        ),
    );
}

/// Reports what was removed with the job's temp root: in the log, and, when the harness left
/// something there, in the job's stored `harness.stderr.log`.
pub(crate) fn note_removed(output: &mut ExecOutput, job: &JobSpec, removed: &Removed) {
    if let Some(error) = &removed.error {
        tracing::warn!(job_id = %job.job_id, dir = %removed.root.display(), error, "removing the job's temp dir failed");
    }
    if removed.leftovers.is_empty() {
        tracing::debug!(job_id = %job.job_id, dir = %removed.root.display(), "removed the job's temp dir");
        return;
    }
    tracing::info!(job_id = %job.job_id, dir = %removed.root.display(), left = ?removed.leftovers, "removed what the harness left in its temp dir");
    let note = format!(
        "[cowork-fleet: removed the job's TMPDIR {}, where the harness left: {}]",
        removed.root.join("tmp").display(),
        removed.leftovers.join(", ")
    );
    append_stderr_note(output, &note);
}

/// `harness.stderr.log`: the CLI's own stderr, with a note when it was cut.
fn stderr_artifact(stderr: Captured) -> Artifact {
    let mut bytes = stderr.bytes;
    if stderr.dropped_bytes > 0 {
        bytes.extend_from_slice(
            format!(
                "\n[cowork-fleet: {} more bytes of stderr were dropped]\n",
                stderr.dropped_bytes
            )
            .as_bytes(),
        );
    }
    Artifact {
        name: "harness.stderr.log".to_owned(),
        source: ArtifactSource::Bytes(bytes),
    }
}

/// `results[0].outDir` of an envelope.
fn envelope_out_dir(envelope: &Envelope) -> Option<String> {
    envelope
        .value
        .get("results")?
        .get(0)?
        .get("outDir")?
        .as_str()
        .map(str::to_owned)
}

/// Makes the child the leader of a new session and process group before it execs.
#[allow(unsafe_code)]
fn start_new_session(command: &mut Command) {
    // SAFETY: the closure runs in the forked child between fork and exec. It calls only
    // setsid(2) and reads errno, both async-signal-safe, allocates nothing and touches no
    // state shared with the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
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

/// How the process ended and what it printed.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) end: ProcessEnd,
    pub(crate) stdout: Captured,
    pub(crate) stderr: Captured,
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

/// Which part of an over-long stream is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keep {
    /// The first bytes (stderr: the first lines name the run dir and the first error).
    Head,
    /// The last bytes, starting at a line boundary (stdout: the envelope is the last line).
    Tail,
}

/// A bounded buffer for one stream.
#[derive(Debug)]
pub(crate) struct Capture {
    bytes: Vec<u8>,
    limit: usize,
    keep: Keep,
    dropped_bytes: u64,
}

impl Capture {
    pub(crate) fn new(limit: usize, keep: Keep) -> Capture {
        Capture {
            bytes: Vec::new(),
            limit,
            keep,
            dropped_bytes: 0,
        }
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) {
        match self.keep {
            Keep::Head => {
                let room = self.limit.saturating_sub(self.bytes.len());
                let taken = room.min(chunk.len());
                self.bytes.extend_from_slice(&chunk[..taken]);
                self.dropped_bytes += (chunk.len() - taken) as u64;
            }
            Keep::Tail => {
                self.bytes.extend_from_slice(chunk);
                // Trimming only once the buffer holds twice the limit keeps the cost of the
                // front removals linear in the bytes read.
                if self.bytes.len() > self.limit.saturating_mul(2).max(READ_CHUNK_BYTES) {
                    self.trim_front();
                }
            }
        }
    }

    fn trim_front(&mut self) {
        let excess = self.bytes.len().saturating_sub(self.limit);
        if excess > 0 {
            self.bytes.drain(..excess);
            self.dropped_bytes += excess as u64;
        }
    }

    pub(crate) fn finish(mut self) -> Captured {
        if self.keep == Keep::Tail {
            self.trim_front();
            if self.dropped_bytes > 0 {
                // The first kept line is a fragment; drop it so that only whole lines remain.
                let cut = self
                    .bytes
                    .iter()
                    .position(|&byte| byte == b'\n')
                    .map_or(self.bytes.len(), |newline| newline + 1);
                self.bytes.drain(..cut);
                self.dropped_bytes += cut as u64;
            }
        }
        Captured {
            bytes: self.bytes,
            dropped_bytes: self.dropped_bytes,
            abandoned: false,
            read_error: None,
        }
    }
}

/// What was read from one stream.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub(crate) bytes: Vec<u8>,
    pub(crate) dropped_bytes: u64,
    /// `true` when the pipe stayed open [`PIPE_DRAIN_GRACE`] after the group was killed.
    pub(crate) abandoned: bool,
    pub(crate) read_error: Option<io::Error>,
}

/// Reads a stream to its end into `capture`, or until [`PIPE_DRAIN_GRACE`] after the leader
/// is gone.
async fn capture(
    reader: &mut (dyn AsyncRead + Unpin + Send),
    mut capture: Capture,
    leader_gone: &CancellationToken,
) -> Captured {
    let deadline = async {
        leader_gone.cancelled().await;
        tokio::time::sleep(PIPE_DRAIN_GRACE).await;
    };
    tokio::pin!(deadline);
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    let mut abandoned = false;
    let mut read_error = None;
    loop {
        // Reading a pipe is cancel-safe: bytes not yet returned stay in the pipe, so dropping
        // the read when the deadline wins loses only output we are giving up anyway.
        tokio::select! {
            read = reader.read(&mut chunk) => match read {
                Ok(0) => break,
                Ok(n_read) => capture.push(&chunk[..n_read]),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    read_error = Some(err);
                    break;
                }
            },
            () = &mut deadline => {
                abandoned = true;
                break;
            }
        }
    }
    let mut captured = capture.finish();
    captured.abandoned = abandoned;
    captured.read_error = read_error;
    captured
}

/// What to look for in the run dir.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    /// The completed result: the highest `turns/<N>/result.json`.
    Result,
    /// The salvaged partial result of an unanswered run (diagnostic only).
    PartialResult,
    /// Only the diagnostic files.
    Diagnostics,
}

#[derive(Debug)]
struct CollectRequest {
    job_id: String,
    runs_root: PathBuf,
    cassette: Option<PathBuf>,
    /// `results[0].outDir` of the envelope, when there was one.
    out_dir: Option<String>,
    want: Want,
}

#[derive(Debug, Default)]
struct Collected {
    /// The result file and its parsed content (Want::Result) or the partial result file
    /// (Want::PartialResult; the value is then unused).
    result: Option<(PathBuf, Value)>,
    artifacts: Vec<Artifact>,
}

/// Finds the run dir and collects the result and the diagnostic files of
/// harness-behaviour.md#uploads.
fn collect(request: &CollectRequest) -> Collected {
    let mut collected = Collected::default();
    let run_dir = match request.out_dir.as_deref() {
        // `replay` writes no run dir; its envelope result is the record.
        Some(REPLAY_OUT_DIR) => None,
        out_dir => locate_run_dir(&request.runs_root, out_dir, &request.job_id),
    };
    if let Some(run_dir) = &run_dir {
        match request.want {
            Want::Result | Want::PartialResult => {
                if let Some(path) = highest_turn_file(run_dir, "result.json") {
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
        if let Some(path) = highest_turn_file(run_dir, "trace.json") {
            named.push(path.clone());
            collected.artifacts.push(Artifact {
                name: "trace.json".to_owned(),
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
                name: format!("{RUN_DIR_PREFIX}{relative}"),
                source: ArtifactSource::File(path),
            });
        }
    }
    if let Some(cassette) = &request.cassette
        && is_regular_file(cassette)
    {
        collected.artifacts.push(Artifact {
            name: "cassette.json".to_owned(),
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
fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
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
    let entries = std::fs::read_dir(run_dir.join("turns")).ok()?;
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

#[cfg(test)]
mod tests {
    use cowork_schema::ids::{BatchId, JobId, UnitRef};
    use cowork_schema::job::Tier;

    use super::*;

    fn job(command: JobCommand, scenario_file: &str, flags: &[&str]) -> JobSpec {
        let batch_id = BatchId::new("b1").expect("valid literal");
        JobSpec {
            protocol: cowork_schema::job::PROTOCOL_VERSION,
            job_id: JobId::new(&batch_id, UnitRef::File(0), None),
            batch_id,
            command,
            tier: Tier::Protocol,
            unit: UnitRef::File(0),
            repeat_index: None,
            scenario_file: scenario_file.to_owned(),
            scenario_name: "s".to_owned(),
            axes: None,
            arm: None,
            forwarded_flags: flags.iter().map(|flag| (*flag).to_owned()).collect(),
            bundle_sha256: "0".repeat(64),
            timeout_ms: 1000,
            executor: ExecutorKind::Harness,
            sim: None,
            generation: 0,
            traceparent: None,
            republished: 0,
            dispatch_epoch: 0,
        }
    }

    fn check_args(command: JobCommand, scenario: &str, flags: &[&str], expect: Option<&str>) {
        let got = harness_args(
            &job(command, scenario, flags),
            Path::new("/bundle"),
            Path::new("/work"),
            Path::new("/work/cassette.json"),
        );
        let got = got.ok().map(|args| {
            args.iter()
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        });
        assert_eq!(got.as_deref(), expect, "{command:?} {scenario}");
    }

    #[test]
    fn command_line_follows_the_cli_contract() {
        check_args(
            JobCommand::Run,
            "scenarios/a.yaml",
            &["--on-unanswered", "first", "--label", "x y"],
            Some(
                "--run-dir /work/runs run /bundle/scenarios/a.yaml --output-format json \
                 --on-unanswered first --label x y",
            ),
        );
        check_args(
            JobCommand::Record,
            "a.yaml",
            &[],
            Some(
                "--run-dir /work/runs record /bundle/a.yaml --out /work/cassette.json --output-format json",
            ),
        );
        check_args(
            JobCommand::Replay,
            "./cassettes/a.json",
            &[],
            Some("--run-dir /work/runs replay /bundle/./cassettes/a.json --output-format json"),
        );
        check_args(JobCommand::Run, "../escape.yaml", &[], None);
        check_args(JobCommand::Run, "a/../../escape.yaml", &[], None);
        check_args(JobCommand::Run, "/etc/passwd", &[], None);
        check_args(JobCommand::Run, "", &[], None);
        check_args(JobCommand::Run, ".", &[], None);
    }

    #[test]
    fn scenario_path_error_names_job_and_path() {
        let err = harness_args(
            &job(JobCommand::Run, "../x.yaml", &[]),
            Path::new("/b"),
            Path::new("/w"),
            Path::new("/w/cassette.json"),
        )
        .expect_err("a parent path escapes the bundle");
        assert_eq!(
            err.to_string(),
            "scenario file \"../x.yaml\" of job b1/f0 must be a relative path inside the bundle"
        );
    }

    fn check_capture(keep: Keep, limit: usize, chunks: &[&str], expect: &str, expect_dropped: u64) {
        let mut capture = Capture::new(limit, keep);
        for chunk in chunks {
            capture.push(chunk.as_bytes());
        }
        let captured = capture.finish();
        assert_eq!(
            String::from_utf8_lossy(&captured.bytes),
            expect,
            "{keep:?} {chunks:?}"
        );
        assert_eq!(
            captured.dropped_bytes, expect_dropped,
            "{keep:?} {chunks:?}"
        );
    }

    #[test]
    fn captures_are_bounded() {
        check_capture(Keep::Head, 10, &["abc", "def"], "abcdef", 0);
        check_capture(Keep::Head, 4, &["abc", "def"], "abcd", 2);
        check_capture(Keep::Head, 0, &["abc"], "", 3);
        check_capture(Keep::Tail, 10, &["abc", "def"], "abcdef", 0);
        // Over the limit the tail is kept, from the first whole line on.
        check_capture(Keep::Tail, 8, &["junk\nmore", "\n{env}\n"], "{env}\n", 10);
        check_capture(Keep::Tail, 4, &["0123456789"], "", 10);
    }

    #[test]
    fn tail_capture_stays_bounded_while_reading() {
        let mut capture = Capture::new(16, Keep::Tail);
        let line = "x".repeat(1000) + "\n";
        for _ in 0..1000 {
            capture.push(line.as_bytes());
            assert!(capture.bytes.len() <= 2 * READ_CHUNK_BYTES + line.len());
        }
        capture.push(b"{\"tool\":1}\n");
        let captured = capture.finish();
        assert_eq!(captured.bytes, b"{\"tool\":1}\n");
        assert_eq!(captured.dropped_bytes, 1000 * 1001);
    }
}
