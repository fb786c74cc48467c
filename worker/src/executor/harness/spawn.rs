//! The harness's child command: cleared environment rebuilt from the allow-list, the job's work
//! dir as cwd, piped output and a session of its own (optionally under the guard).

use std::ffi::OsString;
use std::io;
use std::process::Stdio;

use cowork_schema::event::InfraClass;
use tokio::process::Command;

use super::HarnessExecutor;
use super::launch::ChildDirs;
use crate::executor::Classified;

/// The variable that switches the CLI's git-tracked staging (`0`: copy every file).
const GITSET_VAR: &str = "COWORK_HARNESS_GITSET";

impl HarnessExecutor {
    /// Builds the child command: cleared environment, empty cwd, piped output, own session.
    /// With a guard, the child is the guard and its stdin is the pipe it watches.
    pub(crate) fn command(&self, args: &[OsString], dirs: &ChildDirs<'_>) -> Command {
        let ChildDirs {
            work_dir,
            bundle_dir,
            tmpdir,
        } = *dirs;
        let program = &self.config.program;
        // A bare name is looked up on PATH; a relative path with a directory part would be
        // ambiguous once the cwd is the work dir, so it is made absolute against ours.
        let program = if program.is_relative() && program.components().count() > 1 {
            std::path::absolute(program).unwrap_or_else(|_| program.clone())
        } else {
            program.clone()
        };
        let mut command = match &self.config.guard {
            None => {
                let mut command = Command::new(program);
                command.stdin(Stdio::null());
                command
            }
            Some(guard) => {
                let mut command = Command::new(guard);
                command
                    .arg(crate::executor::guard::GUARD_SUBCOMMAND)
                    .arg(format!(
                        "{}{}",
                        crate::executor::guard::GRACE_OPTION,
                        self.config.stop_grace.as_millis()
                    ));
                if let Some(temp_root) = tmpdir.parent() {
                    let mut option = OsString::from(crate::executor::guard::TEMP_ROOT_OPTION);
                    option.push(temp_root);
                    command.arg(option);
                }
                command.arg(program).stdin(Stdio::piped());
                command
            }
        };
        command
            .args(args)
            .current_dir(work_dir)
            .env_clear()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A safety net only: the group is killed explicitly on every path below.
            .kill_on_drop(true);
        for name in &self.config.passthrough_env {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        // The CLI stages only git-tracked skill and plugin files when they lie in a git work
        // tree, and refuses a dir with none. The bundle cache gives each unpacked bundle an
        // index of its own (`bundle_cache::index_with_git`); a bundle without one (git was
        // missing) may lie inside the user's tree, where git would see it as untracked, so git
        // mode is switched off for it, unless the operator set the variable themselves.
        if std::env::var_os(GITSET_VAR).is_none() && !bundle_dir.join(".git").is_dir() {
            command.env(GITSET_VAR, "0");
        }
        for (name, value) in &self.config.extra_env {
            command.env(name, value);
        }
        // Each job's own temp dir (see `job_temp`): set last, so nothing shares it.
        command.env("TMPDIR", tmpdir);
        start_new_session(&mut command);
        command
    }

    /// Why the harness (or its guard) could not be started: nothing was spent.
    pub(super) fn spawn_failure(&self, err: &io::Error) -> Classified {
        let message = match &self.config.guard {
            None => format!(
                "cannot start harness program {}: {err}",
                self.config.program.display()
            ),
            Some(guard) => format!(
                "cannot start the harness guard {} (for harness program {}): {err}",
                guard.display(),
                self.config.program.display()
            ),
        };
        Classified::Infra {
            class: InfraClass::Spawn,
            message,
        }
    }

    /// The `PATH` the harness gets: an extra variable, else the worker's own when it is
    /// passed through.
    pub fn child_path(&self) -> Option<OsString> {
        if let Some((_, value)) = self
            .config
            .extra_env
            .iter()
            .find(|(name, _)| name == "PATH")
        {
            return Some(OsString::from(value));
        }
        self.config
            .passthrough_env
            .iter()
            .any(|name| name == "PATH")
            .then(|| std::env::var_os("PATH"))
            .flatten()
    }
}

/// Makes the child the leader of a new session and process group before it execs.
#[allow(unsafe_code)]
fn start_new_session(command: &mut Command) {
    // SAFETY: the closure runs in the forked child between fork and exec. It calls only
    // setsid(2) and reads errno, both async-signal-safe, allocates nothing and touches no
    // state shared with the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
