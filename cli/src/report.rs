//! Error rendering and exit codes (contract §7.3: 0 pass, 1 verdict fail, 2 usage or error).

use std::process::ExitCode;

/// What a command can fail with, by the exit code it maps to.
#[derive(Debug)]
pub enum CliError {
    /// Bad input: flags, files, fields. Every problem is listed; nothing was dispatched or
    /// written. Exit 2.
    Usage(Vec<String>),
    /// The command could not complete (IO, store, runtime). Exit 2.
    Failed(anyhow::Error),
    /// The batch was cancelled (Ctrl-C or SIGTERM). Exit 130 like a shell.
    Cancelled,
}

impl From<anyhow::Error> for CliError {
    fn from(error: anyhow::Error) -> Self {
        CliError::Failed(error)
    }
}

impl CliError {
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError::Usage(vec![message.into()])
    }
}

/// Prints an error once and maps a command's result to the process exit code.
pub fn exit_code(result: Result<i32, CliError>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(2)),
        Err(CliError::Usage(problems)) => {
            for problem in &problems {
                eprintln!("error: {problem}");
            }
            if problems.len() > 1 {
                eprintln!("{} problems; nothing was run", problems.len());
            }
            ExitCode::from(2)
        }
        Err(CliError::Failed(error)) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
        Err(CliError::Cancelled) => {
            eprintln!("cancelled");
            ExitCode::from(130)
        }
    }
}
