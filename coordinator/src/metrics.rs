//! `/metrics`: the coordinator's counters in the Prometheus text exposition format (version
//! 0.0.4), written by hand — the handful of series here do not justify a metrics library.
//!
//! [`render`] is a pure function of a [`MetricsSnapshot`]; the API handler gathers the snapshot
//! from the registries and the batches this process supervises.

use cowork_schema::api::ProgressSnapshot;
use std::fmt::Write;

use cowork_schema::registry::BatchState;

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What `/metrics` reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Batches per state, from the batch registry; `None` when the registry did not answer.
    pub batches_by_state: Option<Vec<(BatchState, u64)>>,
    /// The sum of the progress of every batch this process supervises or supervised since it
    /// started.
    pub jobs: ProgressSnapshot,
    /// Live workers, from the worker registry; `None` when the registry did not answer.
    pub workers_live: Option<u64>,
    /// Jobs waiting in the queue per tier (the tier consumers' pending counts).
    pub queue_pending: Vec<(cowork_schema::job::Tier, u64)>,
}

/// Every batch state, in lifecycle order (each gets a series, zero or not).
pub const ALL_STATES: [BatchState; 5] = [
    BatchState::Planned,
    BatchState::Running,
    BatchState::Stopping,
    BatchState::Done,
    BatchState::Cancelled,
];

/// Counts `states` per batch state, in [`ALL_STATES`] order.
pub fn count_states(states: impl IntoIterator<Item = BatchState>) -> Vec<(BatchState, u64)> {
    let mut counts: Vec<(BatchState, u64)> = ALL_STATES.iter().map(|state| (*state, 0)).collect();
    for state in states {
        if let Some(entry) = counts.iter_mut().find(|(known, _)| *known == state) {
            entry.1 += 1;
        }
    }
    counts
}

/// The snapshot in Prometheus text format.
pub fn render(snapshot: &MetricsSnapshot) -> String {
    let mut out = String::new();
    let registry_up = snapshot.batches_by_state.is_some() && snapshot.workers_live.is_some();
    gauge(
        &mut out,
        "cowork_registry_up",
        "1 when the batch and worker registries answered this scrape",
        u64::from(registry_up) as f64,
    );
    if let Some(states) = &snapshot.batches_by_state {
        header(
            &mut out,
            "cowork_batches",
            "gauge",
            "batches in the registry by state",
        );
        for (state, count) in states {
            let _ = writeln!(
                out,
                "cowork_batches{{state=\"{}\"}} {count}",
                state.as_str()
            );
        }
    }
    let jobs = &snapshot.jobs;
    for (name, help, value) in [
        (
            "cowork_jobs_admitted_total",
            "jobs published to the queue",
            jobs.admitted,
        ),
        (
            "cowork_jobs_finished_total",
            "jobs with a finished event",
            jobs.finished,
        ),
        (
            "cowork_jobs_passed_total",
            "finished jobs whose run passed",
            jobs.passed,
        ),
        (
            "cowork_jobs_failed_total",
            "finished jobs whose run failed",
            jobs.failed,
        ),
        (
            "cowork_jobs_errored_total",
            "finished jobs that ended unanswered or in error",
            jobs.errored,
        ),
        (
            "cowork_jobs_discarded_total",
            "finished jobs whose unit was already decided (overshoot)",
            jobs.discarded,
        ),
        (
            "cowork_job_retries_total",
            "job attempts handed back for retry",
            jobs.retries,
        ),
    ] {
        header(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {value}");
    }
    header(
        &mut out,
        "cowork_spend_usd_total",
        "counter",
        "spend reported by finished runs, folded or not, in usd",
    );
    let _ = writeln!(out, "cowork_spend_usd_total {}", number(jobs.cost_usd));
    gauge(
        &mut out,
        "cowork_jobs_running",
        "jobs started and not finished",
        jobs.running as f64,
    );
    if let Some(workers) = snapshot.workers_live {
        gauge(
            &mut out,
            "cowork_workers_live",
            "workers with a live heartbeat",
            workers as f64,
        );
    }
    if !snapshot.queue_pending.is_empty() {
        header(
            &mut out,
            "cowork_queue_pending",
            "gauge",
            "jobs waiting in the queue, per tier",
        );
        for (tier, pending) in &snapshot.queue_pending {
            let _ = writeln!(
                out,
                "cowork_queue_pending{{tier=\"{}\"}} {pending}",
                tier.as_str()
            );
        }
    }
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: f64) {
    header(out, name, "gauge", help);
    let _ = writeln!(out, "{name} {}", number(value));
}

/// A sample value: integral values without a fraction, others in shortest round-trip form.
fn number(value: f64) -> String {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_series() {
        let snapshot = MetricsSnapshot {
            batches_by_state: Some(count_states([
                BatchState::Done,
                BatchState::Running,
                BatchState::Done,
            ])),
            jobs: ProgressSnapshot {
                admitted: 7,
                finished: 6,
                passed: 4,
                failed: 1,
                errored: 1,
                discarded: 2,
                retries: 3,
                running: 1,
                cost_usd: 0.25,
                ..ProgressSnapshot::default()
            },
            workers_live: Some(2),
            queue_pending: vec![(cowork_schema::job::Tier::Container, 5)],
        };
        let text = render(&snapshot);
        for line in [
            "cowork_registry_up 1",
            "cowork_batches{state=\"planned\"} 0",
            "cowork_batches{state=\"running\"} 1",
            "cowork_batches{state=\"done\"} 2",
            "cowork_jobs_admitted_total 7",
            "cowork_jobs_finished_total 6",
            "cowork_jobs_passed_total 4",
            "cowork_jobs_failed_total 1",
            "cowork_jobs_errored_total 1",
            "cowork_jobs_discarded_total 2",
            "cowork_job_retries_total 3",
            "cowork_spend_usd_total 0.25",
            "cowork_jobs_running 1",
            "cowork_workers_live 2",
            "cowork_queue_pending{tier=\"container\"} 5",
            "# TYPE cowork_jobs_admitted_total counter",
            "# TYPE cowork_batches gauge",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn a_registry_that_did_not_answer_drops_its_series() {
        let text = render(&MetricsSnapshot::default());
        assert!(text.contains("cowork_registry_up 0"), "{text}");
        assert!(!text.contains("cowork_batches{"), "{text}");
        assert!(!text.contains("cowork_workers_live"), "{text}");
        assert!(text.contains("cowork_spend_usd_total 0\n"), "{text}");
    }
}
