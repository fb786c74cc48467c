//! A coordinator that stops mid-batch leaves it `running`; the next one resumes it, catches up
//! with the events, never re-admits a finished job and finishes the batch.

use cowork_schema::registry::BatchState;

use crate::support::{
    FakeWorker, Fleet, Server, packed, project, repeat, wait_progress, watch_to_end,
};

#[tokio::test]
async fn a_restarted_coordinator_resumes_and_catches_up() {
    let fleet = Fleet::new();
    let worker = FakeWorker::holding(&fleet);
    let first = Server::start(fleet.config("c1", 4), fleet.ports()).await;
    let client = first.client();
    let dir = project();
    let batch = packed(dir.path(), repeat(4));
    let accepted = client
        .submit(&batch.spec, batch.bundle)
        .await
        .expect("the batch is accepted");
    let id = accepted.batch_id;
    wait_progress(&client, &id, "all four jobs run", |p| p.running == 4).await;
    worker.release(2);
    wait_progress(&client, &id, "two jobs finished", |p| p.finished == 2).await;
    first.stop().await;

    let record = fleet_record(&fleet, &id).await;
    assert_eq!(
        record.state,
        BatchState::Running,
        "shutdown leaves the batch running"
    );
    let finished_before = worker.finished();
    assert_eq!(finished_before.len(), 2);
    let published_before = fleet.queue.published().len();
    assert_eq!(published_before, 4);

    let second = Server::start(fleet.config("c2", 4), fleet.ports()).await;
    let client = second.client();
    // The first progress the second coordinator reports comes after its catch-up and its
    // admission round; only then are the held jobs let go.
    wait_progress(&client, &id, "the second coordinator caught up", |p| {
        p.finished == 2 && p.admitted == 4
    })
    .await;
    worker.release(2);
    let (_, end) = watch_to_end(&client, &id).await;
    assert_eq!(
        (end.state, end.ok, end.exit_code),
        (BatchState::Done, Some(true), Some(0)),
        "{end:?}"
    );

    // The second coordinator re-published only the two unfinished jobs (deduplicated by the
    // queue, which still held them), never the two finished ones.
    let republished = fleet.queue.published()[published_before..].to_vec();
    for job in &finished_before {
        assert!(
            !republished.contains(job),
            "finished job {job} re-admitted: {republished:?}"
        );
    }
    assert_eq!(republished.len(), 2, "{republished:?}");
    assert_eq!(worker.finished().len(), 4, "every job ran once");

    let status = client.status(&id).await.expect("status");
    assert_eq!(status.record.state, BatchState::Done);
    assert_eq!(status.record.owner.as_deref(), Some("c2"));
    let progress = status
        .progress
        .expect("supervised by the second coordinator");
    assert_eq!(
        (
            progress.finished,
            progress.passed,
            progress.duplicates,
            progress.admitted
        ),
        (4, 4, 0, 4),
        "{progress:?}"
    );
    let envelope = client.report(&id).await.expect("report");
    assert_eq!(envelope.results.len(), 4);
    let fleet = serde_json::to_value(&envelope.fleet).expect("json");
    assert_eq!(fleet["jobs"]["finished"], 4);
    second.stop().await;
}

/// A restart mid-batch counts the jobs already running against their model's limit before it
/// admits more of that model, and the envelope's `maxInFlight` says what ran at once.
#[tokio::test]
async fn a_restarted_coordinator_counts_running_jobs_against_the_model_limit() {
    let fleet = Fleet::new();
    let worker = FakeWorker::holding(&fleet);
    let limited = |id: &str| cowork_coordinator::server::CoordinatorConfig {
        model_limits: vec![
            cowork_core::limits::ModelLimit::parse("default=2").expect("a valid rule"),
        ],
        ..fleet.config(id, 8)
    };
    let first = Server::start(limited("c1"), fleet.ports()).await;
    let client = first.client();
    let dir = project();
    let batch = packed(dir.path(), repeat(6));
    let id = client
        .submit(&batch.spec, batch.bundle)
        .await
        .expect("the batch is accepted")
        .batch_id;
    wait_progress(&client, &id, "two jobs run, the limit", |p| p.running == 2).await;
    first.stop().await;
    let published_before = fleet.queue.published().len();
    assert_eq!(published_before, 2, "the limit held before the restart");

    let second = Server::start(limited("c2"), fleet.ports()).await;
    let client = second.client();
    // The first progress comes after the catch-up and the first admission round.
    let caught_up = wait_progress(&client, &id, "the second coordinator caught up", |_| true).await;
    assert_eq!(
        (caught_up.admitted, caught_up.running),
        (2, 2),
        "nothing new admitted beside the two running jobs: {caught_up:?}"
    );
    let republished = fleet.queue.published()[published_before..].to_vec();
    assert_eq!(
        republished.len(),
        2,
        "only the running jobs again: {republished:?}"
    );

    worker.release(6);
    let (_, end) = watch_to_end(&client, &id).await;
    assert_eq!(end.state, BatchState::Done, "{end:?}");
    assert_eq!(worker.finished().len(), 6, "every job ran once");
    let envelope = client.report(&id).await.expect("report");
    let fleet_key = serde_json::to_value(&envelope.fleet).expect("json");
    assert_eq!(
        fleet_key["modelLimits"]["default=2"]["maxInFlight"], 2,
        "{fleet_key}"
    );
    second.stop().await;
}

async fn fleet_record(
    fleet: &Fleet,
    id: &cowork_schema::BatchId,
) -> cowork_schema::registry::BatchRecord {
    use cowork_fabric::BatchRegistry;
    fleet
        .batches
        .get(id)
        .await
        .expect("registry")
        .expect("the batch has a record")
        .0
}
