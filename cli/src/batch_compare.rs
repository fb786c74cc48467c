//! Two decided batches side by side, unit by unit: what `cowork diff` and `cowork report
//! --compare` print, and the per-unit cells `cowork trend` shares. The rows are the core's
//! (`cowork_core::trend`); this module finds the batches and prints the tables.

use cowork_coordinator::catalog::{BatchOverview, overview};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use cowork_core::trend::{
    BatchCounts, Change, CompareRow, Flakiness, FlakyReason, UnitCounts, compare, counts_from_stats,
};
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

/// Why a unit is flaky, for a table: its verdicts when they flipped (`PASS→FAIL→PASS`; past
/// four verdicts, how many flips), else the 95% interval of its pass rate and the bar it
/// straddles (`unsure 49–94% vs 80%`); empty when it is not flaky.
pub fn flaky_cell(flakiness: &Flakiness) -> String {
    match flakiness.reason {
        None => String::new(),
        Some(FlakyReason::Flipped) => {
            let path = flakiness.path();
            if path.matches('→').count() < 4 {
                path
            } else {
                format!("{} flips", flakiness.flips.len())
            }
        }
        Some(FlakyReason::StraddlesBar) => {
            let (low, high) = flakiness.interval.unwrap_or((0.0, 1.0));
            format!(
                "unsure {:.0}–{:.0}% vs {:.0}%",
                low * 100.0,
                high * 100.0,
                flakiness.bar.unwrap_or(1.0) * 100.0
            )
        }
    }
}

/// Adds the flaky fields to a unit's JSON: `flaky`, `flakyReason` (`flipped`, `straddlesBar` or
/// null), `flips` (the ids of the batches whose verdict differs from the batch before) and
/// `passInterval` (the 95% Wilson interval over every judged run, `[low, high]`).
pub fn flaky_json(unit: &mut Value, flakiness: &Flakiness, flips: &[&str]) {
    if let Some(object) = unit.as_object_mut() {
        object.insert("flaky".into(), json!(flakiness.flaky()));
        object.insert(
            "flakyReason".into(),
            json!(flakiness.reason.map(FlakyReason::as_str)),
        );
        object.insert("flips".into(), json!(flips));
        object.insert(
            "passInterval".into(),
            json!(flakiness.interval.map(|(low, high)| [low, high])),
        );
    }
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
    let n_flaky = rows.iter().filter(|row| row.flaky()).count();
    eprintln!(
        "{} units: {}; {n_flaky} flaky (verdict flipped, or pass rate too uncertain to say \
         which side of the bar it is on)",
        rows.len(),
        tally.join(", ")
    );
    Ok(0)
}

/// `N units: …`: every kind of change counted, the steady ones (same verdict, not flaky)
/// apart, then the flaky ones.
fn diff_counts(rows: &[CompareRow]) -> String {
    let steady = |change| {
        rows.iter()
            .filter(|row| row.change == change && !row.flaky())
            .count()
    };
    let mut parts = vec![
        format!("{} steady failing", steady(Change::Failing)),
        format!("{} steady passing", steady(Change::Passing)),
    ];
    let mut changes: Vec<(Change, usize)> = Vec::new();
    for row in rows {
        if matches!(row.change, Change::Passing | Change::Failing) {
            continue;
        }
        match changes.iter_mut().find(|(change, _)| *change == row.change) {
            Some((_, n)) => *n += 1,
            None => changes.push((row.change, 1)),
        }
    }
    changes.sort();
    parts.extend(
        changes
            .iter()
            .map(|(change, n)| format!("{n} {}", change.as_str())),
    );
    let flaky = rows.iter().filter(|row| row.flaky()).count();
    format!(
        "{}: {}; {flaky} flaky",
        crate::text::count(rows.len() as u64, "unit"),
        parts.join(", ")
    )
}

fn diff_json(then: &BatchCounts, now: &BatchCounts, rows: &[CompareRow]) -> String {
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
            let mut unit = json!({
                "label": row.label,
                "change": row.change.as_str(),
                "then": side(row.then.as_ref(), then.min_pass_rate),
                "now": side(row.now.as_ref(), now.min_pass_rate),
            });
            let flips: Vec<&str> = row
                .flakiness
                .flips
                .iter()
                .map(|at| {
                    let batch = if *at == 0 { then } else { now };
                    batch.batch_id.as_str()
                })
                .collect();
            flaky_json(&mut unit, &row.flakiness, &flips);
            unit
        })
        .collect();
    let document = json!({
        "then": {"batchId": then.batch_id.as_str(), "minPassRate": then.min_pass_rate},
        "now": {"batchId": now.batch_id.as_str(), "minPassRate": now.min_pass_rate},
        "units": units,
    });
    format!("{document}\n")
}

fn render_diff(
    then: &BatchCounts,
    now: &BatchCounts,
    rows: &[CompareRow],
    format: TableFormat,
    all: bool,
) -> String {
    if format == TableFormat::Json {
        return diff_json(then, now, rows);
    }
    let markdown = format == TableFormat::Markdown;
    let header = format!(
        "then {} ({}) → now {} ({})",
        then.batch_id,
        when(&then.batch_id),
        now.batch_id,
        when(&now.batch_id)
    );
    // The morning view: a sweep of a thousand cells would print a thousand rows, nearly all
    // unchanged. Past `crate::text::LISTED_UNITS` the table lists what changed or is flaky, in
    // `Change` order (worst first), at most `crate::text::MORNING_ROWS`; the count line
    // counts the rest.
    let unchanged =
        |row: &&CompareRow| !row.flaky() && matches!(row.change, Change::Passing | Change::Failing);
    let compact = !all && rows.len() > crate::text::LISTED_UNITS;
    let mut shown: Vec<&CompareRow> = rows
        .iter()
        .filter(|row| !compact || !unchanged(row))
        .collect();
    let mut more = 0;
    if compact {
        more = shown.len().saturating_sub(crate::text::MORNING_ROWS);
        shown.truncate(crate::text::MORNING_ROWS);
    }
    let cells: Vec<Vec<String>> = shown
        .iter()
        .map(|row| {
            vec![
                row.label.clone(),
                runs_cell(row.then.as_ref(), then.min_pass_rate),
                runs_cell(row.now.as_ref(), now.min_pass_rate),
                row.change.as_str().to_owned(),
                flaky_cell(&row.flakiness),
            ]
        })
        .collect();
    let mut body = diff_counts(rows);
    body.push_str(if markdown { "\n\n" } else { "\n" });
    if !cells.is_empty() {
        body.push_str(&table(
            &["unit", "then", "now", "change", "flaky"],
            &cells,
            &[1, 2],
            format,
        ));
    }
    if more > 0 {
        let _ = writeln!(
            body,
            "{}… and {more} more changed or flaky (--all)",
            if markdown { "\n" } else { "" }
        );
    }
    if markdown {
        format!("**{header}**\n\n{body}")
    } else {
        format!("{header}\n{body}")
    }
}
