//! The commands that start a batch: `run` and `eval` in this process, `submit` to a
//! coordinator.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::OutputFormat;
use super::batch::{
    AdmissionArgs, BatchArgs, ExecutorArgs, HarnessProcessArgs, ModeArgs, NotifyArgs,
};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// A scenario file, or a directory whose *.yaml / *.yml files are the scenarios.
    #[arg(required_unless_present = "replay")]
    pub target: Option<PathBuf>,
    #[command(flatten)]
    pub batch: BatchArgs,
    #[command(flatten)]
    pub mode: ModeArgs,
    #[command(flatten)]
    pub executor: ExecutorArgs,
    /// Jobs run at once in this process (the harness CLI's own local cap is 8).
    #[arg(long, env = "COWORK_SLOTS", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub slots: u16,
    /// Most replay jobs one slot gives one harness process, which replays them as one dir and
    /// splits its output into one result per job (1: every replay in a process of its own);
    /// packs are cut to an even share of the queue across the replay slots.
    #[arg(long, env = "COWORK_REPLAY_PACK", default_value_t = 256, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub replay_pack: u16,
    /// The cowork-harness program for the harness executor.
    #[arg(long, env = "COWORK_HARNESS_BIN", default_value = "cowork-harness")]
    pub harness_bin: PathBuf,
    #[command(flatten)]
    pub harness: HarnessProcessArgs,
    /// Local store: where batches are written (<store>/batches/<id>/). Default: .cowork in the
    /// current directory.
    #[arg(long, env = "COWORK_STORE", default_value = ".cowork")]
    pub store: PathBuf,
    /// Output on stdout.
    #[arg(long, value_enum, default_value = "human")]
    pub output_format: OutputFormat,
    /// Jobs of the batch admitted ahead of results (default: 2 × slots).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub window: Option<usize>,
    #[command(flatten)]
    pub admission: AdmissionArgs,
    #[command(flatten)]
    pub notify: NotifyArgs,
    /// Keep each job's scratch directory under <store>/work (for debugging the harness).
    #[arg(long)]
    pub keep_work: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Validate and plan, then print the plan (jobs per unit, tiers, the caps that apply) and
    /// the cost and time earlier batches in --store suggest; run and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Serve the batch's live page while it runs (progress, heatmap, cost, failures; pause,
    /// resume, adjust, cancel), on a free loopback port, or on ADDR with --ui=ADDR. Its URL,
    /// with a token made for this run, is printed on stderr at start; it closes when the
    /// batch ends.
    #[arg(
        long,
        value_name = "ADDR",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "127.0.0.1:0"
    )]
    pub ui: Option<std::net::SocketAddr>,
}

/// `cowork eval --fail-on`: which overall verdict fails the eval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FailOnArg {
    /// Exit 1 when B is worse than A (with --arm: any arm worse than the control).
    BWorse,
    /// Exit 1 when B differs from A either way (with --arm: any arm from the control).
    AnyDifference,
    /// Never exit 1 (exit 2 still means nothing to compare).
    Never,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Arm A: the skill dir or plugin before the edit (the baseline); `none` runs the
    /// scenarios without the skill (the harness's --ablate-skill), as --without-skill does.
    #[arg(
        long = "a",
        value_name = "DIR",
        required_unless_present_any = ["without_skill", "arms"],
        conflicts_with_all = ["without_skill", "arms"]
    )]
    pub arm_a: Option<PathBuf>,
    /// Arm B: the skill dir or plugin after the edit (the candidate).
    #[arg(
        long = "b",
        value_name = "DIR",
        required_unless_present = "arms",
        conflicts_with = "arms"
    )]
    pub arm_b: Option<PathBuf>,
    /// Arm A runs the same scenarios with no skill at all (the harness's --ablate-skill),
    /// paired run by run with arm B: does the skill help at all? Reports name the arm "no
    /// skill".
    #[arg(long, conflicts_with = "arms")]
    pub without_skill: bool,
    /// One arm of an eval with several: NAME=DIR (NAME=none runs without the skill). Give it
    /// two to eight times; every arm is compared with the control (--control, default the
    /// first) by the paired test, p-values adjusted by Holm's method, ranked by the difference.
    #[arg(long = "arm", value_name = "NAME=DIR")]
    pub arms: Vec<String>,
    /// With --arm: the arm every other is compared with (default: the first --arm).
    #[arg(long, value_name = "NAME", requires = "arms")]
    pub control: Option<String>,
    /// Scenario files, or directories whose *.yaml / *.yml files are the scenarios.
    #[arg(required = true, value_name = "SCENARIOS")]
    pub scenarios: Vec<PathBuf>,
    /// Runs per arm per scenario: 2..=10000.
    #[arg(
        long,
        value_name = "N",
        default_value = "10",
        allow_negative_numbers = true
    )]
    pub runs: String,
    /// The model both arms run (replaces the session's `model`); default: the session's own.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Significance level of the McNemar test, strictly between 0 and 1; the interval of B - A
    /// is at level 1 - alpha.
    #[arg(
        long,
        value_name = "ALPHA",
        default_value = "0.05",
        allow_negative_numbers = true
    )]
    pub alpha: String,
    /// Stop as soon as the answer is clear: at each planned look (see `--looks`) an
    /// always-valid sequential test decides B better, B worse, or that no difference can be
    /// shown any more; then nothing more is run and the report says where it stopped and what it
    /// saved (decisions.md#eval-sequential).
    #[arg(long)]
    pub sequential: bool,
    /// Looks of `--sequential`, equally spaced in pairs of the planned total (default 5).
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub looks: Option<String>,
    /// The difference of pass rates to detect, in percentage points (15 for 15 points): the
    /// dry run prints the runs per arm it needs 4 times in 5, with their cost and time; the
    /// report gives the same figure after the runs; with `--sequential` the eval stops as
    /// futile once even that difference could no longer be shown.
    #[arg(long, value_name = "POINTS", allow_negative_numbers = true)]
    pub mde: Option<String>,
    /// Arm A's pass rate (0 to 1) the dry run's power figures assume for a scenario without
    /// history; default 0.5 (the rate that needs the most runs).
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub expect_pass_rate: Option<String>,
    /// Which overall verdict makes the eval exit 1: `b-worse` (a CI gate against regressions),
    /// `any-difference` (B must behave like A) or `never` (report only). With no run completed
    /// in both arms the eval exits 2 whatever this says.
    #[arg(long, value_enum, value_name = "VERDICT", default_value = "b-worse")]
    pub fail_on: FailOnArg,
    #[command(flatten)]
    pub executor: ExecutorArgs,
    /// Also write the eval report (the JSON of eval.json) to this file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Output on stdout: `json` prints the eval report as one JSON line.
    #[arg(long, value_enum, default_value = "human")]
    pub output_format: OutputFormat,
    /// Hard wall-clock limit per job, with a unit: 45m, 90s, 1h, 500ms (a bare number is
    /// refused). Default: the scenario's timeout_ms + 120 s, else 30 min.
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub job_timeout: Option<String>,
    #[command(flatten)]
    pub stall: super::batch::StallArgs,
    #[command(flatten)]
    pub priority: super::batch::PriorityArgs,
    /// Budget in USD for the whole eval, both arms together, counted as model spend plus
    /// sandbox minutes (--sandbox-price); when reached, every open arm stops as a budget stop
    /// and the report compares the pairs that completed.
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub batch_budget_usd: Option<String>,
    #[command(flatten)]
    pub pricing: super::batch::PricingArgs,
    /// Root of the bundle: every file a scenario or arm reaches must lie below it (default: the
    /// git work tree holding the first scenario target, else the current directory).
    #[arg(long, value_name = "DIR", env = "COWORK_BUNDLE_ROOT")]
    pub bundle_root: Option<PathBuf>,
    #[command(flatten)]
    pub quarantine: super::batch::QuarantineArgs,
    /// Jobs run at once in this process.
    #[arg(long, env = "COWORK_SLOTS", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub slots: u16,
    /// The cowork-harness program for the harness executor.
    #[arg(long, env = "COWORK_HARNESS_BIN", default_value = "cowork-harness")]
    pub harness_bin: PathBuf,
    /// Local store: where batches are written (<store>/batches/<id>/). Default: .cowork in the
    /// current directory.
    #[arg(long, env = "COWORK_STORE", default_value = ".cowork")]
    pub store: PathBuf,
    /// Jobs of the batch admitted ahead of results (default: 2 × slots).
    #[arg(long, value_name = "N")]
    pub window: Option<usize>,
    /// First dispatch pause of a tier after a run hits the model's usage limit, as for `run`.
    #[arg(
        long,
        env = "COWORK_USAGE_LIMIT_PAUSE",
        value_name = "DURATION",
        default_value = "30s"
    )]
    pub usage_limit_pause: String,
    #[command(flatten)]
    pub notify: NotifyArgs,
    /// Keep each job's scratch directory under <store>/work.
    #[arg(long)]
    pub keep_work: bool,
    /// No progress line.
    #[arg(long, short)]
    pub quiet: bool,
    /// Submit the eval to this coordinator instead of running it here (like `cowork submit`).
    #[arg(long, value_name = "URL")]
    pub coordinator: Option<String>,
    /// With --coordinator: file holding the API bearer token (or set COWORK_API_TOKEN).
    #[arg(long, env = "COWORK_API_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// With --coordinator: follow the batch to its end, then print the eval report and exit
    /// like an embedded eval.
    #[arg(long, requires = "coordinator")]
    pub watch: bool,
    /// Validate and plan, then print the plan and the cost and time earlier batches suggest (in
    /// --store, or on --coordinator); run, submit and write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// A scenario file, or a directory whose *.yaml / *.yml files are the scenarios.
    #[arg(required_unless_present = "replay")]
    pub target: Option<PathBuf>,
    #[command(flatten)]
    pub batch: BatchArgs,
    #[command(flatten)]
    pub mode: ModeArgs,
    #[command(flatten)]
    pub client: crate::fleet_args::ClientArgs,
    #[command(flatten)]
    pub executor: ExecutorArgs,
    /// POST a JSON event to URL when the batch is decided, stops at its batch budget, stalls,
    /// loses a worker mid-job or is cancelled (repeatable); signed with the coordinator's
    /// notification secret, beside the coordinator's own hooks.
    #[arg(long = "notify", value_name = "URL")]
    pub notify: Vec<String>,
    /// Follow the batch to its end and exit with its exit code.
    #[arg(long)]
    pub watch: bool,
    /// Output on stdout with --watch.
    #[arg(long, value_enum, default_value = "human")]
    pub output_format: OutputFormat,
    /// No progress line while watching.
    #[arg(long, short)]
    pub quiet: bool,
    /// With --watch: give up (exit 2, naming the tier) once a tier of the batch has had waiting
    /// jobs and no live worker for this long (e.g. 5m). The batch keeps running. Default: wait.
    #[arg(long, value_name = "DURATION", requires = "watch")]
    pub unserved_timeout: Option<String>,
    /// Validate and plan, then print the plan and the cost and time the coordinator's earlier
    /// batches suggest; submit nothing.
    #[arg(long)]
    pub dry_run: bool,
}
