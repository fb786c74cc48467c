//! The notifications of a batch run in this process: its end (decided or cancelled) told to
//! its hooks, then a bounded wait for the deliveries, since the process is about to exit.

use std::time::Duration;

use cowork_coordinator::notify::decided_event;
use cowork_coordinator::supervisor::{SuperviseEnd, SuperviseError};
use cowork_core::notify::{NotifyEvent, Verdict};
use cowork_core::plan::Plan;

use super::EmbeddedRun;

/// How long the end of `cowork run` waits for its notifications: a hook that is down costs
/// the run this much, not the ten minutes a coordinator retries for.
pub const NOTIFY_GRACE: Duration = Duration::from_secs(30);

/// Earlier batches looked at for "newly failing".
const HISTORY_BATCHES: usize = 20;

/// Tells the batch's hooks how it ended and waits for the deliveries (at most
/// [`NOTIFY_GRACE`]). A supervision that failed tells nothing: the run reports its error.
pub(super) async fn notify_end(
    embedded: &EmbeddedRun,
    plan: &Plan,
    end: &Result<SuperviseEnd, SuperviseError>,
) {
    let Some(notifier) = &embedded.notifier else {
        return;
    };
    let event = match end {
        Ok(SuperviseEnd::Decided(outcome)) => {
            let history = cowork_coordinator::history::recent_stats(
                embedded.store.as_ref(),
                HISTORY_BATCHES,
                Some(&plan.batch_id),
            )
            .await
            .unwrap_or_default();
            let verdict = Verdict {
                verdict: if outcome.reduction.ok { "PASS" } else { "FAIL" }.to_owned(),
                exit_code: outcome.exit_code,
                cost_usd: outcome.progress.cost_usd,
            };
            decided_event(
                &outcome.stats,
                outcome.reduction.judging.min_pass_rate,
                &history,
                verdict,
            )
        }
        Ok(SuperviseEnd::Cancelled { progress }) => NotifyEvent::Cancelled {
            batch_id: plan.batch_id.clone(),
            cost_usd: progress.cost_usd,
        },
        Err(_) => return,
    };
    notifier.send(event);
    if !notifier.drain(NOTIFY_GRACE).await {
        tracing::warn!(
            grace_s = NOTIFY_GRACE.as_secs(),
            "a notification was still being retried when the run ended; it is not sent"
        );
    }
}
