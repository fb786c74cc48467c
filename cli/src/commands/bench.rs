//! `cowork bench`: the planner and the reducer on synthetic batches, with time and peak memory;
//! raw JetStream and the raw pipeline (`pipeline`) as baselines; the fleet end to end, in process
//! or against running coordinator and worker processes.
//! Not a test: numbers go to docs/benchmarks.md with the command that produced them.

mod pipeline;
mod replay;

use std::time::Instant;

use cowork_coordinator::intake::files::{PrepareInput, prepare};
use cowork_core::plan::{Plan, plan_units};
use cowork_core::reduce::{
    BatchReducer, BatchShape, FileErrors, Judging, ShapeKind, StopRules, UnitShape,
};
use cowork_schema::BatchId;
use cowork_schema::batch::{BatchFlags, BatchMode, ExecutorKind};
use cowork_schema::event::JobOutcome;
use cowork_schema::job::CellAxes;
use cowork_schema::run_result::{AssertionView, RunView, SignalView};

use crate::args::{BenchArgs, BenchWhat};
use crate::exit::CliError;

/// Peak resident set size of this process in MiB (Linux `VmHWM`), if readable.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Cells × repeats close to `n_jobs`: 1,000 repeats per cell (the fleet's large-sweep shape).
fn shape_for(n_jobs: u64) -> (u32, u32) {
    let repeat = 1000u32.min(n_jobs.max(2) as u32);
    let cells = n_jobs.div_ceil(u64::from(repeat)).max(1) as u32;
    (cells, repeat)
}

pub async fn run(args: BenchArgs) -> Result<i32, CliError> {
    match args.what {
        BenchWhat::Plan { jobs } => bench_plan(jobs),
        BenchWhat::Fold { outcomes } => bench_fold(outcomes),
        BenchWhat::Jetstream { nats_url, messages } => {
            let rates = cowork_fabric::nats::bench::raw_jetstream(&nats_url, messages)
                .await
                .map_err(|e| {
                    CliError::Failed(anyhow::anyhow!(e).context("raw jetstream benchmark"))
                })?;
            println!(
                "jetstream: {} messages; publish+ack {:.0}/s, pull+ack {:.0}/s, whole cycle {:.0} msg/s",
                rates.messages, rates.publish_per_s, rates.pull_ack_per_s, rates.cycle_per_s
            );
            Ok(0)
        }
        BenchWhat::Fleet {
            nats,
            s3,
            jobs,
            workers,
            slots,
            window,
            tiers,
            duration_ms,
            coordinator,
            live_pages,
        } => {
            let tiers = parse_tiers(&tiers)?;
            let bench = FleetBench {
                jobs,
                workers,
                slots,
                duration_ms,
                live_pages,
            };
            match coordinator {
                Some(url) => bench_running_fleet(&bench, &url, &nats).await,
                None => {
                    let fleet = InProcessFleet {
                        nats,
                        s3,
                        window,
                        tiers,
                    };
                    bench_fleet(&bench, fleet).await
                }
            }
        }
        BenchWhat::Replay {
            cassettes,
            harness_bin,
            slots,
            rounds,
        } => {
            replay::run(&replay::ReplayBench {
                cassettes,
                harness_bin,
                slots,
                rounds,
            })
            .await
        }
        BenchWhat::Pipeline {
            nats,
            s3,
            jobs,
            workers,
            slots,
            window,
        } => {
            pipeline::run(pipeline::PipelineBench {
                nats,
                s3,
                jobs,
                workers,
                slots,
                window,
            })
            .await
        }
    }
}

fn parse_tiers(names: &[String]) -> Result<Vec<cowork_schema::job::Tier>, CliError> {
    names
        .iter()
        .map(|name| {
            cowork_schema::job::Tier::parse(name.trim()).ok_or_else(|| {
                CliError::usage(format!(
                    "--tiers: unknown tier {name:?}; use container, hostloop, microvm, protocol or replay"
                ))
            })
        })
        .collect()
}

/// The sim spec of the benchmark batches: seed 1 and, for a positive `duration_ms`, runs of
/// exactly that length slept for real. No spread: the scaling efficiency then compares the
/// fleet with the ideal `jobs × duration / slots` itself, not with the luck of the draws.
fn bench_sim(duration_ms: u64) -> cowork_schema::batch::SimSpec {
    let rules = if duration_ms == 0 {
        Vec::new()
    } else {
        vec![cowork_schema::batch::SimRule {
            duration_ms: Some(duration_ms),
            duration_spread: Some(0.0),
            time_scale: Some(1.0),
            ..cowork_schema::batch::SimRule::default()
        }]
    };
    cowork_schema::batch::SimSpec { seed: 1, rules }
}

/// The benchmark batch: the demo scenarios (two files, tier `container`) with `--repeat`
/// about `jobs / 2`, prepared exactly as `cowork run` and `cowork submit` prepare a batch.
async fn demo_batch(
    jobs: u64,
    duration_ms: u64,
) -> Result<cowork_coordinator::intake::Intake, CliError> {
    // `--jobs` is bounded to 4..=20000 by its parser, so this is a valid `--repeat`.
    let repeat = (jobs / 2).to_string();
    let batch_args = crate::args::BatchArgs {
        repeat: Some(repeat),
        matrix: None,
        min_pass_rate: None,
        stop_on_diverge: false,
        max_budget_usd: None,
        batch_budget_usd: None,
        allow_budget_stop: false,
        max_cells: None,
        allow_truncated_matrix: false,
        concurrency: None,
        ablate_skill: false,
        on_unanswered: None,
        decider_model: None,
        decider_dir: None,
        decider_cmd: None,
        label: None,
        job_timeout: None,
        bundle_root: None,
    };
    let target = std::path::Path::new("examples/demo/scenarios");
    crate::batch_input::prepare_batch(
        target,
        &batch_args,
        BatchMode::Run,
        ExecutorKind::Sim,
        Some(bench_sim(duration_ms)),
    )
    .await
}

/// What every fleet benchmark measures.
struct FleetBench {
    jobs: u64,
    workers: usize,
    slots: usize,
    duration_ms: u64,
    /// Live pages following the batch (`--live-pages`).
    live_pages: u16,
}

/// The in-process fleet's settings.
struct InProcessFleet {
    nats: crate::fleet_args::NatsArgs,
    s3: crate::fleet_args::S3Args,
    window: usize,
    tiers: Vec<cowork_schema::job::Tier>,
}

async fn bench_fleet(bench: &FleetBench, fleet: InProcessFleet) -> Result<i32, CliError> {
    use std::sync::Arc;

    use cowork_coordinator::server::{CoordinatorConfig, FleetPorts};
    use cowork_fabric::bundle::UnpackLimits;
    use tokio_util::sync::CancellationToken;

    use crate::connect::{connect_nats, connect_s3, nats_config, s3_config};

    let nats = nats_config(&fleet.nats)?;
    let s3 = s3_config(&fleet.s3)?;
    let scratch = std::env::temp_dir().join(format!("cowork-bench-fleet-{}", std::process::id()));
    let shutdown = CancellationToken::new();
    let fabric = connect_nats(&nats).await?;
    let store = connect_s3(&s3).await?;
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
        #[cfg(feature = "k8s")]
        k8s_worker_jobs: None,
    };
    let ports = FleetPorts::on_nats(&fabric, Arc::new(store));
    let server = tokio::spawn(cowork_coordinator::server::run(
        config,
        ports,
        listener,
        shutdown.clone(),
    ));
    let mut worker_tasks = Vec::new();
    for index in 0..bench.workers {
        // Each worker has its own connections, as separate processes would.
        let worker_fabric = connect_nats(&nats).await?;
        let worker_store = connect_s3(&s3).await?;
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

    let client = cowork_client::CoordinatorClient::new(&format!("http://{address}"), None)
        .map_err(|e| CliError::Failed(anyhow::anyhow!(e)))?;
    let measured = submit_and_watch(bench, &client, &address.to_string()).await;
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

/// The fleet benchmark against a running coordinator and its workers (`scripts/bench-fleet.sh`
/// starts them as processes).
async fn bench_running_fleet(
    bench: &FleetBench,
    url: &str,
    nats: &crate::fleet_args::NatsArgs,
) -> Result<i32, CliError> {
    let client = cowork_client::CoordinatorClient::new(url, None)
        .map_err(|e| CliError::Failed(anyhow::anyhow!(e)))?;
    // The workers start beside the coordinator; the clock starts once they are all live, so
    // their start-up is not measured. Polled: the API offers nothing to wait on.
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let live = client
            .workers()
            .await
            .map_err(|e| CliError::Failed(anyhow::anyhow!(e).context("listing workers")))?;
        if live.len() >= bench.workers {
            break;
        }
        if Instant::now() > deadline {
            return Err(CliError::Failed(anyhow::anyhow!(
                "only {} of {} workers are live at {url} after 60 s",
                live.len(),
                bench.workers
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let authority = url
        .strip_prefix("http://")
        .unwrap_or(url)
        .trim_end_matches('/')
        .to_owned();
    let measured = submit_and_watch(bench, &client, &authority).await?;
    let nats = crate::connect::nats_config(nats)?;
    let timeline = timeline(&nats, &measured.batch_id).await;
    let label = format!(
        "{} worker processes × {} slots at {url}",
        bench.workers, bench.slots
    );
    print_fleet(bench, &label, measured, timeline);
    Ok(0)
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

/// Submits the benchmark batch to the coordinator at `authority` (`host:port`), opens
/// `--live-pages` live pages on it, and follows it to its end.
async fn submit_and_watch(
    bench: &FleetBench,
    client: &cowork_client::CoordinatorClient,
    authority: &str,
) -> Result<FleetRun, CliError> {
    use cowork_client::WatchEvent;
    use futures::StreamExt;

    let prepared = demo_batch(bench.jobs, bench.duration_ms).await?;
    let n_jobs = prepared.plan.n_jobs();
    let submitted_ms = unix_ms();
    let started = Instant::now();
    let response = client
        .submit(&prepared.spec, prepared.bundle.bytes)
        .await
        .map_err(|e| CliError::Failed(anyhow::anyhow!(e)))?;
    let pages: Vec<_> = (0..bench.live_pages)
        .map(|_| tokio::spawn(live_page(authority.to_owned(), response.batch_id.clone())))
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

/// One live page of `batch_id` as a browser opens it: the page, its script, then its live
/// stream read to its end (the server ends it after the verdict). Returns the stream's events.
async fn live_page(authority: String, batch_id: cowork_schema::BatchId) -> std::io::Result<usize> {
    let page = format!("/v1/batches/{batch_id}/live.html");
    http_read_all(&authority, &page).await?;
    http_read_all(&authority, "/assets/live.js").await?;
    let stream = http_read_all(&authority, &format!("/v1/batches/{batch_id}/live/events")).await?;
    Ok(stream.matches("event:").count())
}

/// The whole answer to `GET path` from the unauthenticated coordinator at `authority`.
async fn http_read_all(authority: &str, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(authority).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    if !answer.starts_with("HTTP/1.1 200") {
        let status = answer.lines().next().unwrap_or_default().to_owned();
        return Err(std::io::Error::other(format!("GET {path}: {status}")));
    }
    Ok(answer)
}

fn unix_ms() -> i128 {
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

/// Writes a real batch to `dir`: one scenario, its session with one local plugin, and a matrix of
/// `cells` cells (baselines × models), so the benchmark goes through the same preparation,
/// planning and materialization as `cowork run`.
fn write_bench_batch(dir: &std::path::Path, cells: u32) -> std::io::Result<()> {
    let models = 10u32.min(cells);
    let baselines = cells.div_ceil(models);
    std::fs::create_dir_all(dir.join("skills/bench-skill/skills/bench-skill"))?;
    std::fs::write(
        dir.join("skills/bench-skill/skills/bench-skill/SKILL.md"),
        "---\nname: bench-skill\n---\n",
    )?;
    std::fs::write(
        dir.join("session.yaml"),
        "model: claude-sonnet-4-5\nplugins:\n  local_plugins:\n    - skills/bench-skill\n",
    )?;
    std::fs::write(
        dir.join("bench.yaml"),
        "session: session.yaml\nprompt: benchmark\nassert:\n  - result: success\n  - tool_called: Skill\n",
    )?;
    let baselines: Vec<String> = (0..baselines).map(|b| format!("desktop-1.{b}.0")).collect();
    let models: Vec<String> = (0..models).map(|m| format!("model-{m}")).collect();
    std::fs::write(
        dir.join("matrix.yaml"),
        format!(
            "baselines: [{}]\nmodels: [{}]\n",
            baselines.join(", "),
            models.join(", ")
        ),
    )?;
    Ok(())
}

fn bench_plan(n_jobs: u64) -> Result<i32, CliError> {
    let (cells, repeat) = shape_for(n_jobs);
    let dir = std::env::temp_dir().join(format!("cowork-bench-plan-{}", std::process::id()));
    write_bench_batch(&dir, cells).map_err(|e| {
        CliError::Failed(anyhow::anyhow!(
            "writing the bench batch in {}: {e}",
            dir.display()
        ))
    })?;
    let started = Instant::now();
    let input = PrepareInput {
        target: dir.join("bench.yaml"),
        matrix: Some(dir.join("matrix.yaml")),
        bundle_root: dir.clone(),
        mode: BatchMode::Run,
    };
    let prepared = prepare(&input).map_err(|errors| {
        CliError::Failed(anyhow::anyhow!(
            "bench batch invalid: {:?}",
            errors.first().map(ToString::to_string)
        ))
    })?;
    let flags = BatchFlags {
        repeat: Some(repeat),
        max_cells: cells,
        ..BatchFlags::default()
    };
    let layout = plan_units(&prepared, &flags, BatchMode::Run).map_err(|errors| {
        CliError::Failed(anyhow::anyhow!(
            "bench plan failed: {:?}",
            errors.first().map(ToString::to_string)
        ))
    })?;
    let n_derived = layout.derived_files.len();
    let batch_id = BatchId::new("bench").expect("a valid literal id");
    let plan = Plan::new(
        layout,
        cowork_core::plan::PlanInput {
            batch_id,
            flags,
            mode: BatchMode::Run,
            executor: ExecutorKind::Sim,
            sim: None,
            bundle_sha256: "0".repeat(64),
        },
    );
    let planned = started.elapsed();
    let mut n = 0u64;
    let mut id_bytes = 0usize;
    for job in plan.jobs() {
        n += 1;
        id_bytes += job.job_id.as_str().len();
    }
    let total = started.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "plan: {cells} cells × {repeat} repeats = {n} jobs ({n_derived} derived files); prepare + plan {:.3} s; + build every JobSpec {:.3} s ({:.0} jobs/s); job ids {} bytes; peak RSS {:.1} MiB",
        planned.as_secs_f64(),
        total.as_secs_f64(),
        n as f64 / total.as_secs_f64(),
        id_bytes,
        peak_rss_mib().unwrap_or(f64::NAN)
    );
    Ok(0)
}

fn bench_fold(n_outcomes: u64) -> Result<i32, CliError> {
    let (cells, repeat) = shape_for(n_outcomes);
    let shape = BatchShape {
        kind: ShapeKind::Matrix,
        repeat: Some(repeat),
        units: (0..cells)
            .map(|index| UnitShape {
                label: format!("bench [cell {index}]"),
                axes: Some(CellAxes::default()),
                cell_error: None,
            })
            .collect(),
        requested_cells: cells,
        truncated: false,
        rules: StopRules {
            stop_on_diverge: false,
            max_budget_usd: Some(1e12),
        },
        judging: Judging {
            min_pass_rate: 0.9,
            allow_budget_stop: false,
            allow_truncated_matrix: false,
        },
        file_errors: FileErrors::AbortBatch,
    };
    let mut reducer = BatchReducer::new(shape)
        .map_err(|e| CliError::Failed(anyhow::anyhow!("bench shape: {e}")))?;
    let started = Instant::now();
    let mut n = 0u64;
    // A cheap deterministic generator: the bench measures the fold, not the randomness.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for cell in 0..cells {
        for index in 0..repeat {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let pass = !state.is_multiple_of(10);
            let run = RunView {
                pass,
                signals: if pass {
                    vec![]
                } else {
                    vec![SignalView {
                        code: "assertion".into(),
                        fail: true,
                    }]
                },
                verdict_rederived: false,
                assertions: vec![
                    AssertionView {
                        key: Some("result".into()),
                        pass: true,
                        message: None,
                    },
                    AssertionView {
                        key: Some("tool_called".into()),
                        pass,
                        message: if pass {
                            None
                        } else {
                            Some("tool Skill was never called".into())
                        },
                    },
                ],
                cost_usd: Some(0.01 + (state % 100) as f64 / 10_000.0),
                tokens_total: Some(1500.0),
                non_deterministic: false,
                provenance_model: "claude-sonnet-4-5".into(),
                provenance_skill: "offered,invoked".into(),
                ablated: false,
                duration_ms: Some(40_000.0),
                effective_fidelity: Some("container".into()),
                out_dir: None,
                simulated: true,
            };
            reducer.offer(cell, Some(index), JobOutcome::Completed { run });
            n += 1;
        }
    }
    let reduction = reducer
        .finish()
        .map_err(|_| CliError::Failed(anyhow::anyhow!("bench batch did not complete")))?;
    let elapsed = started.elapsed();
    println!(
        "fold: {cells} cells × {repeat} repeats = {n} outcomes in {:.3} s ({:.0} outcomes/s); ok={} ; peak RSS {:.1} MiB",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64(),
        reduction.ok,
        peak_rss_mib().unwrap_or(f64::NAN)
    );
    Ok(0)
}
