//! The summary table printed on stderr at the end of a batch: one row per file or cell with
//! runs, pass rate, verdict and cost.

use cowork_coordinator::reduce::{BatchReduction, Judging, arm_label, js_to_fixed, rollup_passes};
use cowork_schema::rollup::RepeatRollup;

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
        runs: "0".into(),
        pass_rate: "-".into(),
        verdict: format!("ERROR: {error}"),
        cost: "-".into(),
    }
}

/// Renders the table, a verdict line, and a marker when results are simulated.
pub fn render(reduction: &BatchReduction) -> String {
    let judging = &reduction.judging;
    let mut rows = Vec::new();
    if let Some(rollups) = &reduction.rollups {
        for rollup in rollups {
            rows.push(repeat_row(rollup.scenario.clone(), rollup, judging));
        }
    } else if let Some(matrix) = &reduction.matrix_repeat {
        for cell in &matrix.cells {
            let unit = format!("c{} {}", cell.index, cell.axes.label());
            match (&cell.rollup, &cell.error) {
                (Some(rollup), _) => rows.push(repeat_row(unit, rollup, judging)),
                (None, Some(error)) => rows.push(error_row(unit, error)),
                (None, None) => {}
            }
        }
    } else if let Some(matrix) = &reduction.matrix {
        for cell in &matrix.cells {
            let unit = format!("c{} {}", cell.index, cell.axes.label());
            if let Some(error) = &cell.error {
                rows.push(error_row(unit, error));
                continue;
            }
            rows.push(Row {
                unit,
                runs: "1".into(),
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
    }
    let mut out = String::new();
    if !rows.is_empty() {
        let headers = Row {
            unit: "unit".into(),
            runs: "runs".into(),
            pass_rate: "pass rate".into(),
            verdict: "verdict".into(),
            cost: "cost".into(),
        };
        let width =
            |f: &dyn Fn(&Row) -> usize| rows.iter().map(f).chain([f(&headers)]).max().unwrap_or(0);
        let w_unit = width(&|r| r.unit.chars().count());
        let w_runs = width(&|r| r.runs.len());
        let w_rate = width(&|r| r.pass_rate.len());
        let w_cost = width(&|r| r.cost.len());
        for row in std::iter::once(&headers).chain(rows.iter()) {
            let pad = w_unit.saturating_sub(row.unit.chars().count());
            out.push_str(&format!(
                "{}{}  {:>w_runs$}  {:>w_rate$}  {:>w_cost$}  {}\n",
                row.unit,
                " ".repeat(pad),
                row.runs,
                row.pass_rate,
                row.cost,
                row.verdict,
            ));
        }
    }
    let truncation = match (&reduction.matrix_repeat, &reduction.matrix) {
        (Some(m), _) => Some((m.truncated, m.ran_cells, m.requested)),
        (None, Some(m)) => Some((m.truncated, m.ran_cells, m.requested)),
        (None, None) => None,
    };
    if let Some((true, ran, requested)) = truncation {
        out.push_str(&format!(
            "matrix truncated: ran {ran} of {requested} cells\n"
        ));
    }
    if let Some(error) = &reduction.error {
        out.push_str(&format!("error ({}): {}\n", error.category, error.message));
    }
    if !reduction.discarded.is_empty() {
        let spend: f64 = reduction.discarded.iter().filter_map(|d| d.cost_usd).sum();
        out.push_str(&format!(
            "discarded {} run(s) after an early stop (spend ${spend:.4}, not folded)\n",
            reduction.discarded.len()
        ));
    }
    if reduction.simulated_runs > 0 {
        out.push_str(&format!(
            "SIMULATED: {} run(s) came from the sim executor, not from the harness\n",
            reduction.simulated_runs
        ));
    }
    out.push_str(&format!(
        "verdict: {} (exit {})\n",
        if reduction.ok { "PASS" } else { "FAIL" },
        reduction.exit_code
    ));
    out
}
