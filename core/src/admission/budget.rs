//! Budgets under parallelism (harness-behaviour.md#parallel-stop-rules,
//! harness-behaviour.md#choice-c5): how many jobs may run at once so that a cap stays a cap.
//!
//! A run's cost is known only when it finishes, so admission estimates the price of the runs it
//! starts from the prices already seen, and admits a job beside `f` others still running only
//! while the known spend plus `f + 1` runs at that price fits the cap:
//!
//! ```text
//! spent + (f + 1) × price ≤ cap          (and at most as many runs at once as runs priced)
//! ```
//!
//! The price is the highest seen so far, widened by `1/n` for what `n` runs may not have shown
//! yet (`highest × (n + 1) / n`, the classic estimate of a range's upper end from `n` samples).
//! Not the mean: a run above the mean in flight is exactly what overshoots. Until `n` runs are
//! priced, at most `n` run at once (a slow start: the first job runs alone), so the estimate
//! that admits a wave of jobs has seen at least as many prices as the wave has jobs.
//!
//! **The bound, for one unit and its `--max-budget-usd` cap.** Assume the estimate is an upper
//! bound: no run costs more than the price estimate in force while it runs. Prices vary, so this
//! is an assumption, not a theorem (harness-behaviour.md#parallel-stop-rules forbids advertising a
//! hard guarantee under parallelism); the widening and the slow start are there to make it hold in
//! practice. Let `X` be the unit's known spend plus the final price of every run in flight; at the
//! end, `X` is what the unit spent, folded and discarded runs alike.
//!
//! 1. A job admitted beside `f ≥ 1` others leaves `X ≤ spent + (f + 1) × price ≤ cap`.
//! 2. A job admitted with nothing in flight (the rule that lets a unit always make progress)
//!    comes only while the unit is undecided. An undecided unit with nothing in flight has
//!    folded every run it finished (jobs of a unit are admitted in index order), so its spend
//!    is below the cap, or the reducer would have stopped it. That job leaves `X < cap + its
//!    price`.
//! 3. While that job runs, another is admitted beside it only if `spent + 2 × price ≤ cap`,
//!    which means `X ≤ spent + price ≤ cap - price`.
//!
//! So `X ≤ cap + one run's price` at all times: the harness's own bound when it runs repeats
//! one after another.
//!
//! The batch-wide budget (`--batch-budget-usd`) uses the same estimate over every unit's runs;
//! it stops the batch instead of running one more job when even one job does not fit.

/// What the prices seen so far say about the next run's price.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PriceEstimate {
    priced_runs: u32,
    highest: f64,
}

impl PriceEstimate {
    /// Takes one finished run's price into account.
    pub fn observe(&mut self, usd: f64) {
        if !usd.is_finite() || usd < 0.0 {
            return;
        }
        self.priced_runs = self.priced_runs.saturating_add(1);
        self.highest = self.highest.max(usd);
    }

    /// Runs that reported a price.
    pub fn priced_runs(&self) -> u32 {
        self.priced_runs
    }

    /// The estimated price of one more run: the highest seen × (n + 1) / n; `None` before the
    /// first price.
    pub fn per_run(&self) -> Option<f64> {
        (self.priced_runs > 0).then(|| {
            let n = f64::from(self.priced_runs);
            self.highest * (n + 1.0) / n
        })
    }

    /// Whether one more job may start beside `in_flight` running ones: at most as many at
    /// once as runs priced, and `spent + (in_flight + 1) × price ≤ cap`.
    pub fn fits_beside(&self, cap: f64, spent: f64, in_flight: u32) -> bool {
        let Some(price) = self.per_run() else {
            return false;
        };
        let wave = in_flight.saturating_add(1);
        self.priced_runs >= wave && spent + f64::from(wave) * price <= cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_the_highest_price_widened_by_one_over_n() {
        let mut estimate = PriceEstimate::default();
        assert_eq!(estimate.per_run(), None);
        assert!(
            !estimate.fits_beside(10.0, 0.0, 0),
            "no price, no speculation"
        );
        estimate.observe(0.10);
        assert_eq!(estimate.per_run(), Some(0.20));
        estimate.observe(0.30);
        estimate.observe(f64::NAN);
        assert_eq!(estimate.priced_runs(), 2);
        assert!((estimate.per_run().expect("priced") - 0.45).abs() < 1e-12);
    }

    #[test]
    fn a_wave_needs_as_many_prices_as_jobs_and_room_under_the_cap() {
        let mut estimate = PriceEstimate::default();
        estimate.observe(0.1);
        estimate.observe(0.1);
        // Price 0.15: spent 0.2 + 2 × 0.15 = 0.5 fits a cap of 0.5; a third would not.
        assert!(estimate.fits_beside(0.5, 0.2, 1));
        assert!(!estimate.fits_beside(0.49, 0.2, 1));
        assert!(!estimate.fits_beside(100.0, 0.2, 2), "only two prices seen");
    }
}
