//! The lease on one delivery: the queue's ack deadline renewed until the delivery is settled.
//!
//! A delivery that is neither acked nor renewed within `ack_wait` goes to another worker, which
//! runs the job again — and pays for it again. So the renewal belongs to the delivery, not to
//! one phase of the job: it starts when the job is pulled and stops only when the [`Lease`] is
//! dropped, after the ack (or nak). Bundle fetches, uploads and event publishes that wait on a
//! slow or absent server are covered as well as the run itself.

use std::sync::Arc;
use std::time::Duration;

use cowork_fabric::queue::Acker;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Renews a delivery's ack deadline until dropped.
pub struct Lease {
    _renewal: DropGuard,
}

impl Lease {
    /// Starts renewing through `acker` every `every`, until the returned guard is dropped.
    ///
    /// A renewal whose answer is slower than `every` is abandoned at the next tick (its request
    /// was sent already, and the server applies it when it arrives), so a slow server never
    /// stretches the interval between two renewals past twice `every`.
    pub fn hold(acker: Arc<dyn Acker>, every: Duration) -> Lease {
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        // Detached on purpose: the task holds nothing but the acker, and it ends when the
        // guard below is dropped, which every path of a job does when it settles the delivery.
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // Stopping between two renewals, or in the middle of one, leaves nothing
                // half done: a renewal only extends a deadline.
                tokio::select! {
                    biased;
                    _ = stopped.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                tokio::select! {
                    biased;
                    _ = stopped.cancelled() => return,
                    renewed = tokio::time::timeout(every, acker.in_progress()) => match renewed {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => tracing::warn!(error = %error, "renewing the job's lease failed"),
                        Err(_) => tracing::warn!(every_ms = every.as_millis() as u64, "renewing the job's lease got no answer in time"),
                    },
                }
            }
        });
        Lease {
            _renewal: stop.drop_guard(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    use cowork_fabric::QueueError;

    /// Counts renewals; each answer takes `answer_after`.
    struct CountingAcker {
        renewals: AtomicU32,
        answer_after: Duration,
    }

    #[async_trait::async_trait]
    impl Acker for CountingAcker {
        async fn ack(&self) -> Result<(), QueueError> {
            Ok(())
        }
        async fn nak(&self, _delay: Duration) -> Result<(), QueueError> {
            Ok(())
        }
        async fn in_progress(&self) -> Result<(), QueueError> {
            self.renewals.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.answer_after).await;
            Ok(())
        }
    }

    async fn renewals_in(window: Duration, answer_after: Duration) -> (u32, u32) {
        let acker = Arc::new(CountingAcker {
            renewals: AtomicU32::new(0),
            answer_after,
        });
        let lease = Lease::hold(acker.clone(), Duration::from_secs(10));
        tokio::time::sleep(window).await;
        let while_held = acker.renewals.load(Ordering::SeqCst);
        drop(lease);
        tokio::time::sleep(Duration::from_secs(60)).await;
        (while_held, acker.renewals.load(Ordering::SeqCst))
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_renews_every_interval_until_dropped() {
        // Renewals at 10, 20, …, 60 s; none after the drop.
        let (while_held, after) = renewals_in(Duration::from_millis(65_000), Duration::ZERO).await;
        assert_eq!(while_held, 6);
        assert_eq!(after, 6);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_answer_does_not_stretch_the_interval() {
        // Each answer takes 25 s, longer than the interval: a renewal is still sent at least
        // every 20 s (one interval of waiting for the answer, one of waiting for the tick).
        let (while_held, _) =
            renewals_in(Duration::from_millis(65_000), Duration::from_secs(25)).await;
        assert!(while_held >= 3, "{while_held} renewals in 65 s");
    }
}
