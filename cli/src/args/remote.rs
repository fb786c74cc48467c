//! The commands on one batch by its id (`status`, `watch`, `cancel`, `pause`, `adjust`,
//! `resume`, `results`) and on the live fleet (`workers`).

use std::path::PathBuf;

use clap::Args;

use super::OutputFormat;
use super::batch::{AdmissionArgs, HarnessProcessArgs};

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The batch id (printed by `cowork submit`), `latest` or `latest~N`.
    pub batch: String,
    #[command(flatten)]
    pub client: crate::fleet_args::ClientArgs,
    /// Also kill the batch's in-flight jobs and skip its queued ones.
    #[arg(long)]
    pub kill_running: bool,
}

#[derive(Debug, Args)]
pub struct SteerArgs {
    /// The batch id (printed by `cowork submit`), `latest` or `latest~N`.
    pub batch: String,
    #[command(flatten)]
    pub client: crate::fleet_args::ClientArgs,
    /// Who asks, recorded with the change. Default: `$USER@<host>`.
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

#[derive(Debug, Args)]
pub struct AdjustArgs {
    #[command(flatten)]
    pub steer: SteerArgs,
    /// The new batch-wide budget in US dollars (0 or more).
    #[arg(
        long,
        alias = "batch-budget-usd",
        value_name = "USD",
        allow_hyphen_values = true
    )]
    pub max_budget_usd: Option<f64>,
    /// The new cap on the batch's jobs outstanding (queued or running) at once (1 or more).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub max_running: Option<i64>,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The batch id (printed by `cowork run` or `cowork submit`), `latest` or `latest~N`.
    pub batch: String,
    #[command(flatten)]
    pub client: crate::fleet_args::ClientArgs,
    /// Follow the resumed batch to its end, like `cowork watch`.
    #[arg(long)]
    pub watch: bool,
    /// Output on stdout (with --watch, or for a batch of the local store).
    #[arg(long, value_enum, default_value = "human")]
    pub output_format: OutputFormat,
    /// No progress line (with --watch, or for a batch of the local store).
    #[arg(long, short)]
    pub quiet: bool,
    /// Local store holding the batch (as for `cowork run`): the batch is finished in this
    /// process. `--coordinator` on the command line has the coordinator resume its batch
    /// instead (`latest` is its newest). With neither, a batch found in `.cowork` is finished
    /// here and any other id is resumed by the coordinator; a reference both hold is refused.
    #[arg(long, env = "COWORK_STORE", value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// `--store` was given on the command line (not by COWORK_STORE).
    #[arg(skip)]
    pub store_on_command_line: bool,
    /// `--coordinator` was given on the command line (not by COWORK_COORDINATOR).
    #[arg(skip)]
    pub coordinator_on_command_line: bool,
    /// Jobs run at once in this process (batch of the local store).
    #[arg(long, env = "COWORK_SLOTS", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub slots: u16,
    /// The cowork-harness program for the harness executor (batch of the local store).
    #[arg(long, env = "COWORK_HARNESS_BIN", default_value = "cowork-harness")]
    pub harness_bin: PathBuf,
    #[command(flatten)]
    pub harness: HarnessProcessArgs,
    /// Jobs of the batch admitted ahead of results (default: 2 × slots; batch of the local
    /// store).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub window: Option<usize>,
    #[command(flatten)]
    pub admission: AdmissionArgs,
    /// Keep each job's scratch directory under <store>/work (batch of the local store).
    #[arg(long)]
    pub keep_work: bool,
}

impl ResumeArgs {
    /// Notes which of the flags naming where the batch is were typed on the command line:
    /// those win over the environment.
    pub fn note_command_line(&mut self, matches: &clap::ArgMatches) {
        let typed = |id: &str| {
            matches!(
                matches.value_source(id),
                Some(clap::parser::ValueSource::CommandLine)
            )
        };
        self.store_on_command_line = typed("store");
        self.coordinator_on_command_line = typed("coordinator");
    }
}

#[derive(Debug, Args)]
pub struct BatchRefArgs {
    /// The batch id (printed by `cowork submit`), `latest` or `latest~N`.
    pub batch: String,
    #[command(flatten)]
    pub client: crate::fleet_args::ClientArgs,
    /// Output on stdout.
    #[arg(long, value_enum, default_value = "human")]
    pub output_format: OutputFormat,
    /// No progress line (watch).
    #[arg(long, short)]
    pub quiet: bool,
    /// Watch: give up (exit 2, naming the tier) once a tier of the batch has had waiting jobs
    /// and no live worker for this long (e.g. 5m). The batch keeps running. Default: wait.
    #[arg(long, value_name = "DURATION")]
    pub unserved_timeout: Option<String>,
}

#[derive(Debug, Args)]
pub struct ResultsArgs {
    /// The batch id, `latest` or `latest~N`.
    pub batch: String,
    #[command(flatten)]
    pub client: crate::fleet_args::ClientArgs,
    /// Also save every stored file of the batch (spec.json, jobs/*/…, rollup.json,
    /// envelope.json) into this directory. The exit code then says whether the download
    /// worked (0 every file saved, 2 it failed), not the verdict, which the summary still
    /// prints: a CI step that fetches a failed batch's artifacts goes on. Without it, the exit
    /// code is the batch's (0 passed; 1 failed, or cancelled before its verdict).
    #[arg(long, value_name = "DIR")]
    pub download: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct WorkersArgs {
    #[command(flatten)]
    pub client: crate::fleet_args::ClientArgs,
    /// Output on stdout.
    #[arg(long, value_enum, default_value = "human")]
    pub output_format: OutputFormat,
}
