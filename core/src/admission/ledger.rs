//! What a batch's `finished` events add up to beside the rollups: per worker, per harness
//! version and per unit (runs, spend, run times) — the stuff of the envelope's `fleet` key and
//! of `stats.json`.
//!
//! Per-unit samples are kept in a bounded reservoir (at most [`SAMPLES_PER_UNIT`] values per
//! unit, replaced uniformly as more arrive), so the medians are exact up to that many runs and
//! an unbiased sample beyond, in memory that does not grow with the runs.

use std::collections::BTreeMap;

/// Samples of cost and of run time kept per unit.
pub const SAMPLES_PER_UNIT: usize = 31;

/// A bounded, deterministic reservoir of values (Vitter's algorithm R with a hash of the count
/// in place of a random draw, so the same arrivals keep the same samples).
#[derive(Clone, Debug, Default)]
pub struct Samples<T> {
    values: Vec<T>,
    seen: u64,
}

impl<T: Copy> Samples<T> {
    pub fn push(&mut self, value: T) {
        self.seen += 1;
        if self.values.len() < SAMPLES_PER_UNIT {
            self.values.push(value);
            return;
        }
        let slot = splitmix64(self.seen) % self.seen;
        if let Some(kept) = self.values.get_mut(slot as usize) {
            *kept = value;
        }
    }

    /// The kept values, in no particular order.
    pub fn values(&self) -> Vec<T> {
        self.values.clone()
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// One unit's finished runs (folded or discarded; runs killed by a cancel are not runs).
#[derive(Clone, Debug, Default)]
pub struct UnitLedger {
    pub runs: u32,
    pub priced_runs: u32,
    pub cost_usd: f64,
    pub costs: Samples<f64>,
    pub run_ms: Samples<u64>,
    pub max_run_ms: Option<u64>,
    /// The verdict of a plain unit's one completed run.
    pub passed: Option<bool>,
}

impl UnitLedger {
    pub fn observe(&mut self, cost_usd: Option<f64>, run_ms: u64) {
        self.runs = self.runs.saturating_add(1);
        if let Some(cost) = cost_usd {
            self.priced_runs = self.priced_runs.saturating_add(1);
            self.cost_usd += cost;
            self.costs.push(cost);
        }
        self.run_ms.push(run_ms);
        self.max_run_ms = Some(self.max_run_ms.map_or(run_ms, |max| max.max(run_ms)));
    }
}

/// Jobs and executor time per worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerTally {
    pub jobs: u64,
    pub run_ms: u64,
}

/// Counters and tallies of a batch's events that the reducer does not keep.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    pub workers: BTreeMap<String, WorkerTally>,
    /// Harness versions in first-seen order.
    pub harness_versions: Vec<String>,
    /// Outcomes of an earlier generation set aside because the job runs again.
    pub superseded: u64,
    /// Jobs of this generation killed by `cancel --kill-running` (never folded).
    pub killed: u64,
    pub units: Vec<UnitLedger>,
}

impl Ledger {
    pub fn new(n_units: usize) -> Ledger {
        Ledger {
            units: vec![UnitLedger::default(); n_units],
            ..Ledger::default()
        }
    }

    /// A worker's finished run.
    pub fn worker_ran(&mut self, worker_id: &str, run_ms: u64) {
        let tally = match self.workers.get_mut(worker_id) {
            Some(tally) => tally,
            None => self.workers.entry(worker_id.to_owned()).or_default(),
        };
        tally.jobs += 1;
        tally.run_ms += run_ms;
    }

    pub fn harness_version(&mut self, version: Option<&str>) {
        if let Some(version) = version
            && !self.harness_versions.iter().any(|known| known == version)
        {
            self.harness_versions.push(version.to_owned());
        }
    }

    /// The envelope's `version`: the one harness version, `mixed`, or `unknown`.
    pub fn envelope_version(&self) -> String {
        match self.harness_versions.as_slice() {
            [one] => one.clone(),
            [] => "unknown".to_owned(),
            _ => "mixed".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reservoir_is_bounded_and_exact_below_its_size() {
        let mut samples = Samples::default();
        for value in 0..SAMPLES_PER_UNIT as u64 {
            samples.push(value);
        }
        let mut kept = samples.values();
        kept.sort_unstable();
        assert_eq!(kept, (0..SAMPLES_PER_UNIT as u64).collect::<Vec<_>>());
        for value in 0..10_000u64 {
            samples.push(1_000 + value);
        }
        assert_eq!(samples.values().len(), SAMPLES_PER_UNIT);
        assert!(
            samples.values().iter().filter(|v| **v >= 1_000).count() > SAMPLES_PER_UNIT / 2,
            "later values replace earlier ones"
        );
    }

    #[test]
    fn one_version_names_the_envelope() {
        let mut ledger = Ledger::new(1);
        assert_eq!(ledger.envelope_version(), "unknown");
        ledger.harness_version(Some("2.0.0"));
        ledger.harness_version(Some("2.0.0"));
        assert_eq!(ledger.envelope_version(), "2.0.0");
        ledger.harness_version(Some("2.1.0"));
        assert_eq!(ledger.envelope_version(), "mixed");
        ledger.worker_ran("w", 5);
        ledger.worker_ran("w", 7);
        assert_eq!(
            ledger.workers["w"],
            WorkerTally {
                jobs: 2,
                run_ms: 12
            }
        );
    }
}
