//! `cowork report`: a stored batch rendered as an HTML page, JUnit XML, a Markdown summary or a
//! compact JSON summary.
//!
//! The batch is read from one of three places, tried in this order: `<batch>` as a stored batch
//! dir (`<store>/batches/<id>`), the coordinator named by `--coordinator` (through its API),
//! or the local store `--store` with `<batch>` as the id. Loading and rendering live in
//! `cowork_core::report`; this module only picks the source, works out where the HTML page's
//! links to each run's files must point, and writes the output.
//!
//! A local store's files are linked relative to where the report is written (the `-o` file's
//! directory, or the current directory for stdout), so the page works as long as the report
//! and the store keep their places. A report read through a coordinator names the files
//! instead of linking them: the coordinator's own report page links them.

use std::io::Write as _;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, anyhow};
use cowork_client::ApiArtifactReader;
use cowork_coordinator::report::{ReportError, load_report_input};
use cowork_core::report::{
    ArtifactLinks, HtmlOptions, ReportInput, render_html, render_json, render_junit,
    render_markdown,
};
use cowork_fabric::embedded::DirArtifactStore;
use cowork_schema::BatchId;

use crate::args::{ReportArgs, ReportFormatArg};
use crate::commands::remote::client;
use crate::fleet_args::ClientArgs;
use crate::report::CliError;

/// `cowork report`.
pub async fn run(args: ReportArgs) -> Result<i32, CliError> {
    let (input, store_root) = load(&args).await?;
    let options = HtmlOptions {
        links: store_root.map_or(ArtifactLinks::None, |root| {
            links_from(args.output.as_deref(), &root)
        }),
    };
    if let Some(incomplete) = &input.incomplete {
        eprintln!(
            "note: batch {} never finished ({}): the report judges the runs that finished; {} \
             job(s) never ran",
            input.stored.batch_id,
            incomplete.reason,
            incomplete.never_ran.len()
        );
    }
    let text = match args.format {
        ReportFormatArg::Html => render_html(&input, &options),
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

/// The links of a report written to `output` (stdout when `None`) to the files of the local
/// store at `store_root`: relative from the report's directory; no links when either place
/// cannot be resolved.
fn links_from(output: Option<&Path>, store_root: &Path) -> ArtifactLinks {
    let report_dir = match output {
        Some(file) => match file.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        },
        None => PathBuf::from("."),
    };
    let (Ok(from), Ok(to)) = (
        std::fs::canonicalize(&report_dir),
        std::fs::canonicalize(store_root),
    ) else {
        return ArtifactLinks::None;
    };
    match relative_path(&from, &to) {
        Some(prefix) => ArtifactLinks::StoreRelative { prefix },
        None => ArtifactLinks::None,
    }
}

/// The relative URL path from directory `from` to directory `to` (both absolute and
/// canonical), ending in `/` unless empty. `None` when a component is not valid UTF-8.
fn relative_path(from: &Path, to: &Path) -> Option<String> {
    let from: Vec<Component<'_>> = from.components().collect();
    let to: Vec<Component<'_>> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_owned(); from.len() - common];
    for component in &to[common..] {
        parts.push(component.as_os_str().to_str()?.to_owned());
    }
    Some(parts.iter().map(|part| format!("{part}/")).collect())
}

/// Reads the batch from the source `args` names (see the module documentation), with the root
/// of its local store when it has one.
async fn load(args: &ReportArgs) -> Result<(ReportInput, Option<PathBuf>), CliError> {
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
        let input = load_report_input(&reader, &batch_id)
            .await
            .map_err(|e| report_error(e, &format!("at coordinator {coordinator}")))?;
        return Ok((input, None));
    }
    let store = DirArtifactStore::new(&args.store);
    let input = load_report_input(&store, &batch_id)
        .await
        .map_err(|e| report_error(e, &format!("in store {}", args.store.display())))?;
    Ok((input, Some(args.store.clone())))
}

/// A stored batch dir: the store root is two levels above it and the id is its name.
async fn load_batch_dir(dir: &Path) -> Result<(ReportInput, Option<PathBuf>), CliError> {
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
    let input = load_report_input(&store, &batch_id)
        .await
        .map_err(|e| report_error(e, &format!("in {}", dir.display())))?;
    Ok((input, Some(root.to_path_buf())))
}

/// An unknown or undecided batch is a usage error (exit 2, one clear line); anything else is a
/// failure with its cause chain.
fn report_error(error: ReportError, place: &str) -> CliError {
    if error.is_not_found() {
        return CliError::usage(format!("{error} ({place})"));
    }
    CliError::Failed(anyhow!(error).context(format!("loading the batch's report {place}")))
}

#[cfg(test)]
mod tests {
    use super::relative_path;
    use std::path::Path;

    #[test]
    fn links_climb_from_the_report_to_the_store() {
        let check = |from: &str, to: &str, expected: &str| {
            assert_eq!(
                relative_path(Path::new(from), Path::new(to)).as_deref(),
                Some(expected),
                "{from} -> {to}"
            );
        };
        check("/work/project", "/work/project/.cowork", ".cowork/");
        check(
            "/work/project/reports",
            "/work/project/.cowork",
            "../.cowork/",
        );
        check("/tmp/out", "/work/store", "../../work/store/");
        check("/work/store", "/work/store", "");
    }
}
