//! The W3C trace context a job carries in its message (`JobSpec::traceparent`), so that one job
//! is one trace across processes: the coordinator's admission span starts it and the worker's
//! job span continues it (decisions.md#operations).
//!
//! Without an OpenTelemetry layer in the subscriber (no `OTEL_EXPORTER_OTLP_ENDPOINT`) spans
//! have no trace context: nothing is stamped and nothing is parented.

use std::collections::HashMap;

use cowork_schema::job::JobSpec;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The W3C header name, the one key the propagator reads and writes.
const TRACEPARENT: &str = "traceparent";

/// Opens the admission span of `job` as the root of a new trace and records its trace context
/// in the job, so the worker that runs it joins the same trace. The span ends at return:
/// admission is the instant the job is handed to the queue.
pub fn admit_traced(mut job: JobSpec) -> JobSpec {
    let admission = tracing::info_span!(
        parent: None,
        "admit",
        job_id = %job.job_id,
        batch_id = %job.batch_id,
        tier = job.tier.as_str(),
    );
    job.traceparent = traceparent_of(&admission);
    job
}

/// The `traceparent` of `span`, or `None` when the span is not exported.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Makes `span` a child of the trace in `traceparent` (a job's admission span). Must be called
/// before the span is first entered. A malformed or absent value leaves the span where it is.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(traceparent) = traceparent else {
        return;
    };
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let parent = TraceContextPropagator::new().extract(&carrier);
    if !parent.span().span_context().is_valid() {
        tracing::debug!(traceparent, "ignoring a malformed traceparent");
        return;
    }
    if let Err(error) = span.set_parent(parent) {
        tracing::debug!(error = %error, "the job span could not join its admission trace");
    }
}
