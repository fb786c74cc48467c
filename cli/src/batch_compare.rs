//! Two decided batches side by side, unit by unit: what `cowork diff` and `cowork report
//! --compare` print, and the per-unit cells `cowork trend` shares. The rows are the core's
//! (`cowork_core::trend`); this module finds the batches and prints the tables.

use cowork_coordinator::catalog::{BatchOverview, overview};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use cowork_core::trend::{BatchCounts, Change, CompareRow, UnitCounts, compare, counts_from_stats};
use cowork_schema::layout::names;
use serde_json::{Value, json};

use crate::args::{DiffArgs, TableFormat};
use crate::batch_source::{Resolved, Source, resolve, when};
use crate::exit::CliError;
use crate::text::table;

/// `PASS 4/5 80%`: the unit's verdict at its batch's `min_pass_rate` and its runs; `ERROR` when
/// the batch holds the unit but judged none of its runs (they errored), `-` when it does not.
fn runs_cell(unit: Option<&UnitCounts>, min_pass_rate: f64) -> String {
    match unit {
        Some(unit) if unit.runs == 0 => "ERROR".to_owned(),
        Some(unit) => format!(
            "{} {}/{} {:.0}%",
            verdict_word(unit.passed(min_pass_rate)),
            unit.passes,
            unit.runs,
            unit.pass_rate().unwrap_or(0.0) * 100.0
        ),
        None => "-".to_owned(),
    }
}

fn verdict_word(passed: Option<bool>) -> &'static str {
    match passed {
        Some(true) => "PASS",
        Some(false) => "FAIL",
        None => "-",
    }
}

pub fn usd(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |usd| format!("${usd:.4}"))
}

pub fn unit_json(unit: Option<&UnitCounts>) -> Value {
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
            "batch {batch_id} has no verdict yet (no {}): it is still running or was \
             interrupted; `cowork rollup {batch_id}` judges the runs it has",
            names::ROLLUP
        ))
    })?;
    Ok((counts, batch.stored.spec.mode.spends_nothing()))
}

/// The per-unit counts of a decided batch, judged at its own min pass rate.
pub fn counts_of(batch: &BatchOverview) -> Option<BatchCounts> {
    let stats = batch.stats.as_ref()?;
    Some(counts_from_stats(
        stats,
        batch.stored.spec.flags.min_pass_rate,
    ))
}

/// `cowork diff THEN NOW`.
pub async fn diff(args: DiffArgs) -> Result<i32, CliError> {
    diff_to(args, None).await
}

/// `cowork diff THEN NOW` with its table written to `output` (stdout when `None`), as
/// `cowork report --compare THEN NOW [-o FILE]` asks.
pub async fn diff_to(args: DiffArgs, output: Option<&Path>) -> Result<i32, CliError> {
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
    let text = render_diff(&then, &now, &rows, args.format, args.all);
    match output {
        Some(path) => {
            std::fs::write(path, text.as_bytes())
                .with_context(|| format!("writing the comparison to {}", path.display()))?;
            eprintln!(
                "wrote the comparison of {} and {} to {}",
                then.batch_id,
                now.batch_id,
                path.display()
            );
        }
        None => print!("{text}"),
    }
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
    let n_flaky = rows.iter().filter(|row| row.flaky).count();
    eprintln!(
        "{} units: {}; {n_flaky} flaky (some runs passed, some failed)",
        rows.len(),
        tally.join(", ")
    );
    Ok(0)
}

fn render_diff(
    then: &BatchCounts,
    now: &BatchCounts,
    rows: &[CompareRow],
    format: TableFormat,
    all: bool,
) -> String {
    if format == TableFormat::Json {
        let units: Vec<Value> = rows
            .iter()
            .map(|row| {
                let side = |unit: Option<&UnitCounts>, min_pass_rate: f64| {
                    let mut value = unit_json(unit);
                    if let (Some(object), Some(unit)) = (value.as_object_mut(), unit) {
                        object.insert("passed".into(), json!(unit.passed(min_pass_rate)));
                    }
                    value
                };
                json!({
                    "label": row.label,
                    "change": row.change.as_str(),
                    "flaky": row.flaky,
                    "then": side(row.then.as_ref(), then.min_pass_rate),
                    "now": side(row.now.as_ref(), now.min_pass_rate),
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
    // A sweep of a thousand cells would print a thousand rows, nearly all unchanged: past
    // `crate::text::LISTED_UNITS` the table keeps what changed and counts the rest.
    let unchanged =
        |row: &&CompareRow| !row.flaky && matches!(row.change, Change::Passing | Change::Failing);
    let compact = !all && rows.len() > crate::text::LISTED_UNITS;
    let shown: Vec<&CompareRow> = rows
        .iter()
        .filter(|row| !compact || !unchanged(row))
        .collect();
    let cells: Vec<Vec<String>> = shown
        .iter()
        .map(|row| {
            vec![
                row.label.clone(),
                runs_cell(row.then.as_ref(), then.min_pass_rate),
                runs_cell(row.now.as_ref(), now.min_pass_rate),
                row.change.as_str().to_owned(),
                if row.flaky { "FLAKY" } else { "" }.to_owned(),
            ]
        })
        .collect();
    let mut body = if cells.is_empty() {
        String::new()
    } else {
        table(
            &["unit", "then", "now", "change", "flaky"],
            &cells,
            &[1, 2],
            format,
        )
    };
    if compact {
        let count = |change| {
            rows.iter()
                .filter(|row| row.change == change && !row.flaky)
                .count() as u64
        };
        let _ = writeln!(
            body,
            "{}{} not listed: {} failing both times, {} passing both times (--all lists every unit)",
            if format == TableFormat::Markdown {
                "\n"
            } else {
                ""
            },
            crate::text::count((rows.len() - shown.len()) as u64, "unchanged unit"),
            count(Change::Failing),
            count(Change::Passing),
        );
    }
    if format == TableFormat::Markdown {
        format!("**{header}**\n\n{body}")
    } else {
        format!("{header}\n{body}")
    }
}
