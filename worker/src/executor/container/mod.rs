//! The `container` executor: the harness CLI inside one container per job, through the Docker
//! Engine API with bollard (decisions.md#executors, harness-behaviour.md#job-invocation,
//! harness-behaviour.md#outcome-classes, harness-behaviour.md#choice-c8,
//! harness-behaviour.md#choice-c13).
//!
//! One job is one container created from a configurable image. Its command line is the harness
//! executor's (`<program> --run-dir <work_dir>/runs <cmd> <bundle_dir>/<scenario> --output-format
//! json [flags]`) and its environment is built from the same kind of allow-list. The job's work
//! dir (read-write) and bundle dir (read-only) are bind-mounted at the same absolute paths as on
//! the host, so the harness's own sibling containers (started through the optionally passed-through
//! Docker socket) can mount them too, and the run dir the harness writes is read back on the host
//! by the harness executor's own collection code.
//!
//! Every container carries the labels `cowork.fleet/batch`, `cowork.fleet/job` and
//! `cowork.fleet/owner`. The owner label scopes [`reap_leftovers`]: a worker removes only its
//! own leftovers, never those of another worker sharing the engine.
//!
//! Failure mapping: a container that cannot be created or started (image missing, engine down)
//! is `Infra { SandboxStart }` with `spawned == false`, so the job is handed back
//! (harness-behaviour.md#choice-c8). Once started, the hard timeout (`job.timeout_ms`) and
//! cancellation kill the container; whatever happens, it is removed before `execute` returns, and
//! leftovers of jobs no longer running are reaped after each job (and, by the worker, at start).
//!
//! Output is read through the engine's log API, so the engine's log driver must support reading
//! (`json-file`, `local` or `journald`); the container is never pulled, and it runs the engine's
//! init as PID 1 by default.
//!
//! Modules: `watch` (waiting for the container, its exit code and its logs) and `removal` (the
//! job's own container and the leftovers of jobs no longer running).

mod removal;
mod watch;

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::CreateContainerOptions;
use cowork_fabric::error_chain;
use cowork_schema::batch::ExecutorKind;
use cowork_schema::event::{ErrorCategory, InfraClass};
use tokio_util::sync::CancellationToken;

use super::classify::ProcessEnd;
use super::harness::{
    DEFAULT_PASSTHROUGH_ENV, DEFAULT_STDOUT_LIMIT_BYTES, Finished, HarnessConfig, HarnessExecutor,
    Launch, not_started,
};
use super::{Classified, ExecOutput, Executor, JobContext};
use removal::ContainerGuard;
pub use removal::reap_leftovers;
use watch::{SIGKILL, capture_logs, supervise};

/// Label holding the batch id of the job a container runs.
pub const LABEL_BATCH: &str = "cowork.fleet/batch";

/// Label holding the job id a container runs.
pub const LABEL_JOB: &str = "cowork.fleet/job";

/// Label holding [`ContainerConfig::owner`]: whose leftovers a container is.
pub const LABEL_OWNER: &str = "cowork.fleet/owner";

/// Where the Docker socket appears inside the container when it is passed through.
pub const CONTAINER_DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// Names of the harness allow-list ([`DEFAULT_PASSTHROUGH_ENV`]) that describe the worker
/// host's own layout. The image brings its own `PATH` and `HOME`; the host's would point at
/// directories the container does not have.
const HOST_LAYOUT_ENV: &[&str] = &["PATH", "HOME", "USER", "TMPDIR"];

/// Added to the job's timeout to give the long-lived wait and log requests their own client
/// timeout: bollard applies the client timeout to receiving response headers, and the engine
/// may hold those back until the first log line.
const STREAM_REQUEST_MARGIN: Duration = Duration::from_secs(120);

/// Settings of the [`ContainerExecutor`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerConfig {
    /// Image every job runs in; it must contain the harness CLI. It is never pulled: it must be
    /// present on the engine. Required.
    pub image: String,
    /// Value of the `cowork.fleet/owner` label. [`reap_leftovers`] removes only containers
    /// with this owner, so it must be unique among the workers that share one engine and stable
    /// across restarts of one worker (a host or pod name). Required.
    pub owner: String,
    /// How to reach the engine: `unix:///path`, `tcp://host:port` or `http://…`. Default
    /// `None`: `DOCKER_HOST` of the worker, else `unix:///var/run/docker.sock`.
    pub docker_host: Option<String>,
    /// The CLI inside the image, looked up on the image's `PATH` when bare. Default
    /// `cowork-harness`.
    pub program: String,
    /// Names of worker environment variables copied into the container; unset names are
    /// skipped. Default: the harness executor's allow-list without `PATH`, `HOME`, `USER` and
    /// `TMPDIR`, which the image defines for itself.
    pub passthrough_env: Vec<String>,
    /// Variables set in the container after the passthrough ones (they win). Default none.
    pub extra_env: Vec<(String, String)>,
    /// Most bytes kept of stdout (the tail) and of stderr (the head). Default
    /// [`DEFAULT_STDOUT_LIMIT_BYTES`].
    pub stdout_limit_bytes: usize,
    /// Host path of the Docker socket to mount at `/var/run/docker.sock` inside the container,
    /// so the harness can start its own (sibling) containers. Default `None`: no socket.
    pub docker_socket: Option<PathBuf>,
    /// Memory limit in bytes (swap included, so it is a hard limit). Default `None`: unlimited.
    pub memory_limit_bytes: Option<u64>,
    /// CPU limit in thousandths of a CPU (`1500` = 1.5 CPUs). Default `None`: unlimited.
    pub cpu_limit_millis: Option<u64>,
    /// Docker network mode (`bridge`, `host`, `none` or a network name). Default `None`: the
    /// engine's default (`bridge`).
    pub network_mode: Option<String>,
    /// User (`uid[:gid]` or a name) the CLI runs as. Default `None`: the image's user. Files
    /// the CLI writes into the work dir belong to this user on the host too.
    pub user: Option<String>,
    /// Runs the engine's init as PID 1, which reaps orphaned processes and lets the CLI kill
    /// its own process group (`kill(0, SIGKILL)`) without taking PID 1 with it. Default `true`.
    pub init: bool,
}

impl ContainerConfig {
    /// The defaults with the required image and owner.
    pub fn new(image: &str, owner: &str) -> ContainerConfig {
        ContainerConfig {
            image: image.to_owned(),
            owner: owner.to_owned(),
            docker_host: None,
            program: "cowork-harness".to_owned(),
            passthrough_env: DEFAULT_PASSTHROUGH_ENV
                .iter()
                .filter(|name| !HOST_LAYOUT_ENV.contains(name))
                .map(|name| (*name).to_owned())
                .collect(),
            extra_env: Vec::new(),
            stdout_limit_bytes: DEFAULT_STDOUT_LIMIT_BYTES,
            docker_socket: None,
            memory_limit_bytes: None,
            cpu_limit_millis: None,
            network_mode: None,
            user: None,
            init: true,
        }
    }
}

/// A failure talking to the Docker engine.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// No connection to the engine could be set up (bad address, missing socket, no version).
    #[error("cannot connect to the docker engine at {host}")]
    Connect {
        host: String,
        #[source]
        source: bollard::errors::Error,
    },
    /// The engine refused or failed an operation.
    #[error("docker engine failed to {operation}")]
    Engine {
        operation: &'static str,
        #[source]
        source: bollard::errors::Error,
    },
}

impl ContainerError {
    fn engine(operation: &'static str) -> impl FnOnce(bollard::errors::Error) -> ContainerError {
        move |source| ContainerError::Engine { operation, source }
    }
}

/// Runs jobs with the harness CLI in a container per job.
pub struct ContainerExecutor {
    config: ContainerConfig,
    /// The engine client after API version negotiation. It is set up on first use, not at
    /// construction, so a worker can start while the engine is down; until it is reachable,
    /// each job fails as a retryable spawn failure.
    engine: tokio::sync::OnceCell<Docker>,
    /// Job ids in `execute` right now, with how many times (a redelivered job may overlap its
    /// own earlier delivery). Their containers are never reaped.
    running: Arc<Mutex<HashMap<String, usize>>>,
    /// Envelope, run-dir and artifact handling shared with the harness executor; only its
    /// stdout limit is used.
    finisher: HarnessExecutor,
}

impl std::fmt::Debug for ContainerExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerExecutor")
            .field("config", &self.config)
            .field("connected", &self.engine.initialized())
            .finish_non_exhaustive()
    }
}

impl ContainerExecutor {
    /// Creates the executor; it connects to the engine on first use.
    pub fn new(config: ContainerConfig) -> ContainerExecutor {
        let finisher = HarnessExecutor::new(HarnessConfig {
            stdout_limit_bytes: config.stdout_limit_bytes,
            ..HarnessConfig::default()
        });
        ContainerExecutor {
            config,
            engine: tokio::sync::OnceCell::new(),
            running: Arc::new(Mutex::new(HashMap::new())),
            finisher,
        }
    }

    /// The settings it runs with.
    pub fn config(&self) -> &ContainerConfig {
        &self.config
    }

    /// The engine client, connected and version-negotiated on first success.
    pub async fn engine(&self) -> Result<&Docker, ContainerError> {
        self.engine
            .get_or_try_init(|| async {
                let host = self.config.docker_host.clone();
                let connected = match &host {
                    Some(host) => Docker::connect_with_host(host),
                    None => Docker::connect_with_defaults(),
                };
                let host_name = host
                    .or_else(|| std::env::var("DOCKER_HOST").ok())
                    .unwrap_or_else(|| "unix:///var/run/docker.sock".to_owned());
                let docker = connected.map_err(|source| ContainerError::Connect {
                    host: host_name.clone(),
                    source,
                })?;
                // The engine may speak an older API than bollard's default; requests in a
                // newer version are refused outright.
                docker
                    .negotiate_version()
                    .await
                    .map_err(|source| ContainerError::Connect {
                        host: host_name,
                        source,
                    })
            })
            .await
    }

    /// Removes this worker's containers of jobs that are not running in this executor now.
    /// The worker calls it at start; `execute` calls it after each job.
    pub async fn reap_leftovers(&self) -> Result<Vec<String>, ContainerError> {
        let docker = self.engine().await?;
        let running: HashSet<String> = self
            .running
            .lock()
            .expect("the running-jobs lock is never held across a panic")
            .keys()
            .cloned()
            .collect();
        reap_leftovers(docker, &self.config.owner, &running).await
    }

    /// Marks a job as running until the returned guard is dropped.
    fn register(&self, job_id: &str) -> RunningJob {
        *self
            .running
            .lock()
            .expect("the running-jobs lock is never held across a panic")
            .entry(job_id.to_owned())
            .or_insert(0) += 1;
        RunningJob {
            running: Arc::clone(&self.running),
            job_id: job_id.to_owned(),
        }
    }

    /// The container's environment: the allow-listed worker variables, then `extra_env`.
    fn environment(&self) -> Vec<String> {
        let mut env: Vec<(String, String)> = Vec::new();
        let mut set =
            |name: &str, value: String| match env.iter_mut().find(|(existing, _)| existing == name)
            {
                Some(entry) => entry.1 = value,
                None => env.push((name.to_owned(), value)),
            };
        for name in &self.config.passthrough_env {
            match std::env::var(name) {
                Ok(value) => set(name, value),
                Err(std::env::VarError::NotPresent) => {}
                Err(std::env::VarError::NotUnicode(_)) => {
                    // The Engine API carries the environment as JSON strings.
                    tracing::warn!(
                        name = %name,
                        "environment variable is not valid unicode; not passed to the container"
                    );
                }
            }
        }
        for (name, value) in &self.config.extra_env {
            set(name, value.clone());
        }
        env.into_iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect()
    }

    /// The create request of a job's container.
    fn create_body(&self, spec: &ContainerSpec<'_>) -> ContainerCreateBody {
        let mut binds = vec![
            format!("{0}:{0}:rw", spec.work_dir.display()),
            format!("{0}:{0}:ro", spec.bundle_dir.display()),
        ];
        if let Some(socket) = &self.config.docker_socket {
            binds.push(format!("{}:{CONTAINER_DOCKER_SOCKET}", socket.display()));
        }
        let memory = self
            .config
            .memory_limit_bytes
            .map(|bytes| i64::try_from(bytes).unwrap_or(i64::MAX));
        let nano_cpus = self
            .config
            .cpu_limit_millis
            .map(|millis| i64::try_from(millis.saturating_mul(1_000_000)).unwrap_or(i64::MAX));
        let labels = HashMap::from([
            (LABEL_BATCH.to_owned(), spec.batch_id.to_owned()),
            (LABEL_JOB.to_owned(), spec.job_id.to_owned()),
            (LABEL_OWNER.to_owned(), self.config.owner.clone()),
        ]);
        ContainerCreateBody {
            image: Some(self.config.image.clone()),
            entrypoint: Some(vec![self.config.program.clone()]),
            cmd: Some(spec.args.clone()),
            env: Some(self.environment()),
            working_dir: Some(spec.work_dir.display().to_string()),
            user: self.config.user.clone(),
            labels: Some(labels),
            attach_stdin: Some(false),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            open_stdin: Some(false),
            host_config: Some(HostConfig {
                binds: Some(binds),
                memory,
                // Equal to `memory`: no swap on top, so the limit is hard.
                memory_swap: memory,
                nano_cpus,
                init: Some(self.config.init),
                network_mode: self.config.network_mode.clone(),
                // Removal is ours, after the logs were read and the exit inspected.
                auto_remove: Some(false),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        }
    }

    async fn run(&self, ctx: &JobContext, cancel: &CancellationToken) -> ExecOutput {
        let job = &ctx.job;
        let job_id = job.job_id.to_string();
        let Launch {
            work_dir,
            bundle_dir,
            args,
        } = match Launch::prepare(ctx, cancel, "its container", None).await {
            Ok(launch) => launch,
            Err(not_run) => return *not_run,
        };
        let Some(args) = utf8_args(args) else {
            return not_started(Classified::error(
                ErrorCategory::Usage,
                format!("the command line of job {job_id} is not valid unicode"),
            ));
        };
        let docker = match self.engine().await {
            Ok(docker) => docker,
            Err(err) => return not_started(spawn_failure(error_chain(&err))),
        };

        let running = self.register(&job_id);
        let spec = ContainerSpec {
            batch_id: job.batch_id.as_str(),
            job_id: &job_id,
            work_dir: &work_dir,
            bundle_dir: &bundle_dir,
            args,
        };
        let output = self.run_container(docker, &spec, ctx, cancel).await;
        drop(running);
        // After each job: remove what earlier jobs (or a crashed earlier worker) left behind.
        if let Err(err) = self.reap_leftovers().await {
            tracing::warn!(job_id = %job_id, error = %error_chain(&err), "reaping leftover containers failed");
        }
        output
    }

    /// Creates, starts, supervises and removes the job's container.
    async fn run_container(
        &self,
        docker: &Docker,
        spec: &ContainerSpec<'_>,
        ctx: &JobContext,
        cancel: &CancellationToken,
    ) -> ExecOutput {
        let (id, mut container) = match self.create_and_start(docker, spec, cancel).await {
            Ok(started) => started,
            Err(not_run) => return *not_run,
        };
        let timeout_ms = ctx.job.timeout_ms;
        let streams = docker
            .clone()
            .with_timeout(Duration::from_millis(timeout_ms).saturating_add(STREAM_REQUEST_MARGIN));
        let stopped = CancellationToken::new();
        let limit = self.config.stdout_limit_bytes;
        let (end, (stdout, stderr)) = tokio::join!(
            supervise(&streams, &id, timeout_ms, cancel, &stopped),
            capture_logs(&streams, &id, limit, &stopped),
        );
        for (stream, captured) in [("stdout", &stdout), ("stderr", &stderr)] {
            if captured.abandoned {
                tracing::warn!(job_id = %spec.job_id, stream, "log stream still open after the container stopped; output abandoned");
            }
            if let Some(err) = &captured.read_error {
                tracing::warn!(job_id = %spec.job_id, stream, error = %err, "reading container logs failed");
            }
        }
        let oom_killed = match end {
            Ok(ProcessEnd::Signaled(SIGKILL)) => docker
                .inspect_container(&id, None)
                .await
                .ok()
                .and_then(|inspected| inspected.state?.oom_killed)
                .unwrap_or(false),
            _ => false,
        };
        container.remove().await;

        let (end, wait_error) = match end {
            Ok(end) => (end, None),
            Err(err) => (ProcessEnd::Exited(-1), Some(err)),
        };
        let finished = Finished {
            end,
            stdout,
            stderr,
        };
        let mut output = self
            .finisher
            .finish(&ctx.job, spec.work_dir, finished)
            .await;
        if let Some(err) = wait_error {
            output.classified = Classified::error(
                ErrorCategory::Internal,
                format!("cannot wait for the container: {}", error_chain(&err)),
            );
            output.exit_code = None;
            return output;
        }
        self.explain_end(&mut output.classified, end, oom_killed);
        output
    }

    /// Creates and starts the job's container; the output of a job that did not start when
    /// either fails or the job was cancelled first.
    async fn create_and_start(
        &self,
        docker: &Docker,
        spec: &ContainerSpec<'_>,
        cancel: &CancellationToken,
    ) -> Result<(String, ContainerGuard), Box<ExecOutput>> {
        let created = docker
            .create_container(
                Some(CreateContainerOptions::default()),
                self.create_body(spec),
            )
            .await;
        let id = match created {
            Ok(created) => created.id,
            Err(err) => {
                return Err(Box::new(not_started(spawn_failure(format!(
                    "cannot create a container from image {}: {}",
                    self.config.image,
                    error_chain(&err)
                )))));
            }
        };
        let mut container = ContainerGuard::new(docker, &id);
        tracing::debug!(job_id = %spec.job_id, container_id = %id, "container created");
        if cancel.is_cancelled() {
            container.remove().await;
            return Err(Box::new(not_started(Classified::error(
                ErrorCategory::Cancelled,
                "job was cancelled before its container started".to_owned(),
            ))));
        }
        if let Err(err) = docker.start_container(&id, None).await {
            container.remove().await;
            return Err(Box::new(not_started(spawn_failure(format!(
                "cannot start the container of image {}: {}",
                self.config.image,
                error_chain(&err)
            )))));
        }
        tracing::debug!(job_id = %spec.job_id, container_id = %id, "container started");
        Ok((id, container))
    }

    /// The shared classification speaks of a process group; say what happened to the
    /// container instead.
    fn explain_end(&self, classified: &mut Classified, end: ProcessEnd, oom_killed: bool) {
        let Classified::Error { category, message } = classified else {
            return;
        };
        match (&*category, end) {
            (ErrorCategory::Timeout, ProcessEnd::TimedOut { timeout_ms }) => {
                *message = format!(
                    "job exceeded its timeout of {timeout_ms} ms; its container was killed and removed"
                );
            }
            (ErrorCategory::Cancelled, ProcessEnd::Cancelled) => {
                *message = "job was cancelled; its container was killed and removed".to_owned();
            }
            (ErrorCategory::Crashed, _) if oom_killed => {
                message.push_str(&format!(
                    " (the container exceeded its memory limit of {} bytes)",
                    self.config.memory_limit_bytes.unwrap_or(0)
                ));
            }
            _ => {}
        }
    }
}

#[async_trait::async_trait]
impl Executor for ContainerExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Container
    }

    #[tracing::instrument(skip_all, fields(job_id = %ctx.job.job_id, executor = "container"))]
    async fn execute(&self, ctx: &JobContext, cancel: CancellationToken) -> ExecOutput {
        let started = Instant::now();
        let mut output = self.run(ctx, &cancel).await;
        output.run_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        output
    }
}

/// What one job's container is made of.
#[derive(Debug)]
struct ContainerSpec<'a> {
    batch_id: &'a str,
    job_id: &'a str,
    work_dir: &'a Path,
    bundle_dir: &'a Path,
    /// The CLI's arguments (after the program).
    args: Vec<String>,
}

/// A job id registered as running; unregisters on drop.
struct RunningJob {
    running: Arc<Mutex<HashMap<String, usize>>>,
    job_id: String,
}

impl Drop for RunningJob {
    fn drop(&mut self) {
        // A poisoned lock only means another job panicked; the map itself is still valid.
        let mut running = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = running.get_mut(&self.job_id) {
            *count -= 1;
            if *count == 0 {
                running.remove(&self.job_id);
            }
        }
    }
}

/// The container could not be created or started: nothing was spent, so the job is handed
/// back for another worker (harness-behaviour.md#choice-c8).
fn spawn_failure(message: String) -> Classified {
    Classified::Infra {
        class: InfraClass::SandboxStart,
        message,
    }
}

/// The arguments as strings (the Engine API carries them as JSON strings); `None` when one is
/// not valid unicode.
fn utf8_args(args: Vec<OsString>) -> Option<Vec<String>> {
    args.into_iter().map(|arg| arg.into_string().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_environment_leaves_out_the_host_layout() {
        let config = ContainerConfig::new("image", "owner");
        for name in HOST_LAYOUT_ENV {
            assert!(
                !config.passthrough_env.iter().any(|kept| kept == name),
                "{name}"
            );
        }
        assert!(
            config
                .passthrough_env
                .iter()
                .any(|kept| kept == "ANTHROPIC_API_KEY")
        );
        assert!(config.init);
    }

    #[test]
    fn error_chain_names_every_source() {
        let err = ContainerError::Engine {
            operation: "list leftover containers",
            source: bollard::errors::Error::DockerStreamError {
                error: "boom".to_owned(),
            },
        };
        assert_eq!(
            error_chain(&err),
            "docker engine failed to list leftover containers: Docker stream error: boom"
        );
    }
}
