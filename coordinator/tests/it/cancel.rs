//! Cancelling a batch stops admission at once; admitted jobs finish; the batch ends
//! `cancelled`.

use cowork_schema::registry::BatchState;

use crate::support::{
    FakeWorker, Fleet, Server, kind, packed, project, repeat, wait_progress, watch_to_end,
};

#[tokio::test]
async fn cancel_stops_admission_and_ends_cancelled() {
    let fleet = Fleet::new();
    let worker = FakeWorker::holding(&fleet);
    // A window of 2: only two of the six jobs are admitted while the worker holds them.
    let server = Server::start(fleet.config("c1", 2), fleet.ports()).await;
    let client = server.client();
    let dir = project();
    let batch = packed(dir.path(), repeat(6));
    let accepted = client
        .submit(&batch.spec, batch.bundle)
        .await
        .expect("the batch is accepted");
    let id = accepted.batch_id;
    wait_progress(&client, &id, "both admitted jobs run", |p| p.running == 2).await;
    assert_eq!(fleet.queue.published().len(), 2);

    let record = client.cancel(&id, false).await.expect("cancel is accepted");
    assert_eq!(record.state, BatchState::Stopping);
    // One job finishes after the cancel: no new job may be admitted in its place.
    worker.release(1);
    wait_progress(&client, &id, "one job finished", |p| p.finished == 1).await;
    assert_eq!(
        fleet.queue.published(),
        [format!("{id}/f0/r0"), format!("{id}/f0/r1")],
        "admission stopped at the cancel"
    );
    assert_eq!(
        client.status(&id).await.expect("status").record.state,
        BatchState::Stopping
    );

    worker.release(1);
    let (_, end) = watch_to_end(&client, &id).await;
    assert_eq!(end.state, BatchState::Cancelled, "{end:?}");
    assert_eq!((end.ok, end.exit_code), (None, None));
    assert_eq!(worker.finished().len(), 2);
    assert_eq!(fleet.queue.published().len(), 2);

    let status = client.status(&id).await.expect("status");
    assert_eq!(status.record.state, BatchState::Cancelled);
    assert!(status.rollup.is_none());
    let progress = status.progress.expect("supervised here");
    assert_eq!((progress.admitted, progress.finished), (2, 2));

    let again = client
        .cancel(&id, false)
        .await
        .expect_err("a final batch cannot be cancelled");
    assert_eq!(kind(&again), "conflict", "{again}");
    // No envelope was stored: the report judges the stored runs, marked incomplete.
    let report = client
        .report(&id)
        .await
        .expect("a cancelled batch's runs, judged");
    assert!(!report.ok, "cancelled before its verdict: {report:?}");
    assert!(
        matches!(
            &report.fleet,
            Some(cowork_schema::fleet_key::FleetKey::Unfinished(meta)) if meta.incomplete
        ),
        "{:?}",
        report.fleet
    );
    server.stop().await;
}

#[tokio::test]
async fn cancel_of_a_batch_no_worker_serves_withdraws_its_jobs_and_ends_cancelled() {
    let fleet = Fleet::new();
    // No worker at all: the admitted jobs wait in the queue for a tier nobody serves.
    let server = Server::start(fleet.config("c1", 2), fleet.ports()).await;
    let client = server.client();
    let dir = project();
    let batch = packed(dir.path(), repeat(5));
    let accepted = client
        .submit(&batch.spec, batch.bundle)
        .await
        .expect("the batch is accepted");
    let id = accepted.batch_id;
    wait_progress(&client, &id, "two jobs admitted", |p| p.admitted == 2).await;
    assert_eq!(fleet.queue.inner.n_ready(), 2);

    client.cancel(&id, false).await.expect("cancel is accepted");
    let (_, end) = watch_to_end(&client, &id).await;
    assert_eq!(end.state, BatchState::Cancelled, "{end:?}");
    assert_eq!(
        fleet.queue.inner.n_ready(),
        0,
        "the queued jobs were withdrawn"
    );
    let progress = client
        .status(&id)
        .await
        .expect("status")
        .progress
        .expect("supervised here");
    assert_eq!(
        (progress.withdrawn, progress.finished),
        (2, 0),
        "{progress:?}"
    );
    server.stop().await;
}
