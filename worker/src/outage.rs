//! Saying an outage of the queue once, not once per retry.
//!
//! While a stream of the queue has no leader, every pull, publish, heartbeat and lease renewal
//! fails and is retried, some of them every few hundred milliseconds. [`Outages`] turns each
//! such streak into one warning when it starts and one line when it ends (with how long it
//! lasted and how many tries failed); the tries in between go to the debug level.
//! [`watch_fabric`] names the stream or bucket that stalls, once per stall, from the
//! `FabricHealth` checks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cowork_fabric::FabricHealth;
use tokio_util::sync::CancellationToken;

/// The failure streaks under way, by operation.
#[derive(Debug, Default)]
pub struct Outages {
    /// Operation → (when its streak started, failures so far).
    streaks: Mutex<BTreeMap<&'static str, (Instant, u64)>>,
}

impl Outages {
    /// Records a failure of `operation` (a fixed phrase: `pulling jobs`, `publishing an event`):
    /// a warning when it starts a streak, a debug line otherwise.
    pub fn failed(&self, operation: &'static str, error: &dyn std::fmt::Display) {
        let started = {
            let mut streaks = self
                .streaks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let streak = streaks.entry(operation).or_insert((Instant::now(), 0));
            streak.1 += 1;
            streak.1 == 1
        };
        if started {
            tracing::warn!(operation, error = %error, "the queue fails; retrying quietly until it works again");
        } else {
            tracing::debug!(operation, error = %error, "still failing, retrying");
        }
    }

    /// Records a success of `operation`: ends its streak, if any, with one line.
    pub fn succeeded(&self, operation: &'static str) {
        let ended = self
            .streaks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(operation);
        if let Some((since, failures)) = ended {
            tracing::info!(
                operation,
                failures,
                outage_s = since.elapsed().as_secs(),
                "the queue works again"
            );
        }
    }
}

/// How often the worker checks the queue's streams while it runs: often enough to name a stall
/// within seconds of it, rare enough to cost the servers nothing.
const CHECK_EVERY: Duration = Duration::from_secs(5);

/// Checks the queue's streams and buckets until `stop`, logging each stall once when it starts
/// (naming it and why) and once when it ends (with how long it lasted).
pub async fn watch_fabric(health: Arc<dyn FabricHealth>, stop: CancellationToken) {
    // (kind, name) → when it was first seen stalled.
    let mut stalled: BTreeMap<(&'static str, String), Instant> = BTreeMap::new();
    loop {
        // Abandoning a check when stopped is safe: it only reads.
        let checked = tokio::select! {
            _ = stop.cancelled() => return,
            checked = health.check() => checked,
        };
        let mut still = BTreeMap::new();
        for object in &checked {
            let key = (object.kind.as_str(), object.name.clone());
            match object.stall() {
                Some(reason) => {
                    let since = stalled.get(&key).copied().unwrap_or_else(|| {
                        tracing::warn!(kind = key.0, name = %key.1, reason = %reason, "a stream of the queue stalls; jobs wait for it");
                        Instant::now()
                    });
                    still.insert(key, since);
                }
                None => {
                    if let Some(since) = stalled.get(&key) {
                        tracing::info!(kind = key.0, name = %key.1, stalled_s = since.elapsed().as_secs(), "a stream of the queue serves again");
                    }
                }
            }
        }
        stalled = still;
        // Abandoning the pause when stopped is safe: nothing is held across it.
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streak_is_counted_once_and_ends_on_success() {
        let outages = Outages::default();
        outages.failed("pulling jobs", &"no leader");
        outages.failed("pulling jobs", &"no leader");
        outages.failed("publishing an event", &"timed out");
        {
            let streaks = outages.streaks.lock().expect("not poisoned");
            assert_eq!(streaks.get("pulling jobs").map(|s| s.1), Some(2));
            assert_eq!(streaks.get("publishing an event").map(|s| s.1), Some(1));
        }
        outages.succeeded("pulling jobs");
        outages.succeeded("heartbeat");
        let streaks = outages.streaks.lock().expect("not poisoned");
        assert!(!streaks.contains_key("pulling jobs"));
        assert!(streaks.contains_key("publishing an event"));
    }
}
