//! Exponential backoff with a cap, as a pure schedule.

use std::time::Duration;

/// A backoff schedule: `initial`, doubled per attempt, capped at `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Delay before the second attempt.
    pub initial: Duration,
    /// Largest delay between two attempts.
    pub max: Duration,
}

impl Default for Backoff {
    /// 200 ms doubling to 10 s: short enough that a blinking store costs little, long enough
    /// that a down store is not hammered.
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(10),
        }
    }
}

impl Backoff {
    /// The delay after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let shift = attempt.saturating_sub(1).min(20);
        self.initial.saturating_mul(1u32 << shift).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_and_cap() {
        let backoff = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        let delays: Vec<u128> = (1..=6).map(|a| backoff.delay(a).as_millis()).collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(1));
    }
}
