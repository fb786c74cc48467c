//! `cowork worker`: a stateless worker of the fleet — pulls jobs for its tiers from NATS, runs
//! them, stores artifacts in S3, publishes events. SIGTERM drains: no new job is pulled, running
//! jobs finish and are stored, then the process exits 0.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cowork_fabric::backoff::Backoff;
use cowork_fabric::bundle::UnpackLimits;
use cowork_fabric::nats::{NatsError, check_worker_id};
use cowork_fabric::{ArtifactStore, BatchRegistry, EventLog, JobQueue, WorkerRegistry};
use cowork_schema::batch::ExecutorKind;
use cowork_schema::job::Tier;
use cowork_worker::capabilities::{
    HostProbe, ProbeConfig, TierOverrides, Tool, probe, servable_tiers,
};
use cowork_worker::executor::Executor;
use cowork_worker::executor::container::{ContainerConfig, ContainerExecutor};
use cowork_worker::executor::harness::{HarnessConfig, HarnessExecutor};
use cowork_worker::executor::sim::SimExecutor;
use cowork_worker::heartbeat::{WorkerIdentity, heartbeat_loop, hostname};
use cowork_worker::{WorkerConfig, WorkerPorts, WorkerStats};
use tokio_util::sync::CancellationToken;

use crate::args::{WorkerArgs, WorkerExecutorArg};
use crate::connect::{connect_nats, connect_s3, nats_config, s3_config};
use crate::exit::CliError;

/// Parses `--tiers`.
pub fn parse_tiers(values: &[String]) -> Result<Vec<Tier>, CliError> {
    let mut tiers = Vec::new();
    for value in values {
        match Tier::parse(value.trim()) {
            Some(tier) if !tiers.contains(&tier) => tiers.push(tier),
            Some(_) => {}
            None => {
                return Err(CliError::usage(format!(
                    "--tiers: unknown tier {value:?}; tiers are container, hostloop, microvm, protocol, replay"
                )));
            }
        }
    }
    if tiers.is_empty() {
        return Err(CliError::usage(
            "--tiers: a worker must serve at least one tier",
        ));
    }
    Ok(tiers)
}

/// Parses `--assume-tiers`: each must be one of the worker's `--tiers`, so that a typo does not
/// silently assume nothing.
fn parse_assumed_tiers(values: &[String], tiers: &[Tier]) -> Result<Vec<Tier>, CliError> {
    let mut problems = Vec::new();
    let mut assumed = Vec::new();
    for value in values.iter().map(|value| value.trim()) {
        match Tier::parse(value) {
            Some(tier) if tiers.contains(&tier) => assumed.push(tier),
            Some(_) => problems.push(format!(
                "--assume-tiers: {value} is not one of --tiers; assume only tiers this worker serves"
            )),
            None => problems.push(format!(
                "--assume-tiers: unknown tier {value:?}; tiers are container, hostloop, microvm, protocol, replay"
            )),
        }
    }
    if !problems.is_empty() {
        return Err(CliError::Usage(problems));
    }
    Ok(assumed)
}

/// The probe in one line for the start-up log: what was found, and what was not probed is left
/// out.
fn describe_probe(host_probe: &HostProbe) -> String {
    let mut parts = vec![format!("{}/{}", host_probe.os, host_probe.arch)];
    for (name, tool) in [
        ("docker", &host_probe.docker),
        ("limactl", &host_probe.limactl),
        ("harness", &host_probe.harness),
    ] {
        if *tool != Tool::NotProbed {
            parts.push(format!("{name} {}", tool.describe()));
        }
    }
    parts.join(", ")
}

/// What to do when the harness cannot be run: the one fix line every entry point gives.
const HARNESS_FIX: &str = "cowork-harness not found (install it, set --harness-bin / COWORK_HARNESS_BIN, or use --executor sim)";

/// A worker whose executor needs the harness starts only when the harness answers its
/// `--version`: otherwise every job it pulls would fail to spawn.
async fn check_harness(args: &WorkerArgs, host_probe: &HostProbe) -> Result<(), CliError> {
    let (what, tool) = match args.executor {
        WorkerExecutorArg::Sim => return Ok(()),
        WorkerExecutorArg::Harness => (
            format!("--harness-bin {}", args.harness_bin.display()),
            host_probe.harness.clone(),
        ),
        WorkerExecutorArg::Container => {
            let image = args.container_image.as_deref().unwrap_or_default();
            // Starting a container takes longer than running a CLI; 30 s covers a busy engine.
            let tool = cowork_worker::capabilities::probe_image_harness(
                Path::new("docker"),
                image,
                "cowork-harness",
                Duration::from_secs(30),
            )
            .await;
            (format!("--container-image {image}"), tool)
        }
    };
    match tool {
        Tool::Ready { .. } => Ok(()),
        Tool::Unavailable { reason } => Err(CliError::Usage(vec![format!(
            "{what}: {reason}; {HARNESS_FIX}"
        )])),
        Tool::NotProbed => Err(CliError::Usage(vec![format!(
            "{what}: the harness was not probed; {HARNESS_FIX}"
        )])),
    }
}

/// A failure to reach the bucket, with what to check.
fn bucket_error(bucket: &str, error: CliError) -> CliError {
    match error {
        CliError::Failed(error) => CliError::Failed(error.context(format!(
            "S3 bucket {bucket}: check --s3-endpoint, --s3-access-key-id and the secret key (COWORK_S3_SECRET_ACCESS_KEY or --s3-secret-access-key-file), and that the bucket exists (the coordinator's --s3-create-bucket creates it)"
        ))),
        other => other,
    }
}

/// Writes the worker's probe object: a worker that cannot store artifacts (read-only or wrong
/// credentials, a missing bucket) must not take jobs, since it could run them but never keep
/// their results.
async fn check_bucket_write(
    store: &dyn ArtifactStore,
    bucket: &str,
    worker_id: &str,
) -> Result<(), CliError> {
    let key = cowork_schema::layout::StoreKey::probe(worker_id);
    let body = format!("cowork worker {worker_id} can write here\n").into_bytes();
    match store.put(key.as_str(), body).await {
        Ok(_) => Ok(()),
        Err(error) => Err(CliError::Failed(anyhow::anyhow!(error).context(format!(
            "S3 bucket {bucket}: this worker cannot write to it (probe object {key}); check the access key and secret key it uses (--s3-access-key-id, COWORK_S3_SECRET_ACCESS_KEY), that they may write to the bucket, and that the bucket exists"
        )))),
    }
}

/// What to do when the worker's set-up could not create or change a stream, a consumer or a
/// bucket. The set-up only writes what is missing or tuned otherwise, and with per-role NATS
/// users the worker's user may not write at all (the `worker` role of
/// docs/nats/cowork-users.conf): the coordinator has to have made everything, with the
/// settings this worker was given.
fn set_up_refused(error: CliError) -> CliError {
    let CliError::Failed(error) = error else {
        return error;
    };
    let refused_write = matches!(
        error.downcast_ref::<NatsError>(),
        Some(NatsError::JetStream { action, .. })
            if action.starts_with("creating") || action.starts_with("updating")
    );
    if !refused_write {
        return CliError::Failed(error);
    }
    CliError::Failed(error.context(
        "the NATS set-up needed a change this worker could not make; when its NATS user may not change streams, consumers or buckets (the worker role of docs/nats/cowork-users.conf), start the coordinator first, and give the worker the coordinator's --ack-wait, --max-deliver, --tier-cap and --nats-replicas",
    ))
}

/// The tiers this worker serves on this host; every refused one is logged with its reason,
/// and none left is a usage error listing them all.
fn served_tiers(
    tiers: &[Tier],
    host_probe: &HostProbe,
    executor_kind: ExecutorKind,
    overrides: &TierOverrides,
    worker_id: &str,
) -> Result<Vec<Tier>, CliError> {
    let decision = servable_tiers(tiers, host_probe, executor_kind, overrides);
    for refused in &decision.refused {
        tracing::warn!(
            tier = refused.tier.as_str(),
            reason = %refused.reason,
            fix = %refused.fix,
            "tier refused: this worker does not pull it"
        );
    }
    if decision.served.is_empty() {
        let mut problems: Vec<String> = decision
            .refused
            .iter()
            .map(|refused| {
                format!(
                    "--tiers {}: {}; fix: {}",
                    refused.tier.as_str(),
                    refused.reason,
                    refused.fix
                )
            })
            .collect();
        problems.push(format!(
            "worker {worker_id}: no tier left to serve with the {} executor on this host",
            executor_kind.as_str()
        ));
        return Err(CliError::Usage(problems));
    }
    Ok(decision.served)
}

/// The executor `args` ask for, its name for heartbeats, and the harness version when known.
async fn build_executor(
    args: &WorkerArgs,
    host_probe: &HostProbe,
) -> Result<(Arc<dyn Executor>, &'static str, Option<String>), CliError> {
    let built: (Arc<dyn Executor>, &'static str, Option<String>) = match args.executor {
        WorkerExecutorArg::Sim => (
            Arc::new(SimExecutor::new()),
            "sim",
            Some(cowork_worker::executor::sim::SIM_VERSION.to_owned()),
        ),
        WorkerExecutorArg::Container => {
            let image = args.container_image.clone().ok_or_else(|| {
                CliError::usage("--container-image: needed with --executor container")
            })?;
            let owner = args
                .container_owner
                .clone()
                .unwrap_or_else(cowork_worker::heartbeat::hostname);
            let executor = ContainerExecutor::new(ContainerConfig {
                docker_socket: args.container_docker_socket.clone(),
                memory_limit_bytes: args.container_memory_bytes,
                cpu_limit_millis: args.container_cpu_millis,
                network_mode: args.container_network.clone(),
                ..ContainerConfig::new(&image, &owner)
            });
            if let Err(error) = executor.reap_leftovers().await {
                tracing::warn!(error = %error, "reaping leftover containers at start failed");
            }
            // The harness version inside the image is known from the first envelope.
            (Arc::new(executor) as Arc<dyn Executor>, "container", None)
        }
        WorkerExecutorArg::Harness => {
            // Checked at start-up: the harness answered its --version.
            let version = host_probe.harness.version().map(str::to_owned);
            // Every harness runs under a guard (this binary, `cowork __harness-guard`) that
            // kills its process group if this worker dies, even by SIGKILL or the OOM killer:
            // a dead worker's jobs are delivered again, so its harnesses must not keep spending.
            let process = crate::harness_process::HarnessProcess::from_args(&args.harness)?;
            let config = process.apply(HarnessConfig {
                guard: std::env::current_exe().ok(),
                ..HarnessConfig::new(&args.harness_bin)
            });
            (Arc::new(HarnessExecutor::new(config)), "harness", version)
        }
    };
    Ok(built)
}

/// Cancels `drain` at the first SIGTERM or Ctrl-C; a second one ends the process at once.
fn watch_signals(drain: CancellationToken) -> Result<(), CliError> {
    let mut interrupts = crate::interrupts::Interrupts::install().map_err(|error| {
        CliError::Failed(anyhow::anyhow!(error).context("watching SIGTERM and Ctrl-C"))
    })?;
    // Detached on purpose: it lives as long as the process.
    tokio::spawn(async move {
        if interrupts.next().await == 1 {
            eprintln!(
                "draining: no new jobs; running jobs finish and are stored (signal again to stop now)"
            );
            drain.cancel();
        }
        interrupts.next().await;
        eprintln!("stopping now; unfinished jobs will be delivered again");
        std::process::exit(130);
    });
    Ok(())
}

/// The worker's timing flags, parsed.
struct WorkerTimings {
    /// `--in-progress-every`: the renewal interval (default a third of the ack deadline).
    renew_every: Option<Duration>,
    /// `--store-deadline`: how long storing a job's outcome may be retried.
    store_deadline: Duration,
    /// `--exit-when-idle`.
    idle_exit: Option<Duration>,
    /// `--drain-grace`.
    drain_grace: Option<Duration>,
    /// `--sandbox-backoff-after`, `--sandbox-backoff`, `--sandbox-backoff-max`.
    sandbox_backoff: cowork_worker::sandbox_starts::SandboxBackoff,
}

impl WorkerTimings {
    fn from_args(args: &WorkerArgs) -> Result<WorkerTimings, CliError> {
        let duration = |flag: &str, text: &Option<String>| {
            text.as_deref()
                .map(|text| crate::connect::duration_arg(flag, text))
                .transpose()
        };
        Ok(WorkerTimings {
            renew_every: duration("--in-progress-every", &args.in_progress_every)?,
            store_deadline: duration("--store-deadline", &args.store_deadline)?
                .unwrap_or(cowork_worker::DEFAULT_STORE_DEADLINE),
            idle_exit: duration("--exit-when-idle", &args.exit_when_idle)?,
            drain_grace: duration("--drain-grace", &args.drain_grace)?,
            sandbox_backoff: {
                let default = cowork_worker::sandbox_starts::SandboxBackoff::default();
                cowork_worker::sandbox_starts::SandboxBackoff {
                    after: args.sandbox_backoff_after,
                    first: duration("--sandbox-backoff", &args.sandbox_backoff)?
                        .unwrap_or(default.first),
                    max: duration("--sandbox-backoff-max", &args.sandbox_backoff_max)?
                        .unwrap_or(default.max),
                }
            },
        })
    }
}

/// Probes the host before anything connects, so a worker that could serve nothing exits
/// without touching the fleet, and one that can advertises and pulls only what it serves.
/// Returns the probe and the tiers this worker serves; a missing harness is refused here.
async fn probe_host(
    args: &WorkerArgs,
    requested: &[Tier],
    worker_id: &str,
) -> Result<(HostProbe, Vec<Tier>), CliError> {
    let assumed = parse_assumed_tiers(&args.assume_tiers, requested)?;
    let executor_kind = match args.executor {
        WorkerExecutorArg::Harness => ExecutorKind::Harness,
        WorkerExecutorArg::Container => ExecutorKind::Container,
        WorkerExecutorArg::Sim => ExecutorKind::Sim,
    };
    if args.executor == WorkerExecutorArg::Container && args.container_image.is_none() {
        return Err(CliError::usage(
            "--container-image: needed with --executor container (an image holding cowork-harness)",
        ));
    }
    let host_probe = probe(&ProbeConfig::for_executor(executor_kind, &args.harness_bin)).await;
    tracing::info!(
        os = %host_probe.os,
        arch = %host_probe.arch,
        docker = %host_probe.docker.describe(),
        limactl = %host_probe.limactl.describe(),
        harness = %host_probe.harness.describe(),
        executor = executor_kind.as_str(),
        "host probed"
    );
    eprintln!("worker {worker_id}: host {}", describe_probe(&host_probe));
    let overrides = TierOverrides {
        assume: assumed,
        microvm_off_macos: args.allow_microvm_off_macos,
    };
    let tiers = served_tiers(requested, &host_probe, executor_kind, &overrides, worker_id)?;
    check_harness(args, &host_probe).await?;
    Ok((host_probe, tiers))
}

/// Serves `/metrics` when `--metrics-listen` asks; the guard stops it when dropped.
async fn metrics_endpoint(
    args: &WorkerArgs,
    stats: &Arc<WorkerStats>,
    worker_id: &str,
) -> Result<Option<tokio_util::sync::DropGuard>, CliError> {
    let Some(address) = args.metrics_listen else {
        return Ok(None);
    };
    let (bound, guard) = crate::telemetry::serve_worker_metrics(address, stats.clone())
        .await
        .map_err(|error| {
            CliError::Failed(
                anyhow::anyhow!(error).context(format!("serving /metrics on {address}")),
            )
        })?;
    eprintln!("worker {worker_id}: metrics at http://{bound}/metrics");
    Ok(Some(guard))
}

/// The job loop's settings from the flags.
fn worker_config(
    args: &WorkerArgs,
    nats: &cowork_fabric::nats::NatsConfig,
    worker_id: &str,
    tiers: &[Tier],
    timings: &WorkerTimings,
) -> WorkerConfig {
    WorkerConfig {
        worker_id: worker_id.to_owned(),
        tiers: tiers.to_vec(),
        slots: usize::from(args.slots),
        replay_pack: usize::from(args.replay_pack),
        ack_wait: nats.ack_wait,
        max_deliver: u32::try_from(nats.max_deliver).unwrap_or(5).max(1),
        cache_dir: args.cache_dir.clone(),
        cache_max_bytes: (args.cache_max_mib > 0)
            .then(|| args.cache_max_mib.saturating_mul(1024 * 1024)),
        work_dir: args.work_dir.clone(),
        keep_work_dirs: args.keep_work,
        unpack_limits: UnpackLimits::default(),
        backoff: Backoff::default(),
        renew_every: timings.renew_every,
        verify_jobs: true,
        store_deadline: timings.store_deadline,
        drain_grace: timings.drain_grace,
    }
}

/// The job loop's ports: the fleet's queue, events and registries, the bucket, the executor.
fn worker_ports(
    fabric: &cowork_fabric::nats::NatsFabric,
    store: Arc<cowork_fabric::s3::S3ArtifactStore>,
    executor: Arc<dyn Executor>,
) -> WorkerPorts {
    WorkerPorts {
        queue: Arc::new(fabric.queue.clone()) as Arc<dyn JobQueue>,
        events: Arc::new(fabric.events.clone()) as Arc<dyn EventLog>,
        store: store as Arc<dyn ArtifactStore>,
        executor,
        batches: Some(Arc::new(fabric.batches.clone()) as Arc<dyn BatchRegistry>),
        workers: Some(Arc::new(fabric.workers.clone()) as Arc<dyn WorkerRegistry>),
    }
}

/// `cowork worker`.
pub async fn run(args: WorkerArgs) -> Result<i32, CliError> {
    let nats = nats_config(&args.nats)?;
    let s3 = s3_config(&args.s3)?;
    let tiers = parse_tiers(&args.tiers)?;
    let host = hostname();
    let worker_id = args
        .worker_id
        .clone()
        .unwrap_or_else(|| format!("{host}-{}", std::process::id()));
    check_worker_id(&worker_id)
        .map_err(|problem| CliError::usage(format!("--worker-id: {problem}")))?;
    let timings = WorkerTimings::from_args(&args)?;
    // A worker that could not unpack a bundle or run a job in its directories would fail every
    // job it takes: it is refused before it connects or advertises itself.
    crate::writable_dirs::check_writable(&crate::writable_dirs::worker_dirs(
        &args.cache_dir,
        &args.work_dir,
        args.executor != WorkerExecutorArg::Sim,
    ))?;
    let (host_probe, tiers) = probe_host(&args, &tiers, &worker_id).await?;
    let store = Arc::new(
        connect_s3(&s3)
            .await
            .map_err(|error| bucket_error(&s3.bucket, error))?,
    );
    check_bucket_write(store.as_ref(), &s3.bucket, &worker_id).await?;
    let fabric = connect_nats(&nats).await.map_err(set_up_refused)?;

    let (executor, executor_name, version) = build_executor(&args, &host_probe).await?;
    let config = worker_config(&args, &nats, &worker_id, &tiers, &timings);
    let ports = worker_ports(&fabric, store, executor);
    let identity = WorkerIdentity {
        worker_id: worker_id.clone(),
        tiers: tiers.clone(),
        slots: u32::from(args.slots),
        executor: executor_name.to_owned(),
        harness_version: version,
        hostname: host,
    };
    let drain = CancellationToken::new();
    watch_signals(drain.clone())?;
    let stats = Arc::new(WorkerStats::default());
    stats.sandbox_starts.set_policy(timings.sandbox_backoff);
    // Dropped when this function returns, which stops the endpoint after the drain.
    let _metrics_endpoint = metrics_endpoint(&args, &stats, &worker_id).await?;
    let stop_heartbeat = CancellationToken::new();
    let registry: Arc<dyn WorkerRegistry> = Arc::new(fabric.workers.clone());
    // Beat at a third of the registry's TTL so one lost beat never expires a live worker.
    let interval = (nats.worker_ttl / 3).max(Duration::from_secs(1));
    let heartbeat = tokio::spawn(heartbeat_loop(
        registry,
        identity,
        stats.clone(),
        interval,
        drain.clone(),
        stop_heartbeat.clone(),
    ));
    // Names a stalled stream of the queue once per stall; stopped and awaited with the
    // heartbeat below.
    let fabric_watch = tokio::spawn(cowork_worker::outage::watch_fabric(
        Arc::new(fabric.health.clone()),
        stop_heartbeat.clone(),
    ));
    eprintln!(
        "worker {worker_id}: serving {} with {} slot(s), executor {executor_name}",
        tiers
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(","),
        args.slots
    );
    // --exit-when-idle (a Kubernetes Job of workers for one batch): leave once idle.
    let result = match timings.idle_exit {
        Some(idle_exit) => {
            cowork_worker::run_until_idle(config, ports, stats.clone(), drain, idle_exit).await
        }
        None => cowork_worker::run(config, ports, stats.clone(), drain).await,
    };
    stop_heartbeat.cancel();
    let _ = heartbeat.await;
    let _ = fabric_watch.await;
    result.map_err(|error| CliError::Failed(anyhow::anyhow!(error).context("pulling jobs")))?;
    eprintln!(
        "worker {worker_id}: drained after {} job(s)",
        stats
            .jobs_finished
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(0)
}
