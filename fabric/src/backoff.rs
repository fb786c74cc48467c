//! The one backoff schedule of the workspace: exponential with a cap, and jittered.
//!
//! Every retry loop (uploads, event publishes, naks, pulls, reconnects, the coordinator's
//! supervision retries) waits through [`Backoff::delay`]. The jitter matters on a fleet: when
//! a store or a broker blinks, every worker fails at the same moment, and without jitter they
//! would all retry at the same moments too, in lockstep, for as long as the outage lasts.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// A backoff schedule: `initial`, doubled per attempt, capped at `max`, each delay drawn
/// uniformly from its upper half ("equal jitter": never less than half the nominal delay, so
/// a retry still backs off, and never more than the nominal delay, so `max` is a bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Nominal delay before the second attempt.
    pub initial: Duration,
    /// Largest delay between two attempts.
    pub max: Duration,
}

impl Default for Backoff {
    /// A worker's schedule before and after spend (`cowork_schema::retries::worker`): 200 ms
    /// doubling to 10 s, short enough that a blinking store costs little, long enough that a
    /// down store is not hammered.
    fn default() -> Self {
        Backoff::of(cowork_schema::retries::worker::BEFORE_SPEND)
    }
}

impl Backoff {
    /// The jittered form of one of the fleet's schedules (`cowork_schema::retries`).
    pub const fn of(schedule: cowork_schema::retries::Schedule) -> Backoff {
        Backoff::new(schedule.initial, schedule.max)
    }

    /// A schedule from `initial` doubling to `max`.
    pub const fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff { initial, max }
    }

    /// The nominal (unjittered) delay after failed attempt number `attempt` (1-based).
    pub fn nominal(&self, attempt: u32) -> Duration {
        let shift = attempt.saturating_sub(1).min(20);
        self.initial.saturating_mul(1u32 << shift).min(self.max)
    }

    /// The delay to wait after failed attempt number `attempt` (1-based): the nominal delay
    /// with jitter, between half of it and all of it.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.delay_at(attempt, next_unit())
    }

    /// [`Backoff::delay`] with the random draw given: `unit` in `[0, 1)` picks the point in
    /// the upper half of the nominal delay. Pure, for tests.
    pub fn delay_at(&self, attempt: u32, unit: f64) -> Duration {
        let nominal = self.nominal(attempt);
        let unit = unit.clamp(0.0, 1.0);
        nominal / 2 + nominal.mul_f64(0.5 * unit)
    }
}

thread_local! {
    /// A per-thread xorshift state, seeded from the standard library's per-process random
    /// hasher keys: jitter needs spread between processes, not cryptographic quality.
    static JITTER_STATE: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(u64::from(std::process::id()));
    // Zero is the one state xorshift never leaves.
    hasher.finish() | 1
}

/// The next draw in `[0, 1)`.
fn next_unit() -> f64 {
    JITTER_STATE.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        // The top 53 bits as a fraction: every value is exactly representable.
        (x >> 11) as f64 / (1u64 << 53) as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nominal_delays_double_and_cap() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let delays: Vec<u128> = (1..=6).map(|a| backoff.nominal(a).as_millis()).collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff.nominal(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn jitter_stays_in_the_upper_half_of_the_nominal_delay() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(backoff.delay_at(3, 0.0), Duration::from_millis(200));
        assert_eq!(backoff.delay_at(3, 0.5), Duration::from_millis(300));
        assert_eq!(backoff.delay_at(3, 1.0), Duration::from_millis(400));
        for attempt in 1..=8 {
            let delay = backoff.delay(attempt);
            let nominal = backoff.nominal(attempt);
            assert!(
                delay >= nominal / 2 && delay <= nominal,
                "{delay:?} vs {nominal:?}"
            );
        }
    }

    #[test]
    fn draws_spread_so_retries_do_not_move_in_lockstep() {
        let draws: Vec<f64> = (0..64).map(|_| next_unit()).collect();
        assert!(draws.iter().all(|unit| (0.0..1.0).contains(unit)));
        let distinct: std::collections::BTreeSet<u64> =
            draws.iter().map(|unit| (unit * 1e6) as u64).collect();
        assert!(distinct.len() > 60, "{distinct:?}");
    }
}
