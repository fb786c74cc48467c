//! `cowork report`: a stored batch rendered as an HTML page, JUnit XML, a Markdown summary or a
//! compact JSON summary.
//!
//! The batch is found like every command finds one (`commands::batches::resolve`): a stored
//! batch dir (`<store>/batches/<id>`), or an id, `latest` or `latest~N` in the coordinator named
//! by `--coordinator` (through its API) or else in the local store `--store`. Loading and
//! rendering live in `cowork_core::report`; this module only picks the source, works out where
//! the HTML page's links to each run's files must point, and writes the output.
//!
//! A local store's files are linked relative to where the report is written (the `-o` file's
//! directory, or the current directory for stdout), so the page works as long as the report
//! and the store keep their places. A report read through a coordinator names the files
//! instead of linking them: the coordinator's own report page links them.

use std::io::Write as _;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, anyhow};
use cowork_coordinator::report_input::{ReportError, load_report_input};
use cowork_core::report::{
    ArtifactLinks, HtmlOptions, ReportInput, render_html, render_json, render_junit,
    render_markdown,
};

use crate::args::{DiffArgs, ReportArgs, ReportFormatArg, TableFormat};
use crate::batch_source::{Resolved, Source, resolve};
use crate::exit::CliError;

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
    let format = args.format.unwrap_or(ReportFormatArg::Html);
    let (input, store_root) = load(&args, batch).await?;
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
            cowork_core::safe_text::for_terminal(&incomplete.reason),
            incomplete.never_ran.len()
        );
    }
    let text = match format {
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
                format_name(format),
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
/// for markdown or json, written to `-o` when given. A format the comparison has no rendering
/// for is refused before anything is read or written.
async fn compare(args: &ReportArgs, then: &str, now: &str) -> Result<i32, CliError> {
    let format = match args.format {
        None => TableFormat::Text,
        Some(ReportFormatArg::Markdown) => TableFormat::Markdown,
        Some(ReportFormatArg::Json) => TableFormat::Json,
        Some(refused @ (ReportFormatArg::Html | ReportFormatArg::Junit)) => {
            return Err(CliError::usage(format!(
                "--compare has no {} rendering: use --format markdown or --format json, or leave \
                 --format out for a text table (nothing written)",
                format_name(refused)
            )));
        }
    };
    crate::batch_compare::diff_to(
        DiffArgs {
            then: then.to_owned(),
            now: now.to_owned(),
            source: args.source.clone(),
            format,
            all: false,
        },
        args.output.as_deref(),
    )
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

/// Reads the batch `batch` names — a stored batch dir, an id or `latest` in `--store`, or an
/// id through `--coordinator` (one resolver for every command, `commands::batches::resolve`) —
/// with the root of its local store when it has one.
async fn load(args: &ReportArgs, batch: &str) -> Result<(ReportInput, Option<PathBuf>), CliError> {
    let source = Source::from_args(&args.source)?;
    let Resolved { batch_id, source } = resolve(batch, &source).await?;
    let store = source.store_of(&batch_id);
    let input = load_report_input(store.as_ref(), &batch_id)
        .await
        .map_err(|e| report_error(e, &format!("in {}", source.describe())))?;
    let root = match &source {
        Source::Local(root) => Some(root.clone()),
        Source::Remote(_) => None,
    };
    Ok((input, root))
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
