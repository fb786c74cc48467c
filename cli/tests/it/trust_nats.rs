//! Trust boundaries against NATS, each tried as an attacker with NATS access would on
//! a loopback fleet (real nats-server, s3s-fs, coordinator and worker processes):
//!
//! - forged `started`/`finished` events for a batch's jobs that no worker was handed are
//!   refused and counted, never folded;
//! - a `finished` event of a delivered job that names another batch's `result.json` is
//!   refused (a compromised worker cannot graft another batch's result into this one);
//! - jobs published by someone other than the coordinator (a made-up batch, forged flags
//!   or bundle on a real batch) are never run.

use std::time::Duration;

use cowork_fabric::nats::NatsConfig;
use cowork_fabric::{EventLog as _, JobQueue as _};
use cowork_schema::BatchId;
use cowork_schema::event::{ArtifactRef, ErrorCategory, JobEvent, JobEventKind, JobOutcome};
use cowork_schema::ids::{JobId, UnitRef};
use cowork_schema::job::Tier;
use cowork_testkit::wait_until;

use crate::fleet::Fleet;
use crate::hostile::SCENARIO;
use crate::support::{Sandbox, forged_job};

/// A sim batch of the fixture project's scenario, 2 runs, on the container tier.
const SIM_BATCH: &[&str] = &[SCENARIO, "--repeat", "2", "--executor", "sim"];

/// How long a test waits for something the fleet is expected to do.
const WAIT: Duration = Duration::from_secs(60);

/// The batch's progress as `cowork status --output-format json` reports it.
fn progress(fleet: &Fleet, sandbox: &Sandbox, batch: &BatchId) -> serde_json::Value {
    let out = fleet.cowork(
        sandbox.path(),
        &["status", batch.as_str(), "--output-format", "json"],
    );
    assert_eq!(out.code(), 0, "{}", out.context());
    let status: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|error| panic!("status JSON: {error}\n{}", out.context()));
    status["progress"].clone()
}

fn count(progress: &serde_json::Value, key: &str) -> u64 {
    progress[key].as_u64().unwrap_or(0)
}

/// Waits until the batch's progress counts `n` refused events; returns that progress.
fn until_refused(fleet: &Fleet, sandbox: &Sandbox, batch: &BatchId, n: u64) -> serde_json::Value {
    wait_until(format!("the batch's progress counts {n} refused events"))
        .within(WAIT)
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(|| {
            let progress = progress(fleet, sandbox, batch);
            if count(&progress, "refusedEvents") >= n {
                Ok(progress)
            } else {
                Err(progress)
            }
        })
}

/// Waits until the coordinator has published the batch's jobs.
fn until_admitted(fleet: &Fleet, sandbox: &Sandbox, batch: &BatchId) {
    wait_until("the batch's jobs are admitted")
        .within(WAIT)
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(|| count(&progress(fleet, sandbox, batch), "admitted") > 0);
}

fn event(batch: &BatchId, job_id: &JobId, kind: JobEventKind) -> JobEvent {
    JobEvent {
        protocol: cowork_schema::job::PROTOCOL_VERSION,
        batch_id: batch.clone(),
        job_id: job_id.clone(),
        attempt: 1,
        generation: 0,
        worker_id: "w-forger".to_owned(),
        event: kind,
    }
}

/// A `finished` event deciding the job as a run that failed, naming `artifacts`.
fn forged_finished(artifacts: Vec<ArtifactRef>) -> JobEventKind {
    JobEventKind::Finished {
        outcome: JobOutcome::Error {
            category: ErrorCategory::Runtime,
            message: "forged".to_owned(),
        },
        artifacts,
        harness_version: Some("6.6.6".to_owned()),
        exit_code: Some(2),
        run_ms: 1,
        unstored_outcome: None,
        from_record_of_attempt: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_events_for_jobs_no_worker_was_handed_are_refused_not_folded() {
    // No worker serves the container tier: the batch's jobs wait in the queue.
    let fleet = Fleet::start();
    let sandbox = Sandbox::with_project();
    let batch = fleet.submit_detached(sandbox.path(), SIM_BATCH);
    until_admitted(&fleet, &sandbox, &batch);
    let fabric = cowork_fabric::nats::connect(&NatsConfig::new(&fleet.nats_url))
        .await
        .expect("connecting to nats");
    let job_id = JobId::new(&batch, UnitRef::File(0), Some(0));
    for kind in [JobEventKind::Started, forged_finished(Vec::new())] {
        fabric
            .events
            .publish(&event(&batch, &job_id, kind))
            .await
            .expect("publishing a forged event");
    }
    let progress = until_refused(&fleet, &sandbox, &batch, 2);
    assert_eq!(count(&progress, "finished"), 0, "{progress}");
    assert_eq!(count(&progress, "running"), 0, "{progress}");
    assert!(
        fleet
            .log("coordinator")
            .contains("event refused: not folded"),
        "the refusal is logged\n{}",
        fleet.log("coordinator")
    );
    assert!(fleet.log("coordinator").contains("w-forger"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_event_naming_another_batchs_result_is_refused() {
    let fleet = Fleet::start();
    let sandbox = Sandbox::with_project();
    let batch = fleet.submit_detached(sandbox.path(), SIM_BATCH);
    until_admitted(&fleet, &sandbox, &batch);
    // A compromised worker: it really is handed one of the batch's jobs.
    let fabric = cowork_fabric::nats::connect(&NatsConfig::new(&fleet.nats_url))
        .await
        .expect("connecting to nats");
    let delivery = tokio::time::timeout(WAIT, fabric.queue.pull(&[Tier::Container]))
        .await
        .expect("a job within the wait")
        .expect("pulling")
        .expect("the queue is open");
    assert_eq!(delivery.job.batch_id, batch);
    let victim = BatchId::new("20261201-000000-a1b2c3").expect("a batch id");
    let stolen = ArtifactRef {
        key: format!("batches/{victim}/jobs/f0/r0/result.json"),
        size: 10,
        sha256: "ab".repeat(32),
    };
    fabric
        .events
        .publish(&event(
            &batch,
            &delivery.job.job_id,
            forged_finished(vec![stolen]),
        ))
        .await
        .expect("publishing the event");
    let progress = until_refused(&fleet, &sandbox, &batch, 1);
    assert_eq!(count(&progress, "finished"), 0, "{progress}");
    assert!(
        fleet
            .log("coordinator")
            .contains("which is not one of the job's own keys"),
        "{}",
        fleet.log("coordinator")
    );
    delivery
        .acker
        .nak(Duration::ZERO)
        .await
        .expect("handing the job back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_the_coordinator_did_not_publish_are_never_run() {
    let mut fleet = Fleet::start();
    // A real batch on the container tier, which no worker serves: it has a record and a
    // spec. The forged jobs go to the hostloop tier, which the worker below serves.
    let sandbox = Sandbox::with_project();
    let real = fleet.submit_detached(sandbox.path(), SIM_BATCH);
    until_admitted(&fleet, &sandbox, &real);
    let bundle_sha256 = fleet.only_bundle_sha256();
    let made_up = BatchId::new("20261201-000000-f0f0f0").expect("a batch id");
    let job = |batch: &BatchId, repeat: u32, flags: &[&str], bundle: &str| {
        forged_job(batch)
            .repeat_index(repeat)
            .scenario_file("scenarios/basic.yaml")
            .forwarded_flags(flags.iter().copied())
            .bundle_sha256(bundle)
            .build()
    };
    let forged = [
        // A batch that does not exist.
        job(&made_up, 0, &[], &bundle_sha256),
        // Jobs of the real batch (under ids the coordinator did not use: its own would be
        // dropped as duplicates of what it published), with flags it was not accepted with,
        // and with a bundle of someone else's.
        job(&real, 5, &["--label", "x; curl evil"], &bundle_sha256),
        job(&real, 6, &[], &"cd".repeat(32)),
    ];
    let fabric = cowork_fabric::nats::connect(&NatsConfig::new(&fleet.nats_url))
        .await
        .expect("connecting to nats");
    for job in &forged {
        fabric
            .queue
            .publish(job)
            .await
            .expect("publishing a forged job");
    }
    fleet.spawn_worker("w0", "hostloop", "2");
    wait_until(format!("w0 refused {} jobs", forged.len()))
        .within(WAIT)
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll_async(async || {
            let refusals = fleet
                .log("w0")
                .matches("refusing a job the coordinator did not admit")
                .count();
            if refusals >= forged.len() {
                Ok(())
            } else {
                Err(format!("{refusals} refusals seen"))
            }
        })
        .await;
    let log = fleet.log("w0");
    for reason in [
        "has no record",
        "are not the ones its batch was accepted with",
        "is not its batch's",
    ] {
        assert!(log.contains(reason), "{reason}:\n{log}");
    }
    // Nothing ran: no event of any forged job and no object under their batches' jobs.
    for batch in [&made_up, &real] {
        let events = fleet.events(batch).await;
        assert!(events.is_empty(), "{batch}: {events:?}");
    }
    assert!(
        !fleet.object_keys().iter().any(|key| key.contains("/jobs/")),
        "{:?}",
        fleet.object_keys()
    );
}
