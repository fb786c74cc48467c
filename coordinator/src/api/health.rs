//! `/healthz`, `/readyz` and `/metrics`: open routes for probes and scrapers.

use cowork_schema::api::ProgressSnapshot;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use cowork_schema::BatchId;

use crate::leadership::Role;
use crate::metrics::{CONTENT_TYPE, MetricsSnapshot, render};
use crate::service::Service;

/// `GET /healthz`: the process serves requests.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: `503` while a stream or bucket of the queue stalls (the body names each, and
/// since when) and while this coordinator does not know who leads; `200` on a standby (it
/// forwards requests; the body names the leader), and on the leader once it resumed the
/// batches it found and the batch registry answers a read.
pub(crate) async fn readyz(State(service): State<Arc<Service>>) -> (StatusCode, String) {
    // First: a stalled queue is also why a leader could not renew its lease.
    let stalls = service.views.fabric.borrow().stalls.clone();
    if !stalls.is_empty() {
        let now_ms = crate::fabric_view::now_ms();
        let mut body = String::from("queue stalled\n");
        for stall in &stalls {
            body.push_str(&stall.describe(now_ms));
            body.push('\n');
        }
        return (StatusCode::SERVICE_UNAVAILABLE, body);
    }
    let since_ms = match service.leadership.role() {
        Role::Leading { since_ms, .. } => since_ms,
        // Ready: it forwards each request to the leader, so a Service may send it any.
        Role::Standby { leader } => {
            return (
                StatusCode::OK,
                format!(
                    "standby: the leader is {} at {}, since {}; requests are forwarded there\n",
                    leader.coordinator_id,
                    leader.url,
                    cowork_schema::api::utc_date_time(leader.since_ms)
                ),
            );
        }
        Role::Starting => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "claiming the coordinator lease\n".to_owned(),
            );
        }
    };
    if !service.is_resumed() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "resuming batches\n".to_owned(),
        );
    }
    let probe = BatchId::new("readyz-probe").expect("a literal valid batch id");
    match service.ports.batches.get(&probe).await {
        Ok(_) if service.ports.lease.is_some() => (
            StatusCode::OK,
            format!(
                "ready: leading since {}\n",
                cowork_schema::api::utc_date_time(since_ms)
            ),
        ),
        Ok(_) => (StatusCode::OK, "ready\n".to_owned()),
        Err(error) => {
            tracing::warn!(error = %error, "readiness probe: batch registry unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "batch registry unavailable\n".to_owned(),
            )
        }
    }
}

/// `GET /metrics`: Prometheus text.
pub(crate) async fn metrics(State(service): State<Arc<Service>>) -> impl IntoResponse {
    // Maintained from the registry's change stream: a scrape never walks the registry.
    let batches_by_state = service.views.batch_counts.borrow().clone();
    let workers_live = match service.ports.workers.list().await {
        Ok(workers) => Some(workers.len() as u64),
        Err(error) => {
            tracing::warn!(error = %error, "metrics: listing workers failed");
            None
        }
    };
    let mut jobs = ProgressSnapshot::default();
    let mut batches_stalled = 0;
    for live in service.live_batches() {
        if live.end.borrow().is_none() && live.stall.borrow().is_some() {
            batches_stalled += 1;
        }
        let progress = live.progress.borrow();
        jobs.planned += progress.planned;
        jobs.admitted += progress.admitted;
        jobs.running += progress.running;
        jobs.finished += progress.finished;
        jobs.passed += progress.passed;
        jobs.failed += progress.failed;
        jobs.errored += progress.errored;
        jobs.skipped += progress.skipped;
        jobs.discarded += progress.discarded;
        jobs.duplicates += progress.duplicates;
        jobs.reacked += progress.reacked;
        jobs.retries += progress.retries;
        jobs.cost_usd += progress.cost_usd;
    }
    let queue_pending = match service.ports.queue.pending().await {
        Ok(pending) => pending,
        Err(error) => {
            tracing::warn!(error = %error, "metrics: reading the queue depth failed");
            Vec::new()
        }
    };
    let snapshot = MetricsSnapshot {
        batches_by_state,
        jobs,
        workers_live,
        queue_pending,
        history_reads: service.history.reads(),
        batches_stalled,
        lease: service.leadership.counts(),
        by_class: service
            .fair_share
            .share()
            .use_by_class()
            .into_iter()
            .map(|((tier, class), (running, queued, batches))| {
                (tier, class, [running, queued, batches])
            })
            .collect(),
    };
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], render(&snapshot))
}
