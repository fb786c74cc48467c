//! `--notify` and its secret on the command line: the hooks checked (a bad URL is a usage
//! error, exit 2), the secret read from its file or `COWORK_NOTIFY_SECRET`, and the
//! notifier of `cowork_coordinator::notify` that tells them.

use std::path::Path;

use cowork_coordinator::notify::{Notifier, NotifyConfig, ReportLink, check_hook_url};
use cowork_fabric::secret::Secret;

use crate::exit::CliError;

/// Every problem with the hook URLs, all at once.
pub fn check_urls(urls: &[String]) -> Result<(), CliError> {
    let problems: Vec<String> = urls
        .iter()
        .filter_map(|url| check_hook_url(url).err())
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::Usage(problems))
    }
}

/// The notification secret: the file's first line, else `COWORK_NOTIFY_SECRET`; `None` when
/// neither is given. An unreadable or empty file is a usage error.
pub fn read_secret(file: Option<&Path>) -> Result<Option<Secret>, CliError> {
    crate::fleet_args::read_secret("COWORK_NOTIFY_SECRET", file)
        .map(|secret| secret.map(Secret::new))
        .map_err(|problem| CliError::usage(format!("--notify-secret-file: {problem}")))
}

/// What tells `urls` (checked) of a batch's moments, signed with the secret of `secret_file`
/// or the environment; `None` without hooks.
pub fn notifier(
    urls: &[String],
    secret_file: Option<&Path>,
    report: ReportLink,
) -> Result<Option<Notifier>, CliError> {
    Ok(notify_config(urls, secret_file, report)?.map(Notifier::new))
}

/// The settings of [`notifier`]; `None` without hooks.
pub fn notify_config(
    urls: &[String],
    secret_file: Option<&Path>,
    report: ReportLink,
) -> Result<Option<NotifyConfig>, CliError> {
    if urls.is_empty() {
        return Ok(None);
    }
    check_urls(urls)?;
    let secret = read_secret(secret_file)?;
    if secret.is_none() {
        tracing::warn!(
            "notifications are sent unsigned: give --notify-secret-file or COWORK_NOTIFY_SECRET to sign them"
        );
    }
    Ok(Some(NotifyConfig {
        urls: urls.to_vec(),
        secret,
        report,
        ..NotifyConfig::default()
    }))
}

/// The secret of a `--notify-secret-file` given on the command line (a file named by
/// `COWORK_NOTIFY_SECRET_FILE` is read by `log_scrub` itself): the log scrubber replaces it
/// wherever it would appear.
pub fn secret_to_scrub(command: &crate::args::Command) -> Option<String> {
    use crate::args::Command;
    let file = match command {
        Command::Run(args) => args.notify.notify_secret_file.as_deref(),
        Command::Eval(args) => args.notify.notify_secret_file.as_deref(),
        Command::Coordinator(args) => args.notify.notify_secret_file.as_deref(),
        Command::NotifyTest(args) => args.notify_secret_file.as_deref(),
        _ => None,
    }?;
    let text = std::fs::read_to_string(file).ok()?;
    Some(text.trim().to_owned()).filter(|secret| !secret.is_empty())
}
