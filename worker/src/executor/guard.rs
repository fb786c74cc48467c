//! The harness guard: a small supervisor process between the worker and one harness process,
//! so that the harness's whole process group dies when the worker dies, however it dies.
//!
//! A harness started directly by the worker survives a `kill -9` of the worker: it is
//! re-parented to init and keeps spending. The real harness also starts children of its own
//! (docker, node), so killing only the direct child would not be enough either. The guard
//! closes both gaps with one mechanism that works on every Unix:
//!
//! - The executor starts `<guard program> __harness-guard <harness> <args…>` as the leader of a
//!   new session and process group (`setsid`), with its stdin a pipe whose write end only the
//!   worker holds (the worker's end is close-on-exec, so no other child inherits it).
//! - The guard starts the harness in its own process group (the harness's children inherit
//!   it), then waits for the harness and forwards its exit status: the same code, or death by
//!   the same signal.
//! - A thread of the guard reads its stdin. The kernel closes the write end when the worker
//!   exits for any reason, including SIGKILL; the read then returns end-of-file and the guard
//!   kills its whole process group, itself included.
//!
//! A parent-death signal (`prctl(PR_SET_PDEATHSIG)`) was not used: it is Linux-only, it fires
//! when the *thread* that spawned the child exits (tokio retires idle blocking threads), and it
//! reaches only the one process that set it, not the harness's children.

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};

/// The hidden first argument that turns the `cowork` binary into a guard.
pub const GUARD_SUBCOMMAND: &str = "__harness-guard";

/// Exit code of a guard that could not start the harness (a shell's "command not found").
pub const SPAWN_FAILED_EXIT_CODE: i32 = 127;

/// How the guard's stderr begins when it could not start the harness; the executor reads it
/// back to report a harness that never started (nothing was spent).
pub const SPAWN_FAILED_PREFIX: &str = "cowork harness guard: cannot start ";

/// Runs the guard with the arguments after [`GUARD_SUBCOMMAND`]: the harness program and its
/// arguments. Never returns: the process ends as the harness ended.
pub fn run_guard(mut args: impl Iterator<Item = OsString>) -> ! {
    let Some(program) = args.next() else {
        eprintln!(
            "usage: cowork {GUARD_SUBCOMMAND} <program> [args…] (started by the harness executor, not by hand)"
        );
        std::process::exit(2);
    };
    // The harness inherits the guard's environment, working directory, stdout and stderr (the
    // executor prepared all four) and its process group; only the pipe on stdin is the guard's.
    let mut harness = match Command::new(&program)
        .args(args)
        .stdin(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            eprintln!(
                "{SPAWN_FAILED_PREFIX}{}: {error}",
                program.to_string_lossy()
            );
            std::process::exit(SPAWN_FAILED_EXIT_CODE);
        }
    };
    let harness_pid = harness.id();
    // Detached on purpose: the thread blocks on stdin for the guard's whole life and ends with
    // the process; if it fires, it ends the process itself.
    std::thread::spawn(move || {
        wait_for_parent_exit(&mut io::stdin().lock());
        kill_job(harness_pid);
    });
    match harness.wait() {
        Ok(status) => exit_like(status),
        Err(error) => {
            eprintln!("cowork harness guard: waiting for the harness failed: {error}");
            kill_job(harness_pid)
        }
    }
}

/// Returns once `pipe` reports end-of-file or fails: the worker, the only writer, is gone.
fn wait_for_parent_exit(pipe: &mut dyn Read) {
    let mut buffer = [0u8; 64];
    loop {
        match pipe.read(&mut buffer) {
            // Nothing is ever written; bytes would only mean a misused guard, not a dead parent.
            Ok(n_read) if n_read > 0 => {}
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Ok(_) | Err(_) => return,
        }
    }
}

/// Kills the job: the guard's whole process group when the guard leads one (it was started
/// with `setsid`), else only the harness, and then the guard.
#[allow(unsafe_code)]
fn kill_job(harness_pid: u32) -> ! {
    let guard_pid = std::process::id();
    // SAFETY: getpgrp(2) takes no arguments, cannot fail and touches no memory.
    let group = unsafe { libc::getpgrp() };
    let leads_group = libc::pid_t::try_from(guard_pid).is_ok_and(|pid| pid == group);
    if leads_group && group > 1 {
        // SAFETY: kill(2) takes plain integers. `-group` addresses exactly the group this
        // guard leads (checked above, and never 0 or 1), which holds the harness and its
        // children; the guard dies with it.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    } else if let Ok(pid) = libc::pid_t::try_from(harness_pid) {
        // Started by hand, outside a group of its own: killing the group would reach the
        // caller's shell, so only the harness is killed.
        // SAFETY: kill(2) takes plain integers; `pid` is our own child's, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    std::process::exit(SPAWN_FAILED_EXIT_CODE)
}

/// Ends the guard the way the harness ended: with its exit code, or killed by its signal.
#[allow(unsafe_code)]
fn exit_like(status: ExitStatus) -> ! {
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    let Some(signal) = status.signal() else {
        // Unix reports either a code or a signal for a process that ended.
        std::process::exit(SPAWN_FAILED_EXIT_CODE);
    };
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit(2) reads the struct we pass by reference for the duration of the call;
    // signal(2) installs the default action (no handler code of ours); raise(3) then delivers
    // the signal to this thread. The core limit is zeroed so a forwarded SIGSEGV or SIGABRT
    // does not write a core file of the guard.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    // Only a signal whose default action is not to terminate gets here, and no such signal
    // can have ended the harness; the shell's convention is the closest honest code.
    std::process::exit(128 + signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_watch_returns_on_end_of_file_after_reading_stray_bytes() {
        let mut pipe: &[u8] = b"stray bytes";
        wait_for_parent_exit(&mut pipe);
        assert!(pipe.is_empty(), "everything was read before end-of-file");
    }
}
