//! Estimates from history: what a unit's runs cost and how long they take, from the
//! `stats.json` of earlier decided batches (`schema::history`). Dry runs print them, and
//! admission may use them to start long units first.
//!
//! Pure: the caller loads the stats (newest first); this module only summarizes them.

use std::collections::BTreeMap;

use cowork_schema::batch::ExecutorKind;
use cowork_schema::history::BatchStats;

/// What kind of runs a batch makes, as far as estimates from history care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunKind {
    /// The executor its jobs ran on.
    pub executor: ExecutorKind,
    /// The batch spends nothing (a replay).
    pub spends_nothing: bool,
}

/// Whether an `earlier` batch's history may feed the estimate of a `planned` one. Replays and
/// live runs never estimate each other (a replay spends nothing), and neither do simulated and
/// real runs: a sim run's cost and time are made up, and a real run's would make a simulated
/// batch look expensive. The harness and container executors run the same CLI, so they
/// estimate each other.
pub fn history_applies(planned: RunKind, earlier: RunKind) -> bool {
    let simulated = |kind: RunKind| kind.executor == ExecutorKind::Sim;
    planned.spends_nothing == earlier.spends_nothing && simulated(planned) == simulated(earlier)
}

/// What history says about one unit (keyed by its rollup label).
#[derive(Clone, Debug, PartialEq)]
pub struct UnitEstimate {
    /// Earlier batches that ran this unit.
    pub batches: u32,
    /// Runs of this unit across those batches.
    pub runs: u64,
    /// Median, over those batches, of each batch's median cost per run (USD); `None` when no
    /// run reported a cost.
    pub cost_per_run_usd: Option<f64>,
    /// Median, over those batches, of each batch's median run time (ms).
    pub run_ms: Option<u64>,
}

/// Per unit label, the estimate from `history`. Each batch counts once, so one huge batch does
/// not outweigh the others, and a median resists one odd night.
pub fn estimates(history: &[BatchStats]) -> BTreeMap<String, UnitEstimate> {
    let mut costs: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut times: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut counts: BTreeMap<&str, (u32, u64)> = BTreeMap::new();
    for batch in history {
        for unit in &batch.units {
            let count = counts.entry(unit.label.as_str()).or_default();
            count.0 += 1;
            count.1 += u64::from(unit.runs);
            if let Some(cost) = unit.median_cost_usd {
                costs.entry(unit.label.as_str()).or_default().push(cost);
            }
            if let Some(ms) = unit.median_run_ms {
                times.entry(unit.label.as_str()).or_default().push(ms);
            }
        }
    }
    counts
        .into_iter()
        .map(|(label, (batches, runs))| {
            let estimate = UnitEstimate {
                batches,
                runs,
                cost_per_run_usd: costs.get_mut(label).and_then(|values| median_f64(values)),
                run_ms: times.get_mut(label).and_then(|values| median_u64(values)),
            };
            (label.to_owned(), estimate)
        })
        .collect()
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
pub fn median_f64(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    })
}

/// The median of `values` (the lower middle for an even count, so it is one of the values).
pub fn median_u64(values: &mut [u64]) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(values[(values.len() - 1) / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_schema::BatchId;
    use cowork_schema::history::UnitStats;

    fn unit(label: &str, runs: u32, cost: Option<f64>, ms: Option<u64>) -> UnitStats {
        UnitStats {
            label: label.to_owned(),
            scenario: label.to_owned(),
            axes: None,
            arm: None,
            runs,
            folded: runs,
            passes: runs,
            priced_runs: u32::from(cost.is_some()) * runs,
            cost_usd: cost.unwrap_or(0.0) * f64::from(runs),
            median_cost_usd: cost,
            median_run_ms: ms,
            max_run_ms: ms,
        }
    }

    fn batch(id: &str, units: Vec<UnitStats>) -> BatchStats {
        BatchStats {
            batch_id: BatchId::new(id).expect("valid id"),
            decided_at_ms: 0,
            wall_ms: 0,
            units,
        }
    }

    #[test]
    fn each_batch_counts_once_and_the_median_wins() {
        let history = vec![
            batch("b3", vec![unit("a", 5, Some(0.10), Some(1000))]),
            batch(
                "b2",
                vec![
                    unit("a", 500, Some(9.0), Some(90_000)),
                    unit("b", 2, None, Some(5)),
                ],
            ),
            batch("b1", vec![unit("a", 5, Some(0.12), Some(1200))]),
        ];
        let estimates = estimates(&history);
        let a = &estimates["a"];
        assert_eq!((a.batches, a.runs), (3, 510));
        assert_eq!(a.cost_per_run_usd, Some(0.12));
        assert_eq!(a.run_ms, Some(1200));
        let b = &estimates["b"];
        assert_eq!(
            (b.batches, b.cost_per_run_usd, b.run_ms),
            (1, None, Some(5))
        );
        assert!(!estimates.contains_key("c"));
    }

    #[test]
    fn simulated_history_never_estimates_real_runs() {
        let kind = |executor, spends_nothing| RunKind {
            executor,
            spends_nothing,
        };
        let harness = kind(ExecutorKind::Harness, false);
        let container = kind(ExecutorKind::Container, false);
        let sim = kind(ExecutorKind::Sim, false);
        let replay = kind(ExecutorKind::Harness, true);
        // The dry run: a harness plan estimated from a sim demo batch.
        assert!(!history_applies(harness, sim));
        assert!(!history_applies(sim, harness));
        assert!(!history_applies(harness, replay));
        assert!(history_applies(harness, container));
        assert!(history_applies(sim, sim));
        assert!(history_applies(replay, replay));
    }

    #[test]
    fn medians() {
        assert_eq!(median_f64(&mut []), None);
        assert_eq!(median_f64(&mut [3.0, 1.0]), Some(2.0));
        assert_eq!(median_u64(&mut [3, 1, 2, 9]), Some(2));
    }
}
