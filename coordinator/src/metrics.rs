//! `/metrics`: the coordinator's counters in the OpenMetrics text format, encoded by the
//! `prometheus-client` crate — the one encoder of the workspace (the worker's `/metrics` uses
//! [`encode`] too), so names, escaping and numbers follow the format's rules in one place.
//!
//! [`render`] is a pure function of a [`MetricsSnapshot`]; the API handler gathers the snapshot
//! from the registries and the batches this process supervises. [`check_exposition`] checks a
//! text against the format's grammar, for tests of every `/metrics`.

use std::sync::atomic::AtomicU64;

use cowork_schema::api::ProgressSnapshot;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use cowork_schema::registry::BatchState;

/// The content type of [`render`]'s output (OpenMetrics text, which Prometheus scrapes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What `/metrics` reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Batches per state, kept from the batch registry's change stream; `None` while it is not
    /// watched.
    pub batches_by_state: Option<Vec<(BatchState, u64)>>,
    /// The sum of the progress of every batch this process supervises or supervised since it
    /// started.
    pub jobs: ProgressSnapshot,
    /// Live workers, from the worker registry; `None` when the registry did not answer.
    pub workers_live: Option<u64>,
    /// Jobs waiting in the queue per tier (the tier consumers' pending counts).
    pub queue_pending: Vec<(cowork_schema::job::Tier, u64)>,
    /// Store walks for the recent batches' stats since the process started (one serves many
    /// batch starts).
    pub history_reads: u64,
    /// Batches supervised here that are stalled now (the stall watchdog's).
    pub batches_stalled: u64,
    /// Per tier and priority class: jobs running, jobs queued and batches with a claim
    /// (the fair share's view).
    pub by_class: Vec<(
        cowork_schema::job::Tier,
        cowork_schema::share::Priority,
        [u64; 3],
    )>,
    /// Whether this coordinator leads now, terms it took over from another leader, and terms
    /// it lost (decisions.md#coordinator-lease).
    pub lease: LeaseCounts,
}

/// The coordinator lease as `/metrics` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseCounts {
    pub leading: bool,
    pub takeovers: u64,
    pub terms_lost: u64,
    /// Writes of this coordinator the queue refused because a later leader had fenced its
    /// term.
    pub fencing_refusals: u64,
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

/// A label set: (name, value) pairs.
type Labels = Vec<(String, String)>;

/// The snapshot in OpenMetrics text.
pub fn render(snapshot: &MetricsSnapshot) -> String {
    let mut registry = Registry::default();
    let registry_up = snapshot.batches_by_state.is_some() && snapshot.workers_live.is_some();
    gauge(
        &mut registry,
        "cowork_registry_up",
        "1 when the batch registry is watched and the worker registry answered this scrape",
        u64::from(registry_up),
    );
    if let Some(states) = &snapshot.batches_by_state {
        let family = Family::<Labels, Gauge<i64>>::default();
        for (state, count) in states {
            family
                .get_or_create(&vec![("state".to_owned(), state.as_str().to_owned())])
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
        registry.register("cowork_batches", "batches in the registry by state", family);
    }
    let jobs = &snapshot.jobs;
    for (name, help, value) in [
        (
            "cowork_jobs_admitted",
            "jobs published to the queue",
            jobs.admitted,
        ),
        (
            "cowork_jobs_finished",
            "jobs with a finished event",
            jobs.finished,
        ),
        (
            "cowork_jobs_passed",
            "finished jobs whose run passed",
            jobs.passed,
        ),
        (
            "cowork_jobs_failed",
            "finished jobs whose run failed",
            jobs.failed,
        ),
        (
            "cowork_jobs_errored",
            "finished jobs that ended unanswered or in error",
            jobs.errored,
        ),
        (
            "cowork_jobs_discarded",
            "finished jobs whose unit was already decided (overshoot)",
            jobs.discarded,
        ),
        (
            "cowork_job_retries",
            "job attempts handed back for retry",
            jobs.retries,
        ),
    ] {
        counter(&mut registry, name, help, value);
    }
    counter(
        &mut registry,
        "cowork_history_reads",
        "store walks for the recent batches' stats (one serves many batch starts)",
        snapshot.history_reads,
    );
    counter_f64(
        &mut registry,
        "cowork_spend_usd",
        "spend reported by finished runs, folded or not, in usd",
        jobs.cost_usd,
    );
    gauge(
        &mut registry,
        "cowork_jobs_running",
        "jobs started and not finished",
        jobs.running,
    );
    fleet_gauges(&mut registry, snapshot);
    encode(&registry)
}

/// The gauges of the fleet: stalled batches, live workers and the queue's depth per tier.
fn fleet_gauges(registry: &mut Registry, snapshot: &MetricsSnapshot) {
    gauge(
        registry,
        "cowork_batches_stalled",
        "batches with jobs outstanding and none started or finished for their --stall-after",
        snapshot.batches_stalled,
    );
    if let Some(workers) = snapshot.workers_live {
        gauge(
            registry,
            "cowork_workers_live",
            "workers with a live heartbeat",
            workers,
        );
    }
    if !snapshot.queue_pending.is_empty() {
        let family = Family::<Labels, Gauge<i64>>::default();
        for (tier, pending) in &snapshot.queue_pending {
            family
                .get_or_create(&vec![("tier".to_owned(), tier.as_str().to_owned())])
                .set(i64::try_from(*pending).unwrap_or(i64::MAX));
        }
        registry.register(
            "cowork_queue_pending",
            "jobs waiting in the queue, per tier",
            family,
        );
    }
    class_gauges(registry, snapshot);
    gauge(
        registry,
        "cowork_coordinator_leading",
        "1 while this coordinator holds the lease and admits, 0 while it stands by",
        u64::from(snapshot.lease.leading),
    );
    counter(
        registry,
        "cowork_coordinator_takeovers",
        "terms this coordinator took over from another leader",
        snapshot.lease.takeovers,
    );
    counter(
        registry,
        "cowork_coordinator_terms_lost",
        "terms that ended because this coordinator lost the lease or could not renew it",
        snapshot.lease.terms_lost,
    );
    counter(
        registry,
        "cowork_coordinator_fencing_refusals",
        "writes of this coordinator refused because a later leader fenced its term",
        snapshot.lease.fencing_refusals,
    );
}

/// The fair share's gauges per tier and priority class.
fn class_gauges(registry: &mut Registry, snapshot: &MetricsSnapshot) {
    if snapshot.by_class.is_empty() {
        return;
    }
    for (index, name, help) in [
        (
            0,
            "cowork_class_jobs_running",
            "jobs running, per tier and priority class",
        ),
        (
            1,
            "cowork_class_jobs_queued",
            "jobs handed to the queue and not started, per tier and priority class",
        ),
        (
            2,
            "cowork_class_batches",
            "batches holding or wanting slots, per tier and priority class",
        ),
    ] {
        let family = Family::<Labels, Gauge<i64>>::default();
        for (tier, class, counts) in &snapshot.by_class {
            family
                .get_or_create(&vec![
                    ("tier".to_owned(), tier.as_str().to_owned()),
                    ("priority".to_owned(), class.as_str().to_owned()),
                ])
                .set(i64::try_from(counts[index]).unwrap_or(i64::MAX));
        }
        registry.register(name, help, family);
    }
}

/// Registers a gauge holding a count.
pub fn gauge(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let gauge = Gauge::<i64>::default();
    gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
    registry.register(name, help, gauge);
}

/// Registers a counter holding a count (the encoder appends `_total` to its name).
pub fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let counter = Counter::<u64>::default();
    counter.inc_by(value);
    registry.register(name, help, counter);
}

/// Registers a counter holding an amount (seconds, dollars). A non-finite or negative value
/// (a sum over nothing gone wrong) is reported as 0: a scrape must never fail on one odd
/// series, and Rust's `inf` is not a number Prometheus reads.
pub fn counter_f64(registry: &mut Registry, name: &str, help: &str, value: f64) {
    let counter = Counter::<f64, AtomicU64>::default();
    counter.inc_by(if value.is_finite() {
        value.max(0.0)
    } else {
        0.0
    });
    registry.register(name, help, counter);
}

/// The registry in OpenMetrics text.
pub fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail; an encoder error would be a bug in a metric's
    // encoding, and a scrape is better served partial than not at all.
    if let Err(error) = prometheus_client::encoding::text::encode(&mut text, registry) {
        tracing::error!(error = %error, "encoding metrics failed");
    }
    text
}

/// Checks `text` against the OpenMetrics text grammar that Prometheus parses: `# HELP` and
/// `# TYPE` lines with valid metric names, samples `name{label="value",…} value` with valid
/// names, escaped label values and a value Prometheus reads (a decimal number, `+Inf`, `-Inf`
/// or `NaN`; Rust's `inf` is not one), and a final `# EOF`. Returns the first bad line.
pub fn check_exposition(text: &str) -> Result<(), String> {
    let valid_name = |name: &str| {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let valid_value = |value: &str| {
        matches!(value, "+Inf" | "-Inf" | "NaN")
            || (value.parse::<f64>().is_ok_and(f64::is_finite)
                && value
                    .chars()
                    .all(|c| c.is_ascii_digit() || ".-+eE".contains(c)))
    };
    let mut saw_eof = false;
    for line in text.lines() {
        let bad = || Err(format!("not OpenMetrics text: {line:?}"));
        if saw_eof {
            return bad();
        }
        if line == "# EOF" {
            saw_eof = true;
            continue;
        }
        if let Some(rest) = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
        {
            match rest.split_once(' ') {
                Some((name, _)) if valid_name(name) => continue,
                _ => return bad(),
            }
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some(parts) => parts,
            None => return bad(),
        };
        if !valid_value(value) {
            return bad();
        }
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => match labels.strip_suffix('}') {
                Some(labels) => (name, labels),
                None => return bad(),
            },
            None => (series, ""),
        };
        if !valid_name(name) || !labels_are_valid(labels) {
            return bad();
        }
    }
    if saw_eof {
        Ok(())
    } else {
        Err("not OpenMetrics text: no final # EOF".to_owned())
    }
}

/// `name="value",…` with every value quoted and `\`, `"` and newlines escaped.
fn labels_are_valid(labels: &str) -> bool {
    let mut rest = labels;
    while !rest.is_empty() {
        let Some((name, after)) = rest.split_once("=\"") else {
            return false;
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return false;
        }
        let mut chars = after.char_indices();
        let mut end = None;
        while let Some((index, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, '\\' | '"' | 'n')) => {}
                    _ => return false,
                },
                '"' => {
                    end = Some(index);
                    break;
                }
                '\n' => return false,
                _ => {}
            }
        }
        let Some(end) = end else {
            return false;
        };
        rest = &after[end + 1..];
        rest = match rest.strip_prefix(',') {
            Some(more) if !more.is_empty() => more,
            Some(_) => return false,
            None if rest.is_empty() => rest,
            None => return false,
        };
    }
    true
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
            by_class: vec![(
                cowork_schema::job::Tier::Container,
                cowork_schema::share::Priority::Urgent,
                [3, 1, 2],
            )],
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
            history_reads: 3,
            batches_stalled: 1,
            lease: LeaseCounts {
                leading: true,
                takeovers: 1,
                terms_lost: 0,
                fencing_refusals: 2,
            },
        };
        let text = render(&snapshot);
        assert_eq!(check_exposition(&text), Ok(()), "{text}");
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
            "cowork_history_reads_total 3",
            "cowork_batches_stalled 1",
            "cowork_class_jobs_running{tier=\"container\",priority=\"urgent\"} 3",
            "cowork_class_jobs_queued{tier=\"container\",priority=\"urgent\"} 1",
            "cowork_class_batches{tier=\"container\",priority=\"urgent\"} 2",
            "cowork_coordinator_leading 1",
            "cowork_coordinator_takeovers_total 1",
            "cowork_coordinator_terms_lost_total 0",
            "cowork_coordinator_fencing_refusals_total 2",
            "# TYPE cowork_jobs_admitted counter",
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
        assert_eq!(check_exposition(&text), Ok(()), "{text}");
        assert!(text.contains("cowork_registry_up 0\n"), "{text}");
        assert!(!text.contains("cowork_batches{"), "{text}");
        assert!(!text.contains("cowork_workers_live"), "{text}");
        assert!(text.contains("cowork_spend_usd_total 0.0\n"), "{text}");
    }

    #[test]
    fn non_finite_values_never_reach_a_scrape() {
        let snapshot = MetricsSnapshot {
            jobs: ProgressSnapshot {
                cost_usd: f64::INFINITY,
                ..ProgressSnapshot::default()
            },
            ..MetricsSnapshot::default()
        };
        let text = render(&snapshot);
        assert_eq!(check_exposition(&text), Ok(()), "{text}");
        assert!(text.contains("cowork_spend_usd_total 0.0\n"), "{text}");
    }

    #[test]
    fn the_grammar_check_refuses_what_prometheus_refuses() {
        let ok =
            "# HELP a_b help text\n# TYPE a_b gauge\na_b{x=\"q\\\"uote\",y=\"2\"} 1.5\n# EOF\n";
        assert_eq!(check_exposition(ok), Ok(()));
        for bad in [
            "a_b inf\n# EOF\n",
            "a_b 1\n",
            "1ab 1\n# EOF\n",
            "a_b{x=\"unterminated} 1\n# EOF\n",
            "a_b{x=unquoted} 1\n# EOF\n",
            "a_b{x=\"a\",} 1\n# EOF\n",
            "a_b 1\n# EOF\nafter 1\n",
        ] {
            assert!(check_exposition(bad).is_err(), "{bad:?}");
        }
    }
}
