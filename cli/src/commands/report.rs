//! `cowork report`: a stored batch rendered as an HTML page, JUnit XML, a Markdown summary or a
//! compact JSON summary.
//!
//! The batch is read from one of three places, tried in this order: `<batch>` as a stored batch
//! dir (`<store>/batches/<id>`), the coordinator named by `--coordinator` (through its API),
//! or the local store `--store` with `<batch>` as the id. Loading and rendering live in
//! `cowork_core::report`; this module only picks the source and writes the output.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, anyhow};
use cowork_client::ApiArtifactReader;
use cowork_coordinator::report::{ReportError, load_report_input};
use cowork_core::report::{ReportInput, render_html, render_json, render_junit, render_markdown};
use cowork_fabric::embedded::DirArtifactStore;
use cowork_schema::BatchId;

use crate::args::{ReportArgs, ReportFormatArg};
use crate::commands::remote::client;
use crate::fleet_args::ClientArgs;
use crate::report::CliError;

/// `cowork report`.
pub async fn run(args: ReportArgs) -> Result<i32, CliError> {
    let input = load(&args).await?;
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

fn format_name(format: ReportFormatArg) -> &'static str {
    match format {
        ReportFormatArg::Html => "html",
        ReportFormatArg::Junit => "junit",
        ReportFormatArg::Markdown => "markdown",
        ReportFormatArg::Json => "json",
    }
}

/// Reads the batch from the source `args` names (see the module documentation).
async fn load(args: &ReportArgs) -> Result<ReportInput, CliError> {
    let as_path = Path::new(&args.batch);
    if as_path.is_dir() {
        return load_batch_dir(as_path).await;
    }
    let batch_id = BatchId::new(&args.batch).map_err(|e| {
        CliError::usage(format!(
            "{:?} is neither a stored batch dir nor a batch id: {e}",
            args.batch
        ))
    })?;
    if let Some(coordinator) = &args.coordinator {
        let client = client(&ClientArgs {
            coordinator: coordinator.clone(),
            token_file: args.token_file.clone(),
            // These commands take no --coordinator-ca flag; the variable still applies.
            coordinator_ca: std::env::var_os("COWORK_COORDINATOR_CA").map(std::path::PathBuf::from),
        })?;
        let reader = ApiArtifactReader::new(client, batch_id.clone());
        return load_report_input(&reader, &batch_id)
            .await
            .map_err(|e| report_error(e, &format!("at coordinator {coordinator}")));
    }
    let store = DirArtifactStore::new(&args.store);
    load_report_input(&store, &batch_id)
        .await
        .map_err(|e| report_error(e, &format!("in store {}", args.store.display())))
}

/// A stored batch dir: the store root is two levels above it and the id is its name.
async fn load_batch_dir(dir: &Path) -> Result<ReportInput, CliError> {
    let not_a_batch = || {
        CliError::usage(format!(
            "{}: not a stored batch dir (expected <store>/batches/<id> holding spec.json)",
            dir.display()
        ))
    };
    let dir = std::fs::canonicalize(dir).map_err(|_| not_a_batch())?;
    let id = dir
        .file_name()
        .and_then(|name| name.to_str())
        .ok_or_else(not_a_batch)?;
    let batch_id = BatchId::new(id).map_err(|_| not_a_batch())?;
    let root = dir
        .parent()
        .filter(|batches| batches.file_name().is_some_and(|name| name == "batches"))
        .and_then(Path::parent)
        .ok_or_else(not_a_batch)?;
    let store = DirArtifactStore::new(root);
    load_report_input(&store, &batch_id)
        .await
        .map_err(|e| report_error(e, &format!("in {}", dir.display())))
}

/// An unknown or undecided batch is a usage error (exit 2, one clear line); anything else is a
/// failure with its cause chain.
fn report_error(error: ReportError, place: &str) -> CliError {
    if error.is_not_found() {
        return CliError::usage(format!("{error} ({place})"));
    }
    CliError::Failed(anyhow!(error).context(format!("loading the batch's report {place}")))
}
