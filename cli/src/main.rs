//! The `cowork` binary: argument parsing, tracing set-up, dispatch and exit codes. Decisions
//! about jobs, batches and verdicts live in the library crates (style rule 4).

mod args;
mod commands;
mod progress;
mod report;
mod summary;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    install_tracing(&cli.log);
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
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => commands::run::run(*args).await,
            Command::Rollup(args) => commands::rollup::run(args).await,
            Command::Bench(args) => commands::bench::run(args),
        }
    });
    report::exit_code(result)
}

fn install_tracing(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
