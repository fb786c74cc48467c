//! Batches side by side: two batches compared unit by unit (`cowork diff`), and units followed
//! over many batches (`cowork trend`), with the one definition of flaky every view shares:
//! [`flakiness`] across batches (the verdict flipped, or the runs' pass rate is too uncertain
//! to say which side of the bar it is on) and [`flaky`] within one batch (the second half).
//!
//! The input is each batch's per-unit counts ([`BatchCounts`]): from its `stats.json`
//! ([`counts_from_stats`]) or, for a batch written without one, from its `rollup.json` and
//! envelope results ([`stats_from_rollup`], which also feeds the dry-run estimates of
//! [`crate::history::estimates`]). Units are matched across batches by their label (the
//! scenario name, plus the axes of a matrix cell or the arm of an eval), the key the history
//! uses everywhere.
//!
//! Pure: the caller loads the documents; nothing here reads a store or a clock.

use std::collections::BTreeMap;

use cowork_schema::BatchId;
use cowork_schema::batch::{PlanKindName, StoredBatch};
use cowork_schema::history::{BatchStats, UnitStats};
use cowork_schema::rollup::{RepeatRollup, RollupDoc};
use cowork_schema::run_result::cost_usd;
use cowork_schema::unit::CellAxes;
use serde_json::Value;

use crate::history::{median_f64, median_u64};

/// What one batch did with one unit.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitCounts {
    /// The unit's key across batches (its rollup label).
    pub label: String,
    /// The effective scenario name.
    pub scenario: String,
    /// The axes of a matrix cell (`None` for a file's unit).
    pub axes: Option<CellAxes>,
    /// Folded runs (a unit stopped early counts what it folded).
    pub runs: u32,
    pub passes: u32,
    /// Total cost of the runs that reported one, and how many did.
    pub cost_usd: f64,
    pub priced_runs: u32,
}

impl UnitCounts {
    /// `passes / runs`; `None` when nothing ran.
    pub fn pass_rate(&self) -> Option<f64> {
        (self.runs > 0).then(|| f64::from(self.passes) / f64::from(self.runs))
    }

    /// Whether the unit passed at `min_pass_rate`; `None` when nothing ran.
    pub fn passed(&self, min_pass_rate: f64) -> Option<bool> {
        self.pass_rate().map(|rate| rate >= min_pass_rate)
    }

    /// Flaky within this one batch, against its bar ([`flaky`]).
    pub fn flaky(&self, min_pass_rate: f64) -> bool {
        flaky(self.passes, self.runs, min_pass_rate)
    }

    /// Mean cost of a priced run; `None` when no run reported a cost.
    pub fn cost_per_run_usd(&self) -> Option<f64> {
        (self.priced_runs > 0).then(|| self.cost_usd / f64::from(self.priced_runs))
    }
}

/// One batch as history sees it: its units and the bar they were judged against.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchCounts {
    pub batch_id: BatchId,
    /// `--min-pass-rate` of the batch (1 unless set).
    pub min_pass_rate: f64,
    pub units: Vec<UnitCounts>,
}

impl BatchCounts {
    fn unit(&self, label: &str) -> Option<&UnitCounts> {
        self.units.iter().find(|unit| unit.label == label)
    }
}

/// The counts of a batch from its `stats.json`.
pub fn counts_from_stats(stats: &BatchStats, min_pass_rate: f64) -> BatchCounts {
    BatchCounts {
        batch_id: stats.batch_id.clone(),
        min_pass_rate,
        units: stats
            .units
            .iter()
            .map(|unit| UnitCounts {
                label: unit.label.clone(),
                scenario: unit.scenario.clone(),
                axes: unit.axes.clone(),
                runs: unit.folded,
                passes: unit.passes,
                cost_usd: unit.cost_usd,
                priced_runs: unit.priced_runs,
            })
            .collect(),
    }
}

/// A stand-in for the `stats.json` of a decided batch written without one, built from its
/// `rollup.json`, its plan (`spec.json`) and the `results` of its envelope (in index order, as
/// the envelope stores them). Per unit: folded runs and passes from the rollup (or, for a plain
/// files batch, from each file's result), cost and run times from the unit's results.
/// Discarded runs are not in the envelope, so `runs` counts folded runs only, and the batch's
/// wall time is unknown (0).
pub fn stats_from_rollup(
    stored: &StoredBatch,
    rollup: &RollupDoc,
    results: &[Value],
) -> BatchStats {
    let plan = &stored.plan;
    let unit_results = results_per_unit(stored, rollup, results);
    let mut units = Vec::new();
    for (unit_idx, unit) in plan.units.iter().enumerate() {
        let runs = unit_results[unit_idx].as_slice();
        let Some((folded, passes)) = folded_and_passes(stored, rollup, unit_idx, runs) else {
            continue;
        };
        let mut costs: Vec<f64> = runs.iter().filter_map(|run| cost_usd(run)).collect();
        let mut times: Vec<u64> = runs.iter().filter_map(|run| run_ms(run)).collect();
        let rollup_cost = unit_rollup(rollup, unit_idx, plan.kind).and_then(|r| r.total_cost_usd);
        let (priced_runs, cost_usd) = match (costs.len(), rollup_cost) {
            // The results did not line up with the plan: the rollup still knows the total.
            (0, Some(total)) if folded > 0 => (folded, total),
            (n, _) => (n as u32, costs.iter().sum()),
        };
        let median_cost_usd = median_f64(&mut costs)
            .or_else(|| (priced_runs > 0).then(|| cost_usd / f64::from(priced_runs)));
        units.push(UnitStats {
            label: unit.label.clone(),
            scenario: unit.scenario_name.clone(),
            axes: unit.axes.clone(),
            arm: None,
            runs: folded,
            folded,
            passes,
            priced_runs,
            cost_usd,
            median_cost_usd,
            median_run_ms: median_u64(&mut times),
            max_run_ms: times.iter().copied().max(),
        });
    }
    BatchStats {
        batch_id: stored.batch_id.clone(),
        decided_at_ms: 0,
        wall_ms: 0,
        units,
    }
}

/// The repeat rollup of unit `unit_idx`, for repeat batches.
fn unit_rollup(rollup: &RollupDoc, unit_idx: usize, kind: PlanKindName) -> Option<&RepeatRollup> {
    match kind {
        PlanKindName::Files => rollup.rollups.as_ref()?.get(unit_idx),
        PlanKindName::Matrix => rollup
            .matrix_repeat
            .as_ref()?
            .cells
            .iter()
            .find(|cell| cell.index as usize == unit_idx)?
            .rollup
            .as_ref(),
    }
}

/// The cell of a plain matrix batch at `unit_idx`.
fn plain_cell(
    rollup: &RollupDoc,
    unit_idx: usize,
) -> Option<&cowork_schema::rollup::MatrixCellResult> {
    rollup
        .matrix
        .as_ref()?
        .cells
        .iter()
        .find(|cell| cell.index as usize == unit_idx)
}

/// Folded runs and passes of unit `unit_idx`, whose results are `runs`; `None` when the unit
/// produced no run (a cell error, or a file after the one a plain batch stopped at).
fn folded_and_passes(
    stored: &StoredBatch,
    rollup: &RollupDoc,
    unit_idx: usize,
    runs: &[&Value],
) -> Option<(u32, u32)> {
    if stored.plan.repeat.is_some() {
        let repeat = unit_rollup(rollup, unit_idx, stored.plan.kind)?;
        return Some((repeat.completed, repeat.passes));
    }
    if stored.plan.kind == PlanKindName::Matrix {
        let cell = plain_cell(rollup, unit_idx)?;
        return cell.error.is_none().then_some((1, u32::from(cell.pass)));
    }
    let result = runs.first()?;
    let pass = cowork_schema::run_result::verdict_pass(result) == Some(true);
    Some((1, u32::from(pass)))
}

/// The results of each unit, by unit index. Results are stored in index order (unit, then
/// repeat), so each repeat unit owns the next `completed` of them, and a plain unit the next
/// result of its scenario. Results that do not line up with the plan give the units no
/// results at all rather than somebody else's. The envelope results are the CLI's RunResults,
/// read by key (their shape is the CLI's, open across CLI versions; see
/// `cowork_schema::run_result`).
fn results_per_unit<'a>(
    stored: &StoredBatch,
    rollup: &RollupDoc,
    results: &'a [Value],
) -> Vec<Vec<&'a Value>> {
    let plan = &stored.plan;
    let none = || vec![Vec::new(); plan.units.len()];
    let mut per_unit: Vec<Vec<&Value>> = none();
    let scenario_of = |result: &Value| {
        result
            .get("scenario")
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    if plan.repeat.is_some() {
        let mut next = results.iter();
        for (unit_idx, unit) in plan.units.iter().enumerate() {
            let Some(repeat) = unit_rollup(rollup, unit_idx, plan.kind) else {
                continue;
            };
            for _ in 0..repeat.completed {
                match next.next() {
                    Some(result) if scenario_of(result).as_deref() == Some(&unit.scenario_name) => {
                        per_unit[unit_idx].push(result);
                    }
                    _ => return none(),
                }
            }
        }
        return per_unit;
    }
    let mut remaining: Vec<&Value> = results.iter().collect();
    for (unit_idx, unit) in plan.units.iter().enumerate() {
        // A matrix cell that errored has no result; it must not take the next cell's.
        if plan.kind == PlanKindName::Matrix
            && plain_cell(rollup, unit_idx).is_none_or(|cell| cell.error.is_some())
        {
            continue;
        }
        if let Some(position) = remaining
            .iter()
            .position(|result| scenario_of(result).as_deref() == Some(&unit.scenario_name))
        {
            per_unit[unit_idx].push(remaining.remove(position));
        }
    }
    per_unit
}

fn run_ms(result: &Value) -> Option<u64> {
    cowork_schema::run_result::duration_ms(result)
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
        .map(|ms| ms as u64)
}

/// The counts of a decided batch without `stats.json`: see [`stats_from_rollup`].
pub fn counts_from_rollup(
    stored: &StoredBatch,
    rollup: &RollupDoc,
    results: &[Value],
) -> BatchCounts {
    counts_from_stats(
        &stats_from_rollup(stored, rollup, results),
        stored.spec.flags.min_pass_rate,
    )
}

/// The z of a two-sided 95% interval.
const Z_95: f64 = 1.959_963_984_540_054;

/// The Wilson score interval at 95% of a pass rate of `passes` in `runs`: `(low, high)`, within
/// [0, 1]; `None` when nothing ran. Unlike `passes / runs ± error` it stays sensible for few
/// runs and for rates near 0 or 1 (5 of 5 gives about 57%–100%, not 100%–100%).
pub fn wilson_interval(passes: u32, runs: u32) -> Option<(f64, f64)> {
    if runs == 0 {
        return None;
    }
    let n = f64::from(runs);
    let p = f64::from(passes.min(runs)) / n;
    let z2 = Z_95 * Z_95;
    let denominator = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denominator;
    let half = Z_95 / denominator * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

/// The flaky rule of one batch (the reports): some of the unit's `runs` passed and some failed,
/// and the 95% Wilson interval of its pass rate straddles `min_pass_rate` (the bar lies
/// strictly inside it), so the runs cannot tell whether the unit really meets the bar. A unit
/// whose runs all passed or all failed is steady, whatever their number; a unit failing some
/// runs whose interval lies clear of the bar (9 of 10 against a bar of 100%, 45 of 50 against
/// 50%) is steadily failing or passing, not flaky. One batch cannot show a verdict flip; across
/// batches, [`flakiness`] adds it.
pub fn flaky(passes: u32, runs: u32, min_pass_rate: f64) -> bool {
    passes > 0
        && passes < runs
        && wilson_interval(passes, runs)
            .is_some_and(|(low, high)| low < min_pass_rate && min_pass_rate < high)
}

/// Why a unit is flaky across batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlakyReason {
    /// Its verdict changed between consecutive batches that judged it.
    Flipped,
    /// Its verdict held, but its runs over the batches passed and failed with a pass rate
    /// whose 95% interval straddles the bar ([`flaky`]).
    StraddlesBar,
}

impl FlakyReason {
    /// The word the JSON documents carry (`flakyReason`).
    pub fn as_str(self) -> &'static str {
        match self {
            FlakyReason::Flipped => "flipped",
            FlakyReason::StraddlesBar => "straddlesBar",
        }
    }
}

/// One batch's judgment of one unit, as [`flakiness`] takes it: the batch's position in the
/// view (0 = oldest), the unit's runs there and the batch's bar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Judged {
    pub batch: usize,
    pub passes: u32,
    pub runs: u32,
    pub min_pass_rate: f64,
}

/// A unit's verdicts over the batches of a view, and whether that makes it flaky.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Flakiness {
    /// Each judging batch's position and verdict (`true`: passed), oldest first. Batches
    /// without a judged run of the unit are not in it.
    pub verdicts: Vec<(usize, bool)>,
    /// Positions of the batches whose verdict differs from the previous judging batch's.
    pub flips: Vec<usize>,
    /// The 95% Wilson interval of the pass rate over every judged run, and the bar it is held
    /// against (the newest judging batch's).
    pub interval: Option<(f64, f64)>,
    pub bar: Option<f64>,
    /// `None`: not flaky.
    pub reason: Option<FlakyReason>,
}

impl Flakiness {
    pub fn flaky(&self) -> bool {
        self.reason.is_some()
    }

    /// The verdicts as a path, `PASS→FAIL→PASS`, a repeated verdict written once; empty when
    /// the verdict never flipped.
    pub fn path(&self) -> String {
        if self.flips.is_empty() {
            return String::new();
        }
        let mut words: Vec<&str> = Vec::new();
        for (_, passed) in &self.verdicts {
            let word = if *passed { "PASS" } else { "FAIL" };
            if words.last() != Some(&word) {
                words.push(word);
            }
        }
        words.join("→")
    }
}

/// The one definition of flaky of `cowork diff` and `cowork trend` (oldest batch first in
/// `judged`): the unit is flaky when its verdict flipped between two consecutive batches that
/// judged it ([`FlakyReason::Flipped`]), or, its verdict steady, when its runs over those batches
/// together are flaky against the newest judging batch's bar ([`flaky`]:
/// [`FlakyReason::StraddlesBar`]). A steady unit with some failed runs whose interval lies
/// clear of the bar is not flaky: it is failing (or passing) every time, and the views count it
/// as such. Batches in `judged` with no run are skipped.
pub fn flakiness(judged: &[Judged]) -> Flakiness {
    let judged: Vec<&Judged> = judged.iter().filter(|one| one.runs > 0).collect();
    let verdicts: Vec<(usize, bool)> = judged
        .iter()
        .map(|one| {
            let rate = f64::from(one.passes) / f64::from(one.runs);
            (one.batch, rate >= one.min_pass_rate)
        })
        .collect();
    let flips: Vec<usize> = verdicts
        .windows(2)
        .filter(|pair| pair[0].1 != pair[1].1)
        .map(|pair| pair[1].0)
        .collect();
    let (passes, runs) = judged.iter().fold((0, 0), |(passes, runs), one| {
        (passes + one.passes, runs + one.runs)
    });
    let bar = judged.last().map(|one| one.min_pass_rate);
    let reason = if !flips.is_empty() {
        Some(FlakyReason::Flipped)
    } else if bar.is_some_and(|bar| flaky(passes, runs, bar)) {
        Some(FlakyReason::StraddlesBar)
    } else {
        None
    };
    Flakiness {
        verdicts,
        flips,
        interval: wilson_interval(passes, runs),
        bar,
        reason,
    }
}

/// How a unit changed between two batches. The order is the order of the `diff` table: what
/// needs attention first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// Passed then, fails now.
    NewlyFailing,
    /// Had runs then; in the later batch too, but no run of it was judged (every run errored
    /// or stopped unanswered, a cell error, or a batch that stopped before it).
    ErroredNow,
    /// Failed then, passes now.
    NewlyPassing,
    /// Failed both times.
    Failing,
    /// In both batches, and no run of it was judged in either.
    ErroredBoth,
    /// In both batches; no run of it was judged then, and it has runs now.
    ErroredThen,
    /// Only in the later batch.
    New,
    /// Only in the earlier batch.
    Gone,
    /// Passed both times.
    Passing,
}

impl Change {
    /// The word the tables print.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::NewlyFailing => "newly failing",
            Change::ErroredNow => "errored now",
            Change::NewlyPassing => "newly passing",
            Change::Failing => "failing",
            Change::ErroredBoth => "errored both times",
            Change::ErroredThen => "errored then",
            Change::New => "new",
            Change::Gone => "gone",
            Change::Passing => "passing",
        }
    }
}

/// One unit of `cowork diff`.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareRow {
    pub label: String,
    pub then: Option<UnitCounts>,
    pub now: Option<UnitCounts>,
    pub change: Change,
    /// The unit's verdict then and now: flaky when it flipped, or when the runs of both
    /// batches together straddle the later bar ([`flakiness`]).
    pub flakiness: Flakiness,
}

impl CompareRow {
    pub fn flaky(&self) -> bool {
        self.flakiness.flaky()
    }
}

/// Compares two batches unit by unit. Each batch judges its units at its own min pass rate; the
/// change is the change of verdict, and [`CompareRow::flaky`] says beside it whether the unit
/// is flaky over the two ([`flakiness`]: a changed verdict always is). A unit a batch holds but produced no judged
/// run in (its runs errored, a cell error) is in that batch and errored there, never new or
/// gone. Rows come in [`Change`] order, and in the later batch's unit order (then the earlier's)
/// within one.
pub fn compare(then: &BatchCounts, now: &BatchCounts) -> Vec<CompareRow> {
    let mut labels: Vec<&str> = now.units.iter().map(|unit| unit.label.as_str()).collect();
    for unit in &then.units {
        if !labels.contains(&unit.label.as_str()) {
            labels.push(&unit.label);
        }
    }
    let mut rows: Vec<CompareRow> = labels
        .into_iter()
        .map(|label| {
            let (held_then, held_now) = (then.unit(label), now.unit(label));
            let before = held_then.filter(|unit| unit.runs > 0);
            let after = held_now.filter(|unit| unit.runs > 0);
            let change = match (before, after) {
                _ if held_then.is_none() => Change::New,
                _ if held_now.is_none() => Change::Gone,
                (None, None) => Change::ErroredBoth,
                (None, Some(_)) => Change::ErroredThen,
                (Some(_), None) => Change::ErroredNow,
                (Some(before), Some(after)) => {
                    let passed_then = before.passed(then.min_pass_rate) == Some(true);
                    let passes_now = after.passed(now.min_pass_rate) == Some(true);
                    match (passed_then, passes_now) {
                        (true, false) => Change::NewlyFailing,
                        (false, true) => Change::NewlyPassing,
                        (false, false) => Change::Failing,
                        (true, true) => Change::Passing,
                    }
                }
            };
            let judged: Vec<Judged> = [(0, before, then), (1, after, now)]
                .into_iter()
                .filter_map(|(batch, unit, counts)| {
                    unit.map(|unit| Judged {
                        batch,
                        passes: unit.passes,
                        runs: unit.runs,
                        min_pass_rate: counts.min_pass_rate,
                    })
                })
                .collect();
            CompareRow {
                label: label.to_owned(),
                then: then.unit(label).cloned(),
                now: now.unit(label).cloned(),
                change,
                flakiness: flakiness(&judged),
            }
        })
        .collect();
    // A stable sort keeps the unit order within each kind of change.
    rows.sort_by_key(|row| row.change);
    rows
}

/// One unit followed across batches by `cowork trend`.
#[derive(Clone, Debug, PartialEq)]
pub struct TrendRow {
    pub label: String,
    /// This unit in each batch, oldest first (`None`: the batch did not run it).
    pub cells: Vec<Option<UnitCounts>>,
    /// Passes and runs over every batch.
    pub passes: u32,
    pub runs: u32,
    /// Total cost over every batch, and the runs that reported one.
    pub cost_usd: f64,
    pub priced_runs: u32,
    /// Batches in which the unit passed and failed, each at its own min pass rate.
    pub batches_passed: u32,
    pub batches_failed: u32,
    /// Its verdict over the batches and whether it is flaky ([`flakiness`]).
    pub flakiness: Flakiness,
}

impl TrendRow {
    /// Flaky over the batches shown ([`flakiness`]).
    pub fn flaky(&self) -> bool {
        self.flakiness.flaky()
    }

    /// The verdict of the newest batch that judged the unit (`true`: passed).
    pub fn latest_passed(&self) -> Option<bool> {
        self.flakiness.verdicts.last().map(|(_, passed)| *passed)
    }

    /// The order of the morning view, worst first: failing now before passing now, a flip
    /// before an uncertain rate, then the lowest pass rate in the newest batch that ran it.
    pub fn attention(&self) -> (bool, bool, u64) {
        let latest_rate = self
            .cells
            .iter()
            .rev()
            .flatten()
            .find_map(UnitCounts::pass_rate)
            .unwrap_or(0.0);
        (
            self.latest_passed() == Some(true),
            self.flakiness.reason != Some(FlakyReason::Flipped),
            (latest_rate * 1e6) as u64,
        )
    }

    /// The verdict changed between the batches shown: it passed in some and failed in others.
    pub fn verdict_changed(&self) -> bool {
        self.batches_passed > 0 && self.batches_failed > 0
    }

    /// Passes over runs across every batch; `None` when nothing ran.
    pub fn pass_rate(&self) -> Option<f64> {
        (self.runs > 0).then(|| f64::from(self.passes) / f64::from(self.runs))
    }

    /// Mean cost of a priced run across every batch.
    pub fn cost_per_run_usd(&self) -> Option<f64> {
        (self.priced_runs > 0).then(|| self.cost_usd / f64::from(self.priced_runs))
    }
}

/// Follows every unit of `batches` (oldest first) whose scenario `wanted` accepts. Units come in
/// the order they first appear, newest batch first, so this morning's units lead.
pub fn trend(batches: &[BatchCounts], wanted: &dyn Fn(&str) -> bool) -> Vec<TrendRow> {
    let mut order: Vec<&str> = Vec::new();
    for batch in batches.iter().rev() {
        for unit in &batch.units {
            if wanted(&unit.scenario) && !order.contains(&unit.label.as_str()) {
                order.push(&unit.label);
            }
        }
    }
    let mut rows: BTreeMap<&str, TrendRow> = BTreeMap::new();
    for label in &order {
        let cells: Vec<Option<UnitCounts>> = batches
            .iter()
            .map(|batch| batch.unit(label).filter(|unit| unit.runs > 0).cloned())
            .collect();
        let mut row = TrendRow {
            label: (*label).to_owned(),
            cells: Vec::new(),
            passes: 0,
            runs: 0,
            cost_usd: 0.0,
            priced_runs: 0,
            batches_passed: 0,
            batches_failed: 0,
            flakiness: Flakiness::default(),
        };
        let mut judged = Vec::new();
        for (position, (batch, cell)) in batches.iter().zip(&cells).enumerate() {
            let Some(unit) = cell else { continue };
            judged.push(Judged {
                batch: position,
                passes: unit.passes,
                runs: unit.runs,
                min_pass_rate: batch.min_pass_rate,
            });
            row.passes += unit.passes;
            row.runs += unit.runs;
            row.cost_usd += unit.cost_usd;
            row.priced_runs += unit.priced_runs;
            match unit.passed(batch.min_pass_rate) {
                Some(true) => row.batches_passed += 1,
                Some(false) => row.batches_failed += 1,
                None => {}
            }
        }
        row.cells = cells;
        row.flakiness = flakiness(&judged);
        rows.insert(label, row);
    }
    order
        .into_iter()
        .filter_map(|label| rows.remove(label))
        .collect()
}

pub mod suggest;
#[cfg(test)]
mod tests;
