//! Which of a batch's runs the report details in full: all of a small batch, the failing ones
//! first in a big one, so that a loader streaming a batch of any size holds a bounded number.

use super::run::RunState;

/// Runs that get a section of their own in the HTML page (and the most runs a loader keeps
/// whole). Above this, failing and errored runs come first and the rest are only squares of
/// their strip: a page of a 100 000-job sweep must still open, and its loader must not hold
/// every result (16 KiB a run).
pub const MAX_RUN_SECTIONS: usize = 2000;

/// Runs detailed in a batch of more than [`MAX_RUN_SECTIONS`] runs: a run's section is about
/// 2 KB, so that the page of a sweep of any size stays within a few MB.
pub const SECTIONS_OF_A_BIG_BATCH: usize = 300;

/// Picks which of a batch's runs the report details, offered one by one in (unit, repeat
/// index) order: all of them up to [`MAX_RUN_SECTIONS`]; above, every run that did not pass
/// (up to [`SECTIONS_OF_A_BIG_BATCH`]), then passing ones, each in unit and index order. It holds at most twice
/// the limit, so a loader applies it as it streams a batch of any size.
#[derive(Debug)]
pub struct DetailedRuns<T> {
    not_passing: Vec<(usize, T)>,
    passing: Vec<(usize, T)>,
    offered: usize,
}

impl<T> Default for DetailedRuns<T> {
    fn default() -> Self {
        Self {
            not_passing: Vec::new(),
            passing: Vec::new(),
            offered: 0,
        }
    }
}

impl<T> DetailedRuns<T> {
    /// Offers the next run, in state `state`.
    pub fn offer(&mut self, state: RunState, run: T) {
        let bucket = if state == RunState::Pass {
            &mut self.passing
        } else {
            &mut self.not_passing
        };
        if bucket.len() < MAX_RUN_SECTIONS {
            bucket.push((self.offered, run));
        }
        self.offered += 1;
    }

    /// The runs picked, in the order they were offered.
    pub fn finish(self) -> Vec<T> {
        let limit = if self.offered > MAX_RUN_SECTIONS {
            SECTIONS_OF_A_BIG_BATCH
        } else {
            MAX_RUN_SECTIONS
        };
        let mut chosen = self.not_passing;
        chosen.truncate(limit);
        let room = limit.saturating_sub(chosen.len());
        chosen.extend(self.passing.into_iter().take(room));
        chosen.sort_unstable_by_key(|(position, _)| *position);
        chosen.into_iter().map(|(_, run)| run).collect()
    }
}

#[cfg(test)]
mod detailed_runs_tests {
    use super::{DetailedRuns, MAX_RUN_SECTIONS, RunState, SECTIONS_OF_A_BIG_BATCH};

    /// A sweep bigger than the page details: every failing run is kept whole (up to the
    /// limit), then the first passing ones, in the order offered, and never more than the
    /// limit, whatever the number of runs offered.
    #[test]
    fn a_big_batch_keeps_its_failing_runs_whole_then_the_first_passing_up_to_the_limit() {
        let mut picker = DetailedRuns::default();
        let failing: Vec<usize> = (0..100_000).step_by(997).collect();
        for position in 0..100_000 {
            let state = if failing.contains(&position) {
                RunState::Fail
            } else {
                RunState::Pass
            };
            picker.offer(state, position);
        }
        let kept = picker.finish();
        assert_eq!(kept.len(), SECTIONS_OF_A_BIG_BATCH);
        assert!(failing.iter().all(|position| kept.contains(position)));
        assert!(
            kept.windows(2).all(|pair| pair[0] < pair[1]),
            "offered order"
        );
        let passing_kept = SECTIONS_OF_A_BIG_BATCH - failing.len();
        let first_passing: Vec<usize> = (0..100_000)
            .filter(|position| !failing.contains(position))
            .take(passing_kept)
            .collect();
        assert!(first_passing.iter().all(|position| kept.contains(position)));
    }

    /// A batch the page details whole keeps every run.
    #[test]
    fn a_small_batch_keeps_every_run_whole() {
        let mut picker = DetailedRuns::default();
        for position in 0..MAX_RUN_SECTIONS {
            picker.offer(RunState::Pass, position);
        }
        assert_eq!(picker.finish(), (0..MAX_RUN_SECTIONS).collect::<Vec<_>>());
    }
}
