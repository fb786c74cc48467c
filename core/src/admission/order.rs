//! The order in which units are offered to admission, and a cheap way past the units that have
//! nothing left to admit.
//!
//! Without history, units go in plan order. With the expected run time of each unit from
//! earlier batches (`stats.json`), the units expected to take longest go first, so a sweep does
//! not end waiting for its slowest cell started last (longest-processing-time first). Jobs of one
//! unit always go in index order, and the reducer folds each unit in index order whatever the
//! admission order, so the order never changes a rollup.

/// Units by admission rank, with a skip list over units that are done.
#[derive(Clone, Debug)]
pub struct UnitOrder {
    /// Unit index at each rank.
    units: Vec<u32>,
    /// `next[rank]`: the lowest rank ≥ `rank` that may still be open (path-halved on lookup);
    /// `next[len]` is the end.
    next: Vec<u32>,
    by_history: bool,
}

impl UnitOrder {
    /// Plan order.
    pub fn plan(n_units: u32) -> UnitOrder {
        UnitOrder::from_units((0..n_units).collect(), false)
    }

    /// Longest expected run first (`expected_run_ms` by unit index; missing entries are
    /// unknown); units without an estimate count as the median of those with one, and ties
    /// keep plan order. Plan order when no unit has an estimate.
    pub fn longest_first(n_units: u32, expected_run_ms: &[Option<u64>]) -> UnitOrder {
        let expected = |unit: u32| expected_run_ms.get(unit as usize).copied().flatten();
        let mut known: Vec<u64> = (0..n_units).filter_map(expected).collect();
        let Some(neutral) = crate::history::median_u64(&mut known) else {
            return UnitOrder::plan(n_units);
        };
        let mut units: Vec<u32> = (0..n_units).collect();
        // Stable: equal estimates keep plan order.
        units.sort_by_key(|unit| std::cmp::Reverse(expected(*unit).unwrap_or(neutral)));
        UnitOrder::from_units(units, true)
    }

    fn from_units(units: Vec<u32>, by_history: bool) -> UnitOrder {
        let next = (0..=units.len() as u32).collect();
        UnitOrder {
            units,
            next,
            by_history,
        }
    }

    /// `true` when history set the order.
    pub fn by_history(&self) -> bool {
        self.by_history
    }

    /// The unit at `rank`.
    pub fn unit_at(&self, rank: u32) -> u32 {
        self.units[rank as usize]
    }

    /// The first rank ≥ `rank` not closed, if any.
    pub fn open_from(&mut self, rank: u32) -> Option<u32> {
        let mut rank = rank.min(self.units.len() as u32);
        while self.next[rank as usize] != rank {
            let skip = self.next[self.next[rank as usize] as usize];
            self.next[rank as usize] = skip;
            rank = skip;
        }
        (rank < self.units.len() as u32).then_some(rank)
    }

    /// Marks `rank` as done: nothing of its unit is left to admit.
    pub fn close(&mut self, rank: u32) {
        if let Some(next) = self.next.get_mut(rank as usize)
            && (rank as usize) < self.units.len()
        {
            *next = rank + 1;
        }
    }

    /// Opens every rank again (after a pause took jobs back from units that had admitted
    /// their last run); ranks with nothing left close again on their next look.
    pub fn reopen_all(&mut self) {
        for (rank, next) in self.next.iter_mut().enumerate() {
            *next = rank as u32;
        }
    }

    /// `true` when every unit is done.
    pub fn all_closed(&mut self) -> bool {
        self.open_from(0).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_expected_first_with_unknowns_at_the_median() {
        let order = UnitOrder::longest_first(5, &[Some(10), None, Some(100), Some(10), Some(30)]);
        let ranks: Vec<u32> = (0..5).map(|rank| order.unit_at(rank)).collect();
        // Median of the known (10, 10, 30, 100) is 10: unit 1 ranks with the 10s, in plan order.
        assert_eq!(ranks, [2, 4, 0, 1, 3]);
        assert!(order.by_history());
        let plain = UnitOrder::longest_first(2, &[None]);
        assert!(!plain.by_history());
        assert_eq!((plain.unit_at(0), plain.unit_at(1)), (0, 1));
    }

    #[test]
    fn closed_ranks_are_skipped() {
        let mut order = UnitOrder::plan(5);
        assert_eq!(order.open_from(0), Some(0));
        order.close(1);
        order.close(2);
        order.close(0);
        assert_eq!(order.open_from(0), Some(3));
        assert_eq!(order.open_from(4), Some(4));
        order.close(4);
        order.close(3);
        assert!(order.all_closed());
        assert_eq!(order.open_from(2), None);
    }
}
