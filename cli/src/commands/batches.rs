//! `cowork batches`: the batches of the local store or of a coordinator, newest first.
//!
//! A batch is named by its id, by its directory (`<store>/batches/<id>`), by `latest` (the
//! newest batch) or by `latest~N` (N batches before the newest). [`resolve`] turns any of those
//! into an id and the store that holds the batch: the local store (`--store`, default
//! `.cowork`) or a coordinator's API. `cowork report`, `rollup`, `diff`, `trend`, `status`,
//! `watch`, `cancel`, `resume` and `results` all go through it.

use cowork_coordinator::catalog::{BatchOverview, CatalogError, overview};
use cowork_schema::BatchId;
use cowork_schema::registry::BatchRecord;
use serde_json::json;

use crate::args::{BatchesArgs, TableFormat};
use crate::batch_source::{Source, when};
use crate::connect::client_error;
use crate::exit::CliError;

/// One row of the batch list.
struct Row {
    batch_id: BatchId,
    target: String,
    units: usize,
    jobs: u64,
    verdict: String,
    cost_usd: Option<f64>,
    state: String,
    priority: cowork_schema::share::Priority,
    /// Why a running batch waits, as its coordinator says (`None`: it does not wait, or the
    /// list is local).
    waits: Option<String>,
}

impl Row {
    /// A row of `batch`, with its coordinator's record when listed from one: the record
    /// has the state, and the spend of a batch that ended without stats (cancelled).
    fn of(batch: &BatchOverview, record: Option<&BatchRecord>) -> Row {
        let state = record.map(|record| record.state);
        let stored = &batch.stored;
        // An eval is listed by its A/B verdict and the exit `cowork eval` gave it, not by its
        // arms' rollup (which judges arm B at the min pass rate).
        let verdict = match batch.verdict() {
            Some((word, 0)) => word,
            Some((word, code)) => format!("{word} ({code})"),
            None => "-".to_owned(),
        };
        let state = match (state, &batch.rollup) {
            (Some(state), _) => state.as_str().to_owned(),
            (None, Some(_)) => "done".to_owned(),
            // A local batch without a rollup is running in some process, or was interrupted.
            (None, None) => "unfinished".to_owned(),
        };
        let mode = stored.spec.mode.envelope_command();
        let target = if mode == "run" {
            stored.spec.target_display.clone()
        } else {
            format!("{mode}: {}", stored.spec.target_display)
        };
        Row {
            batch_id: stored.batch_id.clone(),
            target,
            units: stored.plan.units.len(),
            jobs: stored.plan.n_jobs,
            verdict,
            cost_usd: batch
                .cost_usd()
                .or_else(|| record.and_then(|record| record.listing.spent_usd)),
            state,
            priority: stored.spec.flags.priority,
            waits: None,
        }
    }
}

/// Why `batch` waits now, when it runs on the coordinator behind `source`.
async fn waits_of(source: &Source, row: &Row) -> Option<String> {
    let Source::Remote(client) = source else {
        return None;
    };
    if row.state != "running" {
        return None;
    }
    let status = client.status(&row.batch_id).await.ok()?;
    status.progress?.held_by
}

/// `cowork batches`.
pub async fn list(args: BatchesArgs) -> Result<i32, CliError> {
    let source = Source::from_args(&args.source)?;
    let records = match &source {
        Source::Remote(client) => client
            .list()
            .await
            .map_err(|e| client_error(e, "listing batches"))?,
        Source::Local(_) => Vec::new(),
    };
    let ids = source.batch_ids().await?;
    let mut rows = Vec::new();
    for batch_id in ids.iter().take(args.limit) {
        let store = source.store_of(batch_id);
        let batch = match overview(store.as_ref(), batch_id).await {
            Ok(batch) => batch,
            Err(CatalogError::NotFound { .. }) => continue,
            Err(error) => {
                eprintln!(
                    "warning: batch {batch_id} left out: {}",
                    cowork_core::safe_text::for_terminal(&error.to_string())
                );
                continue;
            }
        };
        let record = records.iter().find(|record| record.batch_id == *batch_id);
        let mut row = Row::of(&batch, record);
        row.waits = waits_of(&source, &row).await;
        rows.push(row);
    }
    print!("{}", render(&rows, args.format));
    if args.format != TableFormat::Json {
        for row in rows.iter().filter(|row| row.waits.is_some()) {
            let why = row.waits.as_deref().unwrap_or_default();
            eprintln!(
                "{} waits: {}",
                row.batch_id,
                cowork_core::safe_text::for_terminal(why)
            );
        }
    }
    if rows.is_empty() {
        eprintln!("no batches in {}", source.describe());
    } else if ids.len() > rows.len() && ids.len() > args.limit {
        eprintln!(
            "the {} newest of {} batches (--limit shows more)",
            rows.len(),
            ids.len()
        );
    }
    Ok(0)
}

fn usd(cost: Option<f64>) -> String {
    cost.map_or_else(|| "-".to_owned(), |usd| format!("${usd:.4}"))
}

fn render(rows: &[Row], format: TableFormat) -> String {
    if format == TableFormat::Json {
        let batches: Vec<_> = rows
            .iter()
            .map(|row| {
                json!({
                    "batchId": row.batch_id.as_str(),
                    "when": when(&row.batch_id),
                    "target": row.target,
                    "units": row.units,
                    "jobs": row.jobs,
                    "verdict": row.verdict,
                    "costUsd": row.cost_usd,
                    "state": row.state,
                    "priority": row.priority.as_str(),
                    "waitsFor": row.waits,
                })
            })
            .collect();
        return format!("{}\n", json!({ "batches": batches }));
    }
    // The text table leaves out the time, which the id starts with (`20261201-142047-…`), so
    // a target keeps more of its name within 100 columns; Markdown has room for it.
    let with_time = format == TableFormat::Markdown;
    let mut header = vec!["batch"];
    if with_time {
        header.push("when (UTC)");
    }
    header.extend(["target", "units", "jobs", "verdict", "cost", "state"]);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let mut cells = vec![row.batch_id.to_string()];
            if with_time {
                cells.push(when(&row.batch_id));
            }
            cells.extend([
                row.target.clone(),
                row.units.to_string(),
                row.jobs.to_string(),
                row.verdict.clone(),
                usd(row.cost_usd),
                if row.priority.is_normal() {
                    row.state.clone()
                } else {
                    format!("{} ({})", row.state, row.priority)
                },
            ]);
            cells
        })
        .collect();
    let right: Vec<usize> = [2, 3, 5]
        .iter()
        .map(|column| column + usize::from(with_time))
        .collect();
    crate::text::table(&header, &cells, &right, format)
}
