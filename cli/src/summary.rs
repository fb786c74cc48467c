//! The summary table printed on stderr at the end of a batch: one row per file or cell with
//! runs, pass rate, verdict and cost.

use cowork_core::reduce::{Judging, arm_label, js_to_fixed, rollup_passes};
use cowork_schema::envelope::Envelope;
use cowork_schema::rollup::RepeatRollup;
use serde_json::Value;

/// One row of the table.
struct Row {
    unit: String,
    runs: String,
    pass_rate: String,
    verdict: String,
    cost: String,
}

fn percent(rate: f64) -> String {
    format!("{}%", js_to_fixed(rate * 100.0, 0))
}

fn cost(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |usd| format!("${usd:.4}"))
}

fn repeat_row(unit: String, rollup: &RepeatRollup, judging: &Judging) -> Row {
    let mut verdict = if rollup_passes(rollup, judging) {
        "PASS".to_owned()
    } else {
        "FAIL".to_owned()
    };
    verdict.push_str(&arm_label(rollup));
    if let Some(stop) = rollup.stopped_early {
        verdict.push_str(&format!(" (stopped: {})", stop.as_str()));
    }
    Row {
        unit,
        runs: format!("{}/{}", rollup.completed, rollup.requested),
        pass_rate: percent(rollup.pass_rate),
        verdict,
        cost: cost(rollup.total_cost_usd),
    }
}

fn error_row(unit: String, error: &str) -> Row {
    Row {
        unit,
        runs: "0/1".into(),
        pass_rate: "-".into(),
        verdict: format!("ERROR: {error}"),
        cost: "-".into(),
    }
}

/// What the summary needs, taken from an envelope (its batch keys, results and `fleet` key) so
/// that `cowork run`, `cowork submit --watch` and `cowork rollup` print the same table. The
/// head of an envelope is enough (results are read only for a plain files batch, one per file).
pub struct Summary<'a> {
    pub envelope: &'a Envelope,
    pub judging: Judging,
    pub exit_code: i32,
    /// The verdict word when the batch is judged otherwise than by its rollup (an eval, by its
    /// A/B comparison); `None`: PASS or FAIL from the envelope.
    pub verdict: Option<String>,
}

impl<'a> Summary<'a> {
    /// The summary of `envelope`; judging settings come from its `fleet` key (defaults: the
    /// CLI's) and the exit code from `exit_code`.
    pub fn new(envelope: &'a Envelope, exit_code: i32) -> Summary<'a> {
        let fleet = &envelope.fleet;
        let judging = Judging {
            min_pass_rate: fleet
                .get("minPassRate")
                .and_then(Value::as_f64)
                .unwrap_or(1.0),
            allow_budget_stop: fleet
                .get("allowBudgetStop")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            allow_truncated_matrix: fleet
                .get("allowTruncatedMatrix")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        };
        Summary {
            envelope,
            judging,
            exit_code,
            verdict: None,
        }
    }

    /// The same summary ending in `verdict` and `exit_code` instead of the rollup's: an eval
    /// batch is judged by its A/B comparison, not by its arms' pass rates.
    pub fn judged_as(self, verdict: String, exit_code: i32) -> Summary<'a> {
        Summary {
            verdict: Some(verdict),
            exit_code,
            ..self
        }
    }
}

/// Discarded runs and their spend: the fleet key's `discardedTotal`, or the sum of its
/// `discarded` list (an envelope written before the total existed).
fn discarded_spend(fleet: &Value) -> Option<(u64, f64)> {
    if let Some(total) = fleet.get("discardedTotal") {
        let runs = total.get("runs").and_then(Value::as_u64)?;
        let spend = total.get("costUsd").and_then(Value::as_f64).unwrap_or(0.0);
        // `+ 0.0` turns a stored `-0` into `0`, so the line never prints `$-0.0000`.
        return Some((runs, spend + 0.0));
    }
    let discarded = fleet.get("discarded").and_then(Value::as_array)?;
    // Folding from 0.0 keeps an all-unpriced list at `$0.0000`, not `-0`.
    let spend = discarded
        .iter()
        .filter_map(|d| d.get("costUsd").and_then(Value::as_f64))
        .fold(0.0, |sum, cost| sum + cost);
    Some((discarded.len() as u64, spend))
}

/// With a per-unit budget: the cap and what the unit that spent most spent (folded and
/// discarded runs together).
fn unit_budget_line(fleet: &Value) -> Option<String> {
    let admission = fleet.get("admission")?;
    let cap = admission.get("unitBudgetUsd").and_then(Value::as_f64)?;
    let most = admission.get("maxUnitSpentUsd").and_then(Value::as_f64)?;
    Some(format!(
        "unit budget ${cap:.4}: the unit that spent most spent ${most:.4} (folded and discarded runs)\n"
    ))
}

/// Renders the table, a verdict line, and a marker when results are simulated.
pub fn render(summary: &Summary<'_>) -> String {
    let envelope = summary.envelope;
    let all_rows = rows(envelope, &summary.judging);
    // A 1,000-cell sweep would print a thousand rows: past `LISTED_UNITS` the table keeps the
    // units that did not pass and one line counts the rest (the envelope has every unit).
    let mut out = if all_rows.len() > crate::text::LISTED_UNITS {
        let n_units = all_rows.len();
        let shown: Vec<Row> = all_rows
            .into_iter()
            .filter(|row| !row.verdict.starts_with("PASS"))
            .collect();
        let mut out = table(&shown);
        out.push_str(&format!(
            "{} of {} not listed: they passed\n",
            crate::text::count((n_units - shown.len()) as u64, "unit"),
            n_units
        ));
        out
    } else {
        table(&all_rows)
    };
    out.push_str(&notes(envelope));
    let verdict = match &summary.verdict {
        Some(verdict) => verdict.as_str(),
        None if envelope.ok => "PASS",
        None => "FAIL",
    };
    out.push_str(&format!(
        "verdict: {verdict} (exit {})\n",
        summary.exit_code
    ));
    out
}

/// A matrix cell's unit name as every other view (dry run, diff, trend, reports) spells it:
/// `<scenario> [<axes>]`, from the batch's scenario name; `c<index> <axes>` only when no
/// result names the scenario.
fn cell_unit(scenario: Option<&str>, index: u32, axes: &str) -> String {
    match scenario {
        Some(name) => format!("{name} [{axes}]"),
        None => format!("c{index} {axes}"),
    }
}

/// The scenario name of a matrix batch: a cell rollup's label without its axes, or a result's
/// `scenario`.
fn matrix_scenario(envelope: &Envelope) -> Option<String> {
    let from_rollup = envelope.matrix_repeat.as_ref().and_then(|matrix| {
        matrix
            .cells
            .iter()
            .find_map(|cell| cell.rollup.as_ref())
            .map(|rollup| rollup.scenario.clone())
    });
    let from_result = || {
        envelope
            .results
            .iter()
            .find_map(|result| result.get("scenario").and_then(Value::as_str))
            .map(str::to_owned)
    };
    let label = from_rollup.or_else(from_result)?;
    // A cell label is `<scenario> [<axes>]`; keep the scenario.
    Some(match label.split_once(" [") {
        Some((name, _)) => name.to_owned(),
        None => label,
    })
}

/// One row per unit: each file's or cell's rollup, a plain matrix's cells, or a plain run's
/// results.
fn rows(envelope: &Envelope, judging: &Judging) -> Vec<Row> {
    let mut rows = Vec::new();
    let scenario = matrix_scenario(envelope);
    if let Some(rollups) = &envelope.rollups {
        for rollup in rollups {
            rows.push(repeat_row(rollup.scenario.clone(), rollup, judging));
        }
    } else if let Some(matrix) = &envelope.matrix_repeat {
        for cell in &matrix.cells {
            let unit = match &cell.rollup {
                // The rollup's own label is the one the history, diff and trend use.
                Some(rollup) => rollup.scenario.clone(),
                None => cell_unit(scenario.as_deref(), cell.index, &cell.axes.label()),
            };
            match (&cell.rollup, &cell.error) {
                (Some(rollup), _) => rows.push(repeat_row(unit, rollup, judging)),
                (None, Some(error)) => rows.push(error_row(unit, error)),
                (None, None) => {}
            }
        }
    } else if let Some(matrix) = &envelope.matrix {
        for cell in &matrix.cells {
            let unit = cell_unit(scenario.as_deref(), cell.index, &cell.axes.label());
            if let Some(error) = &cell.error {
                rows.push(error_row(unit, error));
                continue;
            }
            rows.push(Row {
                unit,
                runs: "1/1".into(),
                pass_rate: if cell.pass {
                    "100%".into()
                } else {
                    "0%".into()
                },
                verdict: if cell.pass {
                    "PASS".into()
                } else {
                    format!("FAIL {}", cell.failed_assertions.join(", "))
                },
                cost: cost(cell.cost_usd),
            });
        }
    } else {
        for result in &envelope.results {
            let pass = result.pointer("/verdict/pass") == Some(&Value::Bool(true));
            let unit = result
                .get("scenario")
                .and_then(Value::as_str)
                .unwrap_or("(unnamed)")
                .to_owned();
            rows.push(Row {
                unit,
                runs: "1/1".into(),
                pass_rate: if pass { "100%".into() } else { "0%".into() },
                verdict: if pass { "PASS".into() } else { "FAIL".into() },
                cost: run_cost(&envelope.command, result),
            });
        }
    }
    rows
}

/// The cost column of one run: what it spent. A replay spends nothing; the cost its result
/// carries is the recorded run's, shown labelled as such.
fn run_cost(command: &str, result: &Value) -> String {
    let recorded = result.pointer("/cost/usd").and_then(Value::as_f64);
    if command == cowork_schema::batch::BatchMode::Replay.envelope_command() {
        return match recorded {
            Some(usd) => format!("$0 (recorded ${usd:.4})"),
            None => "$0".to_owned(),
        };
    }
    cost(recorded)
}

/// The rows under a header, columns aligned; nothing without rows.
/// The units table, at most 100 columns wide like every table (`crate::text::table`: a long
/// unit name gets a line of its own).
fn table(rows: &[Row]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            vec![
                row.unit.clone(),
                row.runs.clone(),
                row.pass_rate.clone(),
                row.cost.clone(),
                row.verdict.clone(),
            ]
        })
        .collect();
    crate::text::table(
        &["unit", "runs", "pass rate", "cost", "verdict"],
        &cells,
        &[1, 2, 3],
        crate::args::TableFormat::Text,
    )
}

/// The lines under the table: truncation, the error, discarded runs and their spend, the
/// per-unit budget, and the simulated-runs warning.
fn notes(envelope: &Envelope) -> String {
    let mut out = String::new();
    let truncation = match (&envelope.matrix_repeat, &envelope.matrix) {
        (Some(m), _) => Some((m.truncated, m.ran_cells, m.requested)),
        (None, Some(m)) => Some((m.truncated, m.ran_cells, m.requested)),
        (None, None) => None,
    };
    if let Some((true, ran, requested)) = truncation {
        out.push_str(&format!(
            "matrix truncated: ran {ran} of {requested} cells\n"
        ));
    }
    if let Some(error) = &envelope.error {
        out.push_str(&format!("error ({}): {}\n", error.category, error.message));
    }
    let discarded = discarded_spend(&envelope.fleet);
    if let Some((runs, spend)) = discarded
        && runs > 0
    {
        out.push_str(&format!(
            "discarded {runs} run(s) after an early stop: ${spend:.4} spent outside the rollups (not folded)\n"
        ));
    }
    if let Some(line) = unit_budget_line(&envelope.fleet) {
        out.push_str(&line);
    }
    let simulated = simulated_runs(envelope, discarded.map_or(0, |(runs, _)| runs));
    if simulated > 0 {
        out.push_str(&format!(
            "SIMULATED: {simulated} run(s) came from the sim executor, not from the harness\n"
        ));
    }
    out
}

/// Runs the simulator made: the folded ones the fleet key counts, plus the discarded ones when
/// the batch ran on the simulator (every run then is simulated), so the line counts every run
/// that was made, as the report does. An envelope without a fleet key (a re-judged batch) is
/// counted from its results.
fn simulated_runs(envelope: &Envelope, discarded_runs: u64) -> u64 {
    let fleet = &envelope.fleet;
    let Some(folded) = fleet.get("simulatedRuns").and_then(Value::as_u64) else {
        return envelope
            .results
            .iter()
            .filter(|r| r.get("simulated") == Some(&Value::Bool(true)))
            .count() as u64;
    };
    let on_the_simulator = fleet.get("executor").and_then(Value::as_str) == Some("sim");
    folded + if on_the_simulator { discarded_runs } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render_fleet(fleet: Value) -> String {
        let mut envelope = Envelope::new("2.0.0", "run");
        envelope.ok = true;
        envelope.fleet = fleet;
        render(&Summary::new(&envelope, 0))
    }

    #[test]
    fn matrix_cells_are_named_as_every_other_view_names_them_and_one_run_reads_1_of_1() {
        let mut envelope = Envelope::new("2.0.0", "run");
        envelope.ok = true;
        envelope.results = vec![json!({"scenario": "csv-report", "verdict": {"pass": true}})];
        envelope.matrix = Some(
            serde_json::from_value(json!({
                "cells": [{"index": 0, "axes": {"model": "m1"}, "pass": true,
                           "failedAssertions": [], "signals": []}],
                "requested": 1, "ranCells": 1, "truncated": false, "anyFail": false,
            }))
            .expect("a matrix rollup"),
        );
        let text = render(&Summary::new(&envelope, 0));
        let row = text
            .lines()
            .find(|line| line.contains("PASS"))
            .unwrap_or_else(|| panic!("no row in\n{text}"));
        assert!(row.starts_with("csv-report [model=m1]"), "{text}");
        assert!(row.contains("1/1"), "{text}");
        // A plain run: one result, one run of one.
        let mut plain = Envelope::new("2.0.0", "run");
        plain.ok = true;
        plain.results = vec![json!({"scenario": "csv-report", "verdict": {"pass": true}})];
        let text = render(&Summary::new(&plain, 0));
        assert!(
            text.lines()
                .any(|line| line.starts_with("csv-report") && line.contains("1/1")),
            "{text}"
        );
    }

    #[test]
    fn discarded_runs_show_their_spend_and_the_unit_budget_its_worst_unit() {
        let text = render_fleet(json!({
            "simulatedRuns": 12,
            "discarded": [{"job": "b/f0/r3", "completed": true, "costUsd": 0.05}],
            "discardedTotal": {"runs": 1, "costUsd": 0.05},
            "admission": {"window": 4, "unitOrder": "plan", "unitBudgetUsd": 0.3,
                "maxUnitSpentUsd": 0.34},
        }));
        assert!(
            text.contains(
                "discarded 1 run(s) after an early stop: $0.0500 spent outside the rollups"
            ),
            "{text}"
        );
        assert!(
            text.contains("unit budget $0.3000: the unit that spent most spent $0.3400"),
            "{text}"
        );
        assert!(text.contains("SIMULATED: 12 run(s)"), "{text}");
    }

    #[test]
    fn an_older_fleet_key_sums_its_discarded_list_without_negative_zero() {
        let text = render_fleet(json!({
            "discarded": [{"job": "b/f1", "completed": false}, {"job": "b/f2", "completed": false}],
        }));
        assert!(
            text.contains("discarded 2 run(s) after an early stop: $0.0000"),
            "{text}"
        );
        let none = render_fleet(json!({"discardedTotal": {"runs": 0, "costUsd": 0}}));
        assert!(!none.contains("discarded"), "{none}");
    }

    #[test]
    fn simulated_runs_count_the_discarded_ones_of_a_simulated_batch() {
        let fleet = |executor: &str| {
            json!({
                "executor": executor,
                "simulatedRuns": 40,
                "discardedTotal": {"runs": 37, "costUsd": 1.73},
            })
        };
        let text = render_fleet(fleet("sim"));
        assert!(text.contains("SIMULATED: 77 run(s)"), "{text}");
        // A real batch with a few simulated runs: only those are simulated.
        let text = render_fleet(fleet("harness"));
        assert!(text.contains("SIMULATED: 40 run(s)"), "{text}");
    }
}
