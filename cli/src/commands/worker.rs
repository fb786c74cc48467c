//! `cowork worker`: a stateless worker of the fleet — pulls jobs for its tiers from NATS, runs
//! them, stores artifacts in S3, publishes events. SIGTERM drains: no new job is pulled, running
//! jobs finish and are stored, then the process exits 0.

use std::sync::Arc;
use std::time::Duration;

use cowork_fabric::bundle::UnpackLimits;
use cowork_fabric::nats::check_worker_id;
use cowork_fabric::{ArtifactStore, EventLog, JobQueue, WorkerRegistry};
use cowork_schema::job::Tier;
use cowork_worker::executor::Executor;
use cowork_worker::executor::harness::{HarnessConfig, HarnessExecutor};
use cowork_worker::executor::sim::SimExecutor;
use cowork_worker::heartbeat::{WorkerIdentity, heartbeat_loop, hostname};
use cowork_worker::retry::Backoff;
use cowork_worker::{WorkerConfig, WorkerPorts, WorkerStats};
use tokio_util::sync::CancellationToken;

use crate::args::{ExecutorArg, WorkerArgs};
use crate::connect::{connect_nats, connect_s3, nats_config, s3_config};
use crate::report::CliError;

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

/// `cowork-harness --version`, if the program runs within 10 s.
async fn harness_version(program: &std::path::Path) -> Option<String> {
    let run = tokio::process::Command::new(program)
        .arg("--version")
        .kill_on_drop(true)
        .output();
    // A hung probe must not keep the worker from starting; 10 s is far above a normal start.
    let output = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let first = text.lines().next()?.trim();
    (!first.is_empty()).then(|| first.to_owned())
}

/// Cancels `drain` at the first SIGTERM or Ctrl-C; a second one ends the process at once.
fn watch_signals(drain: CancellationToken) {
    // Detached on purpose: it lives as long as the process.
    tokio::spawn(async move {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(error) => {
                    tracing::error!(error = %error, "cannot watch SIGTERM");
                    return;
                }
            };
        for round in 0..2 {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            if round == 0 {
                eprintln!(
                    "draining: no new jobs; running jobs finish and are stored (signal again to stop now)"
                );
                drain.cancel();
            } else {
                eprintln!("stopping now; unfinished jobs will be delivered again");
                std::process::exit(130);
            }
        }
    });
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
    let fabric = connect_nats(&nats).await?;
    let store = Arc::new(connect_s3(&s3).await?);

    let (executor, executor_name, version): (Arc<dyn Executor>, &str, Option<String>) = match args
        .executor
    {
        ExecutorArg::Sim => (
            Arc::new(SimExecutor::new()),
            "sim",
            Some(cowork_worker::executor::sim::SIM_VERSION.to_owned()),
        ),
        ExecutorArg::Harness => {
            let version = harness_version(&args.harness_bin).await;
            if version.is_none() {
                tracing::warn!(program = %args.harness_bin.display(), "cowork-harness --version failed; jobs will fail to spawn until it works");
            }
            (
                Arc::new(HarnessExecutor::new(HarnessConfig::new(&args.harness_bin))),
                "harness",
                version,
            )
        }
    };
    let config = WorkerConfig {
        worker_id: worker_id.clone(),
        tiers: tiers.clone(),
        slots: usize::from(args.slots),
        ack_wait: nats.ack_wait,
        max_deliver: u32::try_from(nats.max_deliver).unwrap_or(5).max(1),
        cache_dir: args.cache_dir.clone(),
        work_dir: args.work_dir.clone(),
        keep_work_dirs: args.keep_work,
        unpack_limits: UnpackLimits::default(),
        backoff: Backoff::default(),
    };
    let ports = WorkerPorts {
        queue: Arc::new(fabric.queue.clone()) as Arc<dyn JobQueue>,
        events: Arc::new(fabric.events.clone()) as Arc<dyn EventLog>,
        store: store as Arc<dyn ArtifactStore>,
        executor,
    };
    let identity = WorkerIdentity {
        worker_id: worker_id.clone(),
        tiers: tiers.clone(),
        slots: u32::from(args.slots),
        executor: executor_name.to_owned(),
        harness_version: version,
        hostname: host,
    };
    let drain = CancellationToken::new();
    watch_signals(drain.clone());
    let stats = Arc::new(WorkerStats::default());
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
    eprintln!(
        "worker {worker_id}: serving {} with {} slot(s), executor {executor_name}",
        tiers
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(","),
        args.slots
    );
    let result = cowork_worker::run(config, ports, stats.clone(), drain).await;
    stop_heartbeat.cancel();
    let _ = heartbeat.await;
    result.map_err(|error| CliError::Failed(anyhow::anyhow!(error).context("pulling jobs")))?;
    eprintln!(
        "worker {worker_id}: drained after {} job(s)",
        stats
            .jobs_finished
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(0)
}
