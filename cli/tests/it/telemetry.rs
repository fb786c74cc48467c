//! OTLP export (decisions.md#operations): an embedded `cowork run` of the demo with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at an OTLP/gRPC trace receiver started in this test.
//! Each job is one trace: its admission span is a root, the worker's job span is its child and
//! pull → run → upload are children of the job span. On the fleet the same trace crosses from
//! `cowork-coordinator` to `cowork-worker` through the job message. The worker's
//! `--metrics-listen` endpoint is scraped after a batch.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cowork_testkit::{free_port, wait_until};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;

use crate::fleet::Fleet;
use crate::support::{Output, Sandbox, workspace_root};

/// The demo with two runs per cell: 2 models × 2 skill versions × 2 = 8 jobs.
const DEMO_EIGHT_JOBS: &[&str] = &[
    "run",
    "examples/demo/scenarios/csv-report.yaml",
    "--repeat",
    "2",
    "--matrix",
    "examples/demo/matrix.yaml",
    "--executor",
    "sim",
    "--output-format",
    "json",
];
const DEMO_JOBS: usize = 8;

/// Keeps every export request it receives.
#[derive(Default, Clone)]
struct Receiver {
    requests: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.requests
            .lock()
            .expect("the receiver lock is never poisoned")
            .push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// Serves `receiver` on a fresh loopback port of `runtime` and returns the port's address.
fn start_receiver(runtime: &tokio::runtime::Runtime, receiver: Receiver) -> SocketAddr {
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("binding the OTLP receiver");
    let address = listener.local_addr().expect("the receiver's address");
    // Accepting from the bound listener (rather than re-binding a free port) leaves no window
    // for another process to take the port.
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    });
    runtime.spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver))
            .serve_with_incoming(incoming),
    );
    address
}

/// One received span with the service that sent it.
struct Received {
    service: String,
    span: Span,
}

impl Received {
    fn attribute(&self, key: &str) -> Option<String> {
        string_attribute(&self.span.attributes, key)
    }

    fn expect_attribute(&self, key: &str) -> String {
        self.attribute(key)
            .unwrap_or_else(|| panic!("span {:?} has no {key} attribute", self.span.name))
    }
}

fn string_attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .and_then(|attribute| match &attribute.value {
            Some(AnyValue {
                value: Some(any_value::Value::StringValue(text)),
            }) => Some(text.clone()),
            _ => None,
        })
}

fn spans_of(requests: &[ExportTraceServiceRequest]) -> Vec<Received> {
    let mut spans = Vec::new();
    for request in requests {
        for resource_spans in &request.resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|resource| string_attribute(&resource.attributes, "service.name"))
                .unwrap_or_default();
            for scope_spans in &resource_spans.scope_spans {
                for span in &scope_spans.spans {
                    spans.push(Received {
                        service: service.clone(),
                        span: span.clone(),
                    });
                }
            }
        }
    }
    spans
}

/// The demo's verdict fails one cell (exit 1), which is beside the point here: every job ran.
fn expect_every_job_finished(output: &Output) {
    let envelope = output.envelope();
    if envelope["fleet"]["jobs"]["finished"] != DEMO_JOBS {
        output.fail(&format!("expected {DEMO_JOBS} finished jobs"));
    }
}

#[test]
fn every_job_of_an_embedded_run_is_one_trace_from_admission_to_upload() {
    let runtime = tokio::runtime::Runtime::new().expect("starting the receiver's runtime");
    let receiver = Receiver::default();
    let address = start_receiver(&runtime, receiver.clone());

    let sandbox = Sandbox::empty();
    let cwd = workspace_root();
    let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
    command
        .current_dir(&cwd)
        .args(DEMO_EIGHT_JOBS)
        .arg("--store")
        .arg(sandbox.store());
    // The test's own OpenTelemetry and cowork settings must not leak in.
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if name_text.starts_with("COWORK_") || name_text.starts_with("OTEL_") {
            command.env_remove(&name);
        }
    }
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{address}"));
    let output = Output::new(
        format!("OTEL_EXPORTER_OTLP_ENDPOINT=http://{address} cowork {DEMO_EIGHT_JOBS:?}"),
        cwd.clone(),
        command.output().expect("spawning cowork"),
    );
    expect_every_job_finished(&output);

    // `cowork` flushes its exporter before it exits, so every span has arrived by now.
    let requests = receiver
        .requests
        .lock()
        .expect("the receiver lock is never poisoned")
        .clone();
    let spans = spans_of(&requests);
    if spans.is_empty() {
        output.fail("no span reached the OTLP receiver");
    }
    for received in &spans {
        assert_eq!(received.service, "cowork", "service.name of `cowork run`");
    }

    let admissions: BTreeMap<String, &Received> = spans
        .iter()
        .filter(|received| received.span.name == "admit")
        .map(|received| (received.expect_attribute("job_id"), received))
        .collect();
    assert_eq!(admissions.len(), DEMO_JOBS, "one admission span per job");
    let admission_traces: BTreeSet<&[u8]> = admissions
        .values()
        .map(|admission| admission.span.trace_id.as_slice())
        .collect();
    assert_eq!(
        admission_traces.len(),
        DEMO_JOBS,
        "each job has its own trace"
    );

    let job_spans: Vec<&Received> = spans
        .iter()
        .filter(|received| received.span.name == "job")
        .collect();
    assert_eq!(job_spans.len(), DEMO_JOBS, "one worker job span per job");
    for job_span in job_spans {
        let job_id = job_span.expect_attribute("job_id");
        let batch_id = job_span.expect_attribute("batch_id");
        let admission = admissions
            .get(&job_id)
            .unwrap_or_else(|| panic!("job {job_id} has a worker span but no admission span"));
        assert_eq!(admission.expect_attribute("batch_id"), batch_id);
        assert!(
            admission.span.parent_span_id.is_empty(),
            "the admission span of {job_id} starts its trace"
        );
        assert_eq!(
            job_span.span.trace_id, admission.span.trace_id,
            "job {job_id}: the worker span shares the admission span's trace"
        );
        assert_eq!(
            job_span.span.parent_span_id, admission.span.span_id,
            "job {job_id}: the worker span is a child of the admission span"
        );
        let steps: BTreeSet<&str> = spans
            .iter()
            .filter(|received| {
                received.span.trace_id == job_span.span.trace_id
                    && received.span.parent_span_id == job_span.span.span_id
            })
            .map(|received| received.span.name.as_str())
            .collect();
        assert_eq!(
            steps,
            BTreeSet::from(["pull", "run", "upload"]),
            "job {job_id}: the steps under the worker span"
        );
        // The trace ends where the coordinator folds the job's outcome.
        let folds = spans
            .iter()
            .filter(|received| {
                received.span.name == "fold"
                    && received.span.trace_id == admission.span.trace_id
                    && received.span.parent_span_id == admission.span.span_id
            })
            .count();
        assert_eq!(folds, 1, "job {job_id}: one fold span under its admission");
    }
}

#[test]
fn without_an_endpoint_a_run_runs_as_before() {
    // The same run without the variable: nothing listens, and nothing must try to.
    let sandbox = Sandbox::empty();
    let cwd = workspace_root();
    let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
    command
        .current_dir(&cwd)
        .args(DEMO_EIGHT_JOBS)
        .arg("--store")
        .arg(sandbox.store());
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if name_text.starts_with("COWORK_") || name_text.starts_with("OTEL_") {
            command.env_remove(&name);
        }
    }
    let output = Output::new(
        format!("cowork {DEMO_EIGHT_JOBS:?}"),
        cwd,
        command.output().expect("spawning cowork"),
    );
    expect_every_job_finished(&output);
    if output.stderr.contains("OTLP") {
        output.fail("OTLP mentioned on stderr without OTEL_EXPORTER_OTLP_ENDPOINT");
    }
}

/// The demo on the fleet: 4 cells × 2 runs.
const FLEET_DEMO: &[&str] = &[
    "examples/demo/scenarios/csv-report.yaml",
    "--repeat",
    "2",
    "--matrix",
    "examples/demo/matrix.yaml",
    "--executor",
    "sim",
];

#[test]
fn on_the_fleet_a_job_trace_spans_the_coordinator_and_the_worker() {
    let runtime = tokio::runtime::Runtime::new().expect("starting the receiver's runtime");
    let receiver = Receiver::default();
    let address = start_receiver(&runtime, receiver.clone());
    let endpoint = format!("http://{address}");
    let mut fleet = Fleet::start_with_env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]);
    fleet.spawn_worker("wt", "container", "2");
    let out = fleet.submit(&workspace_root(), FLEET_DEMO);
    let envelope = out.envelope();
    assert_eq!(
        envelope["fleet"]["jobs"]["finished"],
        DEMO_JOBS,
        "{}\n{}",
        out.context(),
        fleet.logs()
    );
    // A drained worker and a stopped coordinator flush their spans before exiting.
    fleet.terminate("wt");
    fleet.terminate("coordinator");

    let requests = receiver
        .requests
        .lock()
        .expect("the receiver lock is never poisoned")
        .clone();
    let spans = spans_of(&requests);
    let admissions: BTreeMap<String, &Received> = spans
        .iter()
        .filter(|received| received.span.name == "admit")
        .map(|received| (received.expect_attribute("job_id"), received))
        .collect();
    assert_eq!(
        admissions.len(),
        DEMO_JOBS,
        "one admission span per job\n{}",
        fleet.logs()
    );
    for admission in admissions.values() {
        assert_eq!(admission.service, "cowork-coordinator");
    }
    let job_spans: Vec<&Received> = spans
        .iter()
        .filter(|received| received.span.name == "job")
        .collect();
    assert_eq!(job_spans.len(), DEMO_JOBS, "one worker job span per job");
    for job_span in job_spans {
        assert_eq!(job_span.service, "cowork-worker");
        let job_id = job_span.expect_attribute("job_id");
        let admission = admissions
            .get(&job_id)
            .unwrap_or_else(|| panic!("job {job_id} has a worker span but no admission span"));
        assert_eq!(
            job_span.span.trace_id, admission.span.trace_id,
            "job {job_id}: the worker's span continues the coordinator's trace"
        );
        assert_eq!(job_span.span.parent_span_id, admission.span.span_id);
    }
}

/// One `GET /metrics` over plain HTTP/1.1: the response body.
fn scrape(address: SocketAddr) -> String {
    let mut stream = TcpStream::connect(address).expect("connecting to the worker's /metrics");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: worker\r\nConnection: close\r\n\r\n")
        .expect("sending the scrape");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("reading the scrape");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP response: {response}"));
    assert!(head.starts_with("HTTP/1.1 200"), "scrape status: {head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "scrape content type: {head}"
    );
    assert_eq!(
        cowork_coordinator::metrics::check_exposition(body),
        Ok(()),
        "the scrape is valid OpenMetrics text"
    );
    body.to_owned()
}

fn sample(body: &str, series: &str) -> Option<u64> {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_worker_serves_its_job_counters_on_metrics_listen() {
    let mut fleet = Fleet::start();
    let address = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let listen = address.to_string();
    fleet.spawn_worker_with("wm", "container", "2", &["--metrics-listen", &listen]);
    let out = fleet.submit(&workspace_root(), FLEET_DEMO);
    let envelope = out.envelope();
    assert_eq!(
        envelope["fleet"]["jobs"]["finished"],
        DEMO_JOBS,
        "{}\n{}",
        out.context(),
        fleet.logs()
    );
    // The worker counts a job after its ack, which follows the `finished` event the batch
    // already folded: poll the counter itself, with a deadline.
    let body = wait_until(format!("the worker counted {DEMO_JOBS} finished jobs"))
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(20))
        .context(|| fleet.logs())
        .poll(|| {
            let body = scrape(address);
            if sample(&body, "cowork_worker_jobs_finished_total") == Some(DEMO_JOBS as u64) {
                Ok(body)
            } else {
                Err(format!("\n{body}"))
            }
        });
    assert_eq!(
        sample(&body, "cowork_worker_jobs_running"),
        Some(0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "cowork_worker_jobs_retried_total"),
        Some(0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "cowork_worker_jobs_failed_total{class=\"infra\"}"),
        Some(0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "cowork_worker_jobs_killed_total"),
        Some(0),
        "{body}"
    );
    assert!(
        fleet
            .log("wm")
            .contains(&format!("metrics at http://{address}/metrics")),
        "the worker says where its metrics are\n{}",
        fleet.log("wm")
    );
}
