//! Per-job state by index: the plan gives every job an ordinal (`unit × runs + run`), so a
//! million jobs' flags cost a bit each instead of a `JobId` string in a set.

use cowork_schema::ids::UnitRef;

/// The jobs of a plan laid out by ordinal: unit-major, `runs` ordinals per unit (units with a
/// cell error keep their ordinals, unused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobGrid {
    n_units: u32,
    runs: u32,
    /// `true` with `--repeat`: jobs carry a repeat index.
    repeat: bool,
}

impl JobGrid {
    pub fn new(n_units: u32, repeat: Option<u32>) -> JobGrid {
        JobGrid {
            n_units,
            runs: repeat.unwrap_or(1).max(1),
            repeat: repeat.is_some(),
        }
    }

    /// Runs per unit.
    pub fn runs(&self) -> u32 {
        self.runs
    }

    /// Ordinals in the grid.
    pub fn n_ordinals(&self) -> u64 {
        u64::from(self.n_units) * u64::from(self.runs)
    }

    /// The repeat index of run `run` (`None` without `--repeat`).
    pub fn repeat_index(&self, run: u32) -> Option<u32> {
        self.repeat.then_some(run)
    }

    /// The ordinal of run `run` of unit `unit`.
    pub fn ordinal(&self, unit: u32, run: u32) -> u64 {
        u64::from(unit) * u64::from(self.runs) + u64::from(run)
    }

    /// The unit and run of an ordinal of this grid.
    pub fn unit_and_run(&self, ordinal: u64) -> (u32, u32) {
        let runs = u64::from(self.runs);
        (
            u32::try_from(ordinal / runs).unwrap_or(u32::MAX),
            (ordinal % runs) as u32,
        )
    }

    /// The unit and run of a job id's parts, if they belong to this grid.
    pub fn locate(&self, unit: UnitRef, repeat_index: Option<u32>) -> Option<(u32, u32)> {
        let unit = unit.index();
        let run = match (self.repeat, repeat_index) {
            (true, Some(index)) if index < self.runs => index,
            (false, None) => 0,
            _ => return None,
        };
        (unit < self.n_units).then_some((unit, run))
    }
}

/// A fixed-size set of ordinals.
#[derive(Clone, Debug, Default)]
pub struct BitSet {
    words: Vec<u64>,
}

impl BitSet {
    pub fn new(len: u64) -> BitSet {
        BitSet {
            words: vec![0; usize::try_from(len.div_ceil(64)).unwrap_or(usize::MAX)],
        }
    }

    pub fn contains(&self, ordinal: u64) -> bool {
        self.words
            .get((ordinal / 64) as usize)
            .is_some_and(|word| word & (1 << (ordinal % 64)) != 0)
    }

    /// Adds `ordinal`; `true` when it was not in the set.
    pub fn insert(&mut self, ordinal: u64) -> bool {
        let Some(word) = self.words.get_mut((ordinal / 64) as usize) else {
            return false;
        };
        let bit = 1 << (ordinal % 64);
        let added = *word & bit == 0;
        *word |= bit;
        added
    }

    /// Ordinals in this set or in `other`.
    pub fn union_len(&self, other: &BitSet) -> u64 {
        self.words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| u64::from((a | b).count_ones()))
            .sum()
    }

    /// Ordinals in this set and not in `other`, in order.
    pub fn difference<'a>(&'a self, other: &'a BitSet) -> impl Iterator<Item = u64> + 'a {
        self.words
            .iter()
            .enumerate()
            .flat_map(move |(index, word)| {
                let mut left = word & !other.words.get(index).copied().unwrap_or(0);
                std::iter::from_fn(move || {
                    (left != 0).then(|| {
                        let bit = left.trailing_zeros();
                        left &= left - 1;
                        index as u64 * 64 + u64::from(bit)
                    })
                })
            })
    }

    /// Ordinals in `start..end` that are in neither this set nor `other`.
    pub fn count_absent_from_both(&self, other: &BitSet, start: u64, end: u64) -> u64 {
        (start..end)
            .filter(|ordinal| !self.contains(*ordinal) && !other.contains(*ordinal))
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_are_unit_major_and_bounded() {
        let grid = JobGrid::new(3, Some(4));
        assert_eq!((grid.n_ordinals(), grid.runs()), (12, 4));
        assert_eq!(grid.ordinal(2, 3), 11);
        assert_eq!(grid.unit_and_run(11), (2, 3));
        assert_eq!(grid.locate(UnitRef::Cell(2), Some(3)), Some((2, 3)));
        assert_eq!(grid.locate(UnitRef::Cell(3), Some(0)), None);
        assert_eq!(grid.locate(UnitRef::Cell(0), Some(4)), None);
        assert_eq!(grid.locate(UnitRef::Cell(0), None), None);
        let plain = JobGrid::new(2, None);
        assert_eq!(plain.locate(UnitRef::File(1), None), Some((1, 0)));
        assert_eq!(plain.locate(UnitRef::File(1), Some(0)), None);
        assert_eq!(plain.repeat_index(0), None);
    }

    #[test]
    fn sets_count_what_they_hold() {
        let mut a = BitSet::new(130);
        let mut b = BitSet::new(130);
        assert!(a.insert(0) && a.insert(129) && !a.insert(129));
        assert!(b.insert(129) && b.insert(64));
        assert!(a.contains(129) && !a.contains(64) && !a.contains(500));
        assert!(!a.insert(500), "out of range is ignored");
        assert_eq!(a.difference(&b).collect::<Vec<_>>(), [0]);
        assert_eq!(b.difference(&a).collect::<Vec<_>>(), [64]);
        assert_eq!(a.union_len(&b), 3);
        assert_eq!(a.count_absent_from_both(&b, 60, 70), 9);
    }
}
