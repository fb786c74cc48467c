//! Command-line arguments: what the user typed, validated by clap, with no IO (each setting is
//! defined once, in its clap field).
//!
//! Each setting is declared once here: its long name, its `COWORK_*` variable and its help text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Cowork Fleet: run cowork-harness batches (--repeat, --matrix) on one machine or a fleet,
/// with the same rollups, verdicts and exit codes as the harness CLI.
#[derive(Debug, Parser)]
#[command(name = "cowork", version, propagate_version = true)]
#[command(
    after_help = "Exit codes: 0 the batch passed, 1 the batch verdict failed, 2 usage or input error.\n\
Start with `cowork run <scenario> --executor sim` (free, simulated) or read README.md."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log filter for diagnostics on stderr (e.g. `info`, `cowork_worker=debug`).
    #[arg(long, global = true, env = "COWORK_LOG", default_value = "warn")]
    pub log: String,
}

// Parsed once at start-up; boxing every variant would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a batch in this process: embedded queue, local store under --store, N slots.
    #[command(
        after_help = "Results are stored under <store>/batches/<batch id>/ (spec.json, \
jobs/*/result.json, rollup.json, envelope.json); <store> is .cowork in the current directory \
unless --store or COWORK_STORE says otherwise. `cowork batches` lists them; re-judge one with \
`cowork rollup <batch id>`. --dry-run prints the plan, the estimate from earlier batches and the \
caps, and runs nothing."
    )]
    Run(Box<RunArgs>),
    /// Compare two versions of a skill or plugin (arms A and B) on the same scenarios: paired,
    /// interleaved runs in this process, then pass rates, the difference with its exact 95%
    /// interval, an exact McNemar test, the smallest detectable difference and a verdict.
    #[command(
        after_help = "Each scenario runs --runs times per arm; run i of arm A is paired \
with run i of arm B, and jobs are admitted repeat-major with the arms alternating, so both arms \
meet the same conditions. Each arm's directory replaces the session's single \
plugins.local_plugins entry (same basename required), and --model replaces the session's model in \
both arms. --seed seeds the sim executor. The report goes to stderr (per scenario and overall: \
pass rate A and B, B - A with its exact interval at 1 - alpha, the McNemar p explained in words, \
the smallest difference the runs can detect, verdict) and to <store>/batches/<batch id>/eval.json; \
--output-format json also prints it as one JSON line on stdout. The interval and the verdict \
always agree: the interval excludes 0 exactly when the verdict is a difference.\n\n\
Exit codes: 0 the gate passed, 1 the gate failed (--fail-on; by default: B worse overall, \
p < alpha), 2 nothing to compare (no run completed in both arms) or a usage or input error \
(nothing is written)."
    )]
    Eval(Box<EvalArgs>),
    /// Re-judge stored runs with the same reducer: a stored batch (dir, id or `latest`),
    /// result.json files or a dir of them.
    #[command(
        after_help = "A stored batch (its dir, its id in --store, or `latest`) is \
re-judged with its own shape and flags; flags given here replace the stored ones. A batch that \
was interrupted is judged on the runs it has, marked INCOMPLETE (exit 1), and the jobs that \
never ran are named. Loose result.json files are folded in the order given (a dir: every \
result.json below it, in natural path order), one repeat rollup per scenario name."
    )]
    Rollup(RollupArgs),
    /// Submit a batch to a coordinator (validated and bundled here, exactly as `run` does).
    #[command(
        after_help = "Without --watch the batch id is printed on stdout; follow it with \
`cowork watch <id>`. With --watch the command ends like `cowork run`: summary, envelope \
(--output-format json), exit code. --dry-run prints the plan and the estimate and submits \
nothing."
    )]
    Submit(Box<SubmitArgs>),
    /// Show a batch's state, progress and verdict.
    Status(BatchRefArgs),
    /// Follow a batch to its end; prints the summary and exits with the batch's exit code.
    Watch(BatchRefArgs),
    /// Cancel a batch: admission stops at once; running jobs finish and are reported.
    #[command(
        after_help = "Without --kill-running, jobs already running finish and are \
reported as discarded (they cost money, so their results are kept). With it, workers kill the \
batch's running jobs (their whole process groups) and skip its queued ones. Either way the batch \
ends `cancelled`; `cowork resume` runs what is missing later."
    )]
    Cancel(CancelArgs),
    /// Pause a running batch's dispatch fleet-wide: no new job of it starts on any worker;
    /// running jobs finish and count.
    #[command(
        after_help = "Queued jobs of the batch are taken back from the queue; the ones already running finish, are stored and counted. `cowork resume-dispatch` goes on from exactly where each unit stopped: the batch ends with the rollup an undisturbed run gives, no job run or paid twice. A paused batch stays paused when its coordinator restarts. The live page (`/v1/batches/<id>/live.html`) has the same button."
    )]
    Pause(SteerArgs),
    /// Resume the dispatch of a paused batch.
    #[command(name = "resume-dispatch")]
    ResumeDispatch(SteerArgs),
    /// Change a running batch's batch-wide budget or its cap on jobs running at once;
    /// admission obeys at once.
    #[command(
        after_help = "--max-budget-usd here is the batch-wide budget (`--batch-budget-usd` of the submit): admission stops when one more job would not fit. The per-run and per-unit `--max-budget-usd` of the submit is part of each unit's verdict and stays as submitted. --max-running caps the batch's jobs outstanding (queued or running) at once. Every change is recorded in the batch (who, when, old, new) and shown on its live page and in its report."
    )]
    Adjust(AdjustArgs),
    /// Resume a done, cancelled or interrupted batch: run again only the jobs with no stored
    /// result, a killed run or an infrastructure failure; finished jobs are kept as they are.
    #[command(
        after_help = "The batch keeps its id; its generation goes up by one. The rollup \
and envelope are computed again from every stored result, exactly as if the batch had run \
undisturbed. A batch of the local store (`cowork run` stopped with Ctrl-C, or killed) is \
finished in this process, like `cowork run`; any other batch is resumed by the coordinator."
    )]
    Resume(ResumeArgs),
    /// Print a batch's envelope (stdout) and summary (stderr); --download saves every file.
    Results(ResultsArgs),
    /// Render a stored batch as an HTML report, JUnit XML, a Markdown summary or a JSON summary.
    #[command(
        after_help = "<batch> is a stored batch dir, a batch id looked up in --store, \
`latest`, or with --coordinator a batch fetched through the coordinator's API (token from \
COWORK_API_TOKEN or --token-file). The HTML report is one self-contained file: inline CSS, no \
script, nothing loaded from the network. Simulated runs are always flagged as such. Exit 0 once \
the report is written, whatever the batch's verdict; a batch that never finished (interrupted or \
cancelled) is reported too, with a note on stderr counting the jobs that never ran. Exit 2 for an \
unknown batch. --compare THEN NOW is `cowork diff THEN NOW`."
    )]
    Report(ReportArgs),
    /// List the batches of a local store or a coordinator: id, when, target, units, verdict,
    /// cost and state, newest first.
    #[command(
        after_help = "Every command that takes a batch accepts its id, its directory \
(<store>/batches/<id>), `latest` (the newest batch) or `latest~N` (N batches before it)."
    )]
    Batches(BatchesArgs),
    /// Compare two batches unit by unit: verdict and pass rate then and now, the change
    /// (newly failing, newly passing, failing, passing, new, gone), and a flaky flag.
    #[command(
        after_help = "Units are matched by their label (the scenario name, plus the axes \
of a matrix cell). A unit passes when its pass rate reaches the min pass rate its batch was \
judged with; each side shows PASS or FAIL and its runs. Change: newly failing (passed then, \
fails now), newly passing, failing, passing, new (only now), gone (only then). Flaky: some of \
the unit's runs passed and some failed (here over both batches) — the same rule as `cowork \
trend` and the reports, shown beside the verdict, never instead of it."
    )]
    Diff(DiffArgs),
    /// Pass rate and cost per unit over the last N batches that ran these scenarios, with a
    /// flaky flag.
    #[command(
        after_help = "<scenarios> is a scenario file, a directory of them, or a scenario \
name. Columns b1, b2, … are the batches, oldest first, named in the legend below the table. \
Flaky: some of the unit's runs passed and some failed (here over every batch shown) — the \
same rule as `cowork diff` and the reports: the unit to look at first after a nightly sweep. \
History comes from each batch's stats.json, or its rollup.json for batches without one."
    )]
    Trend(TrendArgs),
    /// List the live workers of the fleet.
    Workers(WorkersArgs),
    /// Run the coordinator service: HTTP API, admission and judging of submitted batches.
    #[command(
        after_help = "Batches left running by a previous coordinator are resumed from the event \
stream at start-up."
    )]
    Coordinator(Box<CoordinatorArgs>),
    /// Run a fleet worker: pull jobs for --tiers from NATS, run them, store artifacts in S3.
    #[command(
        after_help = "SIGTERM drains: no new job is pulled, running jobs finish and are stored, \
then exit 0."
    )]
    Worker(Box<WorkerArgs>),
    /// Measure the planner and the reducer on synthetic batches (see docs/benchmarks.md).
    Bench(BenchArgs),
}

/// The examples of a subcommand. They are printed after its help exactly as written, one
/// command per line: clap wraps help text to the terminal's width, and a wrapped command line
/// no longer works when it is copied and pasted.
pub fn examples(subcommand: &str) -> Option<&'static str> {
    Some(match subcommand {
        "run" => {
            "cowork run examples/demo/scenarios --repeat 5 --executor sim
cowork run examples/demo/scenarios/csv-report.yaml --repeat 5 --matrix examples/demo/matrix.yaml --executor sim --sim-profile examples/demo/sim-profile.yaml
cowork run examples/demo/scenarios --repeat 3 --min-pass-rate 0.66 --executor sim --output-format json > envelope.json
cowork run examples/demo/scenarios --repeat 10 --job-timeout 45m --dry-run
cowork run examples/demo/scenarios/csv-report.yaml --repeat 50 --matrix examples/demo/matrix.yaml --executor sim --sim-profile examples/demo/live-sim-profile.yaml --ui"
        }
        "eval" => {
            "cowork eval --a examples/demo/skills/v1/csv-report --b examples/demo/eval/skills/csv-report-worse/csv-report examples/demo/scenarios --executor sim --sim-profile examples/demo/eval/sim-profile.yaml
cowork eval --a examples/demo/skills/v1/csv-report --b examples/demo/skills/v2/csv-report examples/demo/scenarios --runs 20 --executor sim --output-format json -o eval.json"
        }
        "rollup" => {
            "cowork rollup latest --min-pass-rate 0.8
cowork rollup 20261130-101500-a1b2c3 --store .cowork
cowork rollup .cowork/batches/20261130-101500-a1b2c3 --rollup-out rollup.json
cowork rollup .cowork/batches/20261130-101500-a1b2c3/jobs/c0/r0/result.json .cowork/batches/20261130-101500-a1b2c3/jobs/c0/r1/result.json"
        }
        "submit" => {
            "cowork submit examples/demo/scenarios/csv-report.yaml --matrix examples/demo/matrix.yaml --repeat 5 --executor sim --coordinator http://coordinator:8700 --watch
cowork submit --replay examples/demo/cassettes --coordinator http://coordinator:8700 --watch --output-format json
cowork submit examples/demo/scenarios --repeat 10 --coordinator http://coordinator:8700 --dry-run"
        }
        "cancel" => {
            "cowork cancel 20261130-101500-a1b2c3
cowork cancel latest --kill-running"
        }
        "pause" => {
            "cowork pause 20261130-101500-a1b2c3
cowork pause latest --coordinator http://coordinator:8700 --by ann"
        }
        "resume-dispatch" => {
            "cowork resume-dispatch 20261130-101500-a1b2c3
cowork resume-dispatch latest --coordinator http://coordinator:8700"
        }
        "adjust" => {
            "cowork adjust 20261130-101500-a1b2c3 --max-budget-usd 40
cowork adjust latest --max-running 8
cowork adjust latest --max-budget-usd 25.5 --max-running 16 --by ann"
        }
        "resume" => {
            "cowork resume 20261130-101500-a1b2c3 --watch
cowork resume latest --store .cowork --slots 8"
        }
        "report" => {
            "cowork report latest -o report.html
cowork report .cowork/batches/20261130-101500-a1b2c3 -o report.html
cowork report 20261130-101500-a1b2c3 --format junit -o junit.xml
cowork report latest --format markdown >> \"$GITHUB_STEP_SUMMARY\"
cowork report 20261130-101500-a1b2c3 --coordinator http://coordinator:8700 -o report.html
cowork report --compare latest~1 latest"
        }
        "batches" => {
            "cowork batches
cowork batches --store .cowork --limit 50
cowork batches --coordinator http://coordinator:8700 --format json"
        }
        "diff" => {
            "cowork diff latest~1 latest
cowork diff 20261130-101500-a1b2c3 20261201-101500-d4e5f6 --format markdown >> \"$GITHUB_STEP_SUMMARY\""
        }
        "trend" => {
            "cowork trend examples/demo/scenarios/csv-report.yaml --last 7
cowork trend examples/demo/scenarios --last 30 --coordinator http://coordinator:8700
cowork trend csv-report --format json"
        }
        "coordinator" => {
            "COWORK_NATS_URL=nats://nats:4222 COWORK_S3_ENDPOINT=http://minio:9000 COWORK_S3_BUCKET=cowork COWORK_S3_ACCESS_KEY_ID=… COWORK_S3_SECRET_ACCESS_KEY=… COWORK_API_TOKEN=… cowork coordinator --listen 0.0.0.0:8700"
        }
        "worker" => {
            "COWORK_NATS_URL=nats://nats:4222 COWORK_S3_ENDPOINT=http://minio:9000 COWORK_S3_BUCKET=cowork COWORK_S3_ACCESS_KEY_ID=… COWORK_S3_SECRET_ACCESS_KEY=… cowork worker --tiers container,replay --slots 4"
        }
        _ => return None,
    })
}

/// The subcommand whose help `args` (the process arguments, program name first) asks for:
/// the first word that names a subcommand, or the word after `help`. Values of the global
/// `--log` flag are skipped.
pub fn help_subcommand(args: &[std::ffi::OsString]) -> Option<String> {
    use clap::CommandFactory as _;
    let command = Cli::command();
    let mut words = args.iter().skip(1).filter_map(|arg| arg.to_str());
    while let Some(word) = words.next() {
        if word == "--log" {
            words.next();
            continue;
        }
        if word.starts_with('-') {
            continue;
        }
        if word == "help" {
            return words
                .find(|next| !next.starts_with('-'))
                .filter(|next| command.find_subcommand(next).is_some())
                .map(str::to_owned);
        }
        return command
            .find_subcommand(word)
            .map(|found| found.get_name().to_owned());
    }
    None
}

/// `cowork eval --fail-on`: which overall verdict fails the eval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FailOnArg {
    /// Exit 1 when B is worse than A.
    BWorse,
    /// Exit 1 when B differs from A either way.
    AnyDifference,
    /// Never exit 1 (exit 2 still means nothing to compare).
    Never,
}

/// How results are printed on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// A summary table on stderr; nothing on stdout.
    Human,
    /// The envelope as one JSON line on stdout (the harness CLI's format); the summary still
    /// goes to stderr.
    Json,
}

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

/// Which executor a fleet worker runs jobs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WorkerExecutorArg {
    /// The real cowork-harness CLI (--harness-bin), one process per job.
    Harness,
    /// The harness CLI in one container per job (--container-image), through the Docker API.
    Container,
    /// The seeded simulator: fast, free, and marked simulated everywhere.
    Sim,
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
    /// Root of the bundle: every file a scenario reaches must lie below it (default: the git
    /// work tree holding the target, else the current directory).
    #[arg(long, value_name = "DIR", env = "COWORK_BUNDLE_ROOT")]
    pub bundle_root: Option<PathBuf>,
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

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Arm A: the skill dir or plugin before the edit (the baseline).
    #[arg(long = "a", value_name = "DIR")]
    pub arm_a: PathBuf,
    /// Arm B: the skill dir or plugin after the edit (the candidate).
    #[arg(long = "b", value_name = "DIR")]
    pub arm_b: PathBuf,
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
    /// Root of the bundle: every file a scenario or arm reaches must lie below it (default: the
    /// git work tree holding the first scenario target, else the current directory).
    #[arg(long, value_name = "DIR", env = "COWORK_BUNDLE_ROOT")]
    pub bundle_root: Option<PathBuf>,
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
    /// process. Without it, a batch found in `.cowork` is finished here and any other id is
    /// resumed by the coordinator.
    #[arg(long, env = "COWORK_STORE", value_name = "DIR")]
    pub store: Option<PathBuf>,
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
    /// envelope.json) into this directory.
    #[arg(long, value_name = "DIR")]
    pub download: Option<PathBuf>,
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
    /// List every unit. Past 40 units the text and Markdown tables list only the units that
    /// changed or are flaky, then one line counting the rest; JSON always lists every unit.
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
    /// List every unit. Past 40 units the text and Markdown tables list only the flaky units,
    /// then one line counting the steady ones; JSON always lists every unit.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct WorkersArgs {
    #[command(flatten)]
    pub client: crate::fleet_args::ClientArgs,
    /// Output on stdout.
    #[arg(long, value_enum, default_value = "human")]
    pub output_format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct CoordinatorArgs {
    #[command(flatten)]
    pub nats: crate::fleet_args::NatsArgs,
    #[command(flatten)]
    pub s3: crate::fleet_args::S3Args,
    /// Address of the HTTP API.
    #[arg(long, env = "COWORK_LISTEN", default_value = "127.0.0.1:8700")]
    pub listen: std::net::SocketAddr,
    /// PEM certificate chain: serve the API over HTTPS (with --tls-key). Without both, the API
    /// is plain HTTP (e.g. behind an ingress that terminates TLS).
    #[arg(long, env = "COWORK_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "COWORK_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// File with the API bearer token(s), one per line (or set COWORK_API_TOKEN).
    #[arg(long, env = "COWORK_API_TOKEN_FILE", value_name = "FILE")]
    pub api_token_file: Option<PathBuf>,
    /// File with read-only API token(s), one per line (or set COWORK_API_READ_TOKEN): they
    /// may read everything (status, reports, artifacts, workers, the pages) but not submit,
    /// cancel, resume, pause or adjust (403).
    #[arg(long, env = "COWORK_API_READ_TOKEN_FILE", value_name = "FILE")]
    pub api_read_token_file: Option<PathBuf>,
    /// Serve the API without a token (local use only).
    #[arg(long)]
    pub allow_unauthenticated: bool,
    /// Jobs of one batch outstanding in the queue at most (admission window).
    #[arg(long, env = "COWORK_WINDOW", default_value_t = 64)]
    pub window: usize,
    #[command(flatten)]
    pub admission: AdmissionArgs,
    /// Largest accepted bundle in MiB.
    #[arg(long, env = "COWORK_MAX_BUNDLE_MIB", default_value_t = 256)]
    pub max_bundle_mib: u64,
    /// Most bytes a submitted bundle may unpack to on the coordinator, in MiB (a compression
    /// bomb is stopped here, while it is decompressed).
    #[arg(long, env = "COWORK_MAX_UNPACKED_MIB", default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub max_unpacked_mib: u64,
    /// Most entries (files and directories) in a submitted bundle.
    #[arg(long, env = "COWORK_MAX_BUNDLE_ENTRIES", default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_bundle_entries: u64,
    /// Submits read and validated at once at most; more are refused with 503 and Retry-After.
    #[arg(long, env = "COWORK_MAX_CONCURRENT_SUBMITS", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub max_concurrent_submits: u64,
    /// Where submitted bundles are unpacked while they are validated.
    #[arg(
        long,
        env = "COWORK_SCRATCH_DIR",
        default_value = ".cowork-coordinator/scratch"
    )]
    pub scratch_dir: PathBuf,
    /// Id of this replica (default <hostname>-<pid>).
    #[arg(long, env = "COWORK_COORDINATOR_ID")]
    pub coordinator_id: Option<String>,
    /// Time a client has to send a complete request head once it started one.
    #[arg(long, env = "COWORK_HTTP_HEADER_TIMEOUT", default_value = "10s")]
    pub http_header_timeout: String,
    /// Time an API connection may stay open with no request in flight (one that never sends
    /// a byte included); then the coordinator closes it.
    #[arg(long, env = "COWORK_HTTP_IDLE_TIMEOUT", default_value = "30s")]
    pub http_idle_timeout: String,
    /// Open API connections at most; at the cap the oldest idle one is closed for a new one.
    #[arg(long, env = "COWORK_HTTP_MAX_CONNECTIONS", default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub http_max_connections: u64,
    #[command(flatten)]
    pub k8s: K8sWorkerJobArgs,
}

/// A Kubernetes Job of workers (`cowork worker --exit-when-idle`) for each large batch: created
/// when the batch is accepted, deleted when it ends. Off by default.
#[derive(Debug, Args)]
pub struct K8sWorkerJobArgs {
    /// Create a Kubernetes Job of workers for each batch of at least --k8s-min-jobs jobs
    /// (in-cluster service account or kubeconfig; needs create/delete on batch jobs).
    #[arg(long, env = "COWORK_K8S_WORKER_JOBS")]
    pub k8s_worker_jobs: bool,
    /// Namespace of the Jobs (default: the client's, i.e. the pod's own namespace).
    #[arg(long, env = "COWORK_K8S_NAMESPACE", value_name = "NAMESPACE")]
    pub k8s_namespace: Option<String>,
    /// Worker image of the Jobs (required with --k8s-worker-jobs).
    #[arg(long, env = "COWORK_K8S_WORKER_IMAGE", value_name = "IMAGE")]
    pub k8s_worker_image: Option<String>,
    /// imagePullPolicy of the worker container (default: the cluster's).
    #[arg(long, env = "COWORK_K8S_IMAGE_PULL_POLICY", value_name = "POLICY")]
    pub k8s_image_pull_policy: Option<String>,
    /// Smallest batch, in jobs, that gets a Job of workers.
    #[arg(long, env = "COWORK_K8S_MIN_JOBS", default_value_t = 200)]
    pub k8s_min_jobs: u64,
    /// Jobs per worker pod when sizing the Job's parallelism.
    #[arg(long, env = "COWORK_K8S_JOBS_PER_WORKER", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub k8s_jobs_per_worker: u64,
    /// Largest parallelism of one Job.
    #[arg(long, env = "COWORK_K8S_MAX_PARALLELISM", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub k8s_max_parallelism: u32,
    /// ConfigMap loaded into the workers' environment (NATS and S3 settings).
    #[arg(long, env = "COWORK_K8S_WORKER_CONFIG_MAP", value_name = "NAME")]
    pub k8s_worker_config_map: Option<String>,
    /// Secrets loaded into the workers' environment (credentials), comma-separated.
    #[arg(
        long,
        env = "COWORK_K8S_WORKER_SECRETS",
        value_delimiter = ',',
        value_name = "NAMES"
    )]
    pub k8s_worker_secrets: Vec<String>,
    /// Tiers the Job's workers pull.
    #[arg(
        long,
        env = "COWORK_K8S_WORKER_TIERS",
        value_delimiter = ',',
        default_value = "container"
    )]
    pub k8s_worker_tiers: Vec<String>,
    /// Jobs each worker pod runs at once.
    #[arg(long, env = "COWORK_K8S_WORKER_SLOTS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub k8s_worker_slots: u32,
    /// The workers' --exit-when-idle.
    #[arg(long, env = "COWORK_K8S_IDLE_EXIT", default_value = "2m")]
    pub k8s_idle_exit: String,
    /// Longest job of a batch: the pods' grace period covers it plus a drain tail.
    #[arg(long, env = "COWORK_K8S_LONGEST_JOB", default_value = "60m")]
    pub k8s_longest_job: String,
    /// ttlSecondsAfterFinished of the Jobs.
    #[arg(long, env = "COWORK_K8S_JOB_TTL", default_value = "10m")]
    pub k8s_job_ttl: String,
    /// backoffLimit of the Jobs (failed pods tolerated).
    #[arg(long, env = "COWORK_K8S_BACKOFF_LIMIT", default_value_t = 6)]
    pub k8s_backoff_limit: i32,
    /// Service account of the worker pods.
    #[arg(long, env = "COWORK_K8S_SERVICE_ACCOUNT", value_name = "NAME")]
    pub k8s_service_account: Option<String>,
    /// Mount the node's Docker socket from this path (container executor); the data dir is
    /// then a hostPath at the same path.
    #[arg(long, env = "COWORK_K8S_DOCKER_SOCKET", value_name = "PATH")]
    pub k8s_docker_socket: Option<String>,
    /// Data directory of the worker pods.
    #[arg(long, env = "COWORK_K8S_DATA_DIR", default_value = "/var/lib/cowork")]
    pub k8s_data_dir: String,
    /// Job names are <prefix>-<batch id>.
    #[arg(long, env = "COWORK_K8S_JOB_PREFIX", default_value = "cowork-workers")]
    pub k8s_job_prefix: String,
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub nats: crate::fleet_args::NatsArgs,
    #[command(flatten)]
    pub s3: crate::fleet_args::S3Args,
    /// Tiers this worker serves (it never pulls others): container, hostloop, microvm, protocol,
    /// replay.
    #[arg(
        long,
        env = "COWORK_TIERS",
        value_delimiter = ',',
        default_value = "container"
    )]
    pub tiers: Vec<String>,
    /// Jobs run at once on this worker (the harness CLI's own local cap is 8).
    #[arg(long, env = "COWORK_SLOTS", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub slots: u16,
    /// Most replay jobs one slot gives one harness process, which replays them as one dir and
    /// splits its output into one result per job (1: every replay in a process of its own);
    /// packs are cut to an even share of the queue across the replay slots.
    #[arg(long, env = "COWORK_REPLAY_PACK", default_value_t = 256, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub replay_pack: u16,
    /// Executor for every job.
    #[arg(long, value_enum, env = "COWORK_EXECUTOR", default_value = "harness")]
    pub executor: WorkerExecutorArg,
    /// Image of the container executor: holds the harness CLI (and the Docker CLI the harness
    /// needs for its own sandboxes, with --container-docker-socket).
    #[arg(long, env = "COWORK_CONTAINER_IMAGE", value_name = "IMAGE")]
    pub container_image: Option<String>,
    /// Owner label of this worker's containers: leftovers of this owner whose job is not
    /// running are removed at start and after each job (default: the hostname).
    #[arg(long, env = "COWORK_CONTAINER_OWNER", value_name = "NAME")]
    pub container_owner: Option<String>,
    /// Pass this Docker socket into each job's container (at /var/run/docker.sock).
    #[arg(long, env = "COWORK_CONTAINER_DOCKER_SOCKET", value_name = "PATH")]
    pub container_docker_socket: Option<PathBuf>,
    /// Memory limit of each job's container, in bytes.
    #[arg(long, env = "COWORK_CONTAINER_MEMORY_BYTES", value_name = "BYTES")]
    pub container_memory_bytes: Option<u64>,
    /// CPU limit of each job's container, in thousandths of a CPU (1500 = 1.5 CPUs).
    #[arg(long, env = "COWORK_CONTAINER_CPU_MILLIS", value_name = "MILLIS")]
    pub container_cpu_millis: Option<u64>,
    /// Docker network of each job's container (default: the engine's default).
    #[arg(long, env = "COWORK_CONTAINER_NETWORK", value_name = "NETWORK")]
    pub container_network: Option<String>,
    /// The cowork-harness program for the harness executor.
    #[arg(long, env = "COWORK_HARNESS_BIN", default_value = "cowork-harness")]
    pub harness_bin: PathBuf,
    #[command(flatten)]
    pub harness: HarnessProcessArgs,
    /// Id shown in events and `cowork workers` (default <hostname>-<pid>).
    #[arg(long, env = "COWORK_WORKER_ID")]
    pub worker_id: Option<String>,
    /// Where bundles are unpacked, by digest.
    #[arg(long, env = "COWORK_CACHE_DIR", default_value = ".cowork-worker/cache")]
    pub cache_dir: PathBuf,
    /// Most MiB of unpacked bundles the cache keeps: after each new bundle, the least
    /// recently used ones no running job holds are removed until the rest fit (0 = no bound).
    #[arg(long, env = "COWORK_CACHE_MAX_MIB", default_value_t = 10240)]
    pub cache_max_mib: u64,
    /// Where each job gets its scratch directory.
    #[arg(long, env = "COWORK_WORK_DIR", default_value = ".cowork-worker/work")]
    pub work_dir: PathBuf,
    /// Keep each job's scratch directory after its artifacts are stored.
    #[arg(long)]
    pub keep_work: bool,
    /// Interval of in-progress acks of a running job (default: a third of --ack-wait). Set
    /// longer than --ack-wait only to test redelivery: the queue then hands running jobs to
    /// other workers, and the coordinator counts each job once.
    #[arg(long, env = "COWORK_IN_PROGRESS_EVERY", value_name = "DURATION")]
    pub in_progress_every: Option<String>,
    /// How long a job's uploads, its record and each of its events are retried when the store
    /// or NATS fails (e.g. 10m, the default). The job's lease is renewed meanwhile. Past it, a
    /// job whose harness ran ends as infra_after_spend (never run again); one that never
    /// started is handed back.
    #[arg(long, env = "COWORK_STORE_DEADLINE", value_name = "DURATION")]
    pub store_deadline: Option<String>,
    /// Exit 0 once no job has been pulled or running for DURATION (e.g. 2m): the workers of a
    /// Kubernetes Job for one batch then complete when its queue is drained.
    #[arg(long, env = "COWORK_EXIT_WHEN_IDLE", value_name = "DURATION")]
    pub exit_when_idle: Option<String>,
    /// Tiers of --tiers served without probing their prerequisites (limactl, Docker), for
    /// hosts where they are met in a way the start-up probe cannot see.
    #[arg(
        long,
        env = "COWORK_ASSUME_TIERS",
        value_delimiter = ',',
        value_name = "TIERS"
    )]
    pub assume_tiers: Vec<String>,
    /// Serve microvm with the harness executor on a host that is not macOS, as long as
    /// limactl answers (Lima also runs on Linux).
    #[arg(long, env = "COWORK_ALLOW_MICROVM_OFF_MACOS")]
    pub allow_microvm_off_macos: bool,
    /// Serve this worker's counters as Prometheus text at http://ADDR/metrics (e.g.
    /// 0.0.0.0:9464); off by default.
    #[arg(long, env = "COWORK_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

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
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

// Parsed once at start-up.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum BenchWhat {
    /// Plan a matrix × repeat batch of about --jobs jobs and iterate every job spec.
    Plan {
        #[arg(long, default_value_t = 1_000_000)]
        jobs: u64,
    },
    /// Fold --outcomes synthetic outcomes (cells × repeats) through the reducer.
    Fold {
        #[arg(long, default_value_t = 1_000_000)]
        outcomes: u64,
    },
    /// Raw JetStream baseline: publish with acks, pull and ack --messages small messages.
    Jetstream {
        /// NATS server URL.
        #[arg(long, env = "COWORK_NATS_URL")]
        nats_url: String,
        #[arg(long, default_value_t = 20_000)]
        messages: u64,
    },
    /// The fleet end to end: an in-process coordinator and --workers workers (each with its own
    /// NATS and S3 connections, sim executor) run a --jobs batch submitted over HTTP; with
    /// --coordinator, the batch goes to a running coordinator and its workers instead.
    Fleet {
        #[command(flatten)]
        nats: crate::fleet_args::NatsArgs,
        #[command(flatten)]
        s3: crate::fleet_args::S3Args,
        /// Jobs of the batch: the demo's two scenarios × --jobs / 2 runs, so at most 20000
        /// (--repeat stops at 10000).
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(4..=20_000))]
        jobs: u64,
        /// Workers of the fleet (started in process, or expected at --coordinator).
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// Slots per worker.
        #[arg(long, default_value_t = 8)]
        slots: usize,
        /// Admission window of the batch (in-process coordinator only).
        #[arg(long, default_value_t = 512)]
        window: usize,
        /// Tiers the in-process workers serve (the batch runs on `container`).
        #[arg(long, value_delimiter = ',', default_value = "container")]
        tiers: Vec<String>,
        /// Simulated run time of each job in milliseconds, slept for real (every run takes
        /// exactly this long, so the ideal wall time is jobs × duration / slots); 0 =
        /// zero-duration jobs.
        #[arg(long, default_value_t = 0)]
        duration_ms: u64,
        /// Submit to this running coordinator (e.g. `http://127.0.0.1:8700`, unauthenticated)
        /// instead of starting one in process; waits until --workers workers are live.
        #[arg(long, value_name = "URL")]
        coordinator: Option<String>,
        /// Live pages open on the batch while it runs, each as a browser opens it: the page,
        /// its script, then its live stream (`/live/events`) read to the verdict.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=1000))]
        live_pages: u16,
    },
    /// A replay corpus against the CLI's own dir replay, side by side: --slots CLI processes
    /// over even slices of --cassettes (the baseline), then `cowork run --replay --slots`
    /// through this binary, --rounds times; prints both rates and their ratio.
    Replay {
        /// The corpus: a dir of `*.cassette.json` (its slices are laid beside it, so session
        /// paths relative to it resolve the same).
        #[arg(long, value_name = "DIR")]
        cassettes: std::path::PathBuf,
        /// The cowork-harness program both sides run.
        #[arg(long, env = "COWORK_HARNESS_BIN", default_value = "cowork-harness")]
        harness_bin: std::path::PathBuf,
        /// CLI processes of the baseline, and slots of `cowork run`.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
        slots: u16,
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
        rounds: u32,
    },
    /// The raw pipeline baseline: per job exactly the durable work the fleet does (publish,
    /// pull, the stores, the events, ack, events consumed, result read back), through the same
    /// clients, with --workers × --slots jobs in flight and no coordinator or worker logic.
    Pipeline {
        #[command(flatten)]
        nats: crate::fleet_args::NatsArgs,
        #[command(flatten)]
        s3: crate::fleet_args::S3Args,
        /// Jobs of the batch, as for `bench fleet` (at most 20000).
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(4..=20_000))]
        jobs: u64,
        /// Worker connections (each with its own NATS and S3 clients).
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// Jobs in flight per worker connection.
        #[arg(long, default_value_t = 8)]
        slots: usize,
        /// Jobs published and not yet finished, at most (the fleet's admission window).
        #[arg(long, default_value_t = 512)]
        window: usize,
    },
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    fn words(args: &[&str]) -> Vec<std::ffi::OsString> {
        std::iter::once("cowork")
            .chain(args.iter().copied())
            .map(Into::into)
            .collect()
    }

    #[test]
    fn the_subcommand_whose_help_is_asked_for() {
        for (args, expect) in [
            (&["eval", "--help"][..], Some("eval")),
            (&["--log", "run", "rollup", "-h"], Some("rollup")),
            (&["--log=debug", "report", "--help"], Some("report")),
            (&["help", "trend"], Some("trend")),
            (&["help"], None),
            (&["--help"], None),
            (&["nonsense", "--help"], None),
        ] {
            assert_eq!(help_subcommand(&words(args)).as_deref(), expect, "{args:?}");
        }
    }

    #[test]
    fn every_example_names_a_subcommand_that_exists() {
        let command = Cli::command();
        for sub in command.get_subcommands() {
            let Some(examples) = examples(sub.get_name()) else {
                continue;
            };
            for line in examples.lines() {
                let words: Vec<&str> = line.split_whitespace().collect();
                let position = words
                    .iter()
                    .position(|word| *word == "cowork")
                    .unwrap_or_else(|| panic!("{line:?} does not run cowork"));
                assert_eq!(words.get(position + 1), Some(&sub.get_name()), "{line:?}");
                // Each example parses: its flags exist and take the values it gives them.
                let argv: Vec<&str> = words[position..]
                    .iter()
                    .copied()
                    .take_while(|word| !word.starts_with('>'))
                    .collect();
                // Settings given as `COWORK_*=…` before the command are not seen here.
                let sets_variables = position > 0;
                match Cli::try_parse_from(&argv) {
                    Ok(_) => {}
                    Err(error)
                        if sets_variables
                            && error.kind() == clap::error::ErrorKind::MissingRequiredArgument => {}
                    Err(error) => panic!("{line:?} does not parse: {error}"),
                }
            }
        }
        assert_eq!(examples("no-such-command"), None);
    }
}
