//! `cowork report`: a stored batch rendered as an HTML page, JUnit XML, a Markdown summary or a
//! compact JSON summary.
//!
//! The batch is found like every command finds one (`commands::batches::resolve`): a stored
//! batch dir (`<store>/batches/<id>`), or an id, `latest` or `latest~N` in the coordinator named
//! by `--coordinator` (through its API) or else in the local store `--store`. Loading and rendering live in
//! `cowork_core::report`; this module only picks the source and writes the output.

use std::io::Write as _;

use anyhow::{Context, anyhow};
use cowork_coordinator::report::{ReportError, load_report_input};
use cowork_core::report::{ReportInput, render_html, render_json, render_junit, render_markdown};

use crate::args::{DiffArgs, ReportArgs, ReportFormatArg, TableFormat};
use crate::commands::batches::{Resolved, Source, resolve};
use crate::commands::trend::report_source;
use crate::report::CliError;

/// `cowork report`.
pub async fn run(args: ReportArgs) -> Result<i32, CliError> {
    if let Some([then, now]) = args.compare.as_deref() {
        return compare(&args, then, now).await;
    }
    let Some(batch) = args.batch.as_deref() else {
        return Err(CliError::usage(
            "a batch (or --compare THEN NOW) is required",
        ));
    };
    let input = load(&args, batch).await?;
    let text = match args.format {
        ReportFormatArg::Html => render_html(&input),
        ReportFormatArg::Junit => render_junit(&input),
        ReportFormatArg::Markdown => render_markdown(&input),
        ReportFormatArg::Json => render_json(&input),
    };
    let batch_id = &input.stored.batch_id;
    match &args.output {
        Some(path) => {
            std::fs::write(path, text.as_bytes())
                .with_context(|| format!("writing the report to {}", path.display()))?;
            eprintln!(
                "wrote the {} report of batch {batch_id} to {}",
                format_name(args.format),
                path.display()
            );
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
                .context("writing the report to stdout")?;
        }
    }
    Ok(0)
}

/// `cowork report --compare THEN NOW`: `cowork diff`, as a text table unless --format asks
/// for markdown or json.
async fn compare(args: &ReportArgs, then: &str, now: &str) -> Result<i32, CliError> {
    let format = match args.format {
        ReportFormatArg::Html => TableFormat::Text,
        ReportFormatArg::Markdown => TableFormat::Markdown,
        ReportFormatArg::Json => TableFormat::Json,
        ReportFormatArg::Junit => {
            return Err(CliError::usage(
                "--compare: prints a text table, or --format markdown or json",
            ));
        }
    };
    crate::commands::trend::diff(DiffArgs {
        then: then.to_owned(),
        now: now.to_owned(),
        source: report_source(
            &args.store,
            args.coordinator.as_deref(),
            args.token_file.as_deref(),
        ),
        format,
    })
    .await
}

fn format_name(format: ReportFormatArg) -> &'static str {
    match format {
        ReportFormatArg::Html => "html",
        ReportFormatArg::Junit => "junit",
        ReportFormatArg::Markdown => "markdown",
        ReportFormatArg::Json => "json",
    }
}

/// Reads the batch `batch` names: a stored batch dir, an id or `latest` in `--store`, or an id
/// through `--coordinator` (one resolver for every command, `commands::batches::resolve`).
async fn load(args: &ReportArgs, batch: &str) -> Result<ReportInput, CliError> {
    let source = Source::from_args(&report_source(
        &args.store,
        args.coordinator.as_deref(),
        args.token_file.as_deref(),
    ))?;
    let Resolved { batch_id, source } = resolve(batch, &source).await?;
    let store = source.store_of(&batch_id);
    load_report_input(store.as_ref(), &batch_id)
        .await
        .map_err(|e| report_error(e, &format!("in {}", source.describe())))
}

/// An unknown or undecided batch is a usage error (exit 2, one clear line); anything else is a
/// failure with its cause chain.
fn report_error(error: ReportError, place: &str) -> CliError {
    if error.is_not_found() {
        return CliError::usage(format!("{error} ({place})"));
    }
    CliError::Failed(anyhow!(error).context(format!("loading the batch's report {place}")))
}
