//! The `cowork` binary: argument parsing, tracing set-up, dispatch and exit codes. Decisions
//! about jobs, batches and verdicts live in the library crates; the binary stays thin.
//!
//! Modules:
//! - `args`, `fleet_args`: every flag once, with its `COWORK_*` variable and help.
//! - `commands`: one module per subcommand; each is a leaf (no command uses another).
//! - `batch_input`: the command line's side of batch intake (`cowork_coordinator::intake`
//!   decides), the executor flags and the harness pre-flight.
//! - `batch_source`: how a command finds the batch it was given (id, dir, `latest~N`).
//! - `batch_compare`: two decided batches unit by unit (`diff`, `report --compare`).
//! - `dry_run`: the plan and estimate `--dry-run` prints.
//! - `quarantine`: today's date and the quarantine file, from the working tree or a git ref.
//! - `embedded`: the in-process fleet `run`, `eval` and `resume` use.
//! - `connect`: flags, environment and secret files → connected ports and API clients.
//! - `follow`: following a submitted batch to its end.
//! - `interrupts`: Ctrl-C and SIGTERM, counted.
//! - `progress`, `summary`: the stderr progress line and the end-of-batch table;
//!   `spend_lines` its lines about the whole cost (model and sandbox spend).
//! - `text`: counted nouns and aligned tables.
//! - `exit`: the errors a command ends with and the exit codes they map to.
//! - `telemetry`: tracing set-up, OTLP export, the worker's `/metrics`.
//! - `log_scrub`: the stderr log's writer, which replaces every known secret value.

mod args;
mod batch_compare;
mod batch_input;
mod batch_source;
mod commands;
mod connect;
mod dry_run;
mod embedded;
mod exit;
mod fleet_args;
mod follow;
mod harness_process;
mod interrupts;
mod log_scrub;
mod notify;
mod progress;
mod quarantine;
mod share_lines;
mod spend_lines;
mod summary;
mod summary_reasons;
mod telemetry;
mod text;
mod writable_dirs;

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _};

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    // `cowork __harness-guard <harness> <args…>` is the guard the harness executor starts
    // around each harness process: no runtime, no tracing, no argument parsing of its own.
    let mut raw_args = std::env::args_os();
    if raw_args
        .nth(1)
        .is_some_and(|arg| arg == cowork_worker::executor::guard::GUARD_SUBCOMMAND)
    {
        cowork_worker::executor::guard::run_guard(raw_args);
    }
    quiet_on_closed_stdout();
    let matches = match Cli::command().try_get_matches() {
        Ok(matches) => matches,
        Err(error) => return parse_failed(&error),
    };
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => return parse_failed(&error),
    };
    if let (Command::Resume(args), Some(("resume", typed))) =
        (&mut cli.command, matches.subcommand())
    {
        args.note_command_line(typed);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: starting the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    // The OTLP exporter's gRPC channel is built on the runtime, so it is installed inside it.
    let telemetry = {
        let _runtime_context = runtime.enter();
        let mut secrets = log_scrub::known_secret_values(None);
        secrets.extend(notify::secret_to_scrub(&cli.command));
        telemetry::install(&cli.log, telemetry::service_name(&cli.command), &secrets)
    };
    // With `--output-format json`, a failure still prints an error envelope on stdout
    // (harness-behaviour.md#envelope-error), so scripts that parse stdout always get one JSON line.
    let json_command = match &cli.command {
        Command::Run(args) if args.output_format == args::OutputFormat::Json => {
            Some(args.mode.batch_mode().envelope_command())
        }
        Command::Rollup(args) if args.output_format == args::OutputFormat::Json => Some("run"),
        Command::Resume(args) if args.output_format == args::OutputFormat::Json => Some("run"),
        Command::Submit(args) if args.watch && args.output_format == args::OutputFormat::Json => {
            Some(args.mode.batch_mode().envelope_command())
        }
        _ => None,
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => commands::run::run(*args).await,
            Command::Eval(args) => commands::eval::run(*args).await,
            Command::Rollup(args) => commands::rollup::run(args).await,
            Command::Worker(args) => commands::worker::run(*args).await,
            Command::Coordinator(args) => commands::coordinator::run(*args).await,
            Command::Submit(args) => commands::remote::submit(*args).await,
            Command::Status(args) => {
                commands::remote::status(&args.client, &args.batch, args.output_format).await
            }
            Command::Watch(args) => commands::remote::watch(&args).await,
            Command::Cancel(args) => {
                commands::remote::cancel(&args.client, &args.batch, args.kill_running).await
            }
            Command::Resume(args) => commands::resume::run(args).await,
            Command::Pause(args) => commands::steer::pause(&args).await,
            Command::ResumeDispatch(args) => commands::steer::resume_dispatch(&args).await,
            Command::Adjust(args) => commands::steer::adjust(&args).await,
            Command::Results(args) => {
                commands::remote::results(&args.client, &args.batch, args.download.as_deref()).await
            }
            Command::Report(args) => commands::report::run(args).await,
            Command::Workers(args) => {
                commands::remote::workers(&args.client, args.output_format).await
            }
            Command::Bench(args) => commands::bench::run(args).await,
            Command::NotifyTest(args) => commands::notify_test::run(&args).await,
            Command::Batches(args) => commands::batches::list(args).await,
            Command::Diff(args) => commands::diff::run(args).await,
            Command::Trend(args) => commands::trend::trend(args).await,
        }
    });
    telemetry.shutdown();
    exit::exit_code(result, json_command)
}

/// Makes a closed stdout (`cowork run --help | head -1`) end the process quietly with exit 0,
/// as `cat` or `rg` do, instead of a "Broken pipe" panic, exit 101 and a backtrace. Every
/// command prints with `println!`, which panics when stdout is gone; one hook here covers them
/// all, so no command needs to thread a writer through. Any other panic is reported as before.
fn quiet_on_closed_stdout() {
    let report_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let closed_stdout = info.payload_as_str().is_some_and(|message| {
            message.starts_with("failed printing to stdout") && message.contains("Broken pipe")
        });
        if closed_stdout {
            std::process::exit(0);
        }
        report_panic(info);
    }));
}

/// Prints clap's message for arguments that did not parse, or the help that was asked for,
/// followed by the subcommand's examples exactly as written (see [`args::examples`]).
fn parse_failed(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = error.print();
    if error.kind() == ErrorKind::DisplayHelp {
        let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
        if let Some(examples) = args::help_subcommand(&argv).and_then(|name| args::examples(&name))
        {
            println!("\nExamples:");
            for line in examples.lines() {
                println!("  {line}");
            }
        }
    }
    ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2))
}
