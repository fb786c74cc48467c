//! A `usage_limit` result pauses the dispatch of its tier with backoff
//! (harness-behaviour.md#choice-c9), while the run itself counts as a completed failing sample, as
//! the CLI counts it. Time is tokio's paused clock: the test reads when each job was admitted, in
//! virtual time, without sleeping.

use cowork_schema::api::ProgressSnapshot;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cowork_coordinator::intake::submitted::plan_from_bundle;
use cowork_coordinator::supervisor::{
    CoordinatorPorts, SuperviseEnd, SuperviseOptions, SuperviseSignals, supervise,
};
use cowork_fabric::bundle::UnpackLimits;
use cowork_fabric::embedded::{DirArtifactStore, MemEventLog, MemJobQueue};
use cowork_fabric::{ArtifactStore, EventLog, JobQueue};
use cowork_schema::BatchId;
use cowork_schema::event::{JobEvent, JobEventKind, JobOutcome};
use cowork_schema::job::Tier;
use cowork_schema::run_result::RunView;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::support::{packed, project, repeat};

const PAUSE: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn a_usage_limit_pauses_the_tiers_dispatch_and_counts_as_a_failing_run() {
    let dir = project();
    let batch = packed(dir.path(), repeat(4));
    let batch_id = BatchId::new("20261130-000000-a0b1c2").expect("a valid id");
    let plan = plan_from_bundle(
        &batch.spec,
        &batch.bundle,
        batch_id.clone(),
        &dir.path().join("scratch"),
        &UnpackLimits::default(),
    )
    .expect("the fixture plans");
    let queue = MemJobQueue::new();
    let events = MemEventLog::new();
    let store = DirArtifactStore::new(&dir.path().join("store"));
    let ports = CoordinatorPorts {
        queue: Arc::new(queue.clone()),
        events: Arc::new(events.clone()),
        store: Arc::new(store.clone()),
    };

    // A worker in the test: r0 hits the usage limit, every other run passes. It records the
    // virtual time at which each job was delivered.
    let admitted: Arc<Mutex<Vec<(u32, Instant)>>> = Arc::default();
    let worker_admitted = Arc::clone(&admitted);
    let worker = tokio::spawn(async move {
        while let Ok(Some(delivery)) = queue.pull(&Tier::ALL).await {
            let job = delivery.job.clone();
            let index = job.repeat_index.expect("a repeat batch");
            worker_admitted
                .lock()
                .expect("not poisoned")
                .push((index, Instant::now()));
            let result = if index == 0 {
                json!({
                    "scenario": job.scenario_name,
                    "result": "error",
                    "resultErrorKind": "usage_limit",
                    "cost": { "usd": 0.1 },
                    "assertions": [],
                    "verdict": { "pass": false, "signals": [
                        { "code": "usage_limit", "severity": "fail", "message": "the agent hit a usage limit" }
                    ] },
                })
            } else {
                json!({
                    "scenario": job.scenario_name,
                    "result": "success",
                    "cost": { "usd": 0.1 },
                    "assertions": [ { "assertion": { "result": "success" }, "pass": true } ],
                    "verdict": { "pass": true, "signals": [] },
                })
            };
            let view = RunView::from_result(&result).expect("a readable result");
            let key = format!(
                "batches/{}/jobs/{}/result.json",
                job.batch_id,
                job.job_id.local_part()
            );
            let stored = store
                .put(&key, serde_json::to_vec(&result).expect("json"))
                .await
                .expect("storing the result");
            events
                .publish(&JobEvent {
                    protocol: cowork_schema::job::PROTOCOL_VERSION,
                    batch_id: job.batch_id.clone(),
                    job_id: job.job_id.clone(),
                    attempt: delivery.attempt,
                    generation: 0,
                    worker_id: "w".into(),
                    event: JobEventKind::Finished {
                        outcome: JobOutcome::Completed { run: view },
                        artifacts: vec![stored],
                        harness_version: Some("9.9.9".into()),
                        exit_code: Some(i32::from(index == 0)),
                        run_ms: 1,
                        unstored_outcome: None,
                        from_record_of_attempt: None,
                    },
                })
                .await
                .expect("publishing finished");
            delivery.acker.ack().await.expect("ack");
        }
    });

    let options = SuperviseOptions {
        usage_pause: PAUSE,
        usage_pause_max: PAUSE * 8,
        // One job at a time, so each admission follows the previous result.
        ..SuperviseOptions::new(1, "run")
    };
    let (progress_tx, _progress_rx) = watch::channel(ProgressSnapshot::default());
    let end = supervise(
        &ports,
        &plan,
        &options,
        &progress_tx,
        SuperviseSignals::default(),
    )
    .await
    .expect("the batch is supervised to its end");
    worker.abort();
    let SuperviseEnd::Decided(outcome) = end else {
        panic!("the batch was decided");
    };

    let admitted = admitted.lock().expect("not poisoned").clone();
    let indices: Vec<u32> = admitted.iter().map(|(index, _)| *index).collect();
    assert_eq!(indices, vec![0, 1, 2, 3], "admission stays in index order");
    let gap = |a: usize, b: usize| admitted[b].1 - admitted[a].1;
    assert!(
        gap(0, 1) >= PAUSE,
        "r1 was admitted {:?} after r0 hit the usage limit; the pause is {PAUSE:?}",
        gap(0, 1)
    );
    assert!(
        gap(1, 2) < PAUSE,
        "the pause ended: r2 followed r1 without waiting ({:?})",
        gap(1, 2)
    );

    // The usage-limited run is a completed failing sample (the CLI's count), not a retry.
    let rollup: serde_json::Value =
        serde_json::from_slice(&outcome.rollup_json).expect("rollup json");
    let text = rollup.to_string();
    assert!(
        text.contains("\"completed\":4") && text.contains("\"passes\":3"),
        "4 completed runs, 3 passing: {text}"
    );
    let fleet = &outcome.fleet;
    assert_eq!(fleet.usage_limit_pauses.count, 1, "{fleet:?}");
    assert_eq!(
        fleet.usage_limit_pauses.by_tier[Tier::Container.as_str()],
        1,
        "{fleet:?}"
    );
    assert_eq!(fleet.jobs.retries, 0, "{fleet:?}");
    assert_eq!(outcome.progress.pauses, 1);

    // The envelope, assembled result by result into the store, is the one line
    // `Envelope::to_line` gives for the same values; `--output-format json` prints it as stored.
    let stored = ports
        .store
        .get(&outcome.envelope_key)
        .await
        .expect("the stored envelope");
    let envelope: cowork_schema::envelope::Envelope =
        serde_json::from_slice(&stored).expect("a valid envelope");
    assert_eq!(envelope.results.len(), 4);
    assert_eq!(
        serde_json::to_value(&outcome.fleet).expect("json"),
        serde_json::to_value(&envelope.fleet).expect("json")
    );
    assert_eq!(format!("{}\n", envelope.to_line()).into_bytes(), stored);
    let mut printed = Vec::new();
    outcome
        .copy_envelope_to(&mut printed)
        .expect("copying the envelope");
    assert_eq!(printed, stored);
}
