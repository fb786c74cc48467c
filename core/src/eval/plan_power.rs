//! The power part of `cowork eval --dry-run`: for each scenario of an eval plan, arm A's pass
//! rate (from history, `--expect-pass-rate`, or assumed), the smallest difference the planned
//! runs detect 4 times in 5, and with `--mde` the runs per arm that difference needs. The
//! figures are [`power_figures`], the function the report uses after the runs.
//!
//! Pure: the caller reads the history; this module only combines it.

use std::collections::BTreeMap;

use cowork_schema::eval::PowerFigures;
use cowork_schema::history::BatchStats;

use super::power::power_figures;
use crate::plan::eval::arm_unit_label;

/// The pass rate a dry run assumes with neither history nor `--expect-pass-rate`: near 50% the
/// arms disagree most often, so the runs it asks for are about the most any rate needs.
pub const ASSUMED_PASS_RATE: f64 = 0.5;

/// Passes and folded runs per unit label, over `history`.
pub fn history_pass_counts(history: &[BatchStats]) -> BTreeMap<String, (u64, u64)> {
    let mut counts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for batch in history {
        for unit in &batch.units {
            let count = counts.entry(unit.label.clone()).or_default();
            count.0 += u64::from(unit.passes);
            count.1 += u64::from(unit.folded);
        }
    }
    counts
}

/// Where a scenario's arm-A pass rate came from.
#[derive(Clone, Debug, PartialEq)]
pub enum PassRateSource {
    /// Earlier runs of the unit `label` (`<scenario> [arm=A]`, else the plain scenario).
    History { label: String, runs: u64 },
    /// `--expect-pass-rate`.
    Expected,
    /// [`ASSUMED_PASS_RATE`]: no history and no `--expect-pass-rate`.
    Assumed,
}

/// One scenario's power figures for the planned runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioPower {
    pub scenario: String,
    pub source: PassRateSource,
    /// The figures for the planned runs per arm as pairs.
    pub figures: PowerFigures,
}

/// The power part of an eval's dry run.
#[derive(Clone, Debug, PartialEq)]
pub struct PowerPlan {
    /// Runs per arm per scenario as planned (`--runs`).
    pub runs_per_arm: u32,
    pub scenarios: Vec<ScenarioPower>,
    /// All scenarios pooled: `runs × scenarios` pairs at the scenarios' mean pass rate.
    pub overall: PowerFigures,
    /// `overall.pairs_for_mde` as runs per arm per scenario.
    pub pooled_runs_for_mde: Option<u64>,
    /// With `--mde`: the runs per arm that detect it in every scenario (the most any one
    /// needs); `None` without `--mde` or when a scenario cannot reach it.
    pub runs_for_mde_everywhere: Option<u64>,
}

/// What the power part of a dry run is computed from.
#[derive(Clone, Copy, Debug)]
pub struct PowerPlanInput<'a> {
    /// The scenario names of the plan, in unit order, each once.
    pub scenarios: &'a [String],
    pub runs_per_arm: u32,
    /// [`history_pass_counts`] of the history the dry run read.
    pub history: &'a BTreeMap<String, (u64, u64)>,
    /// `--expect-pass-rate`.
    pub expect_pass_rate: Option<f64>,
    pub alpha: f64,
    /// `--mde` as a fraction.
    pub mde: Option<f64>,
}

/// The power part of an eval's dry run (see the module).
pub fn power_plan(input: &PowerPlanInput<'_>) -> PowerPlan {
    let pairs = u64::from(input.runs_per_arm);
    let scenarios: Vec<ScenarioPower> = input
        .scenarios
        .iter()
        .map(|scenario| {
            let (rate, source) = pass_rate(input, scenario);
            ScenarioPower {
                scenario: scenario.clone(),
                source,
                figures: power_figures(pairs, rate, input.alpha, input.mde),
            }
        })
        .collect();
    let n_scenarios = scenarios.len().max(1) as u64;
    let mean_rate = scenarios
        .iter()
        .map(|row| row.figures.arm_a_pass_rate)
        .sum::<f64>()
        / n_scenarios as f64;
    let overall = power_figures(pairs * n_scenarios, mean_rate, input.alpha, input.mde);
    let pooled_runs_for_mde = overall
        .pairs_for_mde
        .map(|pooled| pooled.div_ceil(n_scenarios));
    let runs_for_mde_everywhere = match input.mde {
        Some(_) => scenarios
            .iter()
            .map(|row| row.figures.pairs_for_mde)
            .collect::<Option<Vec<u64>>>()
            .and_then(|needed| needed.into_iter().max()),
        None => None,
    };
    PowerPlan {
        runs_per_arm: input.runs_per_arm,
        scenarios,
        overall,
        pooled_runs_for_mde,
        runs_for_mde_everywhere,
    }
}

/// Arm A's pass rate for `scenario`: its arm-A history, else its plain history, else
/// `--expect-pass-rate`, else [`ASSUMED_PASS_RATE`].
fn pass_rate(input: &PowerPlanInput<'_>, scenario: &str) -> (f64, PassRateSource) {
    for label in [arm_unit_label(scenario, "A"), scenario.to_owned()] {
        if let Some(&(passes, folded)) = input.history.get(&label)
            && folded > 0
        {
            let source = PassRateSource::History {
                label,
                runs: folded,
            };
            return (passes as f64 / folded as f64, source);
        }
    }
    match input.expect_pass_rate {
        Some(rate) => (rate, PassRateSource::Expected),
        None => (ASSUMED_PASS_RATE, PassRateSource::Assumed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_schema::BatchId;
    use cowork_schema::history::UnitStats;

    fn unit(label: &str, folded: u32, passes: u32) -> UnitStats {
        UnitStats {
            label: label.to_owned(),
            scenario: label.to_owned(),
            axes: None,
            arm: None,
            runs: folded,
            folded,
            passes,
            priced_runs: 0,
            cost_usd: 0.0,
            median_cost_usd: None,
            median_run_ms: None,
            max_run_ms: None,
        }
    }

    fn batch(units: Vec<UnitStats>) -> BatchStats {
        BatchStats {
            batch_id: BatchId::new("b1").expect("valid id"),
            decided_at_ms: 0,
            wall_ms: 0,
            units,
        }
    }

    #[test]
    fn arm_a_history_comes_first_then_the_plain_scenario_then_the_flag() {
        let history = history_pass_counts(&[
            batch(vec![unit("csv [arm=A]", 10, 9), unit("csv [arm=B]", 10, 1)]),
            batch(vec![unit("csv [arm=A]", 10, 10), unit("plain", 4, 1)]),
        ]);
        let scenarios = ["csv".to_owned(), "plain".to_owned(), "new".to_owned()];
        let input = PowerPlanInput {
            scenarios: &scenarios,
            runs_per_arm: 20,
            history: &history,
            expect_pass_rate: Some(0.7),
            alpha: 0.05,
            mde: Some(0.15),
        };
        let plan = power_plan(&input);
        let rates: Vec<(f64, &PassRateSource)> = plan
            .scenarios
            .iter()
            .map(|row| (row.figures.arm_a_pass_rate, &row.source))
            .collect();
        assert_eq!(
            rates,
            [
                (
                    0.95,
                    &PassRateSource::History {
                        label: "csv [arm=A]".to_owned(),
                        runs: 20
                    }
                ),
                (
                    0.25,
                    &PassRateSource::History {
                        label: "plain".to_owned(),
                        runs: 4
                    }
                ),
                (0.7, &PassRateSource::Expected),
            ]
        );
        for row in &plan.scenarios {
            assert_eq!(
                row.figures,
                power_figures(20, row.figures.arm_a_pass_rate, 0.05, Some(0.15))
            );
        }
        // 95% + 15 points is above 100%: that scenario cannot reach the mde.
        assert_eq!(plan.scenarios[0].figures.pairs_for_mde, None);
        assert_eq!(plan.runs_for_mde_everywhere, None);
        let mean = (0.95 + 0.25 + 0.7) / 3.0;
        assert_eq!(plan.overall, power_figures(60, mean, 0.05, Some(0.15)));
        let without = power_plan(&PowerPlanInput {
            expect_pass_rate: None,
            mde: None,
            ..input
        });
        assert_eq!(without.scenarios[2].source, PassRateSource::Assumed);
        assert_eq!(without.scenarios[2].figures.arm_a_pass_rate, 0.5);
        assert_eq!(without.pooled_runs_for_mde, None);
    }

    #[test]
    fn the_runs_for_every_scenario_are_the_most_any_one_needs() {
        let history = BTreeMap::new();
        let scenarios = ["a".to_owned(), "b".to_owned()];
        let plan = power_plan(&PowerPlanInput {
            scenarios: &scenarios,
            runs_per_arm: 10,
            history: &history,
            expect_pass_rate: Some(0.6),
            alpha: 0.05,
            mde: Some(0.2),
        });
        let one = plan.scenarios[0].figures.pairs_for_mde.expect("reachable");
        assert_eq!(plan.runs_for_mde_everywhere, Some(one));
        let pooled = plan.overall.pairs_for_mde.expect("reachable");
        assert_eq!(plan.pooled_runs_for_mde, Some(pooled.div_ceil(2)));
    }
}
