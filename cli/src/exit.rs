//! How a command ends: the errors it can fail with, how they are printed, and the exit codes
//! they map to (harness-behaviour.md#exit-codes: 0 pass, 1 verdict fail, 2 usage
//! or error).

use std::process::ExitCode;

use cowork_core::safe_text::for_terminal_lines;

use crate::log_scrub::scrub_known;

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

/// The error envelope of harness-behaviour.md#envelope-error for a command that failed before it
/// had results.
fn error_envelope(command: &str, category: &str, message: String) -> String {
    let mut envelope = cowork_schema::envelope::Envelope::new("unknown", command);
    envelope.error = Some(cowork_schema::envelope::EnvelopeError {
        category: category.to_owned(),
        message,
        hint: None,
    });
    envelope.to_line()
}

/// Prints an error once and maps a command's result to the process exit code. With
/// `json_command` set (`--output-format json`), an error envelope also goes to stdout.
pub fn exit_code(result: Result<i32, CliError>, json_command: Option<&str>) -> ExitCode {
    if let (Some(command), Err(error)) = (json_command, &result) {
        let (category, message) = match error {
            CliError::Usage(problems) => ("usage", scrub_known(&problems.join("; "))),
            CliError::Failed(error) => ("runtime", scrub_known(&format!("{error:#}"))),
            CliError::Cancelled => ("cancelled", "the batch was cancelled".to_owned()),
        };
        println!("{}", error_envelope(command, category, message));
    }
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(2)),
        // The reader of stdout is gone (`cowork report latest | head -1`): nobody is left to
        // tell, so the command ends quietly, like one whose `println!` met a closed pipe.
        Err(CliError::Failed(error)) if is_closed_stdout(&error) => ExitCode::SUCCESS,
        Err(CliError::Usage(problems)) => {
            for problem in &problems {
                eprintln!("error: {}", for_terminal_lines(&scrub_known(problem)));
            }
            if problems.len() > 1 {
                eprintln!("{} problems; nothing was run", problems.len());
            }
            ExitCode::from(2)
        }
        Err(CliError::Failed(error)) => {
            eprintln!(
                "error: {}",
                for_terminal_lines(&scrub_known(&format!("{error:#}")))
            );
            ExitCode::from(2)
        }
        Err(CliError::Cancelled) => {
            eprintln!("cancelled");
            ExitCode::from(130)
        }
    }
}

/// Whether `error` was caused by writing to a pipe whose reader is gone.
fn is_closed_stdout(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
