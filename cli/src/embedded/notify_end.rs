//! The notifications of a batch run in this process: its end (decided or cancelled) told to
//! its hooks, then a bounded wait for the deliveries, since the process is about to exit.

use std::time::Duration;

use cowork_coordinator::notify::decided_event;
use cowork_coordinator::supervisor::{BatchOutcome, SuperviseEnd, SuperviseError};
use cowork_core::notify::{NotifyEvent, Verdict};
use cowork_core::plan::Plan;
use cowork_schema::batch::BatchMode;

use super::EmbeddedRun;

/// How long the end of `cowork run` waits for its notifications: a hook that is down costs
/// the run this much, not the ten minutes a coordinator retries for.
pub const NOTIFY_GRACE: Duration = Duration::from_secs(30);

/// Earlier batches looked at for "newly failing".
const HISTORY_BATCHES: usize = 20;

/// Tells the batch's hooks how it ended and waits for the deliveries (at most
/// [`NOTIFY_GRACE`]). A supervision that failed tells nothing: the run reports its error. A
/// decided eval batch is told by `cowork eval` once its A/B verdict is known
/// ([`tell_decided`]).
pub(super) async fn notify_end(
    embedded: &EmbeddedRun,
    plan: &Plan,
    end: &Result<SuperviseEnd, SuperviseError>,
) {
    match end {
        Ok(SuperviseEnd::Decided(_)) if plan.mode == BatchMode::Eval => {}
        Ok(SuperviseEnd::Decided(outcome)) => {
            let verdict = Verdict {
                verdict: if outcome.reduction.ok { "PASS" } else { "FAIL" }.to_owned(),
                exit_code: outcome.exit_code,
                cost_usd: outcome.progress.cost_usd,
            };
            tell_decided(embedded, plan, outcome, verdict).await;
        }
        Ok(SuperviseEnd::Cancelled { progress }) => {
            let event = NotifyEvent::Cancelled {
                batch_id: plan.batch_id.clone(),
                cost_usd: progress.cost_usd,
            };
            tell(embedded, event).await;
        }
        Err(_) => {}
    }
}

/// Tells the hooks of a batch run here that it was decided with `verdict`, and waits for the
/// deliveries (at most [`NOTIFY_GRACE`]).
pub async fn tell_decided(
    embedded: &EmbeddedRun,
    plan: &Plan,
    outcome: &BatchOutcome,
    verdict: Verdict,
) {
    if embedded.notifier.is_none() {
        return;
    }
    let history = cowork_coordinator::history::recent_stats(
        embedded.store.as_ref(),
        HISTORY_BATCHES,
        Some(&plan.batch_id),
    )
    .await
    .unwrap_or_default();
    let event = decided_event(&outcome.stats, &outcome.reduction, &history, verdict);
    tell(embedded, event).await;
}

/// Sends `event` and waits for its deliveries (at most [`NOTIFY_GRACE`]).
async fn tell(embedded: &EmbeddedRun, event: NotifyEvent) {
    let Some(notifier) = &embedded.notifier else {
        return;
    };
    notifier.send(event);
    if !notifier.drain(NOTIFY_GRACE).await {
        tracing::warn!(
            grace_s = NOTIFY_GRACE.as_secs(),
            "a notification was still being retried when the run ended; it is not sent"
        );
    }
}
