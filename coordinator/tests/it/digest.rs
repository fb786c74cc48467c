//! The envelope lists the results that were folded: each is read by the key and sha256 its
//! folded `finished` event recorded, and a file that changed since (a later attempt writing
//! over it) is an error, not a silent swap.

use std::sync::Arc;

use cowork_coordinator::supervisor::{
    CoordinatorPorts, SuperviseError, SuperviseOptions, SuperviseSignals, supervise,
};
use cowork_fabric::embedded::{DirArtifactStore, MemEventLog, MemJobQueue};
use cowork_fabric::{ArtifactStore, EventLog, JobQueue};
use cowork_schema::api::ProgressSnapshot;
use cowork_schema::job::Tier;
use tokio::sync::watch;

use crate::support::{finished_event, planned, project, repeat};

#[tokio::test]
async fn a_result_that_changed_after_its_fold_is_an_error() {
    let dir = project();
    let plan = planned(dir.path(), repeat(2));
    let queue = MemJobQueue::new();
    let events = MemEventLog::new();
    let store = DirArtifactStore::new(&dir.path().join("store"));
    let ports = CoordinatorPorts {
        queue: Arc::new(queue.clone()),
        events: Arc::new(events.clone()),
        store: Arc::new(store.clone()),
    };
    let worker = tokio::spawn(async move {
        while let Ok(Some(delivery)) = queue.pull(&Tier::ALL).await {
            let job = delivery.job.clone();
            let finished = finished_event(&store, &job, delivery.attempt).await;
            if job.repeat_index == Some(1) {
                // Another attempt's bytes land on the key of the folded one.
                let key = cowork_schema::layout::artifact_key(&job.job_id, 0, 1, "result.json");
                store
                    .put(
                        &key,
                        br#"{"result":"failure","verdict":{"pass":false,"signals":[]}}"#.to_vec(),
                    )
                    .await
                    .expect("overwriting");
            }
            events.publish(&finished).await.expect("finished");
            delivery.acker.ack().await.expect("ack");
        }
    });
    let (progress_tx, _progress_rx) = watch::channel(ProgressSnapshot::default());
    let error = supervise(
        &ports,
        &plan,
        &SuperviseOptions::new(1, "run"),
        &progress_tx,
        SuperviseSignals::default(),
    )
    .await
    .expect_err("the envelope cannot list a result that was not folded");
    worker.abort();
    let SuperviseError::ResultMismatch { key, .. } = &error else {
        panic!("a digest mismatch: {error:?}");
    };
    assert!(key.ends_with("/f0/r1/result.json"), "{key}");
    assert!(!error.is_transient());
}
