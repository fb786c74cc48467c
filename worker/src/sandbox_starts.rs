//! Sandbox start failures in a row, and the tiers a worker stops taking because of them.
//!
//! A job whose sandbox does not start (a container that cannot be created or started, a
//! missing image, a VM that does not boot, a full disk) is handed back for another worker: it
//! says nothing about the job and everything about this worker. After
//! [`SandboxBackoff::after`] such failures in a row on one tier, the worker stops taking that
//! tier for a while ([`SandboxBackoff::first`], doubling up to [`SandboxBackoff::max`]); a job
//! of the tier whose sandbox starts resets both the count and the doubling. The heartbeat
//! shows the count and the backed-off tiers (`cowork workers`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use cowork_schema::event::InfraClass;
use cowork_schema::job::Tier;
use cowork_schema::registry::TierBackoff;
use tokio::time::Instant;

/// When a worker backs off a tier after sandbox start failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SandboxBackoff {
    /// Failures in a row on one tier that start a back-off (0 = never back off).
    pub after: u32,
    /// The first back-off; each further one in a row doubles it.
    pub first: Duration,
    /// The longest back-off.
    pub max: Duration,
}

impl Default for SandboxBackoff {
    fn default() -> SandboxBackoff {
        SandboxBackoff {
            after: 3,
            first: Duration::from_secs(60),
            max: Duration::from_secs(600),
        }
    }
}

impl SandboxBackoff {
    /// The `n`th back-off in a row (1-based): the fabric's doubling schedule, unjittered (the
    /// worker says when it takes the tier again, so the time must be the one it keeps).
    fn delay(&self, n: u32) -> Duration {
        cowork_fabric::backoff::Backoff::new(self.first, self.max.max(self.first)).nominal(n)
    }
}

#[derive(Debug, Default)]
struct TierState {
    /// Failures in a row on this tier.
    in_a_row: u32,
    /// Back-offs in a row (the doubling).
    backoffs: u32,
    /// Until when the tier is not taken, and the same as wall-clock milliseconds.
    until: Option<(Instant, u64)>,
}

#[derive(Debug, Default)]
struct State {
    policy: SandboxBackoff,
    /// Failures in a row over all tiers.
    in_a_row: u32,
    tiers: BTreeMap<Tier, TierState>,
}

/// The worker's sandbox start failures, shared by its jobs, its job loop and its heartbeat.
#[derive(Debug, Default)]
pub struct SandboxStarts {
    state: Mutex<State>,
    /// Woken when a tier is backed off, so the job loop stops pulling it at once.
    changed: tokio::sync::Notify,
}

impl SandboxStarts {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Only plain counters change under the lock; a poisoned one is still consistent.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets when the worker backs off a tier (`cowork worker --sandbox-backoff-*`).
    pub fn set_policy(&self, policy: SandboxBackoff) {
        self.lock().policy = policy;
    }

    /// A job of `tier` whose sandbox did not start. Returns the back-off it started, if any.
    pub fn failed(&self, tier: Tier) -> Option<Duration> {
        let mut state = self.lock();
        state.in_a_row = state.in_a_row.saturating_add(1);
        let policy = state.policy;
        let tier_state = state.tiers.entry(tier).or_default();
        tier_state.in_a_row = tier_state.in_a_row.saturating_add(1);
        if policy.after == 0 || tier_state.in_a_row < policy.after {
            return None;
        }
        // Every further failure once the count is reached (a job pulled just before the
        // back-off began) starts the next, longer back-off.
        tier_state.backoffs = tier_state.backoffs.saturating_add(1);
        let delay = policy.delay(tier_state.backoffs);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        let until_ms = now_ms.saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        tier_state.until = Some((Instant::now() + delay, until_ms));
        drop(state);
        self.changed.notify_waiters();
        Some(delay)
    }

    /// Counts a job of `tier` whose sandbox did not start (`failed` with that class) or
    /// started (`None`); other failures before the start say nothing about the sandbox.
    pub(crate) fn count(&self, tier: Tier, failed: Option<InfraClass>) {
        match failed {
            None => self.started(tier),
            Some(InfraClass::SandboxStart) => {
                if let Some(delay) = self.failed(tier) {
                    tracing::warn!(
                        tier = tier.as_str(),
                        backoff_s = delay.as_secs(),
                        "sandbox start failed several times in a row: not taking this tier for a while"
                    );
                }
            }
            Some(_) => {}
        }
    }

    /// A job of `tier` whose sandbox started: the counts and the doubling start again.
    pub fn started(&self, tier: Tier) {
        let mut state = self.lock();
        state.in_a_row = 0;
        if let Some(tier_state) = state.tiers.get_mut(&tier) {
            *tier_state = TierState::default();
        }
    }

    /// Failures in a row over all tiers (the heartbeat's `sandboxStartFailures`).
    pub fn in_a_row(&self) -> u32 {
        self.lock().in_a_row
    }

    /// The tiers not taken now, with their failures and the end of their back-off.
    pub fn backed_off(&self) -> Vec<TierBackoff> {
        let now = Instant::now();
        self.lock()
            .tiers
            .iter()
            .filter_map(|(tier, state)| match state.until {
                Some((until, until_ms)) if until > now => Some(TierBackoff {
                    tier: *tier,
                    failures: state.in_a_row,
                    until_ms,
                }),
                _ => None,
            })
            .collect()
    }

    /// `tiers` without the backed-off ones, and the earliest end of a back-off among them.
    pub fn takeable(&self, tiers: &[Tier]) -> (Vec<Tier>, Option<Instant>) {
        let now = Instant::now();
        let state = self.lock();
        let mut next_end: Option<Instant> = None;
        let takeable = tiers
            .iter()
            .copied()
            .filter(|tier| match state.tiers.get(tier).and_then(|s| s.until) {
                Some((until, _)) if until > now => {
                    next_end = Some(next_end.map_or(until, |end| end.min(until)));
                    false
                }
                _ => true,
            })
            .collect();
        (takeable, next_end)
    }

    /// Resolves when a tier is backed off after this future is enabled (or first polled).
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> SandboxStarts {
        let starts = SandboxStarts::default();
        starts.set_policy(SandboxBackoff {
            after: 3,
            first: Duration::from_secs(60),
            max: Duration::from_secs(600),
        });
        starts
    }

    #[test]
    fn three_failures_in_a_row_back_a_tier_off_and_a_start_resets_it() {
        let starts = quick();
        let tiers = [Tier::Container, Tier::Protocol];
        assert_eq!(starts.failed(Tier::Container), None);
        assert_eq!(starts.failed(Tier::Container), None);
        assert_eq!(starts.takeable(&tiers).0, tiers.to_vec());
        assert_eq!(
            starts.failed(Tier::Container),
            Some(Duration::from_secs(60))
        );
        assert_eq!(starts.in_a_row(), 3);
        let (takeable, next_end) = starts.takeable(&tiers);
        assert_eq!(takeable, vec![Tier::Protocol]);
        assert!(next_end.is_some());
        let backed_off = starts.backed_off();
        assert_eq!(backed_off.len(), 1);
        assert_eq!(backed_off[0].tier, Tier::Container);
        assert_eq!(backed_off[0].failures, 3);
        // The next failure in a row doubles the back-off, up to the max.
        assert_eq!(
            starts.failed(Tier::Container),
            Some(Duration::from_secs(120))
        );
        for _ in 0..5 {
            starts.failed(Tier::Container);
        }
        assert_eq!(
            starts.failed(Tier::Container),
            Some(Duration::from_secs(600))
        );
        starts.started(Tier::Container);
        assert_eq!(starts.in_a_row(), 0);
        assert_eq!(starts.takeable(&tiers).0, tiers.to_vec());
        assert!(starts.backed_off().is_empty());
        assert_eq!(starts.failed(Tier::Container), None);
    }

    #[test]
    fn failures_of_one_tier_do_not_back_off_another() {
        let starts = quick();
        starts.failed(Tier::Container);
        starts.failed(Tier::Container);
        starts.failed(Tier::Protocol);
        assert_eq!(starts.in_a_row(), 3);
        assert!(starts.backed_off().is_empty());
        let never = SandboxStarts::default();
        never.set_policy(SandboxBackoff {
            after: 0,
            ..SandboxBackoff::default()
        });
        for _ in 0..5 {
            assert_eq!(never.failed(Tier::Container), None);
        }
    }
}
