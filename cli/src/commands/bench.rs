//! `cowork bench`: the planner and the reducer on synthetic batches, with time and peak memory;
//! raw JetStream and the raw pipeline (`pipeline`) as baselines; the fleet end to end, in process
//! or against running coordinator and worker processes.
//! Not a test: numbers go to docs/benchmarks.md with the command that produced them.

mod fairness;
mod fleet;
mod fold;
mod pipeline;
mod plan;
mod replay;

use cowork_schema::batch::{BatchMode, ExecutorKind};

use crate::args::{BenchArgs, BenchWhat};
use crate::exit::CliError;

/// Peak resident set size of this process in MiB (Linux `VmHWM`), if readable.
/// Asks `look` every `every` until it says nothing is missing (`None`), or fails with what it
/// last said was missing once `within` has passed. The benchmarks poll the API, which offers
/// nothing to wait on for these moments.
async fn poll_until(
    within: std::time::Duration,
    every: std::time::Duration,
    mut look: impl AsyncFnMut() -> Result<Option<String>, CliError>,
) -> Result<(), CliError> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let Some(missing) = look().await? else {
            return Ok(());
        };
        if std::time::Instant::now() > deadline {
            return Err(CliError::Failed(anyhow::anyhow!(
                "{missing} after {} s",
                within.as_secs()
            )));
        }
        tokio::time::sleep(every).await;
    }
}

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
        BenchWhat::Plan { jobs } => plan::bench_plan(jobs),
        BenchWhat::Fold { outcomes } => fold::bench_fold(outcomes),
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
            let bench = fleet::FleetBench {
                jobs,
                workers,
                slots,
                duration_ms,
                live_pages,
            };
            match coordinator {
                Some(url) => fleet::bench_running_fleet(&bench, &url, &nats).await,
                None => {
                    let in_process = fleet::InProcessFleet {
                        nats,
                        s3,
                        window,
                        tiers,
                    };
                    fleet::bench_fleet(&bench, in_process).await
                }
            }
        }
        BenchWhat::Fairness(args) => fairness::run(args).await,
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
            fenced,
        } => {
            pipeline::run(pipeline::PipelineBench {
                nats,
                s3,
                jobs,
                workers,
                slots,
                window,
                fenced,
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
        stall: crate::args::StallArgs {
            stall_after: None,
            on_stall: None,
        },
        priority: crate::args::PriorityArgs::default(),
        bundle_root: None,
        quarantine: crate::args::QuarantineArgs {
            no_quarantine: true,
            ..crate::args::QuarantineArgs::default()
        },
        pricing: crate::args::PricingArgs::default(),
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
