//! The Kubernetes Job of workers against recorded API exchanges: no API server runs here, so a
//! local HTTP server replays responses recorded in `tests/fixtures/k8s/` (the API's real
//! shapes) and records what the `kube` client sent. Also keeps `worker-job.yaml`, the manifest
//! the chart tests validate offline against the Kubernetes schemas, in step with the code.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use cowork_coordinator::k8s::{
    CreateOutcome, DeleteOutcome, K8sWorkerJobs, KubeWorkerJobs, WorkerJobSettings, WorkerJobs,
    WorkerJobsError, worker_job_manifest,
};
use cowork_schema::BatchId;
use serde::Deserialize;
use tokio_util::sync::{CancellationToken, DropGuard};

const BATCH: &str = "20261130-083349-00abcd";
const JOB_NAME: &str = "cowork-workers-20261130-083349-00abcd";

fn settings() -> WorkerJobSettings {
    WorkerJobSettings {
        namespace: "cowork".to_owned(),
        image: "cowork-worker:1".to_owned(),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        name_prefix: "cowork-workers".to_owned(),
        min_jobs: 100,
        jobs_per_worker: 50,
        max_parallelism: 8,
        config_map: Some("fleet-cowork-fleet".to_owned()),
        env_secrets: vec!["fleet-cowork-fleet-connection".to_owned()],
        tiers: vec!["container".to_owned(), "replay".to_owned()],
        slots: 4,
        idle_exit: Duration::from_secs(120),
        longest_job: Duration::from_secs(1800),
        ttl_after_finished: Duration::from_secs(600),
        backoff_limit: 6,
        service_account: Some("fleet-cowork-fleet".to_owned()),
        docker_socket: None,
        data_dir: "/var/lib/cowork".to_owned(),
    }
}

fn batch_id() -> BatchId {
    BatchId::new(BATCH).expect("a valid batch id literal")
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/k8s")
}

/// One recorded exchange: what the client must send and what the API server answered.
#[derive(Clone, Debug, Deserialize)]
struct Exchange {
    request: ExpectedRequest,
    response: RecordedResponse,
}

#[derive(Clone, Debug, Deserialize)]
struct ExpectedRequest {
    method: String,
    path: String,
}

#[derive(Clone, Debug, Deserialize)]
struct RecordedResponse {
    status: u16,
    body: serde_json::Value,
}

fn exchange(name: &str) -> Exchange {
    let path = fixtures_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("parsing {}: {err}", path.display()))
}

/// A request the replay server received.
#[derive(Clone, Debug)]
struct Received {
    method: Method,
    path: String,
    query: String,
    body: Vec<u8>,
}

impl Received {
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("the client sends a JSON body")
    }
}

#[derive(Default)]
struct ReplayState {
    script: Mutex<VecDeque<Exchange>>,
    received: Mutex<Vec<Received>>,
}

/// A local API server that answers with the scripted exchanges in order.
struct ReplayServer {
    url: String,
    state: Arc<ReplayState>,
    _stop: DropGuard,
}

impl ReplayServer {
    async fn start(script: Vec<Exchange>) -> ReplayServer {
        let state = Arc::new(ReplayState {
            script: Mutex::new(script.into()),
            received: Mutex::new(Vec::new()),
        });
        let router = axum::Router::new()
            .fallback(answer)
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the replay server");
        let addr = listener.local_addr().expect("the replay server's address");
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(stopped.cancelled_owned())
                .await
                .expect("serving the replay server");
        });
        ReplayServer {
            url: format!("http://{addr}"),
            state,
            _stop: stop.drop_guard(),
        }
    }

    fn client(&self) -> kube::Client {
        let url = self.url.parse().expect("a valid url");
        // No auth, no TLS: `Config::new` is a bare cluster URL.
        let mut config = kube::Config::new(url);
        config.default_namespace = "cowork".to_owned();
        kube::Client::try_from(config).expect("a kube client for the replay server")
    }

    fn jobs(&self) -> KubeWorkerJobs {
        KubeWorkerJobs::new(self.client(), "cowork", "cowork-workers")
    }

    fn received(&self) -> Vec<Received> {
        self.state.received.lock().expect("received lock").clone()
    }

    fn unanswered(&self) -> usize {
        self.state.script.lock().expect("script lock").len()
    }
}

async fn answer(
    State(state): State<Arc<ReplayState>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    state
        .received
        .lock()
        .expect("received lock")
        .push(Received {
            method: method.clone(),
            path: uri.path().to_owned(),
            query: uri.query().unwrap_or_default().to_owned(),
            body: body.to_vec(),
        });
    let next = state.script.lock().expect("script lock").pop_front();
    let Some(exchange) = next else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "no recorded exchange left",
        )
            .into_response();
    };
    if exchange.request.method != method.as_str() || exchange.request.path != uri.path() {
        // A request the recording does not hold: answer like a server that has no such route,
        // and let the test's assertions on the received requests say what went wrong.
        return (
            StatusCode::IM_A_TEAPOT,
            "request does not match the recording",
        )
            .into_response();
    }
    let status = StatusCode::from_u16(exchange.response.status).expect("a valid recorded status");
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        exchange.response.body.to_string(),
    )
        .into_response()
}

fn assert_request(received: &Received, method: Method, path: &str) {
    assert_eq!(received.method, method, "method of {received:?}");
    assert_eq!(received.path, path, "path of {received:?}");
}

#[tokio::test]
async fn k8s_create_posts_the_job_manifest() {
    let server = ReplayServer::start(vec![exchange("create-job-201.json")]).await;
    let job = worker_job_manifest(&settings(), &batch_id(), 120);

    let outcome = server
        .jobs()
        .create(&job)
        .await
        .expect("the job is created");

    assert_eq!(outcome, CreateOutcome::Created);
    let received = server.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_request(
        &received[0],
        Method::POST,
        "/apis/batch/v1/namespaces/cowork/jobs",
    );
    assert!(
        received[0]
            .query
            .contains("fieldManager=cowork-coordinator"),
        "query {:?}",
        received[0].query
    );
    let sent = received[0].json();
    assert_eq!(sent, serde_json::to_value(&job).expect("a job serializes"));
    // The wire shape the API server expects, independent of how k8s-openapi spells it.
    assert_eq!(sent["apiVersion"], "batch/v1");
    assert_eq!(sent["kind"], "Job");
    assert_eq!(sent["metadata"]["name"], JOB_NAME);
    assert_eq!(sent["metadata"]["labels"]["cowork.fleet/batch"], BATCH);
    assert_eq!(sent["spec"]["parallelism"], 3);
    assert_eq!(sent["spec"]["ttlSecondsAfterFinished"], 600);
    assert_eq!(
        sent["spec"]["template"]["spec"]["containers"][0]["args"],
        serde_json::json!(["worker", "--exit-when-idle", "120s"])
    );
    assert_eq!(server.unanswered(), 0);
}

#[tokio::test]
async fn k8s_create_of_an_existing_job_is_already_exists() {
    let server = ReplayServer::start(vec![exchange("create-job-409.json")]).await;
    let job = worker_job_manifest(&settings(), &batch_id(), 120);

    let outcome = server
        .jobs()
        .create(&job)
        .await
        .expect("409 AlreadyExists is not an error");

    assert_eq!(outcome, CreateOutcome::AlreadyExists);
    let received = server.received();
    assert_eq!(received.len(), 1, "a 409 is not retried: {received:?}");
    assert_request(
        &received[0],
        Method::POST,
        "/apis/batch/v1/namespaces/cowork/jobs",
    );
}

#[tokio::test]
async fn k8s_create_refused_by_rbac_is_an_error() {
    let server = ReplayServer::start(vec![exchange("create-job-403.json")]).await;
    let job = worker_job_manifest(&settings(), &batch_id(), 120);

    let error = server
        .jobs()
        .create(&job)
        .await
        .expect_err("403 Forbidden is an error");

    let WorkerJobsError::Create {
        name,
        namespace,
        source: kube::Error::Api(status),
    } = error
    else {
        panic!("unexpected error {error:?}");
    };
    assert_eq!((name.as_str(), namespace.as_str()), (JOB_NAME, "cowork"));
    assert!(status.is_forbidden(), "{status:?}");
}

#[tokio::test]
async fn k8s_delete_removes_the_job_and_its_pods() {
    let server = ReplayServer::start(vec![
        exchange("delete-job-200.json"),
        exchange("delete-job-404.json"),
    ])
    .await;
    let jobs = server.jobs();

    let first = jobs.delete(&batch_id()).await.expect("the job is deleted");
    let again = jobs
        .delete(&batch_id())
        .await
        .expect("404 NotFound is not an error");

    assert_eq!(first, DeleteOutcome::Deleted);
    assert_eq!(again, DeleteOutcome::NotFound);
    let received = server.received();
    assert_eq!(received.len(), 2, "{received:?}");
    let path = format!("/apis/batch/v1/namespaces/cowork/jobs/{JOB_NAME}");
    for request in &received {
        assert_request(request, Method::DELETE, &path);
        // Without a propagation policy the API server orphans a Job's pods.
        assert_eq!(request.json()["propagationPolicy"], "Background");
    }
}

#[tokio::test]
async fn k8s_only_large_batches_get_a_job() {
    let server = ReplayServer::start(vec![
        exchange("create-job-201.json"),
        exchange("delete-job-200.json"),
    ])
    .await;
    let feature = K8sWorkerJobs {
        settings: settings(),
        jobs: Arc::new(server.jobs()),
    };

    // Below min_jobs (100): neither a create nor a delete reaches the API.
    feature.batch_accepted(&batch_id(), 99).await;
    feature.batch_ended(&batch_id(), 99).await;
    assert!(server.received().is_empty(), "{:?}", server.received());

    feature.batch_accepted(&batch_id(), 120).await;
    feature.batch_ended(&batch_id(), 120).await;
    let received = server.received();
    assert_eq!(received.len(), 2, "{received:?}");
    assert_request(
        &received[0],
        Method::POST,
        "/apis/batch/v1/namespaces/cowork/jobs",
    );
    assert_eq!(received[0].json()["spec"]["parallelism"], 3);
    assert_request(
        &received[1],
        Method::DELETE,
        &format!("/apis/batch/v1/namespaces/cowork/jobs/{JOB_NAME}"),
    );
    assert_eq!(server.unanswered(), 0);
}

/// The manifests as YAML documents: the emptyDir variant and the node-socket variant.
fn rendered_manifests() -> String {
    let plain = worker_job_manifest(&settings(), &batch_id(), 120);
    let host_socket = worker_job_manifest(
        &WorkerJobSettings {
            docker_socket: Some("/var/run/docker.sock".to_owned()),
            ..settings()
        },
        &BatchId::new(&format!("{BATCH}-{}", "x".repeat(41))).expect("a 64-character batch id"),
        10_000,
    );
    let mut text = String::from(
        "# Generated by `cargo test -p cowork-coordinator k8s` (tests/it/k8s.rs); validated by\n\
         # charts/tests/test_chart.py against the Kubernetes schemas. Do not edit by hand.\n",
    );
    for job in [plain, host_socket] {
        text.push_str("---\n");
        text.push_str(&serde_saphyr::to_string(&job).expect("a job serializes to YAML"));
    }
    text
}

#[test]
fn k8s_worker_job_yaml_fixture_is_current() {
    let path = fixtures_dir().join("worker-job.yaml");
    let rendered = rendered_manifests();
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    if stored != rendered {
        // Regenerate, then fail once so the change is seen and committed.
        std::fs::write(&path, &rendered)
            .unwrap_or_else(|err| panic!("writing {}: {err}", path.display()));
        panic!(
            "{} was out of date and has been rewritten; run the test again",
            path.display()
        );
    }
}

/// A [`WorkerJobs`] that reports each call on a channel, for the coordinator's wiring.
struct ReportingJobs {
    calls: tokio::sync::mpsc::UnboundedSender<String>,
}

#[async_trait::async_trait]
impl WorkerJobs for ReportingJobs {
    async fn create(
        &self,
        job: &k8s_openapi::api::batch::v1::Job,
    ) -> Result<CreateOutcome, WorkerJobsError> {
        let parallelism = job.spec.as_ref().and_then(|spec| spec.parallelism);
        let name = job.metadata.name.clone().unwrap_or_default();
        let _ = self
            .calls
            .send(format!("create {name} parallelism={parallelism:?}"));
        Ok(CreateOutcome::Created)
    }

    async fn delete(&self, batch_id: &BatchId) -> Result<DeleteOutcome, WorkerJobsError> {
        let _ = self.calls.send(format!("delete {batch_id}"));
        Ok(DeleteOutcome::Deleted)
    }
}

#[tokio::test]
async fn k8s_coordinator_creates_a_job_for_a_large_batch_and_deletes_it_at_the_end() {
    use crate::support::{
        FakeWorker, Fleet, Server, packed, project, repeat, watch_to_end, worker_info,
    };
    use cowork_fabric::WorkerRegistry;
    use cowork_schema::registry::BatchState;

    let fleet = Fleet::new();
    fleet
        .workers
        .heartbeat(&worker_info())
        .await
        .expect("heartbeat");
    let _worker = FakeWorker::eager(&fleet, Arc::new(|_: &cowork_schema::job::JobSpec| true));
    let (calls_tx, mut calls) = tokio::sync::mpsc::unbounded_channel();
    let mut config = fleet.config("c1", 8);
    config.k8s_worker_jobs = Some(K8sWorkerJobs {
        settings: WorkerJobSettings {
            min_jobs: 3,
            jobs_per_worker: 2,
            ..settings()
        },
        jobs: Arc::new(ReportingJobs { calls: calls_tx }),
    });
    let server = Server::start(config, fleet.ports()).await;
    let client = server.client();
    let dir = project();

    // Below min_jobs: runs without a Job of workers.
    let small = packed(dir.path(), repeat(2));
    let small = client
        .submit(&small.spec, small.bundle.clone())
        .await
        .expect("the small batch is accepted");
    let (_, end) = watch_to_end(&client, &small.batch_id).await;
    assert_eq!(end.state, BatchState::Done, "{end:?}");

    let large = packed(dir.path(), repeat(3));
    let large = client
        .submit(&large.spec, large.bundle.clone())
        .await
        .expect("the large batch is accepted");
    let (_, end) = watch_to_end(&client, &large.batch_id).await;
    assert_eq!(end.state, BatchState::Done, "{end:?}");
    // Stopping drains the coordinator's tasks, so every call it makes has been reported.
    server.stop().await;

    let mut reported = Vec::new();
    while let Ok(call) = calls.try_recv() {
        reported.push(call);
    }
    assert_eq!(
        reported,
        vec![
            format!(
                "create cowork-workers-{} parallelism=Some(2)",
                large.batch_id
            ),
            format!("delete {}", large.batch_id),
        ]
    );
}
