//! The commands that read stored batches, from a local store or a coordinator: `rollup`,
//! `report`, `batches`, `diff` and `trend`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::OutputFormat;

#[derive(Debug, Args)]
pub struct RollupArgs {
    /// A stored batch (its dir, its id in --store, `latest` or `latest~N`), result.json files,
    /// or a dir of them.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Local store a batch id (or `latest`) is looked up in.
    #[arg(long, env = "COWORK_STORE", default_value = ".cowork")]
    pub store: PathBuf,
    /// Pass threshold in [0, 1]; default: the stored batch's, else 1.
    #[arg(long, value_name = "RATE", allow_negative_numbers = true)]
    pub min_pass_rate: Option<String>,
    /// Apply the divergence stop while folding.
    #[arg(long)]
    pub stop_on_diverge: bool,
    /// Apply the per-unit budget stop while folding.
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub max_budget_usd: Option<String>,
    /// Judge budget-stopped units on their completed runs.
    #[arg(long)]
    pub allow_budget_stop: bool,
    /// Judge a truncated matrix on its executed cells.
    #[arg(long)]
    pub allow_truncated_matrix: bool,
    /// Output on stdout.
    #[arg(long, value_enum, default_value = "human")]
    pub output_format: OutputFormat,
    /// Also write the rollup document (the bytes of a batch's rollup.json) to this file.
    #[arg(long, value_name = "FILE")]
    pub rollup_out: Option<PathBuf>,
    /// A stored batch is judged with the quarantine it recorded (same entries, same day);
    /// --quarantine FILE or --quarantine-ref REF re-judge it with another file as of today,
    /// --no-quarantine without any.
    #[command(flatten)]
    pub quarantine: crate::args::QuarantineArgs,
}

/// The formats of `cowork report`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormatArg {
    /// One self-contained page: heatmap, cells, failure reasons, stops.
    Html,
    /// JUnit XML: one testsuite per batch, one testcase per scenario file or matrix cell.
    Junit,
    /// A summary for a CI job summary or a PR comment.
    Markdown,
    /// A compact machine summary (one line).
    Json,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A stored batch dir (<store>/batches/<id>), a batch id, `latest` or `latest~N`.
    #[arg(required_unless_present = "compare")]
    pub batch: Option<String>,
    /// Compare two batches instead (the same as `cowork diff THEN NOW`): a text table, or
    /// --format markdown or json (there is no HTML or JUnit comparison: exit 2).
    #[arg(long, num_args = 2, value_names = ["THEN", "NOW"], conflicts_with = "batch")]
    pub compare: Option<Vec<String>>,
    /// Output format [default: html; with --compare, a text table].
    #[arg(long, value_enum)]
    pub format: Option<ReportFormatArg>,
    /// Write the report to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub source: BatchSourceArgs,
}

/// Where batches are read from: a local store, or a coordinator's API.
#[derive(Clone, Debug, Args)]
pub struct BatchSourceArgs {
    /// Local store the batches are read from.
    #[arg(long, env = "COWORK_STORE", default_value = ".cowork")]
    pub store: PathBuf,
    /// Read the batches through this coordinator's API instead of a local store (like
    /// `status`, `workers` and `resume`, this honours COWORK_COORDINATOR).
    #[arg(long, env = "COWORK_COORDINATOR", value_name = "URL")]
    pub coordinator: Option<String>,
    /// File holding the API bearer token (or set COWORK_API_TOKEN); used with --coordinator.
    #[arg(long, env = "COWORK_API_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// How `batches`, `diff` and `trend` print their table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TableFormat {
    /// An aligned text table.
    Text,
    /// A Markdown table (a CI job summary or a PR comment).
    Markdown,
    /// One JSON document.
    Json,
}

#[derive(Debug, Args)]
pub struct BatchesArgs {
    #[command(flatten)]
    pub source: BatchSourceArgs,
    /// Newest batches listed, at most.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: TableFormat,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The earlier batch: an id, a batch dir, `latest` or `latest~N`.
    pub then: String,
    /// The later batch.
    pub now: String,
    #[command(flatten)]
    pub source: BatchSourceArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: TableFormat,
    /// List every unit. Past 40 units the text and Markdown tables count the steady units
    /// (failing or passing both times) and list only what changed or is flaky, worst first,
    /// at most 15; JSON always lists every unit.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct TrendArgs {
    /// A scenario file, a directory of scenarios, or a scenario name.
    #[arg(value_name = "SCENARIOS")]
    pub target: String,
    /// How many of the most recent batches that ran these scenarios to show.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=500))]
    pub last: u16,
    #[command(flatten)]
    pub source: BatchSourceArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: TableFormat,
    /// List every unit. Past 40 units the text and Markdown tables count the steady units
    /// (failing or passing every batch) and list the flaky ones only, worst first, at most 15;
    /// JSON always lists every unit.
    #[arg(long)]
    pub all: bool,
    /// Print `quarantine.yaml` entries for the flaky units instead of the table: owner left
    /// blank to fill in, expiring 14 days from today.
    #[arg(long, conflicts_with_all = ["all", "format"])]
    pub suggest_quarantine: bool,
}
