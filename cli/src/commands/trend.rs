//! `cowork diff` (also `cowork report --compare`): two batches unit by unit; and `cowork trend`:
//! units over the last N batches that ran them, with the flaky flag across batches (and
//! `--suggest-quarantine`, quarantine entries for the flaky ones). The rows
//! are the core's (`cowork_core::trend`); this module finds the batches, reads their history
//! (`cowork_coordinator::catalog`) and prints the tables.

use std::fmt::Write as _;
use std::path::Path;

use cowork_coordinator::catalog::{BatchOverview, HistoryScope, decided_history};
use cowork_core::trend::{BatchCounts, TrendRow, suggest};
use serde_json::{Value, json};

use crate::args::{TableFormat, TrendArgs};
use crate::batch_compare::{counts_of, flaky_cell, flaky_json, unit_json, usd};
use crate::batch_source::{Source, when};
use crate::exit::CliError;
use crate::text::table;

/// Batches looked at per batch `trend` shows: history is read newest first and stops here,
/// so a store of thousands of batches costs a bounded number of reads.
const TREND_SCAN_PER_BATCH: usize = 20;

/// The scenario names `target` stands for: the scenario of a file, the scenarios directly in a
/// directory (as a directory target runs them), or the text itself as a name.
fn scenario_names(target: &str) -> Result<Vec<String>, CliError> {
    let path = Path::new(target);
    if path.is_file() {
        return Ok(vec![scenario_name(path)?]);
    }
    if path.is_dir() {
        let mut names = Vec::new();
        let entries = std::fs::read_dir(path)
            .map_err(|e| CliError::usage(format!("{target}: cannot list the directory: {e}")))?;
        for entry in entries.flatten() {
            let file = entry.path();
            let is_yaml = file
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.ends_with(".yaml") || name.ends_with(".yml"));
            if is_yaml && file.is_file() {
                names.push(scenario_name(&file)?);
            }
        }
        if names.is_empty() {
            return Err(CliError::usage(format!(
                "{target}: the directory holds no *.yaml / *.yml scenario files"
            )));
        }
        names.sort();
        return Ok(names);
    }
    if target.contains('/') || target.ends_with(".yaml") || target.ends_with(".yml") {
        return Err(CliError::usage(format!(
            "{target}: no such file or directory (give a scenario file, a directory of them, or \
             a scenario name)"
        )));
    }
    Ok(vec![target.to_owned()])
}

/// The effective name of a scenario file: its `name:`, else its file name without extension.
fn scenario_name(file: &Path) -> Result<String, CliError> {
    let text = cowork_schema::load::read_text(file, cowork_schema::load::MAX_DOCUMENT_BYTES)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let root =
        cowork_schema::load::parse_yaml(&text, file).map_err(|e| CliError::usage(e.to_string()))?;
    let declared = match &root.value {
        cowork_schema::load::NodeValue::Mapping(entries) => {
            entries.iter().find_map(|(key, value)| {
                match (key.scalar_text().as_deref(), &value.value) {
                    (Some("name"), cowork_schema::load::NodeValue::String(name))
                        if !name.is_empty() =>
                    {
                        Some(name.clone())
                    }
                    _ => None,
                }
            })
        }
        _ => None,
    };
    Ok(declared.unwrap_or_else(|| cowork_schema::scenario::name_from_file(file)))
}

/// `cowork trend <scenarios> --last N`.
pub async fn trend(args: TrendArgs) -> Result<i32, CliError> {
    let names = scenario_names(&args.target)?;
    let source = Source::from_args(&args.source)?;
    let ids = source.batch_ids().await?;
    let keep = usize::from(args.last);
    let scope = HistoryScope {
        keep,
        scan: keep.saturating_mul(TREND_SCAN_PER_BATCH),
    };
    // A replay batch re-judges recordings: mixed with live batches it would make a unit look
    // flaky (or steady) for reasons no live run showed, so trends follow live batches only.
    // An eval batch's units are arms of two skill versions, not runs of the scenario as it
    // stands: its rows would mix with the ordinary ones, so trends leave evals out too.
    let ran_them = |batch: &BatchOverview| {
        !batch.stored.spec.mode.spends_nothing()
            && batch.stored.spec.mode != cowork_schema::batch::BatchMode::Eval
            && batch.stats.as_ref().is_some_and(|stats| {
                stats
                    .units
                    .iter()
                    .any(|unit| names.contains(&unit.scenario))
            })
    };
    let store_of = |batch_id: &cowork_schema::BatchId| source.store_of(batch_id);
    let found = decided_history(&ids, &store_of, scope, &ran_them)
        .await
        .map_err(|e| CliError::Failed(anyhow::anyhow!(e).context("reading the batch history")))?;
    // Oldest first, so that the columns read left to right in time.
    let batches: Vec<BatchCounts> = found.iter().rev().filter_map(counts_of).collect();
    if batches.is_empty() {
        eprintln!(
            "no decided batch in {} ran {} (`cowork batches` lists what is there)",
            source.describe(),
            names.join(", ")
        );
        return Ok(0);
    }
    let rows = cowork_core::trend::trend(&batches, &|scenario| {
        names.iter().any(|name| name == scenario)
    });
    if args.suggest_quarantine {
        let today = crate::quarantine::today();
        let text = suggest::quarantine_suggestions(&rows, batches.len(), today);
        if text.is_empty() {
            eprintln!(
                "no flaky unit over the last {}: nothing to suggest",
                crate::text::count_of(batches.len() as u64, "batch", "batches")
            );
        }
        print!("{text}");
        return Ok(0);
    }
    print!("{}", render_trend(&batches, &rows, args.format, args.all));
    let flaky = rows.iter().filter(|row| row.flaky()).count();
    eprintln!(
        "{} over the last {}; {flaky} flaky (verdict flipped, or pass rate too uncertain to \
         say which side of the bar it is on)",
        crate::text::count(rows.len() as u64, "unit"),
        crate::text::count_of(batches.len() as u64, "batch", "batches"),
    );
    Ok(0)
}

/// `N units over K batches: …`: the units that kept their verdict, counted, and the flaky ones.
fn trend_counts(batches: &[BatchCounts], rows: &[TrendRow]) -> String {
    let steady = |passed: bool| {
        rows.iter()
            .filter(|row| !row.flaky() && row.latest_passed() == Some(passed))
            .count()
    };
    let flaky = rows.iter().filter(|row| row.flaky()).count();
    let unjudged = rows
        .iter()
        .filter(|row| row.latest_passed().is_none())
        .count();
    let mut line = format!(
        "{} over {}: {} steady failing, {} steady passing, {flaky} flaky",
        crate::text::count(rows.len() as u64, "unit"),
        crate::text::count_of(batches.len() as u64, "batch", "batches"),
        steady(false),
        steady(true),
    );
    if unjudged > 0 {
        let _ = write!(line, ", {unjudged} with no judged run");
    }
    line
}

fn render_trend(
    batches: &[BatchCounts],
    rows: &[TrendRow],
    format: TableFormat,
    all: bool,
) -> String {
    if format == TableFormat::Json {
        return trend_json(batches, rows);
    }
    let markdown = format == TableFormat::Markdown;
    // Columns are headed b1, b2, … (oldest first) and a legend below names each batch: a batch
    // id (22 characters) or even its time per column would push five batches past 100
    // columns, and batches run in the same minute need their ids anyway.
    let columns: Vec<String> = (1..=batches.len()).map(|n| format!("b{n}")).collect();
    let mut header: Vec<&str> = vec!["unit"];
    header.extend(columns.iter().map(String::as_str));
    header.extend(["all runs", "cost/run", "flaky"]);
    // The morning view: past `crate::text::LISTED_UNITS` units the table lists the flaky ones
    // only, worst first and at most `crate::text::MORNING_ROWS` of them; the steady rest are
    // in the count line.
    let compact = !all && rows.len() > crate::text::LISTED_UNITS;
    let mut shown: Vec<&TrendRow> = rows.iter().filter(|row| !compact || row.flaky()).collect();
    let mut more = 0;
    if compact {
        shown.sort_by_key(|row| row.attention());
        more = shown.len().saturating_sub(crate::text::MORNING_ROWS);
        shown.truncate(crate::text::MORNING_ROWS);
    }
    let mut out = trend_counts(batches, rows);
    out.push_str(if markdown { "\n\n" } else { "\n" });
    let cells: Vec<Vec<String>> = shown.iter().map(|row| trend_cells(row)).collect();
    let right: Vec<usize> = (1..=batches.len() + 2).collect();
    if !cells.is_empty() {
        out.push_str(&table(&header, &cells, &right, format));
    }
    if more > 0 {
        let _ = writeln!(
            out,
            "{}… and {more} more flaky (--all)",
            if markdown { "\n" } else { "" }
        );
    }
    if markdown {
        out.push('\n');
    }
    for (column, batch) in columns.iter().zip(batches) {
        let _ = writeln!(
            out,
            "{}{column} = {} ({})",
            if markdown { "- " } else { "" },
            batch.batch_id,
            when(&batch.batch_id)
        );
    }
    out
}

/// The trend as one JSON document: the batches, oldest first, and every unit.
fn trend_json(batches: &[BatchCounts], rows: &[TrendRow]) -> String {
    let units: Vec<Value> = rows
        .iter()
        .map(|row| {
            let mut unit = json!({
                "label": row.label,
                "batches": row.cells.iter().map(|cell| unit_json(cell.as_ref())).collect::<Vec<_>>(),
                "runs": row.runs,
                "passes": row.passes,
                "passRate": row.pass_rate(),
                "costUsd": (row.priced_runs > 0).then_some(row.cost_usd),
                "costPerRunUsd": row.cost_per_run_usd(),
                "batchesPassed": row.batches_passed,
                "batchesFailed": row.batches_failed,
            });
            let flips: Vec<&str> = row
                .flakiness
                .flips
                .iter()
                .filter_map(|at| batches.get(*at))
                .map(|batch| batch.batch_id.as_str())
                .collect();
            flaky_json(&mut unit, &row.flakiness, &flips);
            unit
        })
        .collect();
    let ids: Vec<&str> = batches
        .iter()
        .map(|batch| batch.batch_id.as_str())
        .collect();
    format!("{}\n", json!({ "batches": ids, "units": units }))
}

/// One unit's row of the text or Markdown table: its pass rate per batch, over every run,
/// its cost per run and why it is flaky.
fn trend_cells(row: &TrendRow) -> Vec<String> {
    let mut cells = vec![row.label.clone()];
    cells.extend(row.cells.iter().map(|cell| match cell {
        Some(unit) => format!("{:.0}%", unit.pass_rate().unwrap_or(0.0) * 100.0),
        None => "-".to_owned(),
    }));
    cells.push(format!(
        "{}/{} {:.0}%",
        row.passes,
        row.runs,
        row.pass_rate().unwrap_or(0.0) * 100.0
    ));
    cells.push(usd(row.cost_per_run_usd()));
    cells.push(flaky_cell(&row.flakiness));
    cells
}
