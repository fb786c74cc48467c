//! The power part of `cowork eval --dry-run`: per scenario and overall, arm A's pass rate and
//! where it came from, the smallest rise of B the planned runs detect 4 times in 5 at
//! `--alpha`, and with `--mde` the runs per arm that difference needs, with what that many runs
//! would cost and take by the same history as the plan's estimate. The figures are the core's
//! (`cowork_core::eval::plan_power`), the function the report uses after the runs.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use cowork_core::eval::PowerFigures;
use cowork_core::eval::plan_power::{PassRateSource, PowerPlan, PowerPlanInput, power_plan};
use cowork_core::eval::power::PAIRS_CAP;
use cowork_core::eval::words::half_points;
use cowork_core::history::UnitEstimate;
use cowork_core::plan::Plan;
use cowork_core::preflight::preflight;
use cowork_schema::batch::REPEAT_MAX;
use cowork_schema::history::BatchStats;

use crate::args::TableFormat;
use crate::text::{count, table};

/// The eval settings the power part needs.
#[derive(Clone, Copy, Debug)]
pub struct EvalPower {
    pub alpha: f64,
    /// `--mde` as a fraction.
    pub mde: Option<f64>,
    /// `--expect-pass-rate`.
    pub expect_pass_rate: Option<f64>,
}

/// The scenario names of an eval plan, each once, in unit order (the first arm's units).
pub fn scenario_names(plan: &Plan) -> Vec<String> {
    plan.units
        .iter()
        .filter(|unit| unit.arm.is_some_and(|arm| arm.index == 0))
        .map(|unit| unit.scenario_name.clone())
        .collect()
}

/// The power section of the dry run of `plan`, from `history` (the batches the dry run read)
/// and the cost and time `estimates` by unit label, on `slots` when known.
pub fn render(
    plan: &Plan,
    power: EvalPower,
    history: &[BatchStats],
    estimates: &BTreeMap<String, UnitEstimate>,
    slots: Option<u16>,
) -> String {
    let scenarios = scenario_names(plan);
    let counts = cowork_core::eval::plan_power::history_pass_counts(history);
    let powered = power_plan(&PowerPlanInput {
        scenarios: &scenarios,
        runs_per_arm: plan.runs_per_unit(),
        history: &counts,
        expect_pass_rate: power.expect_pass_rate,
        alpha: power.alpha,
        mde: power.mde,
    });
    let mut out = String::new();
    let _ = writeln!(
        out,
        "power: McNemar's test at alpha {} with {} per arm: the smallest rise of B over arm A's\n  \
         pass rate it detects 4 times in 5 (a pair's two runs independent given the scenario)",
        power.alpha,
        count(u64::from(powered.runs_per_arm), "run")
    );
    out.push_str(&power_table(&powered, power.mde));
    if let Some(mde) = power.mde {
        write_mde_lines(&mut out, plan, &powered, mde, estimates, slots);
    }
    out
}

fn power_table(powered: &PowerPlan, mde: Option<f64>) -> String {
    let mde_header = mde.map(|mde| {
        format!(
            "runs/arm for {}",
            half_points(mde).replace(" points", " pts")
        )
    });
    let mut header = vec!["scenario", "arm A pass rate", "pairs", "detects B ≥"];
    if let Some(mde_header) = &mde_header {
        header.push(mde_header.as_str());
    }
    let row = |scope: &str, source: String, pairs: u64, figures: &PowerFigures, runs: String| {
        let mut cells = vec![
            scope.to_owned(),
            format!("{:.0}% ({source})", figures.arm_a_pass_rate * 100.0),
            pairs.to_string(),
            figures
                .detectable_diff
                .map_or_else(|| "nothing".to_owned(), half_points),
        ];
        if mde.is_some() {
            cells.push(runs);
        }
        cells
    };
    let pairs = u64::from(powered.runs_per_arm);
    let mut rows: Vec<Vec<String>> = powered
        .scenarios
        .iter()
        .map(|scenario| {
            row(
                &scenario.scenario,
                source_words(&scenario.source),
                pairs,
                &scenario.figures,
                runs_words(scenario.figures.pairs_for_mde, u64::from(REPEAT_MAX)),
            )
        })
        .collect();
    let n_scenarios = powered.scenarios.len().max(1) as u64;
    rows.push(row(
        "overall",
        "mean".to_owned(),
        pairs * n_scenarios,
        &powered.overall,
        runs_words(
            powered.pooled_runs_for_mde,
            u64::from(REPEAT_MAX).min(PAIRS_CAP / n_scenarios),
        ) + " pooled",
    ));
    table(&header, &rows, &[2, 3, 4], TableFormat::Text)
}

fn source_words(source: &PassRateSource) -> String {
    match source {
        PassRateSource::History { runs, .. } => format!("history, {}", count(*runs, "run")),
        PassRateSource::Expected => "--expect-pass-rate".to_owned(),
        PassRateSource::Assumed => "assumed: no history".to_owned(),
    }
}

/// Runs per arm, or why there is no such number.
fn runs_words(runs: Option<u64>, cap: u64) -> String {
    match runs {
        Some(runs) if runs <= cap => runs.to_string(),
        Some(_) => format!("more than {cap}"),
        None => "out of reach".to_owned(),
    }
}

/// With `--mde`: what `--runs` detects it in every scenario, and pooled, and what that many runs
/// would cost and take.
fn write_mde_lines(
    out: &mut String,
    plan: &Plan,
    powered: &PowerPlan,
    mde: f64,
    estimates: &BTreeMap<String, UnitEstimate>,
    slots: Option<u16>,
) {
    let points = half_points(mde);
    let mut write = |what: &str, runs: Option<u64>| match runs {
        Some(runs) if runs <= u64::from(REPEAT_MAX) => {
            let _ = writeln!(
                out,
                "--mde {}: --runs {runs} {what} ({})",
                points.replace(" points", ""),
                estimate_words(plan, runs, estimates, slots)
            );
        }
        Some(_) => {
            let _ = writeln!(
                out,
                "--mde {}: more than {REPEAT_MAX} runs per arm {what}: out of an eval's reach",
                points.replace(" points", "")
            );
        }
        None => {
            let _ = writeln!(
                out,
                "--mde {}: no number of runs {what} (arm A's pass rate leaves B less than {points} \
                 to rise, or it needs more than {PAIRS_CAP} pairs)",
                points.replace(" points", "")
            );
        }
    };
    write(
        &format!("detects {points} in every scenario"),
        powered.runs_for_mde_everywhere,
    );
    if powered.scenarios.len() > 1 {
        write(
            &format!("detects {points} over all scenarios pooled"),
            powered.pooled_runs_for_mde,
        );
    }
}

/// The cost and time of the plan with `runs` per arm, by the same estimate as the plan's.
fn estimate_words(
    plan: &Plan,
    runs: u64,
    estimates: &BTreeMap<String, UnitEstimate>,
    slots: Option<u16>,
) -> String {
    let mut resized = plan.clone();
    let runs = u32::try_from(runs).unwrap_or(u32::MAX);
    resized.repeat = Some(runs);
    resized.flags.repeat = Some(runs);
    let dry = preflight(&resized, estimates, slots.map(u32::from));
    let cost = dry.cost_usd.map_or_else(
        || "cost: no history".to_owned(),
        |usd| format!("est. cost ${usd:.2}"),
    );
    // The simulator's wall time is its profile's time scale's (the plan's time line says it).
    let simulated = plan.executor == cowork_schema::batch::ExecutorKind::Sim;
    let time = match (dry.run_ms, dry.wall_ms, slots) {
        (Some(run_ms), _, _) if simulated => {
            format!("{} of simulated runs", super::minutes(run_ms))
        }
        (Some(run_ms), Some(wall_ms), Some(slots)) => format!(
            "{} of runs, about {} of wall time on {}",
            super::minutes(run_ms),
            super::minutes(wall_ms),
            count(u64::from(slots), "slot")
        ),
        (Some(run_ms), _, _) => format!("{} of runs", super::minutes(run_ms)),
        (None, _, _) => "time: no history".to_owned(),
    };
    format!("{} jobs, {cost}, {time}", dry.n_jobs)
}
