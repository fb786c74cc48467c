//! The stall watchdog: on every refresh of the fleet view, for every batch this process
//! supervises, whether it has jobs outstanding and none started or finished for its
//! `--stall-after`, and why (`cowork_core::stall` decides; the clock, the workers registry and
//! the fabric's health are read here and passed in). A stall is merged into the batch's
//! progress (`cowork status`, `cowork watch`, the live page) and counted in `/metrics`.
//!
//! [`became_stalled`] is the one place where a batch becomes stalled: it logs, tells the
//! notification hooks (a `stalled` event) and, with `--on-stall cancel`, cancels the batch as `cowork cancel` does with
//! the reason recorded in its controls. A paused batch is never cancelled for its pause.

use std::collections::HashMap;
use std::sync::Arc;

use cowork_core::stall::{
    ProgressMark, StallInputs, default_stall_after_ms, live_workers, outstanding, stall_reason,
};
use cowork_schema::BatchId;
use cowork_schema::api::{BatchStall, StallReason};
use cowork_schema::job::PROTOCOL_VERSION;
use cowork_schema::registry::WorkerInfo;

use crate::service::{LiveBatch, Service};

/// Recent batches whose run times set the default `--stall-after`.
const HISTORY_BATCHES: usize = 20;

/// What the watchdog remembers of one batch between refreshes.
#[derive(Debug)]
struct Watched {
    mark: ProgressMark,
    stall_after_ms: u64,
}

/// The watchdog's memory of the batches it watches.
#[derive(Debug, Default)]
pub(crate) struct StallWatch {
    watched: HashMap<BatchId, Watched>,
}

impl StallWatch {
    /// Looks at every running batch once, at `now_ms`. `workers` is `None` when the workers
    /// registry did not answer (the broker is then taken as unreachable).
    pub(crate) async fn refresh(
        &mut self,
        service: &Arc<Service>,
        workers: Option<&[WorkerInfo]>,
        now_ms: u64,
    ) {
        let running: Vec<(BatchId, Arc<LiveBatch>)> = service
            .live_batches_by_id()
            .into_iter()
            .filter(|(_, live)| live.end.borrow().is_none())
            .collect();
        self.watched
            .retain(|id, _| running.iter().any(|(running, _)| running == id));
        let broker_healthy = workers.is_some() && service.views.fabric.borrow().stalls.is_empty();
        for (batch_id, live) in running {
            let progress = live.progress.borrow().clone();
            if !self.watched.contains_key(&batch_id) {
                let stall_after_ms = match live.stall_policy.after_ms {
                    Some(after_ms) => after_ms,
                    None => default_after(service).await,
                };
                self.watched.insert(
                    batch_id.clone(),
                    Watched {
                        mark: ProgressMark::new(&progress, now_ms),
                        stall_after_ms,
                    },
                );
            }
            let Some(watched) = self.watched.get_mut(&batch_id) else {
                continue;
            };
            watched.mark.observe(&progress, now_ms);
            let mut tiers: Vec<_> = live.tiers.clone();
            tiers.sort_by_key(|tier| tier.as_str());
            tiers.dedup();
            let tiers: Vec<_> = tiers
                .into_iter()
                .map(|tier| {
                    let live = workers.map_or(0, |workers| {
                        live_workers(tier, workers, now_ms, PROTOCOL_VERSION)
                    });
                    (tier, live)
                })
                .collect();
            let inputs = StallInputs {
                now_ms,
                progress_at_ms: watched.mark.at_ms(),
                outstanding: outstanding(&progress),
                tiers: &tiers,
                paused: live.controls.borrow().paused,
                broker_healthy,
                sandbox_start_failures: watched.mark.failures_since(&progress),
                stall_after_ms: watched.stall_after_ms,
            };
            let reason = stall_reason(&inputs);
            let stall = reason.map(|reason| BatchStall {
                message: reason.describe(),
                reason,
                progress_at_ms: watched.mark.at_ms(),
                stall_after_ms: watched.stall_after_ms,
                cancelled: false,
            });
            update(service, &batch_id, &live, stall).await;
        }
    }
}

/// The default `--stall-after`, from the recent batches' run times.
async fn default_after(service: &Service) -> u64 {
    let history = service
        .history
        .recent(service.ports.store.as_ref(), HISTORY_BATCHES, None)
        .await;
    default_stall_after_ms(&history)
}

/// Stores the watchdog's new verdict on a batch; a batch that was not stalled and now is, or
/// is stalled for another reason now, goes through [`became_stalled`].
async fn update(
    service: &Service,
    batch_id: &BatchId,
    live: &LiveBatch,
    stall: Option<BatchStall>,
) {
    let was_stalled = live.stall.borrow().is_some();
    match stall {
        None => {
            if was_stalled {
                tracing::info!(batch_id = %batch_id, "the stalled batch moves again");
                live.stall.send_replace(None);
            }
        }
        Some(stall) if was_stalled => {
            // Same stall: a new reason is said and told again (a stall first seen with no cause
            // in sight is often a worker whose heartbeat was not late yet); a batch already
            // cancelled for its stall is left as it is.
            let (same_reason, cancelled) = live
                .stall
                .borrow()
                .as_ref()
                .map_or((false, false), |current| {
                    (current.reason == stall.reason, current.cancelled)
                });
            if !same_reason && !cancelled {
                became_stalled(service, batch_id, live, stall).await;
            }
        }
        Some(stall) => became_stalled(service, batch_id, live, stall).await,
    }
}

/// Where a batch becomes stalled: logs it, shows it, tells the notification hooks and, with
/// `--on-stall cancel`, cancels the batch.
pub(crate) async fn became_stalled(
    service: &Service,
    batch_id: &BatchId,
    live: &LiveBatch,
    mut stall: BatchStall,
) {
    tracing::warn!(
        batch_id = %batch_id,
        reason = %stall.message,
        stall_after_ms = stall.stall_after_ms,
        "batch stalled: jobs outstanding and none started or finished"
    );
    // Said before the cancel, so the batch's end keeps it (an ended batch keeps only a stall
    // it was cancelled for).
    stall.cancelled = live.stall_policy.cancel && stall.reason != StallReason::Paused;
    live.stall.send_replace(Some(stall.clone()));
    if stall.cancelled
        && let Err(error) = service.cancel_stalled(batch_id, &stall.message).await
    {
        tracing::warn!(batch_id = %batch_id, error = %error, "cancelling the stalled batch failed");
        stall.cancelled = false;
        live.stall.send_replace(Some(stall.clone()));
    }
    // The batch's hooks and the coordinator's: the same batch and reason give the same event
    // id, so a stall said again after a restart is dropped by the receiver.
    service
        .notifier
        .send(cowork_core::notify::NotifyEvent::Stalled {
            batch_id: batch_id.clone(),
            reason: stall.message,
        });
}
