//! `cowork bench fleet`: the fleet end to end, an in-process coordinator and workers or a
//! running fleet, from submit to decided; with `--live-pages`, live pages follow the batch
//! through the client as browsers would.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use cowork_client::{ClientError, CoordinatorClient, WatchEvent};
use cowork_coordinator::server::{CoordinatorConfig, FleetPorts, ServerError};
use cowork_fabric::QueueError;
use cowork_fabric::bundle::UnpackLimits;
use cowork_fabric::nats::NatsConfig;
use cowork_fabric::s3::S3Config;
use futures::StreamExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::demo_batch;
use crate::connect::{connect_nats, connect_s3, nats_config, s3_config};
use crate::exit::CliError;

/// What every fleet benchmark measures.
pub(super) struct FleetBench {
    pub(super) jobs: u64,
    pub(super) workers: usize,
    pub(super) slots: usize,
    pub(super) duration_ms: u64,
    /// Live pages following the batch (`--live-pages`).
    pub(super) live_pages: u16,
}

/// The in-process fleet's settings.
pub(super) struct InProcessFleet {
    pub(super) nats: crate::fleet_args::NatsArgs,
    pub(super) s3: crate::fleet_args::S3Args,
    pub(super) window: usize,
    pub(super) tiers: Vec<cowork_schema::job::Tier>,
}

/// The fleet benchmark with an in-process coordinator and in-process workers.
pub(super) async fn bench_fleet(
    bench: &FleetBench,
    fleet: InProcessFleet,
) -> Result<i32, CliError> {
    let nats = nats_config(&fleet.nats)?;
    let s3 = s3_config(&fleet.s3)?;
    let scratch = std::env::temp_dir().join(format!("cowork-bench-fleet-{}", std::process::id()));
    let shutdown = CancellationToken::new();
    let (address, server) = start_coordinator(&fleet, &nats, &s3, &scratch, &shutdown).await?;
    let worker_tasks = start_workers(bench, &fleet, &nats, &s3, &scratch, &shutdown).await?;

    let url = format!("http://{address}");
    let client =
        CoordinatorClient::new(&url, None).map_err(|e| CliError::Failed(anyhow::anyhow!(e)))?;
    let measured = submit_and_watch(bench, &client, &url).await;
    let timeline = match &measured {
        Ok(run) => timeline(&nats, &run.batch_id).await,
        Err(_) => None,
    };
    shutdown.cancel();
    for task in worker_tasks {
        let _ = task.await;
    }
    let _ = server.await;
    let _ = std::fs::remove_dir_all(&scratch);
    let label = format!(
        "{} in-process workers × {} slots, tiers {}, window {}",
        bench.workers,
        bench.slots,
        fleet
            .tiers
            .iter()
            .map(|tier| tier.as_str())
            .collect::<Vec<_>>()
            .join(","),
        fleet.window
    );
    print_fleet(bench, &label, measured?, timeline);
    Ok(0)
}

/// Starts the in-process coordinator, unauthenticated on a free loopback port; its address
/// and its task.
async fn start_coordinator(
    fleet: &InProcessFleet,
    nats: &NatsConfig,
    s3: &S3Config,
    scratch: &Path,
    shutdown: &CancellationToken,
) -> Result<(SocketAddr, JoinHandle<Result<(), ServerError>>), CliError> {
    let fabric = connect_nats(nats).await?;
    let store = connect_s3(s3).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| CliError::Failed(e.into()))?;
    let address = listener
        .local_addr()
        .map_err(|e| CliError::Failed(e.into()))?;
    let config = CoordinatorConfig {
        listen: address,
        coordinator_id: "bench-coordinator".into(),
        api_tokens: Vec::new(),
        read_tokens: Vec::new(),
        allow_unauthenticated: true,
        window: fleet.window,
        max_bundle_bytes: 64 * 1024 * 1024,
        unpack_limits: UnpackLimits::default(),
        scratch_dir: scratch.join("coordinator"),
        usage_pause: cowork_coordinator::supervisor::DEFAULT_USAGE_PAUSE,
        usage_pause_max: cowork_coordinator::supervisor::DEFAULT_USAGE_PAUSE_MAX,
        model_limits: Vec::new(),
        http_limits: Default::default(),
        max_concurrent_submits: cowork_coordinator::server::DEFAULT_MAX_CONCURRENT_SUBMITS,
        tls: None,
        notify: Default::default(),
        #[cfg(feature = "k8s")]
        k8s_worker_jobs: None,
        prices: Default::default(),
        token_policies: Vec::new(),
    };
    let ports = FleetPorts::on_nats(&fabric, Arc::new(store));
    let server = tokio::spawn(cowork_coordinator::server::run(
        config,
        ports,
        listener,
        shutdown.clone(),
    ));
    Ok((address, server))
}

/// Starts `--workers` in-process workers with the sim executor.
async fn start_workers(
    bench: &FleetBench,
    fleet: &InProcessFleet,
    nats: &NatsConfig,
    s3: &S3Config,
    scratch: &Path,
    shutdown: &CancellationToken,
) -> Result<Vec<JoinHandle<Result<(), QueueError>>>, CliError> {
    let mut worker_tasks = Vec::new();
    for index in 0..bench.workers {
        // Each worker has its own connections, as separate processes would.
        let worker_fabric = connect_nats(nats).await?;
        let worker_store = connect_s3(s3).await?;
        let config = cowork_worker::WorkerConfig {
            worker_id: format!("bench-w{index}"),
            tiers: fleet.tiers.clone(),
            slots: bench.slots,
            replay_pack: cowork_worker::executor::replay_pack::DEFAULT_REPLAY_PACK,
            ack_wait: nats.ack_wait,
            max_deliver: 5,
            cache_dir: scratch.join(format!("w{index}/cache")),
            cache_max_bytes: None,
            work_dir: scratch.join(format!("w{index}/work")),
            keep_work_dirs: false,
            unpack_limits: UnpackLimits::default(),
            backoff: cowork_fabric::backoff::Backoff::default(),
            renew_every: None,
            verify_jobs: false,
            store_deadline: cowork_worker::DEFAULT_STORE_DEADLINE,
            drain_grace: None,
        };
        let ports = cowork_worker::WorkerPorts {
            queue: Arc::new(worker_fabric.queue.clone()),
            events: Arc::new(worker_fabric.events.clone()),
            store: Arc::new(worker_store),
            executor: Arc::new(cowork_worker::executor::sim::SimExecutor::new()),
            batches: None,
            workers: None,
        };
        worker_tasks.push(tokio::spawn(cowork_worker::run(
            config,
            ports,
            Arc::new(cowork_worker::WorkerStats::default()),
            shutdown.clone(),
        )));
    }
    Ok(worker_tasks)
}

/// The fleet benchmark against a running coordinator and its workers (`scripts/bench-fleet.sh`
/// starts them as processes).
pub(super) async fn bench_running_fleet(
    bench: &FleetBench,
    url: &str,
    nats: &crate::fleet_args::NatsArgs,
) -> Result<i32, CliError> {
    let client =
        CoordinatorClient::new(url, None).map_err(|e| CliError::Failed(anyhow::anyhow!(e)))?;
    wait_for_workers(&client, bench.workers, url).await?;
    let measured = submit_and_watch(bench, &client, url).await?;
    let nats = crate::connect::nats_config(nats)?;
    let timeline = timeline(&nats, &measured.batch_id).await;
    let label = format!(
        "{} worker processes × {} slots at {url}",
        bench.workers, bench.slots
    );
    print_fleet(bench, &label, measured, timeline);
    Ok(0)
}

/// Waits until `n_workers` workers are live at the coordinator: the clock of a benchmark starts
/// once they are all up, so their start-up is not measured. Polled: the API offers nothing to
/// wait on.
pub(super) async fn wait_for_workers(
    client: &CoordinatorClient,
    n_workers: usize,
    url: &str,
) -> Result<(), CliError> {
    super::poll_until(
        std::time::Duration::from_secs(60),
        std::time::Duration::from_millis(100),
        async || {
            let live = client
                .workers()
                .await
                .map_err(|e| CliError::Failed(anyhow::anyhow!(e).context("listing workers")))?;
            Ok((live.len() < n_workers).then(|| {
                format!(
                    "only {} of {n_workers} workers are live at {url}",
                    live.len()
                )
            }))
        },
    )
    .await
}

/// The batch's event timeline, or `None` (said on stderr) when it cannot be read.
async fn timeline(
    nats: &cowork_fabric::nats::NatsConfig,
    batch_id: &cowork_schema::BatchId,
) -> Option<cowork_fabric::nats::bench::BatchTimeline> {
    match cowork_fabric::nats::bench::batch_timeline(nats, batch_id).await {
        Ok(timeline) => Some(timeline),
        Err(error) => {
            eprintln!("no timeline: {error}");
            None
        }
    }
}

/// One fleet run: the batch, the time from submit to decided, and how it ended.
struct FleetRun {
    batch_id: cowork_schema::BatchId,
    /// Unix time in milliseconds of the submit and of the end of the watch.
    submitted_ms: i128,
    decided_ms: i128,
    n_jobs: u64,
    elapsed: std::time::Duration,
    state: String,
    exit_code: Option<i32>,
}

/// Submits the benchmark batch to the coordinator at `url`, opens `--live-pages` live pages on
/// it, and follows it to its end.
async fn submit_and_watch(
    bench: &FleetBench,
    client: &CoordinatorClient,
    url: &str,
) -> Result<FleetRun, CliError> {
    let prepared = demo_batch(bench.jobs, bench.duration_ms).await?;
    let n_jobs = prepared.plan.n_jobs();
    let submitted_ms = unix_ms();
    let started = Instant::now();
    let response = client
        .submit(&prepared.spec, prepared.bundle.bytes)
        .await
        .map_err(|e| CliError::Failed(anyhow::anyhow!(e)))?;
    let pages: Vec<_> = (0..bench.live_pages)
        .map(|_| tokio::spawn(live_page(url.to_owned(), response.batch_id.clone())))
        .collect();
    let events = client
        .watch(&response.batch_id)
        .await
        .map_err(|e| CliError::Failed(anyhow::anyhow!(e)))?;
    let mut events = std::pin::pin!(events);
    let mut end = None;
    while let Some(event) = events.next().await {
        if let Ok(WatchEvent::End(batch_end)) = event {
            end = Some(batch_end);
            break;
        }
    }
    let elapsed = started.elapsed();
    let decided_ms = unix_ms();
    let end =
        end.ok_or_else(|| CliError::Failed(anyhow::anyhow!("the watch ended before the batch")))?;
    if !pages.is_empty() {
        let mut counts = Vec::new();
        for page in pages {
            match page.await {
                Ok(Ok(n_events)) => counts.push(n_events),
                Ok(Err(error)) => eprintln!("a live page failed: {error}"),
                Err(error) => eprintln!("a live page failed: {error}"),
            }
        }
        println!(
            "live pages: {} of {} followed the batch to its verdict; live events each: {:?}",
            counts.len(),
            bench.live_pages,
            counts
        );
    }
    Ok(FleetRun {
        batch_id: response.batch_id,
        submitted_ms,
        decided_ms,
        n_jobs,
        elapsed,
        state: end.state.as_str().to_owned(),
        exit_code: end.exit_code,
    })
}

/// One live page of `batch_id` as a browser opens it, with connections of its own: the page,
/// its script, then its live stream read to its end (the server ends it after the verdict).
/// Returns the stream's events.
async fn live_page(url: String, batch_id: cowork_schema::BatchId) -> Result<usize, ClientError> {
    let browser = CoordinatorClient::new(&url, None)?;
    browser.live_page(&batch_id).await?;
    browser.live_script().await?;
    let events = browser.live_events(&batch_id).await?;
    let mut events = std::pin::pin!(events);
    let mut n_events = 0;
    while let Some(event) = events.next().await {
        event?;
        n_events += 1;
    }
    Ok(n_events)
}

pub(super) fn unix_ms() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i128)
}

fn print_fleet(
    bench: &FleetBench,
    label: &str,
    run: FleetRun,
    timeline: Option<cowork_fabric::nats::bench::BatchTimeline>,
) {
    let seconds = run.elapsed.as_secs_f64();
    println!(
        "fleet: {} jobs, {label}: submit → decided in {seconds:.2} s = {:.0} jobs/s (state {}, exit {:?})",
        run.n_jobs,
        run.n_jobs as f64 / seconds,
        run.state,
        run.exit_code
    );
    if let Some(cowork_fabric::nats::bench::BatchTimeline {
        n_events,
        first_event_ms: Some(first),
        last_finished_ms: Some(last),
    }) = timeline
    {
        let seconds = |ms: i128| ms as f64 / 1000.0;
        println!(
            "timeline: submit → first job started {:.2} s; first started → last finished {:.2} s ({:.0} jobs/s); last finished → decided {:.2} s ({n_events} events)",
            seconds(first - run.submitted_ms),
            seconds(last - first),
            run.n_jobs as f64 / seconds(last - first).max(1e-3),
            seconds(run.decided_ms - last)
        );
    }
    if bench.duration_ms > 0 {
        // Every run takes exactly `duration_ms` (`bench_sim`), so a fleet without overhead
        // runs the jobs in waves of one per slot.
        let n_slots = (bench.workers * bench.slots).max(1) as u64;
        let ideal = run.n_jobs.div_ceil(n_slots) as f64 * bench.duration_ms as f64 / 1000.0;
        println!(
            "scaling: ideal {ideal:.2} s (jobs / slots, rounded up, × duration) = {:.1}% efficiency",
            100.0 * ideal / seconds
        );
    }
}
