//! How long a batch still needs: the rate at which its jobs were seen to finish, applied to the
//! jobs left.
//!
//! The rate is observed, over a window the caller measured: jobs finished per second of wall
//! time. That rate already carries the fleet's concurrency (four slots finishing 5 s jobs
//! finish 0.8 jobs a second), so `remaining / rate` is `remaining × time per job /
//! concurrency` without having to know either. Jobs that had finished before the window began
//! must not count in it, or a watch started late on a long batch divides a few seconds by
//! dozens of jobs and promises the end in seconds.
//!
//! There is no estimate when the batch is no longer open (decided, cancelled, stopping: nothing
//! more will be admitted), when nothing is left, or when no job finished in the window: "ETA
//! 0s" with most jobs still to run is worse than no figure.
//!
//! **Invariant:** pure; the window and its counts are arguments, no clock is read.

use std::time::Duration;

/// What an estimate is made from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EtaInput {
    /// The batch still admits and runs jobs (planned or running; not stopping, cancelled or
    /// decided).
    pub open: bool,
    /// Jobs not finished yet that will run: planned, minus skipped, minus finished.
    pub remaining: u64,
    /// Jobs that finished within the observation window.
    pub finished_in_window: u64,
    /// How long the window lasted.
    pub window: Duration,
}

/// The time left at the observed rate, `remaining × window / finished_in_window`; `None` when
/// there is nothing to estimate or nothing to estimate from (see the module doc).
pub fn eta(input: &EtaInput) -> Option<Duration> {
    if !input.open || input.remaining == 0 || input.finished_in_window == 0 {
        return None;
    }
    let window_seconds = input.window.as_secs_f64();
    if window_seconds <= 0.0 {
        return None;
    }
    let seconds = input.remaining as f64 * window_seconds / input.finished_in_window as f64;
    // A rate seen over a window may be wildly off, but a finite, non-negative one never fails
    // to convert; anything else is no estimate.
    Duration::try_from_secs_f64(seconds).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: EtaInput, expected: Option<u64>) {
        assert_eq!(
            eta(&input).map(|left| left.as_secs_f64().round() as u64),
            expected,
            "{input:?}"
        );
    }

    fn open(remaining: u64, finished_in_window: u64, window_seconds: u64) -> EtaInput {
        EtaInput {
            open: true,
            remaining,
            finished_in_window,
            window: Duration::from_secs(window_seconds),
        }
    }

    #[test]
    fn the_estimate_is_the_observed_rate_applied_to_what_is_left() {
        // 20 five-second jobs left on 4 slots: 4 slots finished 8 jobs in 10 s, 0.8 a second,
        // so 25 s; the bug counted jobs finished before the watch began and said 2 s.
        check(open(20, 8, 10), Some(25));
        // Half done in 10 s: 10 s more.
        check(open(50, 50, 10), Some(10));
        // 72 of 80 left after 8 finished in 40 s: 6 minutes, not "0s".
        check(open(72, 8, 40), Some(360));
    }

    #[test]
    fn there_is_no_estimate_without_a_rate_or_an_open_batch() {
        // Nothing finished in the window (a single status snapshot, a watch just started).
        check(open(72, 0, 40), None);
        // An empty window.
        check(open(72, 8, 0), None);
        // Nothing left.
        check(open(0, 80, 40), None);
        // A cancelled or decided batch runs nothing more, whatever is "left".
        check(
            EtaInput {
                open: false,
                ..open(72, 8, 40)
            },
            None,
        );
    }
}
