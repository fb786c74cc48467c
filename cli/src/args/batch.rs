//! The batch flags shared by the commands that start a batch (`run`, `submit`, `eval`,
//! `resume`, `coordinator`): what to run, how often, with which executor, mode and limits.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Which executor runs jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExecutorArg {
    /// The real cowork-harness CLI (--harness-bin), one process per job.
    Harness,
    /// The seeded simulator: fast, free, and marked simulated everywhere.
    Sim,
}

/// Admission controls shared by `run` and `coordinator`.
#[derive(Debug, Args)]
pub struct AdmissionArgs {
    /// First dispatch pause of a tier after a run hits the model's usage limit; it doubles with
    /// each further one in a row, up to 10 minutes. A duration with a unit: `30s`, `500ms`.
    #[arg(
        long,
        env = "COWORK_USAGE_LIMIT_PAUSE",
        value_name = "DURATION",
        default_value = "30s"
    )]
    pub usage_limit_pause: String,
    /// Per-model admission limit shared by every job (repeatable or comma-separated):
    /// `MODEL=CONCURRENCY[/PERIOD]`, e.g. `claude-sonnet=20/4s` = at most 20 jobs of models
    /// starting with `claude-sonnet` in flight and at most 20 admissions in any 4 s. `default`
    /// names jobs without a model axis.
    #[arg(
        long,
        env = "COWORK_MODEL_LIMITS",
        value_name = "MODEL=N[/PERIOD]",
        value_delimiter = ','
    )]
    pub model_limit: Vec<String>,
}

// The batch flags shared by `run` and `submit` (harness-behaviour.md#repeat-flags,
// harness-behaviour.md#matrix-flags). Numbers are read with JavaScript `Number()` rules, like the
// CLI's.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// Run each scenario (or each matrix cell) N times: 2..=10000 (the CLI's own cap is 100).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub repeat: Option<String>,
    /// Sweep a matrix file (baselines × models × skill_dirs) over one scenario.
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<PathBuf>,
    /// A rollup passes when passes/completed >= this, in [0, 1] (default 1). Needs --repeat.
    #[arg(long, value_name = "RATE", allow_negative_numbers = true)]
    pub min_pass_rate: Option<String>,
    /// Stop a unit at the first index where both a pass and a fail exist; the unit fails.
    #[arg(long)]
    pub stop_on_diverge: bool,
    /// Per-file / per-cell budget in USD: stop when spend >= cap and runs remain (as the
    /// harness CLI does).
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub max_budget_usd: Option<String>,
    /// Budget in USD for the whole batch, all cells together (a fleet feature beside the CLI's
    /// per-cell --max-budget-usd): admission keeps known spend plus the in-flight estimate
    /// under it; when reached, every open unit stops as a budget stop. Needs --repeat.
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub batch_budget_usd: Option<String>,
    /// Judge a budget-stopped unit on its completed runs instead of failing it.
    #[arg(long)]
    pub allow_budget_stop: bool,
    /// Keep the first N matrix cells (default 16, like the CLI). Needs --matrix.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_cells: Option<String>,
    /// Judge a truncated matrix on its executed cells instead of failing it.
    #[arg(long)]
    pub allow_truncated_matrix: bool,
    /// Accepted for CLI compatibility (1..=8, needs --matrix); fleet parallelism is --slots.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub concurrency: Option<String>,
    /// Run every job as a control arm without the skill (forwarded to the harness).
    #[arg(long)]
    pub ablate_skill: bool,
    /// Policy for gates without a scripted answer, forwarded to every job: fail or first.
    #[arg(long, value_name = "POLICY")]
    pub on_unanswered: Option<String>,
    /// Decider model id, forwarded to every job.
    #[arg(long, value_name = "MODEL")]
    pub decider_model: Option<String>,
    /// Refused: an external decider is interactive and serial.
    #[arg(long, value_name = "DIR", hide = true)]
    pub decider_dir: Option<String>,
    /// Refused: an external decider is interactive and serial.
    #[arg(long, value_name = "CMD", hide = true)]
    pub decider_cmd: Option<String>,
    /// A label forwarded to every run (`RunResult.runLabel`; one line, at most 200 characters).
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
    /// Hard wall-clock limit per job, with a unit: 45m, 90s, 1h, 500ms (a bare number is
    /// refused). Default: the scenario's timeout_ms + 120 s, else 30 min. It must exceed the
    /// scenario's own timeout.
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub job_timeout: Option<String>,
    #[command(flatten)]
    pub stall: StallArgs,
    #[command(flatten)]
    pub priority: PriorityArgs,
    /// Root of the bundle: every file a scenario reaches must lie below it (default: the git
    /// work tree holding the target, else the current directory).
    #[arg(long, value_name = "DIR", env = "COWORK_BUNDLE_ROOT")]
    pub bundle_root: Option<PathBuf>,
    #[command(flatten)]
    pub quarantine: QuarantineArgs,
    #[command(flatten)]
    pub pricing: PricingArgs,
}

/// What a batch's runs cost beside their model spend, shared by `run`, `submit` and `eval`
/// (docs/decisions.md#whole-cost). They travel with the batch and override the coordinator's.
#[derive(Debug, Default, Args)]
pub struct PricingArgs {
    /// Sandbox price of a tier in USD per minute a run holds it (repeatable or
    /// comma-separated): `container=0.02`. The batch budget counts each run's minutes at it.
    #[arg(long, value_name = "TIER=USD_PER_MIN", value_delimiter = ',')]
    pub sandbox_price: Vec<String>,
    /// Price in USD of a run of a model that reports no cost.usd (repeatable or
    /// comma-separated): `claude-sonnet=0.30` prices every model starting with claude-sonnet;
    /// `default` prices runs without a model axis.
    #[arg(long, value_name = "MODEL=USD_PER_RUN", value_delimiter = ',')]
    pub model_price: Vec<String>,
    /// Accept --batch-budget-usd over a tier or model nothing prices (it counts $0); the
    /// envelope's fleet.spend names them.
    #[arg(long)]
    pub allow_unpriced: bool,
}

/// The coordinator's prices for every batch (a batch's own override them).
#[derive(Debug, Default, Args)]
pub struct FleetPricingArgs {
    /// Sandbox price of a tier in USD per minute, for every batch that sets none: `TIER=USD`,
    /// e.g. `microvm=0.05` (repeatable; COWORK_SANDBOX_PRICES takes them comma-separated).
    #[arg(
        long = "sandbox-price",
        env = "COWORK_SANDBOX_PRICES",
        value_name = "TIER=USD_PER_MIN",
        value_delimiter = ','
    )]
    pub sandbox_price: Vec<String>,
    /// Price in USD of a run of a model that reports no cost.usd, for every batch that sets
    /// none: `MODEL=USD` (repeatable; COWORK_MODEL_PRICES takes them comma-separated).
    #[arg(
        long = "model-price",
        env = "COWORK_MODEL_PRICES",
        value_name = "MODEL=USD_PER_RUN",
        value_delimiter = ','
    )]
    pub model_price: Vec<String>,
}

/// The batch's class when it shares the fleet with other batches, shared by `run`, `submit`
/// and `eval` (decisions.md#fair-share); it travels with the batch.
#[derive(Debug, Default, Args)]
pub struct PriorityArgs {
    /// The batch's priority class: `urgent`, `normal` (default) or `batch`. PR checks run
    /// `urgent`, nightly sweeps `batch`. Higher classes get free slots first; a lower class
    /// keeps a minimum share so it never starves, and a started job is never preempted. A
    /// coordinator may cap the class a token submits (`--token-policy`).
    #[arg(long, env = "COWORK_PRIORITY", value_name = "CLASS")]
    pub priority: Option<String>,
}

/// Which quarantine file the verdict honours, shared by `run`, `submit`, `eval` and `rollup`.
#[derive(Debug, Default, Args)]
pub struct QuarantineArgs {
    /// The quarantine file (default: quarantine.yaml at the bundle root, when it exists). Units
    /// it lists still run and are reported, but do not gate the verdict until they expire.
    #[arg(long, value_name = "FILE", conflicts_with = "no_quarantine")]
    pub quarantine: Option<PathBuf>,
    /// Read the quarantine file from this git ref (e.g. origin/main) instead of the working
    /// tree, so a change cannot quarantine its own regression.
    #[arg(long, value_name = "REF", conflicts_with = "no_quarantine")]
    pub quarantine_ref: Option<String>,
    /// Ignore any quarantine file: every unit gates.
    #[arg(long)]
    pub no_quarantine: bool,
}

/// What the fleet does about a batch that stops progressing, shared by `run`, `submit` and
/// `eval`; both travel with the batch.
#[derive(Debug, Args)]
pub struct StallArgs {
    /// Mark the batch stalled when it has jobs outstanding and none started or finished for
    /// this long, with a unit: 10m, 90s (default: 3 × the p95 run time of recent batches, else
    /// 15m). A stalled batch says why in `status`, `watch`, the live page and metrics.
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub stall_after: Option<String>,
    /// What to do when the batch stalls: `none` (only say so) or `cancel` (cancel it as
    /// `cowork cancel` does, with the reason recorded; a paused batch is kept).
    #[arg(long, value_name = "ACTION")]
    pub on_stall: Option<String>,
}

/// The executor of a batch and the simulator's settings, shared by `run` and `submit`.
#[derive(Debug, Args)]
pub struct ExecutorArgs {
    /// Executor for every job of the batch.
    #[arg(long, value_enum, env = "COWORK_EXECUTOR", default_value = "harness")]
    pub executor: ExecutorArg,
    /// Seed of the sim executor: the same seed gives the same results.
    #[arg(long, env = "COWORK_SIM_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Simulation profile (YAML `rules:` list: pass_rate, cost_usd, duration_ms … per scenario/cell).
    #[arg(long, value_name = "FILE")]
    pub sim_profile: Option<PathBuf>,
}

/// How the harness process is started and stopped (the harness executor; the container
/// executor keeps its own environment rules).
#[derive(Debug, Args)]
pub struct HarnessProcessArgs {
    /// How long a harness sent SIGTERM (job timeout, cancel --kill-running, the second Ctrl-C,
    /// cowork's own death) may take to remove its Docker containers and networks before its
    /// process group is killed (e.g. 30s, 2m).
    #[arg(
        long,
        env = "COWORK_HARNESS_GRACE",
        value_name = "DURATION",
        default_value = "30s"
    )]
    pub harness_grace: String,
    /// Another worker environment variable passed to the harness, beside the default
    /// allow-list (repeatable; COWORK_HARNESS_ENV takes names separated by commas). Its value
    /// is scrubbed from everything stored when it looks like a secret.
    #[arg(
        long,
        env = "COWORK_HARNESS_ENV",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub harness_env: Vec<String>,
}

/// Record and replay: the two harness modes CI lives on.
#[derive(Debug, Args)]
pub struct ModeArgs {
    /// Run each job with `cowork-harness record`; its cassette is stored beside result.json.
    #[arg(long, conflicts_with = "replay")]
    pub record: bool,
    /// Replay a cassette file or a directory of cassettes (*.json): one job per cassette on the
    /// `replay` tier, no model tokens spent. Each cassette needs its session and skill dirs at
    /// their recorded relative places.
    #[arg(long, value_name = "CASSETTES", conflicts_with = "target")]
    pub replay: Option<PathBuf>,
}

impl ModeArgs {
    /// The batch mode these flags ask for.
    pub fn batch_mode(&self) -> cowork_schema::batch::BatchMode {
        use cowork_schema::batch::BatchMode;
        if self.replay.is_some() {
            BatchMode::Replay
        } else if self.record {
            BatchMode::Record
        } else {
            BatchMode::Run
        }
    }
}

/// Webhooks told of a batch's moments, and the secret that signs what they receive (`run`,
/// `eval`, `resume`, `coordinator`; `submit` takes only `--notify`: a coordinator signs with
/// its own secret).
#[derive(Debug, Args)]
pub struct NotifyArgs {
    /// POST a signed JSON event to URL when the batch is decided, stops at its batch budget,
    /// stalls, loses a worker mid-job or is cancelled (repeatable; docs/operations/unattended.md).
    #[arg(
        long = "notify",
        value_name = "URL",
        env = "COWORK_NOTIFY",
        value_delimiter = ','
    )]
    pub notify: Vec<String>,
    /// File holding the secret every event is signed with (Cowork-Signature), or set
    /// COWORK_NOTIFY_SECRET. Without one, events are sent unsigned.
    #[arg(long, env = "COWORK_NOTIFY_SECRET_FILE", value_name = "FILE")]
    pub notify_secret_file: Option<PathBuf>,
}

/// `cowork notify-test`.
#[derive(Debug, Args)]
pub struct NotifyTestArgs {
    /// The hook to send a sample event to.
    #[arg(value_name = "URL")]
    pub url: String,
    /// File holding the secret the event is signed with, or set COWORK_NOTIFY_SECRET.
    #[arg(long, env = "COWORK_NOTIFY_SECRET_FILE", value_name = "FILE")]
    pub notify_secret_file: Option<PathBuf>,
}
