//! The summary table printed on stderr at the end of a batch: one row per file or cell with
//! runs, pass rate, verdict and cost.

use cowork_core::reduce::{Judging, arm_label, js_to_fixed, rollup_passes};
use cowork_schema::envelope::Envelope;
use cowork_schema::fleet_key::FleetView;
use cowork_schema::quarantine::QuarantineRecord;
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

/// Whether the fleet key says `unit` was stopped by a run killed on request (`cancel
/// --kill-running`, a second Ctrl-C): its stop is then said as `killed`, not `error`.
fn killed_on_request(fleet: &FleetView, unit: &str) -> bool {
    fleet
        .stop_errors
        .iter()
        .any(|error| error.unit == unit && error.category == "cancelled")
}

fn repeat_row(unit: String, rollup: &RepeatRollup, judging: &Judging, fleet: &FleetView) -> Row {
    let mut verdict = if rollup_passes(rollup, judging) {
        "PASS".to_owned()
    } else {
        "FAIL".to_owned()
    };
    verdict.push_str(&arm_label(rollup));
    if let Some(stop) = rollup.stopped_early {
        let stop = if killed_on_request(fleet, &rollup.scenario) {
            "killed"
        } else {
            stop.as_str()
        };
        verdict.push_str(&format!(" (stopped: {stop})"));
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
/// head of an envelope is enough (results are read only where they are the units: a plain files
/// batch, one per file, and a plain matrix, one per cell, whose scenario name they carry).
pub struct Summary<'a> {
    pub envelope: &'a Envelope,
    pub judging: Judging,
    pub exit_code: i32,
    /// The verdict word when the batch is judged otherwise than by its rollup (an eval, by its
    /// A/B comparison); `None`: PASS or FAIL from the envelope.
    pub verdict: Option<String>,
    /// Why runs failed, under the table (`crate::summary_reasons`); empty when none is known.
    pub reasons: String,
    /// The envelope's `fleet` key, read once for every line that needs it.
    pub fleet: FleetView,
}

impl<'a> Summary<'a> {
    /// The summary of `envelope`; judging settings come from its `fleet` key (defaults: the
    /// CLI's) and the exit code from `exit_code`.
    pub fn new(envelope: &'a Envelope, exit_code: i32) -> Summary<'a> {
        let fleet = envelope.fleet_view();
        let judging = Judging {
            min_pass_rate: fleet.min_pass_rate.unwrap_or(1.0),
            allow_budget_stop: fleet.allow_budget_stop.unwrap_or(false),
            allow_truncated_matrix: fleet.allow_truncated_matrix.unwrap_or(false),
        };
        Summary {
            envelope,
            judging,
            exit_code,
            verdict: None,
            reasons: String::new(),
            fleet,
        }
    }

    /// The same summary with `reasons` (the lines saying why runs failed) under the table.
    pub fn with_reasons(self, reasons: String) -> Summary<'a> {
        Summary { reasons, ..self }
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
fn discarded_spend(fleet: &FleetView) -> Option<(u64, f64)> {
    if let Some(total) = &fleet.discarded_total {
        // `+ 0.0` turns a stored `-0` into `0`, so the line never prints `$-0.0000`.
        return Some((total.runs, total.cost_usd + 0.0));
    }
    if fleet.discarded.is_empty() {
        return None;
    }
    // Folding from 0.0 keeps an all-unpriced list at `$0.0000`, not `-0`.
    let spend = fleet
        .discarded
        .iter()
        .filter_map(|d| d.cost_usd)
        .fold(0.0, |sum, cost| sum + cost);
    Some((fleet.discarded.len() as u64, spend))
}

/// With a per-unit budget: the cap and what the unit that spent most spent (folded and
/// discarded runs together).
fn unit_budget_line(fleet: &FleetView) -> Option<String> {
    let cap = fleet.unit_budget_usd?;
    let most = fleet.max_unit_spent_usd?;
    Some(format!(
        "unit budget ${cap:.4}: the unit that spent most spent ${most:.4} (folded and discarded runs)\n"
    ))
}

/// Prints the summary on stderr, its verdicts coloured on a terminal (never in a pipe, never
/// with `NO_COLOR`).
pub fn print(summary: &Summary<'_>) {
    let text = render(summary);
    if crate::telemetry::stderr_may_colour() {
        eprint!("{}", colour_verdicts(&text));
    } else {
        eprint!("{text}");
    }
}

/// ANSI escapes for the verdict words of a rendered summary: PASS green, FAIL and ERROR red,
/// SIMULATED yellow, each only as a whole word (a unit named `PASSWORD-reset` stays plain).
fn colour_verdicts(text: &str) -> String {
    const WORDS: [(&str, &str); 4] = [
        ("PASS", "\x1b[32m"),
        ("FAIL", "\x1b[31m"),
        ("ERROR", "\x1b[31m"),
        ("SIMULATED", "\x1b[33m"),
    ];
    let mut out = String::with_capacity(text.len() + 64);
    let mut word_start = None;
    let flush = |out: &mut String, word: &str| match WORDS.iter().find(|(w, _)| *w == word) {
        Some((_, colour)) => out.push_str(&format!("{colour}\x1b[1m{word}\x1b[0m")),
        None => out.push_str(word),
    };
    for (idx, ch) in text.char_indices() {
        let in_word = ch.is_alphanumeric() || ch == '_' || ch == '-';
        match (in_word, word_start) {
            (true, None) => word_start = Some(idx),
            (false, Some(start)) => {
                flush(&mut out, &text[start..idx]);
                word_start = None;
                out.push(ch);
            }
            (false, None) => out.push(ch),
            (true, Some(_)) => {}
        }
    }
    if let Some(start) = word_start {
        flush(&mut out, &text[start..]);
    }
    out
}

/// Renders the table, a verdict line, and a marker when results are simulated.
pub fn render(summary: &Summary<'_>) -> String {
    let envelope = summary.envelope;
    let mut all_rows = rows(envelope, &summary.fleet, &summary.judging);
    if let Some(quarantine) = &envelope.quarantine {
        mark_quarantined(&mut all_rows, quarantine);
    }
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
    out.push_str(&notes(envelope, &summary.fleet));
    if let Some(quarantine) = &envelope.quarantine {
        out.push_str(&quarantine_lines(quarantine));
    }
    out.push_str(&summary.reasons);
    let verdict = match &summary.verdict {
        Some(verdict) => verdict.as_str(),
        None if envelope.ok => "PASS",
        None => "FAIL",
    };
    out.push_str(&format!(
        "verdict: {verdict} (exit {})\n",
        summary.exit_code
    ));
    // Unit names, messages and reasons come from scenarios and harnesses: one escape for the
    // whole block, so no line of it can start a terminal sequence or forge a row.
    cowork_core::safe_text::for_terminal_lines(&out)
}

/// Marks each quarantined unit's verdict (`FAIL (quarantined)` still says FAIL: the unit's own
/// verdict stands) and each unit whose entry expired.
fn mark_quarantined(rows: &mut [Row], quarantine: &QuarantineRecord) {
    for row in rows {
        if quarantine.quarantined.contains(&row.unit) {
            row.verdict.push_str(" (quarantined)");
        } else if quarantine.expired.contains(&row.unit) {
            row.verdict.push_str(" (quarantine EXPIRED)");
        }
    }
}

/// The lines under the table about the quarantine: what it set aside, what expired (loudly:
/// those units gate again) and entries that matched nothing.
pub fn quarantine_lines(quarantine: &QuarantineRecord) -> String {
    let mut out = format!(
        "quarantine {} (sha256 {}): {} quarantined",
        quarantine.source,
        quarantine.sha256.get(..12).unwrap_or(&quarantine.sha256),
        crate::text::count(quarantine.quarantined.len() as u64, "unit"),
    );
    if quarantine.applied.is_empty() {
        out.push_str(", no failure set aside\n");
    } else {
        out.push_str(&format!(
            "; failures set aside, not gating the verdict: {}\n",
            quarantine.applied.join(", ")
        ));
    }
    for unit in &quarantine.expired {
        out.push_str(&format!(
            "WARNING: the quarantine of {unit} has EXPIRED: it gates the verdict again (renew the entry or fix the unit)\n"
        ));
    }
    for entry in &quarantine.unmatched {
        out.push_str(&format!(
            "warning: the quarantine entry {entry} matches no unit of this batch\n"
        ));
    }
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
    // Results are the CLI's `result.json`s, read by key: their shape is the CLI's.
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
fn rows(envelope: &Envelope, fleet: &FleetView, judging: &Judging) -> Vec<Row> {
    let mut rows = Vec::new();
    let scenario = matrix_scenario(envelope);
    if let Some(rollups) = &envelope.rollups {
        for rollup in rollups {
            rows.push(repeat_row(rollup.scenario.clone(), rollup, judging, fleet));
        }
    } else if let Some(matrix) = &envelope.matrix_repeat {
        for cell in &matrix.cells {
            let unit = match &cell.rollup {
                // The rollup's own label is the one the history, diff and trend use.
                Some(rollup) => rollup.scenario.clone(),
                None => cell_unit(scenario.as_deref(), cell.index, &cell.axes.label()),
            };
            match (&cell.rollup, &cell.error) {
                (Some(rollup), _) => rows.push(repeat_row(unit, rollup, judging, fleet)),
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
        // The CLI's results, read by key: their shape is the CLI's, open across versions.
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
fn notes(envelope: &Envelope, fleet: &FleetView) -> String {
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
    out.push_str(&stop_error_lines(fleet));
    let discarded = discarded_spend(fleet);
    if let Some((runs, spend)) = discarded
        && runs > 0
    {
        out.push_str(&format!(
            "discarded {runs} run(s) after an early stop: ${spend:.4} spent outside the rollups (not folded)\n"
        ));
    }
    if let Some(line) = unit_budget_line(fleet) {
        out.push_str(&line);
    }
    if let Some(spend) = &fleet.spend {
        out.push_str(&crate::spend_lines::spend_lines(spend));
    }
    if fleet.sandbox_start_retries > 0 {
        out.push_str(&format!(
            "{} sandbox start failure(s) retried as infrastructure on another worker (not attempts, nothing spent)\n",
            fleet.sandbox_start_retries
        ));
    }
    if fleet.disrupted > 0 {
        out.push_str(&format!(
            "{} run(s) cut short by a worker's stop and run again on another worker (not attempts)\n",
            fleet.disrupted
        ));
    }
    let simulated = simulated_runs(envelope, fleet, discarded.map_or(0, |(runs, _)| runs));
    if simulated > 0 {
        out.push_str(&format!(
            "SIMULATED: {simulated} run(s) came from the sim executor, not from the harness\n"
        ));
    }
    out
}

/// Why each unit stopped by a run without a result stopped (the fleet key's `stopErrors`), one
/// line per distinct reason naming its units, so "FAIL (stopped: error)" never stands alone.
/// Past [`STOP_REASONS_LISTED`] reasons one line counts the rest (`cowork report` has them all).
pub fn stop_error_lines(fleet: &FleetView) -> String {
    // Reasons in first-seen order, each with its units: twenty cells failing for one cause
    // read as one line.
    let mut reasons: Vec<((&str, String), Vec<&str>)> = Vec::new();
    for error in &fleet.stop_errors {
        let (unit, message) = (error.unit.as_str(), error.message.as_str());
        // A run killed on request (`cancel --kill-running`, a second Ctrl-C) is no fault.
        let how = if error.category == "cancelled" {
            "killed on request"
        } else {
            "stopped by an error"
        };
        let generic = (how, generic_reason(message));
        match reasons.iter_mut().find(|(reason, _)| *reason == generic) {
            Some((_, units)) => units.push(unit),
            None => reasons.push((generic, vec![unit])),
        }
    }
    let mut out = String::new();
    for (reason, units) in reasons.iter().take(STOP_REASONS_LISTED) {
        let named = match units.as_slice() {
            [one] => (*one).to_owned(),
            many => crate::text::count(many.len() as u64, "unit"),
        };
        let (how, why) = reason;
        out.push_str(&format!("{how} ({named}): {why}\n"));
    }
    if reasons.len() > STOP_REASONS_LISTED {
        out.push_str(&format!(
            "… and {} more reason(s) (`cowork report` lists every one)\n",
            reasons.len() - STOP_REASONS_LISTED
        ));
    }
    out
}

/// Distinct stop reasons listed under the summary, at most.
const STOP_REASONS_LISTED: usize = 5;

/// A reason without the job it names (`job b1/c0/r0 uses …` → `a job uses …`), so that one
/// cause across many units reads as one line.
fn generic_reason(message: &str) -> String {
    match message
        .strip_prefix("job ")
        .and_then(|rest| rest.split_once(' '))
    {
        Some((job, rest)) if job.contains('/') => format!("a job {rest}"),
        _ => message.to_owned(),
    }
}

/// Runs the simulator made: the folded ones the fleet key counts, plus the discarded ones when
/// the batch ran on the simulator (every run then is simulated), so the line counts every run
/// that was made, as the report does. An envelope without a fleet key (a re-judged batch) is
/// counted from its results.
fn simulated_runs(envelope: &Envelope, fleet: &FleetView, discarded_runs: u64) -> u64 {
    let Some(folded) = fleet.simulated_runs else {
        // The CLI's results, read by key: their shape is the CLI's.
        return envelope
            .results
            .iter()
            .filter(|r| r.get("simulated") == Some(&Value::Bool(true)))
            .count() as u64;
    };
    let on_the_simulator = fleet.executor.as_deref() == Some("sim");
    folded + if on_the_simulator { discarded_runs } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fleet_key(fleet: Value) -> Option<cowork_schema::fleet_key::FleetKey> {
        Some(serde_json::from_value(fleet).expect("any object is a fleet key"))
    }

    fn render_fleet(fleet: Value) -> String {
        let mut envelope = Envelope::new("2.0.0", "run");
        envelope.ok = true;
        envelope.fleet = fleet_key(fleet);
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
    fn stop_errors_are_said_under_the_table_once_per_reason() {
        let no_spec = |unit: &str, job: &str| json!({"unit": unit, "message": format!("job {job} uses the sim executor but carries no sim spec")});
        let text = render_fleet(json!({
            "stopErrors": [
                no_spec("csv-report [model=a]", "b1/c0/r0"),
                no_spec("csv-report [model=b]", "b1/c1/r0"),
                {"unit": "triggers", "message": "harness exited 3"},
            ],
        }));
        assert!(
            text.contains(
                "stopped by an error (2 units): a job uses the sim executor but carries no sim spec\n\
                 stopped by an error (triggers): harness exited 3\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_unit_stopped_by_a_run_killed_on_request_says_killed() {
        let mut envelope = Envelope::new("2.0.0", "run");
        let rollup: RepeatRollup = serde_json::from_value(json!({
            "scenario": "csv", "requested": 3, "completed": 0, "stoppedEarly": "error",
            "passes": 0, "passRate": 0, "signalHistogram": {}, "perAssertion": [],
            "nonDeterministicRuns": 0, "provenance": {"models": [], "skills": [], "ablatedRuns": 0}
        }))
        .expect("a rollup");
        envelope.rollups = Some(vec![rollup]);
        let mut fleet = json!({"stopErrors": [{"unit": "csv", "category": "cancelled",
            "message": "job was cancelled while the simulated run was in progress"}]});
        envelope.fleet = fleet_key(fleet.clone());
        let text = render(&Summary::new(&envelope, 1));
        assert!(text.contains("FAIL (stopped: killed)"), "{text}");
        fleet["stopErrors"][0]["category"] = json!("runtime");
        envelope.fleet = fleet_key(fleet);
        let text = render(&Summary::new(&envelope, 1));
        assert!(text.contains("FAIL (stopped: error)"), "{text}");
    }

    #[test]
    fn verdict_words_are_coloured_whole() {
        assert_eq!(
            colour_verdicts("csv  1/1  PASS\nPASSWORD-reset  FAIL\nverdict: FAIL (exit 1)\n"),
            "csv  1/1  \x1b[32m\x1b[1mPASS\x1b[0m\nPASSWORD-reset  \x1b[31m\x1b[1mFAIL\x1b[0m\n\
             verdict: \x1b[31m\x1b[1mFAIL\x1b[0m (exit 1)\n"
        );
        assert_eq!(
            colour_verdicts("ERROR: x"),
            "\x1b[31m\x1b[1mERROR\x1b[0m: x"
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
