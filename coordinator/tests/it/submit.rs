//! A batch submitted over HTTP runs to its end: watch, status, report, list and workers.

use std::sync::Arc;

use cowork_fabric::WorkerRegistry;

use cowork_schema::job::JobSpec;
use cowork_schema::registry::BatchState;

use crate::support::{
    FakeWorker, Fleet, Server, packed, project, repeat, watch_to_end, worker_info,
};

#[tokio::test]
async fn a_submitted_batch_runs_to_an_envelope() {
    let fleet = Fleet::new();
    fleet
        .workers
        .heartbeat(&worker_info())
        .await
        .expect("heartbeat");
    let _worker = FakeWorker::eager(&fleet, Arc::new(|_: &JobSpec| true));
    let server = Server::start(fleet.config("c1", 8), fleet.ports()).await;
    let client = server.client();
    let dir = project();
    let batch = packed(dir.path(), repeat(3));

    let accepted = client
        .submit(&batch.spec, batch.bundle.clone())
        .await
        .expect("the batch is accepted");
    assert_eq!(accepted.n_jobs, 3);
    assert_eq!(accepted.units, 1);
    assert_eq!(accepted.state, BatchState::Planned);

    let (_, end) = watch_to_end(&client, &accepted.batch_id).await;
    assert_eq!(end.state, BatchState::Done, "{end:?}");
    assert_eq!(end.ok, Some(true));
    assert_eq!(end.exit_code, Some(0));

    let status = client.status(&accepted.batch_id).await.expect("status");
    assert_eq!(status.record.state, BatchState::Done);
    assert_eq!(status.record.ok, Some(true));
    assert_eq!(status.record.exit_code, Some(0));
    assert_eq!(status.record.owner.as_deref(), Some("c1"));
    let progress = status
        .progress
        .expect("supervised here, so progress is known");
    assert_eq!(
        (progress.finished, progress.passed, progress.admitted),
        (3, 3, 3)
    );
    assert_eq!(progress.cost_usd, 0.75);
    let rollup = status.rollup.expect("a done batch has a rollup");
    assert!(rollup.ok);
    assert_eq!(rollup.rollups.as_ref().map(Vec::len), Some(1));

    let envelope = client.report(&accepted.batch_id).await.expect("report");
    assert!(envelope.ok);
    assert_eq!(envelope.results.len(), 3);
    assert_eq!(envelope.version, "9.9.9");
    let fleet_key = serde_json::to_value(&envelope.fleet).expect("json");
    assert_eq!(fleet_key["batchId"], accepted.batch_id.as_str());

    let records = client.list().await.expect("list");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].batch_id, accepted.batch_id);
    let workers = client.workers().await.expect("workers");
    assert_eq!(
        workers,
        vec![cowork_schema::api::WorkerStatus {
            info: worker_info(),
            refused: None
        }]
    );
    // The stored layout of decisions.md#storage.
    let stored = fleet.stored_files();
    for key in [
        format!("bundles/{}.tar.zst", batch.spec.bundle_sha256),
        format!("batches/{}/spec.json", accepted.batch_id),
        format!("batches/{}/rollup.json", accepted.batch_id),
        format!("batches/{}/envelope.json", accepted.batch_id),
    ] {
        assert!(stored.contains(&key), "{key} missing from {stored:#?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_failing_run_fails_the_batch_with_exit_1() {
    let fleet = Fleet::new();
    // The second run fails: with the default min pass rate of 1 the rollup fails.
    let _worker = FakeWorker::eager(
        &fleet,
        Arc::new(|job: &JobSpec| job.repeat_index != Some(1)),
    );
    let server = Server::start(fleet.config("c1", 8), fleet.ports()).await;
    let client = server.client();
    let dir = project();
    let batch = packed(dir.path(), repeat(3));
    let accepted = client
        .submit(&batch.spec, batch.bundle)
        .await
        .expect("the batch is accepted");
    let (_, end) = watch_to_end(&client, &accepted.batch_id).await;
    assert_eq!(
        (end.state, end.ok, end.exit_code),
        (BatchState::Done, Some(false), Some(1)),
        "{end:?}"
    );
    let envelope = client.report(&accepted.batch_id).await.expect("report");
    assert!(!envelope.ok);
    assert_eq!(envelope.results.len(), 3);
    // A batch already final gets its end at once.
    let (progress, again) = watch_to_end(&client, &accepted.batch_id).await;
    assert!(progress.is_empty(), "{progress:?}");
    assert_eq!(again, end);
    server.stop().await;
}
