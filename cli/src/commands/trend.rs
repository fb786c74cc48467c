//! `cowork diff` (also `cowork report --compare`): two batches unit by unit; and `cowork trend`:
//! units over the last N batches that ran them, with the flaky flag across batches. The rows
//! are the core's (`cowork_core::trend`); this module finds the batches, reads their history
//! (`cowork_coordinator::catalog`) and prints the tables.

use std::fmt::Write as _;
use std::path::Path;

use cowork_coordinator::catalog::{BatchOverview, HistoryScope, decided_history, overview};
use cowork_core::trend::{
    BatchCounts, CompareRow, TrendRow, UnitCounts, compare, counts_from_stats,
};
use serde_json::{Value, json};

use crate::args::{DiffArgs, TableFormat, TrendArgs};
use crate::commands::batches::{Resolved, Source, resolve, when};
use crate::report::CliError;

/// Batches looked at per batch `trend` shows: history is read newest first and stops here,
/// so a store of thousands of batches costs a bounded number of reads.
const TREND_SCAN_PER_BATCH: usize = 20;

/// Prints an aligned text table (columns in `right` right-aligned) or a Markdown table.
pub fn table(
    header: &[&str],
    rows: &[Vec<String>],
    right: &[usize],
    format: TableFormat,
) -> String {
    let mut out = String::new();
    if format == TableFormat::Markdown {
        let escape = |cell: &str| cell.replace('|', "\\|");
        let _ = writeln!(out, "| {} |", header.join(" | "));
        let rule: Vec<&str> = (0..header.len())
            .map(|column| {
                if right.contains(&column) {
                    "---:"
                } else {
                    "---"
                }
            })
            .collect();
        let _ = writeln!(out, "|{}|", rule.join("|"));
        for row in rows {
            let cells: Vec<String> = row.iter().map(|cell| escape(cell)).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        return out;
    }
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut line = |cells: &[&str]| {
        let mut text = String::new();
        for (column, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if column > 0 {
                text.push_str("  ");
            }
            if right.contains(&column) {
                let _ = write!(text, "{cell:>width$}");
            } else {
                let _ = write!(text, "{cell:<width$}");
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(header);
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&cells);
    }
    out
}

/// `4/5 80%`, or `-` when the unit did not run.
fn runs_cell(unit: Option<&UnitCounts>) -> String {
    match unit.filter(|unit| unit.runs > 0) {
        Some(unit) => format!(
            "{}/{} {:.0}%",
            unit.passes,
            unit.runs,
            unit.pass_rate().unwrap_or(0.0) * 100.0
        ),
        None => "-".to_owned(),
    }
}

fn usd(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |usd| format!("${usd:.4}"))
}

fn unit_json(unit: Option<&UnitCounts>) -> Value {
    match unit {
        None => Value::Null,
        Some(unit) => json!({
            "runs": unit.runs,
            "passes": unit.passes,
            "passRate": unit.pass_rate(),
            "costUsd": (unit.priced_runs > 0).then_some(unit.cost_usd),
        }),
    }
}

/// The history of one decided batch as `diff` compares it, and whether it was a replay.
async fn decided_counts(text: &str, source: &Source) -> Result<(BatchCounts, bool), CliError> {
    let Resolved { batch_id, source } = resolve(text, source).await?;
    let store = source.store_of(&batch_id);
    let batch = overview(store.as_ref(), &batch_id)
        .await
        .map_err(|e| CliError::usage(format!("{e} (in {})", source.describe())))?;
    let counts = counts_of(&batch).ok_or_else(|| {
        CliError::usage(format!(
            "batch {batch_id} has no verdict yet (no rollup.json): it is still running or was \
             interrupted; `cowork rollup {batch_id}` judges the runs it has"
        ))
    })?;
    Ok((counts, batch.stored.spec.mode.spends_nothing()))
}

/// The per-unit counts of a decided batch, judged at its own min pass rate.
fn counts_of(batch: &BatchOverview) -> Option<BatchCounts> {
    let stats = batch.stats.as_ref()?;
    Some(counts_from_stats(
        stats,
        batch.stored.spec.flags.min_pass_rate,
    ))
}

/// `cowork diff THEN NOW` (and `cowork report --compare THEN NOW`).
pub async fn diff(args: DiffArgs) -> Result<i32, CliError> {
    let source = Source::from_args(&args.source)?;
    let (then, then_replay) = decided_counts(&args.then, &source).await?;
    let (now, now_replay) = decided_counts(&args.now, &source).await?;
    if then_replay != now_replay {
        let (replay, live) = if then_replay {
            (&then, &now)
        } else {
            (&now, &then)
        };
        return Err(CliError::usage(format!(
            "batch {} is a replay and batch {} a live run: a replay re-judges recordings, so \
             comparing it with a live run says nothing about the skill; compare two replays or \
             two live batches",
            replay.batch_id, live.batch_id
        )));
    }
    let rows = compare(&then, &now);
    print!("{}", render_diff(&then, &now, &rows, args.format));
    let mut tally: Vec<(cowork_core::trend::Change, usize)> = Vec::new();
    for row in &rows {
        match tally.iter_mut().find(|(change, _)| *change == row.change) {
            Some((_, n)) => *n += 1,
            None => tally.push((row.change, 1)),
        }
    }
    let tally: Vec<String> = tally
        .iter()
        .map(|(change, n)| format!("{n} {}", change.as_str()))
        .collect();
    eprintln!("{} units: {}", rows.len(), tally.join(", "));
    Ok(0)
}

fn render_diff(
    then: &BatchCounts,
    now: &BatchCounts,
    rows: &[CompareRow],
    format: TableFormat,
) -> String {
    if format == TableFormat::Json {
        let units: Vec<Value> = rows
            .iter()
            .map(|row| {
                json!({
                    "label": row.label,
                    "change": row.change.as_str(),
                    "then": unit_json(row.then.as_ref()),
                    "now": unit_json(row.now.as_ref()),
                })
            })
            .collect();
        let document = json!({
            "then": {"batchId": then.batch_id.as_str(), "minPassRate": then.min_pass_rate},
            "now": {"batchId": now.batch_id.as_str(), "minPassRate": now.min_pass_rate},
            "units": units,
        });
        return format!("{document}\n");
    }
    let header = format!(
        "then {} ({}) → now {} ({})",
        then.batch_id,
        when(&then.batch_id),
        now.batch_id,
        when(&now.batch_id)
    );
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            vec![
                row.label.clone(),
                runs_cell(row.then.as_ref()),
                runs_cell(row.now.as_ref()),
                row.change.as_str().to_owned(),
            ]
        })
        .collect();
    let body = table(&["unit", "then", "now", "change"], &cells, &[1, 2], format);
    if format == TableFormat::Markdown {
        format!("**{header}**\n\n{body}")
    } else {
        format!("{header}\n{body}")
    }
}

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
    let ran_them = |batch: &BatchOverview| {
        !batch.stored.spec.mode.spends_nothing()
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
    print!("{}", render_trend(&batches, &rows, args.format));
    let flaky = rows.iter().filter(|row| row.flaky()).count();
    eprintln!(
        "{} over the last {}; {flaky} flaky across batches",
        crate::commands::run::count(rows.len() as u64, "unit"),
        crate::commands::run::count_of(batches.len() as u64, "batch", "batches"),
    );
    Ok(0)
}

fn render_trend(batches: &[BatchCounts], rows: &[TrendRow], format: TableFormat) -> String {
    if format == TableFormat::Json {
        let units: Vec<Value> = rows
            .iter()
            .map(|row| {
                json!({
                    "label": row.label,
                    "batches": row.cells.iter().map(|cell| unit_json(cell.as_ref())).collect::<Vec<_>>(),
                    "runs": row.runs,
                    "passes": row.passes,
                    "passRate": row.pass_rate(),
                    "costUsd": (row.priced_runs > 0).then_some(row.cost_usd),
                    "costPerRunUsd": row.cost_per_run_usd(),
                    "batchesPassed": row.batches_passed,
                    "batchesFailed": row.batches_failed,
                    "flaky": row.flaky(),
                })
            })
            .collect();
        let ids: Vec<&str> = batches
            .iter()
            .map(|batch| batch.batch_id.as_str())
            .collect();
        return format!("{}\n", json!({ "batches": ids, "units": units }));
    }
    // Columns are headed by when each batch ran (`12-01 00:59`); batches run in the same
    // minute are told apart by their ids.
    let short = |batch: &BatchCounts| when(&batch.batch_id).get(5..).unwrap_or("-").to_owned();
    let unique = {
        let shorts: Vec<String> = batches.iter().map(short).collect();
        shorts
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            == shorts.len()
    };
    let columns: Vec<String> = batches
        .iter()
        .map(|batch| {
            if unique {
                short(batch)
            } else {
                batch.batch_id.to_string()
            }
        })
        .collect();
    let mut header: Vec<&str> = vec!["unit"];
    header.extend(columns.iter().map(String::as_str));
    header.extend(["all runs", "cost/run", "flaky"]);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
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
            cells.push(if row.flaky() {
                "FLAKY".to_owned()
            } else {
                String::new()
            });
            cells
        })
        .collect();
    let right: Vec<usize> = (1..=batches.len() + 2).collect();
    let mut out = table(&header, &cells, &right, format);
    let ids: Vec<&str> = batches
        .iter()
        .map(|batch| batch.batch_id.as_str())
        .collect();
    let _ = writeln!(
        out,
        "{}batches, oldest first: {}",
        if format == TableFormat::Markdown {
            "\n"
        } else {
            ""
        },
        ids.join(", ")
    );
    out
}
