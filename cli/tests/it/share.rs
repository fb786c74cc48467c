//! Sharing the fleet between batches (docs/decisions.md "Fair share"), with a real
//! nats-server, s3s-fs, coordinator and two `sim` workers of 4 slots each as separate
//! processes: a batch submitted beside a running sweep has its jobs next in line instead of
//! behind the sweep's queue, and every running batch says what it holds and why it waits.

use std::time::Duration;

use cowork_schema::BatchId;
use cowork_schema::api::BatchStatus;
use cowork_schema::event::JobEventKind;
use cowork_testkit::wait_until;

use crate::faults::{
    EventFollower, batch_args, fault_fleet, finish_and_check_of, profile_file, submit_of,
};
use crate::fleet::Fleet;
use crate::support::workspace_root;

/// Run length of the jobs, in ms (±50%).
const RUN_MS: u64 = 300;

fn status(fleet: &Fleet, batch: &BatchId) -> BatchStatus {
    let body = fleet.api_get(&format!("/v1/batches/{batch}"));
    serde_json::from_str(&body).expect("a batch status")
}

/// Waits until both workers beat, so the coordinator has live slots to divide from the
/// first batch on.
fn wait_for_workers(fleet: &Fleet) {
    wait_until("both workers beat")
        .within(Duration::from_secs(60))
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(|| {
            let body = fleet.api_get("/v1/workers");
            body.contains("\"w0\"") && body.contains("\"w1\"")
        });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_batch_beside_a_sweep_is_served_next_and_both_say_what_they_hold() {
    let fleet = fault_fleet(&[], &[]);
    wait_for_workers(&fleet);
    // 4 cells × 40 runs: 160 jobs, far more than the 8 slots.
    let sweep = submit_of(&fleet, 40, RUN_MS);
    let mut sweep_events = EventFollower::new(&fleet.nats.url(), &sweep).await;
    sweep_events.until_finished(&fleet, 8).await;
    let alone = status(&fleet, &sweep);
    let shares = &alone
        .progress
        .as_ref()
        .expect("a running batch has progress")
        .shares;
    assert_eq!(shares.len(), 1, "{shares:?}");
    assert_eq!((shares[0].slots, shares[0].batches), (8, 1), "{shares:?}");
    assert!(
        shares[0].queued + shares[0].running <= 8,
        "the sweep alone holds at most the live slots, not its window: {shares:?}"
    );

    // 4 cells × 2 runs beside it: its jobs are next in line for the next free slots.
    let finished_before = status(&fleet, &sweep)
        .progress
        .map_or(0, |progress| progress.finished);
    let small = submit_of(&fleet, 2, RUN_MS);
    let out = fleet.watch(&workspace_root(), &small);
    assert!(
        matches!(out.code(), 0 | 1),
        "{}\n{}",
        out.context(),
        fleet.logs()
    );
    // How many sweep jobs finished between the submit and the small batch's first start, in
    // the events stream's order: behind a queue of the sweep's window (64) that would be
    // about 60; next in line, a few of the 8 running ones.
    let small_events = fleet.events_with_seq(&small).await;
    let first_start = small_events
        .iter()
        .filter(|(_, event)| matches!(event.event, JobEventKind::Started))
        .map(|(seq, _)| *seq)
        .min()
        .expect("the small batch's jobs started");
    let sweep_finished_first = fleet
        .events_with_seq(&sweep)
        .await
        .iter()
        .filter(|(seq, event)| {
            *seq < first_start && matches!(event.event, JobEventKind::Finished { .. })
        })
        .count() as u64;
    let waited_for = sweep_finished_first.saturating_sub(finished_before);
    assert!(
        waited_for <= 16,
        "the small batch's first job started after {waited_for} sweep jobs finished: it waited behind the sweep's queue\n{}",
        fleet.logs()
    );
    let progress = status(&fleet, &sweep).progress.expect("the sweep runs on");
    let shares = &progress.shares;
    assert!(
        shares.iter().all(|share| share.queued + share.running <= 8),
        "{shares:?}"
    );
    let out = fleet.cowork(&workspace_root(), &["cancel", sweep.as_str()]);
    assert_eq!(out.code(), 0, "{}", out.context());
}

/// Submits the fault batch of `repeat` runs per cell with `extra` flags (without waiting).
fn submit_with(fleet: &Fleet, repeat: usize, duration_ms: u64, extra: &[&str]) -> BatchId {
    let mut args = batch_args(&profile_file(duration_ms, 1.0), repeat);
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fleet.submit_detached(&workspace_root(), &args)
}

/// Waits until the batch's status shows a share that satisfies `wanted`.
fn wait_for_share(
    fleet: &Fleet,
    batch: &BatchId,
    what: &str,
    wanted: impl Fn(&cowork_schema::share::TierShare) -> bool,
) {
    wait_until(what)
        .within(Duration::from_secs(60))
        .every(Duration::from_millis(50))
        .context(|| fleet.logs())
        .poll(|| {
            status(fleet, batch)
                .progress
                .is_some_and(|progress| progress.shares.iter().any(&wanted))
        });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_urgent_batch_goes_first_across_a_coordinator_restart_and_nothing_is_lost_or_run_twice()
{
    let mut fleet = fault_fleet(&[], &[]);
    wait_for_workers(&fleet);
    let sweep = submit_with(&fleet, 50, 500, &["--priority", "batch"]);
    let mut sweep_events = EventFollower::new(&fleet.nats.url(), &sweep).await;
    sweep_events.until_finished(&fleet, 8).await;
    let urgent = submit_with(&fleet, 20, 500, &["--priority", "urgent"]);
    // The urgent batch takes 7 of the 8 slots; the batch class keeps its floor of one.
    wait_for_share(
        &fleet,
        &sweep,
        "the sweep waits behind the urgent batch",
        |share| {
            share.priority == cowork_schema::share::Priority::Batch
                && share.allowed == 1
                && share.waits_for.as_deref() == Some("behind 1 urgent batch")
        },
    );
    // Every view a person opens says it: the list, the status line and the workers.
    let root = workspace_root();
    let listed = fleet.cowork(&root, &["batches"]);
    listed
        .expect_code(0)
        .expect_stdout("running (batch)")
        .expect_stdout("running (urgent)")
        .expect_stderr("waits: fair share (container): behind 1 urgent batch");
    fleet
        .cowork(&root, &["workers"])
        .expect_code(0)
        .expect_stdout("tier container: 8 live slots")
        .expect_stdout(sweep.as_str());
    fleet
        .cowork(&root, &["status", sweep.as_str()])
        .expect_code(0)
        .expect_stdout("batch on tier container: ")
        .expect_stdout("waits: behind 1 urgent batch");
    let mut urgent_events = EventFollower::new(&fleet.nats.url(), &urgent).await;
    urgent_events.until_finished(&fleet, 8).await;
    fleet.kill("coordinator");
    fleet.spawn_coordinator();
    // The restarted coordinator divides the slots as before: the priority is in the spec.
    wait_for_share(
        &fleet,
        &urgent,
        "the urgent batch keeps its share after the restart",
        |share| share.priority == cowork_schema::share::Priority::Urgent && share.allowed == 7,
    );
    finish_and_check_of(&fleet, &urgent, 20, 500).await;
    finish_and_check_of(&fleet, &sweep, 50, 500).await;
}
