//! Diagnostics: the stderr log and, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, OTLP/gRPC export
//! of spans (decisions.md#operations: one trace per job, from admission to fold).
//!
//! The two outputs filter independently: `--log` (default `warn`) only decides what reaches
//! stderr, while the exporter always sees the `info` spans of the cowork crates, so traces do not
//! depend on how chatty the terminal is.
//!
//! It also holds the worker's `/metrics` (`cowork worker --metrics-listen`): the counters of
//! `WorkerStats` in Prometheus text, written by hand like the coordinator's.

use std::io::IsTerminal as _;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// The variable that switches OTLP export on; the exporter reads it (and the other standard
/// `OTEL_EXPORTER_OTLP_*` variables) itself.
pub const OTLP_ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// What the exporter sees: the spans of the cowork crates, whatever `--log` says.
const EXPORT_FILTER: &str =
    "cowork_coordinator=info,cowork_worker=info,cowork_fabric=info,cowork=info";

/// How long exiting waits for the last spans to reach the collector.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Owns the span exporter; [`Telemetry::shutdown`] flushes it. Without OTLP it holds nothing.
#[must_use = "call shutdown() before exiting, or the last spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes buffered spans to the collector and stops the exporter. Must be called while
    /// the Tokio runtime the exporter was built in is still alive: the gRPC channel runs on it.
    pub fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        if let Err(error) = provider.shutdown_with_timeout(FLUSH_TIMEOUT) {
            eprintln!("warning: flushing OTLP spans: {error}");
        }
    }
}

/// Installs the global subscriber: the stderr log filtered by `log_filter` and, when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is set, an OpenTelemetry layer exporting spans as
/// `service_name`. Call it inside the runtime (`Runtime::enter`): the gRPC channel is built on it.
///
/// Every stderr line is scrubbed of `secrets` first ([`crate::log_scrub`]).
pub fn install(log_filter: &str, service_name: &'static str, secrets: &[String]) -> Telemetry {
    let log_filter = EnvFilter::try_new(log_filter).unwrap_or_else(|_| EnvFilter::new("warn"));
    let stderr_log = tracing_subscriber::fmt::layer()
        .with_writer(crate::log_scrub::ScrubbedStderr::new(secrets))
        .with_target(false)
        .with_ansi(stderr_colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_filter(log_filter);
    let provider = match std::env::var_os(OTLP_ENDPOINT_VAR) {
        Some(endpoint) if !endpoint.is_empty() => match otlp_provider(service_name) {
            Ok(provider) => Some(provider),
            Err(error) => {
                // Telemetry is never a reason not to run: report and go on without it.
                eprintln!("warning: OTLP export disabled: {error}");
                None
            }
        },
        _ => None,
    };
    let otel_layer = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(service_name))
            .with_filter(EnvFilter::new(EXPORT_FILTER))
    });
    tracing_subscriber::registry()
        .with(stderr_log)
        .with(otel_layer)
        .init();
    Telemetry { provider }
}

/// Whether the stderr log may colour its lines: only on a terminal (escape bytes in a pipe or a
/// CI log are noise), and never when `NO_COLOR` is set to anything but the empty string
/// (<https://no-color.org>).
fn stderr_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

/// Whether this process may colour what it prints on stderr (the log, the summary): the same
/// rule for both.
pub fn stderr_may_colour() -> bool {
    use std::io::IsTerminal as _;
    stderr_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

fn otlp_provider(
    service_name: &'static str,
) -> Result<SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_protocol(opentelemetry_otlp::Protocol::Grpc)
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service_name)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// The OpenTelemetry `service.name` of a subcommand: the two fleet services by name, every
/// client and embedded command as `cowork`.
pub fn service_name(command: &crate::args::Command) -> &'static str {
    match command {
        crate::args::Command::Coordinator(_) => "cowork-coordinator",
        crate::args::Command::Worker(_) => "cowork-worker",
        _ => "cowork",
    }
}

/// Serves `GET /metrics` (Prometheus text of `stats`) on `address` until the returned guard is
/// dropped. Binding happens before return, so a taken address fails the command at start.
pub async fn serve_worker_metrics(
    address: std::net::SocketAddr,
    stats: std::sync::Arc<cowork_worker::WorkerStats>,
) -> std::io::Result<(std::net::SocketAddr, tokio_util::sync::DropGuard)> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let stop = tokio_util::sync::CancellationToken::new();
    let router = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let text = worker_metrics_text(&stats);
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        cowork_coordinator::metrics::CONTENT_TYPE,
                    )],
                    text,
                )
            }
        }),
    );
    let stopped = stop.clone();
    tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(stopped.cancelled_owned())
            .await;
        if let Err(error) = served {
            tracing::warn!(error = %error, "the metrics endpoint stopped");
        }
    });
    Ok((bound, stop.drop_guard()))
}

/// The worker's counters in OpenMetrics text, through the coordinator's one encoder.
pub fn worker_metrics_text(stats: &cowork_worker::WorkerStats) -> String {
    use std::sync::atomic::Ordering;

    use cowork_coordinator::metrics::{counter, counter_f64, encode, gauge};
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::registry::Registry;

    let mut registry = Registry::default();
    gauge(
        &mut registry,
        "cowork_worker_jobs_running",
        "jobs running on this worker now",
        stats.jobs_running.load(Ordering::Relaxed),
    );
    gauge(
        &mut registry,
        "cowork_worker_sandbox_start_failures",
        "jobs in a row whose sandbox did not start on this worker (handed back for another)",
        u64::from(stats.sandbox_starts.in_a_row()),
    );
    gauge(
        &mut registry,
        "cowork_worker_tiers_backed_off",
        "tiers this worker does not take for now after sandbox start failures in a row",
        stats.sandbox_starts.backed_off().len() as u64,
    );
    for (name, help, value) in [
        (
            "cowork_worker_jobs_finished",
            "jobs this worker finished, stored and acked",
            &stats.jobs_finished,
        ),
        (
            "cowork_worker_jobs_retried",
            "job attempts handed back for another delivery after an infrastructure failure",
            &stats.jobs_retried,
        ),
        (
            "cowork_worker_jobs_killed",
            "jobs killed or skipped because their batch was cancelled",
            &stats.jobs_killed,
        ),
        (
            "cowork_worker_jobs_timed",
            "jobs whose executor time is in cowork_worker_job_run_seconds",
            &stats.jobs_timed,
        ),
    ] {
        counter(&mut registry, name, help, value.load(Ordering::Relaxed));
    }
    // Failures by class: `infra` has its own counter, every other class (an error category
    // such as `timeout`, `crashed`, `unanswered`) comes from the per-class map.
    let failed = Family::<Vec<(String, String)>, Counter<u64>>::default();
    failed
        .get_or_create(&vec![("class".to_owned(), "infra".to_owned())])
        .inc_by(stats.jobs_failed_infra.load(Ordering::Relaxed));
    let classes = stats
        .failed_by_class
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    for (class, count) in classes
        .iter()
        .filter(|(class, _)| class.as_str() != "infra")
    {
        failed
            .get_or_create(&vec![("class".to_owned(), class.clone())])
            .inc_by(*count);
    }
    registry.register(
        "cowork_worker_jobs_failed",
        "jobs that ended in error on this worker, by failure class",
        failed,
    );
    counter_f64(
        &mut registry,
        "cowork_worker_job_run_seconds",
        "executor time of the jobs this worker ran",
        stats.job_run_ms_total.load(Ordering::Relaxed) as f64 / 1000.0,
    );
    encode(&registry)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::{stderr_colour, worker_metrics_text};

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        for (terminal, no_color, expect) in [
            (true, None, true),
            (false, None, false),
            (true, Some(""), true),
            (true, Some("1"), false),
            (false, Some("1"), false),
        ] {
            assert_eq!(
                stderr_colour(terminal, no_color.map(OsStr::new)),
                expect,
                "terminal {terminal}, NO_COLOR {no_color:?}"
            );
        }
    }

    #[test]
    fn worker_metrics_show_every_counter_with_its_type() {
        let stats = cowork_worker::WorkerStats::default();
        stats.jobs_running.store(2, Ordering::Relaxed);
        stats.jobs_finished.store(7, Ordering::Relaxed);
        stats.jobs_retried.store(3, Ordering::Relaxed);
        stats.jobs_failed_infra.store(1, Ordering::Relaxed);
        stats.jobs_killed.store(4, Ordering::Relaxed);
        stats.job_run_ms_total.store(2500, Ordering::Relaxed);
        stats.jobs_timed.store(2, Ordering::Relaxed);
        stats
            .sandbox_starts
            .failed(cowork_schema::job::Tier::Container);
        stats
            .failed_by_class
            .lock()
            .expect("not poisoned")
            .insert("timeout".into(), 2);
        // A class with characters that need escaping in a label value.
        stats
            .failed_by_class
            .lock()
            .expect("not poisoned")
            .insert("odd\"class\\".into(), 1);
        let text = worker_metrics_text(&stats);
        assert_eq!(
            cowork_coordinator::metrics::check_exposition(&text),
            Ok(()),
            "{text}"
        );
        for line in [
            "# TYPE cowork_worker_jobs_running gauge",
            "cowork_worker_jobs_running 2",
            "cowork_worker_sandbox_start_failures 1",
            "cowork_worker_tiers_backed_off 0",
            "# TYPE cowork_worker_jobs_finished counter",
            "cowork_worker_jobs_finished_total 7",
            "cowork_worker_jobs_retried_total 3",
            "cowork_worker_jobs_failed_total{class=\"infra\"} 1",
            "cowork_worker_jobs_killed_total 4",
            "cowork_worker_jobs_failed_total{class=\"timeout\"} 2",
            "cowork_worker_jobs_failed_total{class=\"odd\\\"class\\\\\"} 1",
            "cowork_worker_job_run_seconds_total 2.5",
            "cowork_worker_jobs_timed_total 2",
        ] {
            assert!(
                text.lines().any(|got| got == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
}
