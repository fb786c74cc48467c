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
//!   stops the job the way the worker would have: SIGTERM to the harness (the real CLI removes
//!   its proxy container and Docker networks only on SIGINT/SIGTERM), a bounded grace for that
//!   cleanup (`--grace-ms=N`, given by the executor), then SIGKILL of its whole process group,
//!   itself included.
//! - SIGTERM and SIGINT sent to the guard (the executor stops a job by signalling the group's
//!   leader) are forwarded to the harness, so the harness, not the guard, decides how to end.
//!
//! A parent-death signal (`prctl(PR_SET_PDEATHSIG)`) was not used: it is Linux-only, it fires
//! when the *thread* that spawned the child exits (tokio retires idle blocking threads), and it
//! reaches only the one process that set it, not the harness's children.

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The hidden first argument that turns the `cowork` binary into a guard.
pub const GUARD_SUBCOMMAND: &str = "__harness-guard";

/// Exit code of a guard that could not start the harness (a shell's "command not found").
pub const SPAWN_FAILED_EXIT_CODE: i32 = 127;

/// How the guard's stderr begins when it could not start the harness; the executor reads it
/// back to report a harness that never started (nothing was spent).
pub const SPAWN_FAILED_PREFIX: &str = "cowork harness guard: cannot start ";

/// The guard's option naming how long the harness gets between SIGTERM and SIGKILL when the
/// worker died: `--grace-ms=<milliseconds>`, before the program.
pub const GRACE_OPTION: &str = "--grace-ms=";

/// The guard's option naming the job's temp root (see `job_temp`), which it removes when the
/// worker died and cannot: `--temp-root=<dir>`, before the program. Only a directory named
/// like a job temp root is removed.
pub const TEMP_ROOT_OPTION: &str = "--temp-root=";

/// Grace when the executor gave none (a guard started by hand).
const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// Set once the worker is gone: the harness was sent SIGTERM and, when it exits, the guard
/// kills what is left of the group instead of reporting to a parent that is not there.
static PARENT_GONE: AtomicBool = AtomicBool::new(false);

/// Runs the guard with the arguments after [`GUARD_SUBCOMMAND`]: optionally
/// [`GRACE_OPTION`], then the harness program and its arguments. Never returns: the process
/// ends as the harness ended.
pub fn run_guard(args: impl Iterator<Item = OsString>) -> ! {
    let mut args = args.peekable();
    let mut grace = DEFAULT_GRACE;
    let mut temp_root = None;
    while let Some(option) = args.peek().and_then(|arg| arg.to_str()) {
        if let Some(value) = option.strip_prefix(GRACE_OPTION) {
            let Ok(grace_ms) = value.parse::<u64>() else {
                eprintln!(
                    "cowork harness guard: {GRACE_OPTION} takes whole milliseconds (got {value:?})"
                );
                std::process::exit(2);
            };
            grace = Duration::from_millis(grace_ms);
        } else if let Some(value) = option.strip_prefix(TEMP_ROOT_OPTION) {
            temp_root = Some(PathBuf::from(value));
        } else {
            break;
        }
        args.next();
    }
    let Some(program) = args.next() else {
        eprintln!(
            "usage: cowork {GUARD_SUBCOMMAND} [{GRACE_OPTION}<ms>] [{TEMP_ROOT_OPTION}<dir>] <program> [args…] (started by the harness executor, not by hand)"
        );
        std::process::exit(2);
    };
    // Blocked before any thread starts, so every thread inherits the mask and only the
    // forwarding thread below receives them. A child inherits the mask too, so the harness
    // unblocks them before it execs (`unblock_in_child`): the CLI must see SIGTERM.
    let stop_signals = block_stop_signals();
    // The harness inherits the guard's environment, working directory, stdout and stderr (the
    // executor prepared all four) and its process group; only the pipe on stdin is the guard's.
    let mut harness_command = Command::new(&program);
    harness_command.args(args).stdin(Stdio::null());
    if let Some(stop_signals) = stop_signals {
        unblock_in_child(&mut harness_command, stop_signals);
    }
    let mut harness = match harness_command.spawn() {
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
    if let Some(stop_signals) = stop_signals {
        // Detached: it waits for signals for the guard's whole life.
        std::thread::spawn(move || forward_stop_signals(&stop_signals, harness_pid));
    }
    // Detached on purpose: the thread blocks on stdin for the guard's whole life and ends with
    // the process; if it fires, it ends the process itself.
    let orphan_temp_root = temp_root.clone();
    std::thread::spawn(move || {
        wait_for_parent_exit(&mut io::stdin().lock());
        PARENT_GONE.store(true, Ordering::SeqCst);
        signal_harness(harness_pid, libc::SIGTERM);
        // Sleeping is the grace itself: the harness's own exit ends the wait early (the main
        // thread then kills the group), else the group is killed when it runs out.
        std::thread::sleep(grace);
        remove_temp_root(orphan_temp_root.as_deref());
        kill_job(harness_pid);
    });
    match harness.wait() {
        // With the worker gone nobody reads the status, removes the job's temp root or kills
        // the group: the harness has cleaned up, so its temp root and what is left of its
        // group (docker clients, agents) go now. The root goes first, as the guard dies with
        // its group.
        Ok(_) if PARENT_GONE.load(Ordering::SeqCst) => {
            remove_temp_root(temp_root.as_deref());
            kill_job(harness_pid)
        }
        Ok(status) => exit_like(status),
        Err(error) => {
            eprintln!("cowork harness guard: waiting for the harness failed: {error}");
            kill_job(harness_pid)
        }
    }
}

/// Removes the job's temp root, if it is named like one (a guard given another dir by mistake
/// removes nothing).
fn remove_temp_root(root: Option<&Path>) {
    let Some(root) = root else { return };
    let named_like_one = root
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with(super::job_temp::JOB_TEMP_PREFIX));
    if named_like_one && let Err(error) = std::fs::remove_dir_all(root) {
        eprintln!(
            "cowork harness guard: removing the job's temp root {} failed: {error}",
            root.display()
        );
    }
}

/// Blocks SIGTERM and SIGINT in the calling thread (and every thread it starts later); the
/// blocked set, for `sigwait`, or `None` when blocking failed (signals then act as usual).
#[allow(unsafe_code)]
fn block_stop_signals() -> Option<libc::sigset_t> {
    // SAFETY: sigset_t is plain data that sigemptyset initialises before any other use;
    // sigaddset and pthread_sigmask only read and write the set we pass by pointer.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        (libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) == 0).then_some(set)
    }
}

/// Makes `command`'s child unblock `set` between fork and exec.
#[allow(unsafe_code)]
fn unblock_in_child(command: &mut Command, set: libc::sigset_t) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child between fork and exec and calls only
    // sigprocmask(2), which is async-signal-safe, on a set copied into the closure; it
    // allocates nothing and touches no state shared with the parent.
    unsafe {
        command.pre_exec(move || {
            if libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Waits for the blocked stop signals forever and sends each to the harness.
#[allow(unsafe_code)]
fn forward_stop_signals(set: &libc::sigset_t, harness_pid: u32) {
    loop {
        let mut signal: libc::c_int = 0;
        // SAFETY: sigwait reads the set and writes one int, both owned by this frame.
        if unsafe { libc::sigwait(set, &mut signal) } == 0 {
            signal_harness(harness_pid, signal);
        }
    }
}

/// Sends `signal` to the harness alone (not its group: the CLI's own handler decides what
/// its children get).
#[allow(unsafe_code)]
fn signal_harness(harness_pid: u32, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(harness_pid) {
        // SAFETY: kill(2) takes plain integers; `pid` is our own child's. Once the child is
        // reaped the guard exits at once, so the pid is never another process's.
        unsafe { libc::kill(pid, signal) };
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
