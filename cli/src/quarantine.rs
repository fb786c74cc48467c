//! The edge of quarantine: today's date from this machine's clock, and the quarantine file's
//! text from the working tree or from a git ref (`--quarantine-ref`). What the text means is
//! decided by intake and the core, which get both as plain values.

use std::path::{Path, PathBuf};
use std::process::Command;

use cowork_coordinator::intake::quarantine::QuarantineText;
use cowork_schema::quarantine::{Date, QUARANTINE_FILE};

use crate::args::QuarantineArgs;
use crate::exit::CliError;

/// Largest quarantine file read.
const MAX_QUARANTINE_BYTES: usize = 1024 * 1024;

/// Today (UTC) by this machine's clock: the one clock reading expiry is judged with.
pub fn today() -> Date {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        });
    Date::from_unix_seconds(seconds)
}

/// The quarantine file the flags name, read: `None` with `--no-quarantine`, or when the default
/// file (`quarantine.yaml` at `bundle_root`) does not exist, or when `--quarantine-ref` has no
/// such file (then every unit gates, and a note says so). A file named with `--quarantine` that
/// cannot be read, or a ref that does not exist, is a usage error.
pub fn read_quarantine(
    args: &QuarantineArgs,
    bundle_root: &Path,
    cwd: &Path,
) -> Result<Option<QuarantineText>, CliError> {
    if args.no_quarantine {
        return Ok(None);
    }
    let (path, source) = match &args.quarantine {
        Some(path) => (cwd.join(path), path.display().to_string()),
        None => (
            cwd.join(bundle_root).join(QUARANTINE_FILE),
            QUARANTINE_FILE.to_owned(),
        ),
    };
    let today = today();
    if let Some(reference) = &args.quarantine_ref {
        return read_from_ref(reference, &path, today);
    }
    if args.quarantine.is_none() && !path.exists() {
        return Ok(None);
    }
    let text = cowork_schema::load::read_text(&path, MAX_QUARANTINE_BYTES).map_err(|error| {
        CliError::usage(format!(
            "{error}; give a readable quarantine file to --quarantine, or pass --no-quarantine"
        ))
    })?;
    Ok(Some(QuarantineText {
        source,
        file: path,
        text,
        today,
    }))
}

/// `git show REF:./<file>` run in the file's directory: the file as the ref has it.
fn read_from_ref(
    reference: &str,
    path: &Path,
    today: Date,
) -> Result<Option<QuarantineText>, CliError> {
    let dir = path
        .parent()
        .filter(|dir| dir.is_dir())
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            CliError::usage(format!(
                "--quarantine-ref: {} is not in a directory of a git work tree; run from the \
                 repository or pass --quarantine with a path inside it",
                path.display()
            ))
        })?;
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| QUARANTINE_FILE.to_owned());
    let git = |args: &[&str]| Command::new("git").arg("-C").arg(&dir).args(args).output();
    let verified = git(&[
        "rev-parse",
        "--verify",
        "--quiet",
        &format!("{reference}^{{commit}}"),
    ])
    .map_err(|error| CliError::usage(format!("--quarantine-ref: cannot run git: {error}")))?;
    if !verified.status.success() {
        return Err(CliError::usage(format!(
            "--quarantine-ref: {reference:?} is not a commit of the repository at {}; fetch it \
             first (e.g. git fetch origin main) or name an existing ref",
            dir.display()
        )));
    }
    let prefix = git(&["rev-parse", "--show-prefix"])
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_default();
    let source = format!("{reference}:{prefix}{name}");
    let shown = git(&["show", &format!("{reference}:./{name}")])
        .map_err(|error| CliError::usage(format!("--quarantine-ref: cannot run git: {error}")))?;
    if !shown.status.success() {
        eprintln!("note: {source} does not exist: no unit is quarantined, every unit gates");
        return Ok(None);
    }
    if shown.stdout.len() > MAX_QUARANTINE_BYTES {
        return Err(CliError::usage(format!(
            "{source}: larger than the limit of {MAX_QUARANTINE_BYTES} bytes"
        )));
    }
    let text = String::from_utf8(shown.stdout)
        .map_err(|_| CliError::usage(format!("{source}: not valid UTF-8")))?;
    Ok(Some(QuarantineText {
        source: source.clone(),
        file: PathBuf::from(source),
        text,
        today,
    }))
}
