//! Notifications, the pure half: a batch's moment ([`NotifyEvent`]) becomes a JSON body with a
//! line for people ([`body`]), an event id that stays the same on every retry ([`event_id`]),
//! and a signature over timestamp and body ([`signature_header`]). Delivery (HTTP, retries,
//! the queue) is `cowork_coordinator::notify`.
//!
//! The signature is Stripe's scheme: `Cowork-Signature: t=<unix seconds>,v1=<hex>` where `v1`
//! is HMAC-SHA256 under the shared secret of `"<t>.<body>"`. A receiver recomputes it, compares
//! in constant time and refuses a `t` far from its clock (a replayed delivery).

use cowork_schema::BatchId;
use cowork_schema::notify::{NotifyBody, NotifyKind};
use sha2::{Digest, Sha256};

use crate::trend::BatchCounts;

/// One moment of a batch a webhook is told of.
#[derive(Clone, Debug, PartialEq)]
pub enum NotifyEvent {
    /// Every unit is decided.
    Decided(Box<Decided>),
    /// The batch budget was reached: `units` open units stop as budget stops.
    BudgetStop {
        batch_id: BatchId,
        spent_usd: f64,
        cap_usd: f64,
        units: u64,
    },
    /// Nothing moved for too long; `reason` says what the batch waits on (the stall
    /// watchdog's words, shown as they are).
    Stalled { batch_id: BatchId, reason: String },
    /// A worker stopped beating while it held `jobs_held` jobs; `heartbeat_at_ms` (its last
    /// beat) tells one loss from a later one of the same worker.
    WorkerLost {
        batch_id: BatchId,
        worker_id: String,
        jobs_held: u32,
        heartbeat_at_ms: u64,
    },
    /// The batch was cancelled before it was decided; `cost_usd` is what its runs spent.
    Cancelled { batch_id: BatchId, cost_usd: f64 },
    /// Coordinator `leader` took the lease over from `previous` (under fencing token
    /// `revision`, which tells one takeover from a later one) and resumed the batch.
    TakenOver {
        batch_id: BatchId,
        leader: String,
        previous: String,
        revision: u64,
    },
    /// A sample (`cowork notify-test`).
    Test { batch_id: BatchId },
}

/// A decided batch as a notification tells it.
#[derive(Clone, Debug, PartialEq)]
pub struct Decided {
    pub batch_id: BatchId,
    /// `PASS`, `FAIL`, or an eval's verdict in words.
    pub verdict: String,
    pub exit_code: i32,
    pub units_total: u64,
    /// Labels of the units that did not pass, in unit order.
    pub failing: Vec<String>,
    /// Failing units that passed in the earlier batch compared with.
    pub newly_failing: Vec<String>,
    /// Labels of quarantined units.
    pub quarantined: Vec<String>,
    /// What the batch's runs spent, in US dollars.
    pub cost_usd: f64,
}

/// The verdict, exit code and spend of a decided batch, beside its unit counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub verdict: String,
    pub exit_code: i32,
    pub cost_usd: f64,
}

impl Decided {
    /// A decided batch from its unit counts (`now`) and, when one is known, the most recent
    /// earlier batch's (`then`): a unit is failing when it did not pass at the batch's min
    /// pass rate (errored units included), newly failing when it also passed in `then`.
    pub fn from_counts(
        now: &BatchCounts,
        then: Option<&BatchCounts>,
        verdict: Verdict,
        quarantined: Vec<String>,
    ) -> Decided {
        let failing: Vec<String> = now
            .units
            .iter()
            .filter(|unit| unit.passed(now.min_pass_rate) != Some(true))
            .map(|unit| unit.label.clone())
            .collect();
        let passed_then = |label: &str| {
            then.is_some_and(|then| {
                then.units.iter().any(|unit| {
                    unit.label == label && unit.passed(then.min_pass_rate) == Some(true)
                })
            })
        };
        let newly_failing = failing
            .iter()
            .filter(|label| passed_then(label))
            .cloned()
            .collect();
        Decided {
            batch_id: now.batch_id.clone(),
            verdict: verdict.verdict,
            exit_code: verdict.exit_code,
            units_total: now.units.len() as u64,
            failing,
            newly_failing,
            quarantined,
            cost_usd: verdict.cost_usd,
        }
    }
}

impl NotifyEvent {
    /// The batch the event is about.
    pub fn batch_id(&self) -> &BatchId {
        match self {
            NotifyEvent::Decided(decided) => &decided.batch_id,
            NotifyEvent::BudgetStop { batch_id, .. }
            | NotifyEvent::Stalled { batch_id, .. }
            | NotifyEvent::WorkerLost { batch_id, .. }
            | NotifyEvent::Cancelled { batch_id, .. }
            | NotifyEvent::TakenOver { batch_id, .. }
            | NotifyEvent::Test { batch_id } => batch_id,
        }
    }

    /// The kind of event.
    pub fn kind(&self) -> NotifyKind {
        match self {
            NotifyEvent::Decided(_) => NotifyKind::Decided,
            NotifyEvent::BudgetStop { .. } => NotifyKind::BudgetStop,
            NotifyEvent::Stalled { .. } => NotifyKind::Stalled,
            NotifyEvent::WorkerLost { .. } => NotifyKind::WorkerLost,
            NotifyEvent::Cancelled { .. } => NotifyKind::Cancelled,
            NotifyEvent::TakenOver { .. } => NotifyKind::TakenOver,
            NotifyEvent::Test { .. } => NotifyKind::Test,
        }
    }
}

/// The event's id: a digest of the batch, the kind and what tells two events of one kind
/// apart (a stall's reason, a lost worker and its last beat). The same moment told again — a
/// retry, or a coordinator that resumed the batch after a restart — has the same id, so a
/// receiver keeps the first delivery and drops the others.
pub fn event_id(event: &NotifyEvent) -> String {
    let detail = match event {
        NotifyEvent::Stalled { reason, .. } => reason.clone(),
        NotifyEvent::WorkerLost {
            worker_id,
            heartbeat_at_ms,
            ..
        } => format!("{worker_id}@{heartbeat_at_ms}"),
        NotifyEvent::TakenOver {
            leader, revision, ..
        } => format!("{leader}@{revision}"),
        _ => String::new(),
    };
    let key = format!("{}\n{}\n{detail}", event.batch_id(), event.kind().as_str());
    let digest = Sha256::digest(key.as_bytes());
    format!("evt_{}", &hex(&digest)[..32])
}

/// The JSON body of `event`, `created_at` its time in Unix seconds, `report` where people read
/// the batch (a URL, or the command that makes its report).
pub fn body(event: &NotifyEvent, created_at: u64, report: Option<&str>) -> NotifyBody {
    let mut body = NotifyBody {
        id: event_id(event),
        kind: event.kind(),
        batch_id: event.batch_id().clone(),
        created_at,
        text: text(event, report),
        verdict: None,
        exit_code: None,
        units_total: None,
        failing: None,
        newly_failing: None,
        quarantined: None,
        cost_usd: None,
        budget_usd: None,
        reason: None,
        worker_id: None,
        jobs_held: None,
        report: report.map(str::to_owned),
    };
    match event {
        NotifyEvent::Decided(decided) => {
            body.verdict = Some(decided.verdict.clone());
            body.exit_code = Some(decided.exit_code);
            body.units_total = Some(decided.units_total);
            body.failing = Some(decided.failing.clone());
            body.newly_failing = Some(decided.newly_failing.clone());
            body.quarantined = Some(decided.quarantined.clone());
            body.cost_usd = Some(decided.cost_usd);
        }
        NotifyEvent::BudgetStop {
            spent_usd, cap_usd, ..
        } => {
            body.cost_usd = Some(*spent_usd);
            body.budget_usd = Some(*cap_usd);
        }
        NotifyEvent::Stalled { reason, .. } => body.reason = Some(reason.clone()),
        NotifyEvent::WorkerLost {
            worker_id,
            jobs_held,
            ..
        } => {
            body.worker_id = Some(worker_id.clone());
            body.jobs_held = Some(*jobs_held);
        }
        NotifyEvent::Cancelled { cost_usd, .. } => body.cost_usd = Some(*cost_usd),
        NotifyEvent::TakenOver {
            leader, previous, ..
        } => body.reason = Some(format!("coordinator {leader} took over from {previous}")),
        NotifyEvent::Test { .. } => {}
    }
    body
}

/// Failing units named in the one-line text; the body lists them all.
const NAMED_UNITS: usize = 3;

/// The line (or two) for people, as Slack shows it: `cowork: batch <id> FAIL — 3 of 40 units
/// failing (a, b, c), $4.20 — <report>`.
pub fn text(event: &NotifyEvent, report: Option<&str>) -> String {
    let id = event.batch_id();
    let head = match event {
        NotifyEvent::Decided(decided) => decided_line(decided),
        NotifyEvent::BudgetStop {
            spent_usd,
            cap_usd,
            units,
            ..
        } => format!(
            "cowork: batch {id} stopped at its budget — {} of {} spent; {units} open {} stop",
            dollars(*spent_usd),
            dollars(*cap_usd),
            if *units == 1 { "unit" } else { "units" }
        ),
        NotifyEvent::Stalled { reason, .. } => {
            format!("cowork: batch {id} stalled — {}", for_slack(reason))
        }
        NotifyEvent::WorkerLost {
            worker_id,
            jobs_held,
            ..
        } => format!(
            "cowork: batch {id} lost worker {} mid-job — its {jobs_held} {} wait for redelivery",
            for_slack(worker_id),
            if *jobs_held == 1 { "job" } else { "jobs" }
        ),
        NotifyEvent::Cancelled { cost_usd, .. } => {
            format!(
                "cowork: batch {id} cancelled — {} spent",
                dollars(*cost_usd)
            )
        }
        NotifyEvent::TakenOver {
            leader, previous, ..
        } => format!(
            "cowork: batch {id} resumed by coordinator {}, which took over from {} — nothing is lost or run twice",
            for_slack(leader),
            for_slack(previous)
        ),
        NotifyEvent::Test { .. } => {
            "cowork: test notification — check its Cowork-Signature with your secret".to_owned()
        }
    };
    let mut text = match report {
        Some(report) => format!("{head} — {}", for_slack(report)),
        None => head,
    };
    if let NotifyEvent::Decided(decided) = event
        && !decided.newly_failing.is_empty()
    {
        text.push_str(&format!(
            "\nnewly failing: {}",
            named(&decided.newly_failing)
        ));
    }
    text
}

/// `FAIL — 3 of 40 units failing (a, b, c), $4.20`, or `PASS — 40 units, $4.20`.
fn decided_line(decided: &Decided) -> String {
    let id = &decided.batch_id;
    let verdict = for_slack(&decided.verdict);
    let cost = dollars(decided.cost_usd);
    let total = decided.units_total;
    let units = if total == 1 { "unit" } else { "units" };
    if decided.failing.is_empty() {
        return format!("cowork: batch {id} {verdict} — {total} {units} passing, {cost}");
    }
    let mut line = format!(
        "cowork: batch {id} {verdict} — {} of {total} {units} failing ({})",
        decided.failing.len(),
        named(&decided.failing)
    );
    if !decided.quarantined.is_empty() {
        line.push_str(&format!(", {} quarantined", decided.quarantined.len()));
    }
    line.push_str(&format!(", {cost}"));
    line
}

/// The first [`NAMED_UNITS`] labels and how many more.
fn named(labels: &[String]) -> String {
    let mut shown: Vec<String> = labels
        .iter()
        .take(NAMED_UNITS)
        .map(|label| for_slack(label))
        .collect();
    if labels.len() > NAMED_UNITS {
        shown.push(format!("+{} more", labels.len() - NAMED_UNITS));
    }
    shown.join(", ")
}

/// `$4.20`.
fn dollars(usd: f64) -> String {
    format!("${usd:.2}")
}

/// Outside text (unit labels, reasons, worker ids) as Slack shows it literally: `&`, `<` and
/// `>` escaped as Slack asks (they would start a link or a mention), control and bidi
/// characters as visible escapes.
fn for_slack(text: &str) -> String {
    crate::safe_text::for_terminal(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block_key = [0u8; BLOCK];
    if key.len() > BLOCK {
        block_key[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block_key[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block_key.map(|k| k ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// The `Cowork-Signature` header of `body` sent at `timestamp` (Unix seconds):
/// `t=<timestamp>,v1=<hex of HMAC-SHA256(secret, "<timestamp>.<body>")>`.
pub fn signature_header(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let mut signed = format!("{timestamp}.").into_bytes();
    signed.extend_from_slice(body);
    format!("t={timestamp},v1={}", hex(&hmac_sha256(secret, &signed)))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

#[cfg(test)]
mod tests;
