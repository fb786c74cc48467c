//! `cowork bench fairness`: how a running fleet shares its slots between batches. Against a
//! coordinator with live sim workers it runs, one after the other: a small batch idle and beside
//! a sweep, two sweeps together, and an urgent batch beside two sweeps of class `batch`; then
//! prints a table of each measure against its target. Waits on the coordinator's status and
//! events, never on a sleep; start times come from the workers' `started` events as the events
//! stream stored them.

mod measure;

use std::time::{Duration, Instant};

use cowork_client::{CoordinatorClient, WatchEvent};
use cowork_fabric::nats::NatsConfig;
use cowork_schema::BatchId;
use cowork_schema::event::JobEventKind;
use cowork_schema::share::Priority;
use futures::StreamExt;

use self::measure::{OverlapShare, Overtakes, SweepAtAdmission};
use super::fleet::unix_ms;
use crate::exit::CliError;

/// Jobs of the small batch that shares the fleet with a sweep.
const SMALL_JOBS: u64 = 4;
/// Jobs of the urgent batch.
const URGENT_JOBS: u64 = 8;
/// Most a wait on the fleet may take before the benchmark gives up.
const WAIT_AT_MOST: Duration = Duration::from_secs(600);
/// How often a wait polls the coordinator.
const POLL_EVERY: Duration = Duration::from_millis(50);
/// What a small batch's first start may take beyond one job duration at a wave's start: the
/// submit, the admission and the pull.
const FIRST_START_SLACK_MS: i128 = 250;
/// The targets.
const MAX_SLOWDOWN: f64 = 1.5;
const SHARE_RANGE: (f64, f64) = (40.0, 60.0);

/// The running fleet and the benchmark's shape.
struct FairnessBench {
    client: CoordinatorClient,
    url: String,
    nats: NatsConfig,
    workers: usize,
    slots: usize,
    duration_ms: u64,
    sweep_jobs: u64,
    big_sweep_jobs: u64,
}

/// One line of the table.
struct Row {
    scenario: String,
    measure: String,
    value: String,
    target: &'static str,
    /// `None` for a line without a target.
    met: Option<bool>,
}

/// A submitted batch: its id, when the submit was sent (for its submit → decided time) and when
/// the coordinator accepted it (Unix ms, comparable with the events' stored times).
struct Submitted {
    batch_id: BatchId,
    sent: Instant,
    accepted_ms: i128,
}

/// Runs every scenario and prints the table; 1 with `--check` when a target was missed.
pub(super) async fn run(args: crate::args::FairnessArgs) -> Result<i32, CliError> {
    let bench = FairnessBench {
        client: crate::connect::client(&args.client)?,
        url: args.client.coordinator,
        nats: crate::connect::nats_config(&args.nats)?,
        workers: args.workers,
        slots: args.slots,
        duration_ms: args.duration_ms,
        sweep_jobs: args.sweep_jobs,
        big_sweep_jobs: args.big_sweep_jobs,
    };
    let rows = measure_all(&bench).await?;
    print_rows(&bench, &rows);
    let missed = rows.iter().any(|row| row.met == Some(false));
    Ok(if args.check && missed { 1 } else { 0 })
}

/// Every scenario, one after the other, on an idle fleet each.
async fn measure_all(bench: &FairnessBench) -> Result<Vec<Row>, CliError> {
    super::fleet::wait_for_workers(&bench.client, bench.workers, &bench.url).await?;
    await_idle(bench).await?;
    let mut rows = small_batch_rows(bench).await?;
    rows.extend(two_sweeps(bench).await?);
    rows.extend(urgent_beside_sweeps(bench).await?);
    Ok(rows)
}

fn print_rows(bench: &FairnessBench, rows: &[Row]) {
    println!(
        "fairness: {} sim workers × {} slots at {}, every job {} ms",
        bench.workers, bench.slots, bench.url, bench.duration_ms
    );
    println!("| scenario | measure | value | target | met |");
    println!("|---|---|---|---|---|");
    for row in rows {
        let met = match row.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        println!(
            "| {} | {} | {} | {} | {met} |",
            row.scenario, row.measure, row.value, row.target
        );
    }
    println!(
        "targets: {} of {} met",
        rows.iter().filter(|row| row.met == Some(true)).count(),
        rows.iter().filter(|row| row.met.is_some()).count()
    );
}

/// The small batch's submit → decided time idle, then beside each sweep (cancelled once the
/// small batch ends), against the idle time.
async fn small_batch_rows(bench: &FairnessBench) -> Result<Vec<Row>, CliError> {
    let (idle, idle_wait) = small_batch_beside(bench, None, Duration::ZERO).await?;
    let mut rows = vec![Row {
        scenario: "idle fleet".into(),
        measure: format!("{SMALL_JOBS}-job batch, submit → decided"),
        value: format!(
            "{:.2} s (first start {} after submit)",
            idle.as_secs_f64(),
            seconds_or_never(idle_wait)
        ),
        target: "",
        met: None,
    }];
    let job = Duration::from_millis(bench.duration_ms);
    for sweep_jobs in [bench.sweep_jobs, bench.big_sweep_jobs] {
        // At a wave's start every slot has a whole job to run (the worst moment: nothing is
        // preempted); half a job later is what a submit at a random moment waits on average.
        for (when, phase) in [("at a wave's start", 0.0), ("half a job later", 0.5)] {
            let (beside, wait) =
                small_batch_beside(bench, Some(sweep_jobs), job.mul_f64(phase)).await?;
            let ratio = beside.as_secs_f64() / idle.as_secs_f64().max(1e-3);
            let (target, met) = if phase == 0.0 {
                // The bound of a scheduler that preempts nothing: its first job waits at most for
                // one running job to end.
                let bound = job.as_millis() as i128 + FIRST_START_SLACK_MS;
                (
                    "first start ≤ one job + 0.25 s",
                    wait.is_some_and(|ms| ms <= bound),
                )
            } else {
                ("≤ 1.5 × idle", ratio <= MAX_SLOWDOWN)
            };
            rows.push(Row {
                scenario: format!("beside a running {sweep_jobs}-job sweep, {when}"),
                measure: format!("{SMALL_JOBS}-job batch, submit → decided (× idle)"),
                value: format!(
                    "{:.2} s ({ratio:.2} ×; first start {} after submit)",
                    beside.as_secs_f64(),
                    seconds_or_never(wait)
                ),
                target,
                met: Some(met),
            });
        }
    }
    Ok(rows)
}

/// The small batch's submit → decided time, alone or once a sweep of `sweep_jobs` fills every
/// slot, and how long after its submit its first job started (the wait for a free slot: no
/// running job is preempted); the sweep is cancelled after it and the fleet left idle.
async fn small_batch_beside(
    bench: &FairnessBench,
    sweep_jobs: Option<u64>,
    after_wave_start: Duration,
) -> Result<(Duration, Option<i128>), CliError> {
    let sweep = match sweep_jobs {
        Some(jobs) => {
            let sweep = submit(bench, jobs, Priority::Normal, "fairness: sweep").await?;
            let n_slots = (bench.workers * bench.slots) as u64;
            await_started(bench, &[&sweep.batch_id], 1, n_slots).await?;
            // The moment of the submit within the sweep's wave of jobs: a benchmark's chosen
            // arrival, not a wait for something to happen.
            tokio::time::sleep(after_wave_start).await;
            Some(sweep)
        }
        None => None,
    };
    let batch = submit(bench, SMALL_JOBS, Priority::Normal, "fairness: small batch").await?;
    await_end(bench, &batch.batch_id).await?;
    let took = batch.sent.elapsed();
    if let Some(sweep) = sweep {
        stop(bench, &sweep.batch_id).await?;
    }
    await_idle(bench).await?;
    let first_start = starts_of(bench, &batch.batch_id).await?.first().copied();
    Ok((took, first_start.map(|at| at - batch.accepted_ms)))
}

/// Two sweeps submitted together and run to their end: each one's share of the starts.
async fn two_sweeps(bench: &FairnessBench) -> Result<Vec<Row>, CliError> {
    let (first, second) = futures::try_join!(
        submit(
            bench,
            bench.sweep_jobs,
            Priority::Normal,
            "fairness: sweep A"
        ),
        submit(
            bench,
            bench.sweep_jobs,
            Priority::Normal,
            "fairness: sweep B"
        ),
    )?;
    await_end(bench, &first.batch_id).await?;
    await_end(bench, &second.batch_id).await?;
    await_idle(bench).await?;
    let starts = [
        starts_of(bench, &first.batch_id).await?,
        starts_of(bench, &second.batch_id).await?,
    ];
    let share = measure::overlap_share(
        [first.accepted_ms, second.accepted_ms],
        [&starts[0], &starts[1]],
    );
    let scenario = format!("two {}-job sweeps submitted together", bench.sweep_jobs);
    let mut rows = Vec::new();
    for (index, name) in ["A", "B"].into_iter().enumerate() {
        let first_start = starts[index]
            .first()
            .map(|&at| seconds(at - first.accepted_ms.max(second.accepted_ms)));
        rows.push(Row {
            scenario: scenario.clone(),
            measure: format!("sweep {name}'s share of the starts while both had jobs to start"),
            value: share_value(share.as_ref(), index, first_start),
            target: "40–60%",
            met: Some(share.is_some_and(|share| {
                (SHARE_RANGE.0..=SHARE_RANGE.1).contains(&share.percent(index))
            })),
        });
    }
    Ok(rows)
}

fn share_value(share: Option<&OverlapShare>, index: usize, first_start_s: Option<f64>) -> String {
    let first = first_start_s.map_or("never".to_owned(), |s| format!("{s:.2} s"));
    match share {
        Some(share) => format!(
            "{:.1}% ({} of {} starts in {:.1} s; its first start {first} after the later submit)",
            share.percent(index),
            share.starts[index],
            share.starts[0] + share.starts[1],
            seconds(share.to_ms - share.from_ms),
        ),
        None => "no overlap: a sweep never started".into(),
    }
}

/// Two sweeps of class `batch` fill the fleet, then an urgent batch arrives: how many of the
/// sweeps' queued jobs started before its last job.
async fn urgent_beside_sweeps(bench: &FairnessBench) -> Result<Vec<Row>, CliError> {
    let (first, second) = futures::try_join!(
        submit(
            bench,
            bench.sweep_jobs,
            Priority::Batch,
            "fairness: batch sweep A"
        ),
        submit(
            bench,
            bench.sweep_jobs,
            Priority::Batch,
            "fairness: batch sweep B"
        ),
    )?;
    let sweep_ids = [&first.batch_id, &second.batch_id];
    let n_slots = (bench.workers * bench.slots) as u64;
    await_started(bench, &sweep_ids, 1, n_slots).await?;
    let urgent = submit(bench, URGENT_JOBS, Priority::Urgent, "fairness: urgent").await?;
    // What the sweeps had handed to the queue at the admission instant, read right after it.
    let mut admitted = Vec::new();
    for batch_id in sweep_ids {
        admitted.push(progress(bench, batch_id).await?.admitted);
    }
    await_end(bench, &urgent.batch_id).await?;
    let urgent_took = urgent.sent.elapsed();
    for batch_id in sweep_ids {
        stop(bench, batch_id).await?;
    }
    await_idle(bench).await?;
    let urgent_starts = starts_of(bench, &urgent.batch_id).await?;
    let mut sweeps = Vec::new();
    for (batch_id, admitted) in sweep_ids.into_iter().zip(admitted) {
        sweeps.push(SweepAtAdmission {
            starts: starts_of(bench, batch_id).await?,
            admitted,
        });
    }
    let counted = measure::overtakes(urgent.accepted_ms, &urgent_starts, &sweeps);
    Ok(urgent_rows(
        bench,
        urgent.accepted_ms,
        &urgent_starts,
        urgent_took,
        counted,
    ))
}

fn urgent_rows(
    bench: &FairnessBench,
    admission_ms: i128,
    urgent_starts: &[i128],
    urgent_took: Duration,
    counted: Option<Overtakes>,
) -> Vec<Row> {
    let scenario = format!(
        "urgent {URGENT_JOBS}-job batch beside two running {}-job sweeps of class batch",
        bench.sweep_jobs
    );
    let since_admission = |at: Option<&i128>| {
        at.map_or("never".to_owned(), |&at| {
            format!("{:.2} s", seconds(at - admission_ms))
        })
    };
    let mut rows = vec![Row {
        scenario: scenario.clone(),
        measure: "urgent batch, submit → decided (its first and last start after admission)".into(),
        value: format!(
            "{:.2} s ({}, {})",
            urgent_took.as_secs_f64(),
            since_admission(urgent_starts.first()),
            since_admission(urgent_starts.last())
        ),
        target: "",
        met: None,
    }];
    let Some(counted) = counted else {
        rows.push(Row {
            scenario,
            measure: "the urgent batch's jobs".into(),
            value: "none started".into(),
            target: "",
            met: Some(false),
        });
        return rows;
    };
    rows.push(Row {
        scenario: scenario.clone(),
        measure: "sweep jobs started after admission, before the urgent batch's last start".into(),
        value: counted.started_before_urgent.to_string(),
        target: "",
        met: None,
    });
    rows.push(Row {
        scenario,
        measure: "of them queued at admission (counted: admitted less started; the queue is FIFO)"
            .into(),
        value: format!(
            "{} (of {} queued at admission)",
            counted.queued_started_before_urgent, counted.queued_at_admission
        ),
        target: "0",
        met: Some(counted.queued_started_before_urgent == 0),
    });
    rows
}

fn seconds_or_never(ms: Option<i128>) -> String {
    ms.map_or("never".to_owned(), |ms| format!("{:.2} s", seconds(ms)))
}

fn seconds(ms: i128) -> f64 {
    ms as f64 / 1000.0
}

/// Prepares the demo batch of `jobs` sim jobs of exactly `--duration-ms` each, in class
/// `priority` and labelled, and submits it.
async fn submit(
    bench: &FairnessBench,
    jobs: u64,
    priority: Priority,
    label: &str,
) -> Result<Submitted, CliError> {
    let mut prepared = super::demo_batch(jobs, bench.duration_ms).await?;
    prepared.spec.flags.priority = priority;
    prepared.spec.flags.label = Some(label.to_owned());
    let sent = Instant::now();
    let response = bench
        .client
        .submit(&prepared.spec, prepared.bundle.bytes)
        .await
        .map_err(|e| crate::connect::client_error(e, "submitting a batch"))?;
    Ok(Submitted {
        batch_id: response.batch_id,
        sent,
        accepted_ms: unix_ms(),
    })
}

/// The batch's live progress (a batch this coordinator supervises has one).
async fn progress(
    bench: &FairnessBench,
    batch_id: &BatchId,
) -> Result<cowork_schema::api::ProgressSnapshot, CliError> {
    let status = bench
        .client
        .status(batch_id)
        .await
        .map_err(|e| crate::connect::client_error(e, "reading a batch's status"))?;
    Ok(status.progress.unwrap_or_default())
}

/// Waits until each batch has started `each` jobs and all of them `total` together.
async fn await_started(
    bench: &FairnessBench,
    batch_ids: &[&BatchId],
    each: u64,
    total: u64,
) -> Result<(), CliError> {
    super::poll_until(WAIT_AT_MOST, POLL_EVERY, async || {
        let mut started = Vec::new();
        for batch_id in batch_ids {
            let progress = progress(bench, batch_id).await?;
            started.push(progress.running + progress.finished);
        }
        let done = started.iter().all(|&n| n >= each) && started.iter().sum::<u64>() >= total;
        Ok((!done).then(|| {
            format!(
                "the sweeps started {started:?} jobs, waited for {each} each and {total} together"
            )
        }))
    })
    .await
}

/// Follows the batch to its end.
async fn await_end(bench: &FairnessBench, batch_id: &BatchId) -> Result<(), CliError> {
    let events = bench
        .client
        .watch(batch_id)
        .await
        .map_err(|e| crate::connect::client_error(e, "watching a batch"))?;
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(WatchEvent::End(_)) => return Ok(()),
            Ok(WatchEvent::Progress(_)) => {}
            Err(error) => return Err(crate::connect::client_error(error, "watching a batch")),
        }
    }
    Err(CliError::Failed(anyhow::anyhow!(
        "the watch of {batch_id} ended before the batch"
    )))
}

/// Cancels the batch, its running jobs killed, and waits for its end.
async fn stop(bench: &FairnessBench, batch_id: &BatchId) -> Result<(), CliError> {
    bench
        .client
        .cancel(batch_id, true)
        .await
        .map_err(|e| crate::connect::client_error(e, "cancelling a sweep"))?;
    await_end(bench, batch_id).await
}

/// Waits until no worker runs a job (by their heartbeats), so each scenario starts on an idle
/// fleet.
async fn await_idle(bench: &FairnessBench) -> Result<(), CliError> {
    super::poll_until(WAIT_AT_MOST, POLL_EVERY, async || {
        let workers = bench
            .client
            .workers()
            .await
            .map_err(|e| crate::connect::client_error(e, "listing workers"))?;
        let busy: u32 = workers.iter().map(|worker| worker.info.busy).sum();
        Ok((busy > 0).then(|| format!("the workers still run {busy} jobs")))
    })
    .await
}

/// The first start of each job of the batch, read back from its events.
async fn starts_of(bench: &FairnessBench, batch_id: &BatchId) -> Result<Vec<i128>, CliError> {
    let mut events = Vec::new();
    cowork_fabric::nats::bench::each_batch_event(&bench.nats, batch_id, |stored_ms, event| {
        // Only `started` events are kept: a `finished` one carries the whole run.
        if let Some(event) = event.filter(|event| matches!(event.event, JobEventKind::Started)) {
            events.push((stored_ms, event.clone()));
        }
    })
    .await
    .map_err(|e| CliError::Failed(anyhow::anyhow!(e).context("reading a batch's events")))?;
    Ok(measure::first_starts(
        events.iter().map(|(stored_ms, event)| (*stored_ms, event)),
    ))
}
