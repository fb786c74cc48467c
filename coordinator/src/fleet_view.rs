//! The coordinator's view of its fleet, refreshed every few seconds: for every batch it
//! supervises, the tiers with waiting jobs that no live worker serves (shown in the batch's
//! progress, so a batch never waits without saying why), and the workers it refuses for their
//! protocol version (logged once each). The decisions are `cowork_core::fleet`'s; this module
//! reads the workers registry and the queue and passes them in.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use cowork_core::fleet::{lost_workers, refusal, unserved_tiers_since};
use cowork_schema::job::PROTOCOL_VERSION;

use crate::service::Service;

/// How often the view is refreshed. Well under the workers registry's heartbeat TTL (30 s by
/// default): a tier that loses its last worker is named within one TTL of the worker's last
/// heartbeat, and a tier that never had one within this interval.
const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// Refreshes the fleet view until the service shuts down.
pub(crate) async fn watch_fleet(service: Arc<Service>) {
    // Workers already logged as refused, with the version they were refused for.
    let mut refused_logged: HashSet<(String, u32)> = HashSet::new();
    let mut stalls = crate::stall_watch::StallWatch::default();
    // Until one heartbeat period has passed, a worker that is up may not have beaten yet.
    let started_ms = wall_ms();
    // The first look is at once: the fair share needs the live slots before it divides them.
    let mut pause = Duration::ZERO;
    loop {
        // Abandoning the pause at shutdown is safe: nothing is held across it.
        tokio::select! {
            _ = service.shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = REFRESH_EVERY;
        let workers = service.ports.workers.list().await;
        let now_ms = wall_ms();
        if let Ok(workers) = &workers {
            service.share_live_slots(workers, now_ms);
        }
        stalls
            .refresh(&service, workers.as_deref().ok(), now_ms)
            .await;
        let workers = match workers {
            Ok(workers) => workers,
            Err(error) => {
                tracing::debug!(error = %error, "listing workers for the fleet view failed");
                continue;
            }
        };
        let lost = lost_workers(&workers, now_ms);
        let mut newly_lost = Vec::new();
        service.views.lost_workers.send_if_modified(|current| {
            if *current == lost {
                return false;
            }
            for worker in lost
                .iter()
                .filter(|w| !current.iter().any(|c| c.worker_id == w.worker_id))
            {
                tracing::warn!(
                    worker_id = %worker.worker_id,
                    busy = worker.busy,
                    "a worker running jobs stopped beating; its jobs wait for redelivery"
                );
                newly_lost.push(worker.clone());
            }
            *current = lost;
            true
        });
        notify_lost(&service, &workers, &newly_lost);
        service.views.workers_seen.send_replace(workers.clone());
        log_refused(&workers, &mut refused_logged);
        let batches: Vec<_> = service
            .live_batches()
            .into_iter()
            .filter(|batch| batch.end.borrow().is_none())
            .collect();
        if batches.is_empty() {
            continue;
        }
        let pending = match service.ports.queue.pending().await {
            Ok(pending) => pending,
            Err(error) => {
                tracing::debug!(error = %error, "reading the queue depth for the fleet view failed");
                continue;
            }
        };
        for batch in batches {
            let unserved = unserved_tiers_since(
                &batch.tiers,
                &workers,
                &pending,
                PROTOCOL_VERSION,
                started_ms,
                now_ms,
            );
            batch.unserved.send_if_modified(|current| {
                if *current == unserved {
                    return false;
                }
                for tier in unserved.iter().filter(|tier| !current.contains(tier)) {
                    tracing::warn!(
                        tier = tier.tier.as_str(),
                        waiting = tier.waiting,
                        "no live worker serves a tier with waiting jobs"
                    );
                }
                *current = unserved;
                true
            });
        }
    }
}

/// Logs each worker refused for its protocol version, once per worker and version.
fn log_refused(
    workers: &[cowork_schema::registry::WorkerInfo],
    refused_logged: &mut HashSet<(String, u32)>,
) {
    for worker in workers {
        if let Some(reason) = refusal(worker, PROTOCOL_VERSION)
            && refused_logged.insert((worker.worker_id.clone(), worker.protocol))
        {
            tracing::warn!(
                worker_id = %worker.worker_id,
                worker_protocol = worker.protocol,
                coordinator_protocol = PROTOCOL_VERSION,
                reason = %reason,
                "worker refused: it speaks another protocol version"
            );
        }
    }
}

/// Now on the wall clock, in ms: heartbeats carry the workers' wall-clock times.
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// Tells the hooks of every running batch with a tier a newly lost worker served that the
/// worker stopped mid-job (the registry does not say whose jobs it held).
fn notify_lost(
    service: &Service,
    workers: &[cowork_schema::registry::WorkerInfo],
    newly_lost: &[cowork_schema::api::LostWorker],
) {
    if newly_lost.is_empty() {
        return;
    }
    let batches = service.live_batches_by_id();
    for lost in newly_lost {
        let Some(worker) = workers.iter().find(|w| w.worker_id == lost.worker_id) else {
            continue;
        };
        let running = batches.iter().filter(|(_, live)| {
            live.end.borrow().is_none() && live.tiers.iter().any(|t| worker.tiers.contains(t))
        });
        for (batch_id, _) in running {
            service
                .notifier
                .send(cowork_core::notify::NotifyEvent::WorkerLost {
                    batch_id: batch_id.clone(),
                    worker_id: lost.worker_id.clone(),
                    jobs_held: lost.busy,
                    heartbeat_at_ms: lost.heartbeat_at_ms,
                });
        }
    }
}
