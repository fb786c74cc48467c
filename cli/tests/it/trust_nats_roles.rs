//! Least privilege on NATS. A real nats-server runs with the per-role users of
//! `docs/nats/cowork-users.conf` (coordinator, worker, observer), and each test connects or
//! starts processes with one role's user and password:
//!
//! - a worker's credentials report events, read batch records, beat, pull and ack, but cannot
//!   publish a job, write or delete a batch record, or delete or purge a stream, and the
//!   server names each refusal;
//! - a fleet whose coordinator and worker each hold only their own role's credentials runs a
//!   batch to its end and withdraws a cancelled one's queued jobs, and the server refuses
//!   nothing it asks;
//! - a worker started before any coordinator creates nothing and says to start the
//!   coordinator first.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use cowork_fabric::nats::{NatsConfig, NatsFabric, Secret};
use cowork_fabric::s3::{S3ArtifactStore, S3Config};
use cowork_fabric::{BatchRegistry as _, EventLog as _, JobQueue as _, WorkerRegistry as _};
use cowork_schema::BatchId;
use cowork_schema::event::{JobEvent, JobEventKind};
use cowork_schema::job::{JobSpec, Tier};
use cowork_schema::registry::{BatchRecord, BatchState, WorkerInfo};
use cowork_testkit::{NatsOptions, NatsServer, S3Server};

use crate::fleet::{BUCKET, Fleet, batch_of};
use crate::hostile::SCENARIO;
use crate::support::{Output, Sandbox, forged_job, workspace_root};

/// A plain sim batch of the fixture project's scenario.
const SIM_BATCH: &[&str] = &[SCENARIO, "--repeat", "3", "--executor", "sim"];

/// One user of `docs/nats/cowork-users.conf`: its name, the variable the file reads its
/// password from, and the password the test gives the server.
struct Role {
    user: &'static str,
    password_variable: &'static str,
    password: &'static str,
}

const COORDINATOR: Role = Role {
    user: "coordinator",
    password_variable: "COWORK_NATS_COORDINATOR_PASSWORD",
    password: "roles-coordinator-pw-3f81",
};
const WORKER: Role = Role {
    user: "worker",
    password_variable: "COWORK_NATS_WORKER_PASSWORD",
    password: "roles-worker-pw-9c02",
};
const OBSERVER: Role = Role {
    user: "observer",
    password_variable: "COWORK_NATS_OBSERVER_PASSWORD",
    password: "roles-observer-pw-51de",
};

/// The shipped users file.
fn users_file() -> PathBuf {
    workspace_root().join("docs/nats/cowork-users.conf")
}

/// A JetStream server that authenticates with the shipped users file, as an operator runs it:
/// the file itself (`-c`), the passwords from the environment.
fn roles_server() -> NatsServer {
    let config = users_file();
    assert!(
        config.is_file(),
        "{} is missing: the per-role NATS users are shipped there",
        config.display()
    );
    NatsServer::start_with(NatsOptions {
        extra_args: vec!["-c".to_owned(), config.display().to_string()],
        env: [COORDINATOR, WORKER, OBSERVER]
            .iter()
            .map(|role| (role.password_variable.to_owned(), role.password.to_owned()))
            .collect(),
        ..NatsOptions::default()
    })
}

/// The fabric config of `role` on `url`.
fn role_config(url: &str, role: &Role) -> NatsConfig {
    let mut config = NatsConfig::new(url);
    config.user = Some(role.user.to_owned());
    config.password = Some(Secret::new(role.password));
    config
}

/// Connects as `role` the way `cowork coordinator` and `cowork worker` do (the set-up
/// included), or panics with the server's log.
async fn connect_as(nats: &NatsServer, role: &Role) -> NatsFabric {
    match cowork_fabric::nats::connect(&role_config(&nats.url(), role)).await {
        Ok(fabric) => fabric,
        Err(error) => panic!(
            "connecting as {}: {}\nserver log:\n{}",
            role.user,
            cowork_fabric::error_chain(&error),
            server_log(nats)
        ),
    }
}

fn server_log(nats: &NatsServer) -> String {
    std::fs::read_to_string(nats.log_path()).unwrap_or_default()
}

/// The server's log lines that report a permissions violation.
fn violations(nats: &NatsServer) -> Vec<String> {
    server_log(nats)
        .lines()
        .filter(|line| line.contains("Violation"))
        .map(str::to_owned)
        .collect()
}

/// The jobs in the jobs stream. Its state is updated before a publish is acknowledged and
/// when an ack is confirmed; a consumer's pending count can lag behind both.
async fn queued_jobs(fabric: &NatsFabric) -> u64 {
    crate::support::job_messages(fabric, "COWORK_JOBS").await
}

fn record(batch: &BatchId) -> BatchRecord {
    serde_json::from_value(serde_json::json!({
        "batchId": batch.as_str(),
        "state": "planned",
        "specSha256": "00",
        "nJobs": 1,
        "createdAtMs": 1,
        "updatedAtMs": 1,
    }))
    .expect("a batch record")
}

fn job(batch: &BatchId) -> JobSpec {
    forged_job(batch)
        .tier(Tier::Container)
        .repeat_index(0)
        .scenario_file("scenarios/report.yaml")
        .bundle_sha256("00")
        .build()
}

fn started(batch: &BatchId, worker_id: &str) -> JobEvent {
    serde_json::from_value(serde_json::json!({
        "protocol": cowork_schema::job::PROTOCOL_VERSION,
        "batchId": batch.as_str(),
        "jobId": format!("{batch}/f0/r0"),
        "attempt": 1,
        "workerId": worker_id,
        "event": {"type": "started"},
    }))
    .expect("a started event")
}

fn heartbeat(worker_id: &str) -> WorkerInfo {
    serde_json::from_value(serde_json::json!({
        "protocol": cowork_schema::job::PROTOCOL_VERSION,
        "workerId": worker_id,
        "tiers": ["container"],
        "slots": 1,
        "busy": 0,
        "executor": "sim",
        "os": "linux",
        "arch": "x86_64",
        "hostname": "roles-host",
        "jobsFinished": 0,
        "startedAtMs": 1,
        "heartbeatAtMs": 1,
        "heartbeatEveryMs": 10_000,
    }))
    .expect("a worker heartbeat")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_s_credentials_cannot_publish_a_job_or_write_the_batch_registry() {
    let nats = roles_server();
    // The coordinator's user sets the fabric up, as `cowork coordinator` does at start, and
    // stores a batch record.
    let coordinator = connect_as(&nats, &COORDINATOR).await;
    let batch = BatchId::new("20260101-000000-roles1").expect("a batch id");
    let revision = coordinator
        .batches
        .create(&record(&batch))
        .await
        .expect("the coordinator creates a batch record");

    // The worker's user goes through a worker's start: the set-up finds everything in place
    // and changes nothing, so it needs no right to change anything.
    let worker = connect_as(&nats, &WORKER).await;

    // What a worker does is allowed: report an event, read a batch record, beat.
    let seq = worker
        .events
        .publish(&started(&batch, "w-roles"))
        .await
        .expect("a worker publishes an event of its job");
    assert!(seq > 0, "the event was stored (sequence {seq})");
    let (read, read_revision) = worker
        .batches
        .get(&batch)
        .await
        .expect("a worker reads a batch record")
        .expect("the batch record is there");
    assert_eq!((read.batch_id, read_revision), (batch.clone(), revision));
    // A worker id may be a host name with dots: several subject tokens.
    worker
        .workers
        .heartbeat(&heartbeat("roles-host.example.com"))
        .await
        .expect("a worker writes its heartbeat");
    // A replay worker sizes its packs from the fleet's heartbeats and the queue's depth.
    let listed = worker
        .workers
        .list()
        .await
        .expect("a worker lists heartbeats");
    assert_eq!(
        listed
            .iter()
            .map(|info| info.worker_id.as_str())
            .collect::<Vec<_>>(),
        ["roles-host.example.com"]
    );
    worker
        .queue
        .pending()
        .await
        .expect("a worker reads the queue's depth");

    // What only the coordinator may do is refused: a job, a new batch record, a change of
    // the existing one (a cancel, say), raw writes into the bucket, and deleting or purging
    // the jobs stream. Each refused request ends when its reply deadline passes, all at once.
    let other_batch = BatchId::new("20260101-000000-roles2").expect("a batch id");
    let mut changed = record(&batch);
    changed.state = BatchState::Done;
    let bucket = worker
        .jetstream
        .get_key_value(&NatsConfig::new(&nats.url()).batches_bucket)
        .await
        .expect("a worker opens the batches bucket to read it");
    let raw_job_subject = format!("cowork.jobs.container.{batch}");
    let raw_job = async {
        match worker
            .jetstream
            .publish(raw_job_subject.clone(), b"{}".to_vec().into())
            .await
        {
            Ok(ack) => ack.await.map(|_| ()).map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        }
    };
    let purge = async {
        match worker.jetstream.get_stream_no_info("COWORK_JOBS").await {
            Ok(stream) => stream
                .purge()
                .await
                .map(|_| ())
                .map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        }
    };
    let (forged_job, other_record) = (job(&batch), record(&other_batch));
    let (published, raw_published, created, updated, put, deleted, purged, stream_deleted) = tokio::join!(
        worker.queue.publish(&forged_job),
        raw_job,
        worker.batches.create(&other_record),
        worker.batches.update(&changed, revision),
        bucket.put(batch.as_str(), b"{}".to_vec().into()),
        bucket.delete(batch.as_str()),
        purge,
        worker.jetstream.delete_stream("COWORK_JOBS"),
    );
    assert!(
        published.is_err(),
        "a worker published a job: {published:?}"
    );
    assert!(
        raw_published.is_err(),
        "a worker published on {raw_job_subject}: {raw_published:?}"
    );
    assert!(created.is_err(), "a worker created a batch record");
    assert!(updated.is_err(), "a worker changed a batch record");
    assert!(put.is_err(), "a worker put into the batches bucket");
    assert!(deleted.is_err(), "a worker deleted a batch record");
    assert!(purged.is_err(), "a worker purged the jobs stream");
    assert!(stream_deleted.is_err(), "a worker deleted the jobs stream");

    // The server says why, naming the worker and each subject. A flush is answered after
    // every earlier message of the connection was handled, so every refusal is logged.
    worker
        .client
        .flush()
        .await
        .expect("flushing the worker's connection");
    let refused = violations(&nats);
    for subject in [
        raw_job_subject.clone(),
        format!("$KV.COWORK_BATCHES.{batch}"),
        format!("$KV.COWORK_BATCHES.{other_batch}"),
        "$JS.API.STREAM.PURGE.COWORK_JOBS".to_owned(),
        "$JS.API.STREAM.DELETE.COWORK_JOBS".to_owned(),
    ] {
        assert!(
            refused
                .iter()
                .any(|line| line.contains("user:worker\"") && line.contains(&subject)),
            "no refusal of {subject} for the worker in the server's log:\n{}",
            refused.join("\n")
        );
    }

    // Nothing changed: no job is queued, the stream is there, the record is as created and
    // the other batch has none.
    assert_eq!(queued_jobs(&coordinator).await, 0, "a job was queued");
    let (kept, kept_revision) = coordinator
        .batches
        .get(&batch)
        .await
        .expect("reading the batch record")
        .expect("the batch record is still there");
    assert_eq!(
        (kept.state, kept_revision),
        (BatchState::Planned, revision),
        "the worker changed the record"
    );
    assert!(
        coordinator
            .batches
            .get(&other_batch)
            .await
            .expect("reading the other record")
            .is_none(),
        "the worker created a batch record"
    );

    // The refusal is the role's, not the subject's: the coordinator's user queues the job.
    coordinator
        .queue
        .publish(&job(&batch))
        .await
        .expect("the coordinator publishes a job");
    assert_eq!(queued_jobs(&coordinator).await, 1, "the coordinator's job");
    // And the worker's user pulls it from the tier's consumer and acks it. The job is queued,
    // so the pull answers at once; the bound only keeps a broken permission from hanging.
    let delivery = tokio::time::timeout(
        Duration::from_secs(30),
        worker.queue.pull(&[Tier::Container]),
    )
    .await
    .unwrap_or_else(|_| panic!("no job pulled within 30 s\n{}", server_log(&nats)))
    .expect("a worker pulls a job")
    .expect("the queued job");
    assert_eq!(delivery.job.job_id, forged_job.job_id);
    // The ack is confirmed by the server, and an acked message leaves the work queue.
    delivery.acker.ack().await.expect("a worker acks its job");
    assert_eq!(
        queued_jobs(&coordinator).await,
        0,
        "the acked job is still in the queue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_runs_a_batch_with_per_role_credentials() {
    let nats = roles_server();
    let url = nats.url();
    let coordinator_env = [
        ("COWORK_NATS_USER", COORDINATOR.user),
        ("COWORK_NATS_PASSWORD", COORDINATOR.password),
    ];
    let mut fleet = Fleet::with_servers(nats, S3Server::start(), &coordinator_env);
    let worker_args = Fleet::worker_args("w0", "container", "2");
    let worker_args: Vec<&str> = worker_args.iter().map(String::as_str).collect();
    fleet.spawn_program_with_env(
        "w0",
        env!("CARGO_BIN_EXE_cowork"),
        &[],
        &worker_args,
        &[
            ("COWORK_NATS_USER", WORKER.user.to_owned()),
            ("COWORK_NATS_PASSWORD", WORKER.password.to_owned()),
        ],
    );

    let sandbox = Sandbox::with_project();
    let out = fleet.submit(sandbox.path(), SIM_BATCH);
    assert!(out.code() <= 1, "{}\n{}", out.context(), fleet.logs());
    let envelope = out.envelope();
    let batch = batch_of(&envelope);
    assert_eq!(
        envelope["results"].as_array().map(Vec::len),
        Some(3),
        "every job decided: {}\n{}",
        envelope["fleet"],
        fleet.logs()
    );

    // Every job ran on the worker that holds only the worker's credentials; the observer's
    // user reads the events.
    let observer = connect_as(&fleet.nats, &OBSERVER).await;
    let last = observer
        .events
        .last_sequence(&batch)
        .await
        .expect("the batch's last event");
    let mut subscription = observer
        .events
        .subscribe(&batch, 1)
        .await
        .expect("the observer reads the events");
    let mut finished_by = Vec::new();
    while let Some(item) = subscription.next().await {
        let (seq, event) = item.expect("an event");
        if matches!(event.event, JobEventKind::Finished { .. }) {
            finished_by.push(event.worker_id);
        }
        if seq >= last {
            break;
        }
    }
    assert_eq!(finished_by, vec!["w0"; 3], "{}", fleet.logs());

    // A cancel withdraws a batch's queued jobs (a purge, the coordinator's alone): with the
    // worker gone, the second batch's jobs wait in the queue until the cancel takes them back.
    fleet.kill("w0");
    let queued = fleet.submit_detached(sandbox.path(), SIM_BATCH);
    let out = fleet.cowork(sandbox.path(), &["cancel", queued.as_str()]);
    assert_eq!(out.code(), 0, "{}\n{}", out.context(), fleet.logs());
    let out = fleet.watch(sandbox.path(), &queued);
    assert_eq!(out.code(), 1, "a cancelled batch\n{}", out.context());
    let status = fleet.cowork(
        sandbox.path(),
        &["status", queued.as_str(), "--output-format", "json"],
    );
    let status: serde_json::Value =
        serde_json::from_str(status.stdout.trim()).unwrap_or(serde_json::Value::Null);
    // What was admitted (all 3, or fewer once the fair share counts the dead worker's slots
    // until its heartbeat is late) is what the cancel withdrew.
    let admitted = status["progress"]["admitted"].as_u64().unwrap_or(0);
    assert!(admitted >= 1, "{status}\n{}", fleet.logs());
    assert_eq!(
        status["progress"]["withdrawn"].as_u64(),
        Some(admitted),
        "{status}\n{}",
        fleet.logs()
    );
    assert_eq!(queued_jobs(&observer).await, 0, "jobs are still queued");

    // The server refused nothing the coordinator, the worker or the observer asked: the roles
    // cover what the fleet does.
    let refused = violations(&fleet.nats);
    assert!(
        refused.is_empty(),
        "the server refused requests of the fleet on {url}:\n{}\n{}",
        refused.join("\n"),
        fleet.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_before_the_coordinator_creates_nothing_and_says_to_start_it_first() {
    let nats = roles_server();
    let s3 = S3Server::start();
    // The bucket exists (an operator made it), so the worker gets as far as NATS.
    let mut s3_config = S3Config::new(BUCKET, &s3.access_key, Secret::new(s3.secret_key.clone()));
    s3_config.endpoint = Some(s3.endpoint());
    s3_config.create_bucket = true;
    S3ArtifactStore::connect(&s3_config)
        .await
        .expect("creating the bucket");

    let dir = tempfile::tempdir().expect("a temp dir");
    let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("COWORK_") {
            command.env_remove(key);
        }
    }
    command
        .args(Fleet::worker_args("w-first", "container", "1"))
        .env("COWORK_NATS_URL", nats.url())
        .env("COWORK_NATS_USER", WORKER.user)
        .env("COWORK_NATS_PASSWORD", WORKER.password)
        .env("COWORK_S3_ENDPOINT", s3.endpoint())
        .env("COWORK_S3_BUCKET", BUCKET)
        .env("COWORK_S3_ACCESS_KEY_ID", &s3.access_key)
        .env("COWORK_S3_SECRET_ACCESS_KEY", &s3.secret_key)
        .env("COWORK_LOG", "warn")
        .current_dir(dir.path());
    let out = Output::new(
        "cowork worker as the worker role before any coordinator".to_owned(),
        dir.path().to_path_buf(),
        command.output().expect("running cowork worker"),
    );
    assert_ne!(out.code(), 0, "{}", out.context());
    out.expect_stderr("start the coordinator first")
        .expect_stderr("docs/nats/cowork-users.conf");
    assert!(
        !out.stderr.contains(WORKER.password),
        "the password is printed: {}",
        out.context()
    );

    // It created nothing: asked by the observer's user, JetStream knows none of the streams.
    let observer = cowork_fabric::nats::connect_client(&role_config(&nats.url(), &OBSERVER))
        .await
        .unwrap_or_else(|error| panic!("connecting as the observer: {error}"));
    for stream in [
        "COWORK_JOBS",
        "COWORK_EVENTS",
        "KV_COWORK_BATCHES",
        "KV_COWORK_WORKERS",
    ] {
        let answer = observer
            .request(format!("$JS.API.STREAM.INFO.{stream}"), "".into())
            .await
            .unwrap_or_else(|error| panic!("asking for stream {stream}: {error}"));
        let info: serde_json::Value =
            serde_json::from_slice(&answer.payload).expect("a JetStream API answer");
        assert_eq!(
            info["error"]["err_code"], STREAM_NOT_FOUND,
            "the worker created stream {stream}: {info}"
        );
    }
}

/// JetStream's error code for a stream that does not exist.
const STREAM_NOT_FOUND: u64 = 10059;
