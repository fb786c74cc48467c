//! Command-line arguments: what the user typed, validated by clap, with no IO (each setting is
//! defined once, in its clap field).
//!
//! Each setting is declared once in this module: its long name, its `COWORK_*` variable and its
//! help text. The flags are grouped by command family (`batch`: the flags shared by the commands
//! that start a batch; `start`, `remote`, `stored`, `fleet`, `bench`); [`Cli`] and [`Command`]
//! here give `cowork --help` its order.

mod batch;
mod bench;
mod examples;
mod fleet;
mod remote;
mod start;
mod stored;

pub use batch::{
    AdmissionArgs, BatchArgs, ExecutorArg, ExecutorArgs, HarnessProcessArgs, ModeArgs,
    NotifyTestArgs, PricingArgs, PriorityArgs, QuarantineArgs, StallArgs,
};
pub use bench::{BenchArgs, BenchWhat, FairnessArgs};
pub use examples::examples;
pub use fleet::{CoordinatorArgs, K8sWorkerJobArgs, WorkerArgs, WorkerExecutorArg};
pub use remote::{
    AdjustArgs, BatchRefArgs, CancelArgs, ResultsArgs, ResumeArgs, SteerArgs, WorkersArgs,
};
pub use start::{EvalArgs, FailOnArg, RunArgs, SubmitArgs};
pub use stored::{
    BatchSourceArgs, BatchesArgs, DiffArgs, ReportArgs, ReportFormatArg, RollupArgs, TableFormat,
    TrendArgs,
};

use clap::{Parser, Subcommand, ValueEnum};

/// Cowork Fleet: run cowork-harness batches (--repeat, --matrix) on one machine or a fleet,
/// with the same rollups, verdicts and exit codes as the harness CLI.
#[derive(Debug, Parser)]
#[command(name = "cowork", version, propagate_version = true)]
#[command(
    after_help = "Exit codes: 0 the batch passed; 1 the batch verdict failed (also an \
interrupted batch re-judged by `cowork rollup`, and a watched batch cancelled before its \
verdict); 2 usage or input error (nothing was run), a store or coordinator that failed, or a \
single run (no --repeat or --matrix) that errored or stopped at an unanswered question; 3 a \
boundary error in a single run (the harness refused to stage a path: one outside its root, or a \
skill dir with no git-tracked file); 130 interrupted by Ctrl-C or SIGTERM before the batch was \
decided (`cowork resume <batch>` runs the rest). `cowork eval` has its own: cowork eval --help.\n\
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
    /// Compare two versions of a skill or plugin (arms A and B), the skill against no skill
    /// (--without-skill), or several drafts (--arm) on the same scenarios: paired, interleaved
    /// runs, then pass rates, the difference with its 95% interval (Tango's score interval),
    /// McNemar's score test, the smallest detectable difference and a verdict.
    #[command(
        after_help = "Each scenario runs --runs times per arm; run i of arm A is paired \
with run i of arm B, and jobs are admitted repeat-major with the arms alternating, so both arms \
meet the same conditions. Each arm's directory replaces the session's single \
plugins.local_plugins entry (same basename required), and --model replaces the session's model in \
both arms. --seed seeds the sim executor. The report goes to stderr (per scenario and overall: \
pass rate A and B, B - A with Tango's score interval at 1 - alpha, the p of McNemar's score test \
(no continuity correction) explained in words, \
the smallest difference the runs can detect, verdict) and to <store>/batches/<batch id>/eval.json; \
--output-format json also prints it as one JSON line on stdout. The interval and the verdict \
always agree: the interval excludes 0 exactly when the verdict is a difference.\n\n\
With --arm NAME=DIR (two to eight), every arm is compared with the control (--control) the same \
way, the overall p-values adjusted by Holm's method, and the gate reads each comparison. \
--dry-run prints what the planned runs can detect (and with --mde what they need); \
--sequential stops once the answer is clear; --batch-budget-usd caps model spend and sandbox \
minutes (--sandbox-price, --model-price).\n\n\
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
fails now), newly passing, failing, passing, new (only now), gone (only then). Flaky: the \
verdict flipped (PASS→FAIL or FAIL→PASS), or the runs of both batches passed and failed with a \
pass rate whose 95% interval (Wilson) straddles the later bar — the same rule as `cowork \
trend`; shown beside the verdict, never instead of it. A unit failing some runs but clearly \
below (or above) the bar is steady, not flaky. Past 40 units the table counts the steady \
units and lists what changed or is flaky, worst first, at most 15 (--all lists every unit)."
    )]
    Diff(DiffArgs),
    /// Pass rate and cost per unit over the last N batches that ran these scenarios, with a
    /// flaky flag.
    #[command(
        after_help = "<scenarios> is a scenario file, a directory of them, or a scenario \
name. Columns b1, b2, … are the batches, oldest first, named in the legend below the table. \
Flaky: the verdict flipped between batches shown (the flaky column shows PASS→FAIL→…), or \
the runs over them passed and failed with a pass rate whose 95% interval (Wilson) straddles \
the newest bar (`unsure 49–94% vs 80%`) — the same rule as `cowork diff`. Past 40 units the \
table counts the steady units and lists the flaky ones, worst first, at most 15 (--all lists \
every unit). --suggest-quarantine prints quarantine.yaml entries for the flaky units. \
History comes from each batch's stats.json, or its rollup.json for batches without one."
    )]
    Trend(TrendArgs),
    /// List the live workers of the fleet.
    Workers(WorkersArgs),
    /// Send a signed sample event to a webhook and print the status it answered (exit 0 on
    /// 2xx, 1 otherwise).
    #[command(name = "notify-test")]
    NotifyTest(NotifyTestArgs),
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

/// How results are printed on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// A summary table on stderr; nothing on stdout.
    Human,
    /// The envelope as one JSON line on stdout (the harness CLI's format); the summary still
    /// goes to stderr.
    Json,
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
