//! A new user's first runs: a missing or wrong harness stops `run` and `eval` before anything is
//! written (exit 2, a message naming the fixes), piped stderr carries no escape bytes, and the
//! smaller things a first run trips on — a session given as the target, typos in a scenario and
//! its session reported together, subfolders a directory target does not run, a simulation
//! rule that matches nothing, the same directory as both eval arms, plurals, and scratch
//! directories left behind.

use crate::support::{Output, Sandbox, cowork};

/// Checks the refusal of a batch for a missing harness: exit 2, the fixes named, nothing
/// written, no escape bytes.
fn check_no_harness(sandbox: &Sandbox, out: &Output) {
    out.expect_code(2);
    for fragment in [
        "cowork-harness not found",
        "--harness-bin",
        "COWORK_HARNESS_BIN",
        "--executor sim",
    ] {
        out.expect_stderr(fragment);
    }
    if sandbox.store().exists() {
        out.fail("a refused batch created the store");
    }
    if out.stderr.contains('\x1b') {
        out.fail("escape bytes in piped stderr");
    }
}

#[test]
fn a_missing_harness_stops_run_and_eval_before_anything_is_written() {
    let sandbox = Sandbox::with_project();
    let missing = sandbox.path().join("no-such-dir/cowork-harness");
    let missing = missing.to_str().expect("UTF-8");
    for repeat in [None, Some("5")] {
        let mut args = vec!["scenarios/report.yaml", "--harness-bin", missing];
        if let Some(n) = repeat {
            args.extend(["--repeat", n]);
        }
        let out = sandbox.run_batch(&args);
        check_no_harness(&sandbox, &out);
    }
    let store = sandbox.store();
    let out = cowork(
        sandbox.path(),
        &[
            "eval",
            "--a",
            "skills/v1/report",
            "--b",
            "skills/v2/report",
            "scenarios",
            "--harness-bin",
            missing,
            "--store",
            store.to_str().expect("UTF-8"),
        ],
    );
    check_no_harness(&sandbox, &out);
    // A bad flag and the missing harness are reported together.
    let out = sandbox.run_batch(&[
        "scenarios/report.yaml",
        "--harness-bin",
        missing,
        "--repeat",
        "1",
    ]);
    check_no_harness(&sandbox, &out);
    out.expect_stderr("--repeat").expect_stderr("2 problems");
}

#[test]
fn a_program_that_is_not_the_harness_is_refused() {
    let sandbox = Sandbox::with_project();
    sandbox.write("bin/not-harness", "#!/bin/sh\necho hello\n");
    let program = sandbox.path().join("bin/not-harness");
    make_executable(&program);
    let out = sandbox.run_batch(&[
        "scenarios/report.yaml",
        "--harness-bin",
        program.to_str().expect("UTF-8"),
    ]);
    out.expect_code(2)
        .expect_stderr("does not look like cowork-harness");
    out.expect_stderr("--executor sim");
    assert!(!sandbox.store().exists());
}

fn make_executable(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn piped_stderr_has_no_escape_bytes_and_counts_read_right() {
    let sandbox = Sandbox::with_project();
    // `--log info` makes the run log; a pipe gets no colour.
    let out = sandbox.run_batch(&[
        "scenarios/report.yaml",
        "--executor",
        "sim",
        "--log",
        "info",
    ]);
    out.expect_code(0);
    out.expect_stderr("1 job in 1 file with the sim executor, 4 slots");
    if out.stderr.contains('\x1b') {
        out.fail("escape bytes in piped stderr");
    }
    // The job's scratch dir and the empty dirs above it are gone.
    let work = sandbox.store().join("work");
    assert!(!work.exists(), "{} is left behind", work.display());
    let out = sandbox.run_batch(&[
        "scenarios",
        "--executor",
        "sim",
        "--repeat",
        "2",
        "--quiet",
        "--keep-work",
    ]);
    out.expect_code(0);
    assert!(work.exists(), "--keep-work keeps the scratch dirs");
}

#[test]
fn a_session_given_as_the_target_is_one_plain_error() {
    let sandbox = Sandbox::with_project();
    let out = sandbox.run_batch(&["sessions/report.yaml", "--executor", "sim"]);
    out.expect_code(2);
    out.expect_stderr("this is a session file, not a scenario");
    if out.stderr.contains("valid keys") || out.stderr.contains("problems") {
        out.fail("one error, not one per session key");
    }
}

#[test]
fn typos_in_a_scenario_and_its_session_are_reported_together() {
    let sandbox = Sandbox::with_project();
    sandbox.replace("scenarios/report.yaml", "baseline:", "baselne:");
    sandbox.replace("sessions/report.yaml", "model:", "modle:");
    let out = sandbox.run_batch(&["scenarios/report.yaml", "--executor", "sim"]);
    out.expect_code(2);
    out.expect_stderr("`baselne`")
        .expect_stderr("`modle`")
        .expect_stderr("2 problems");
}

#[test]
fn notes_for_subfolders_unmatched_sim_rules_and_the_same_arm_twice() {
    let sandbox = Sandbox::with_project();
    sandbox.copy_in(
        &sandbox.path().join("scenarios/report.yaml"),
        "scenarios/nightly/extra.yaml",
    );
    sandbox.replace(
        "scenarios/nightly/extra.yaml",
        "../sessions/",
        "../../sessions/",
    );
    sandbox.write(
        "profile.yaml",
        "rules:\n  - scenario: reprot\n    pass_rate: 0.1\n  - pass_rate: 1\n",
    );
    let out = sandbox.run_batch(&[
        "scenarios",
        "--executor",
        "sim",
        "--sim-profile",
        "profile.yaml",
        "--quiet",
    ]);
    out.expect_code(0);
    out.expect_stderr("subfolder nightly/ holds 1 YAML file that this batch does not run");
    out.expect_stderr("rule 1 (scenario: reprot) matches no job");
    if out.stderr.contains("rule 2") {
        out.fail("a rule without selectors matches every job");
    }
    let store = sandbox.store();
    let out = cowork(
        sandbox.path(),
        &[
            "eval",
            "--a",
            "skills/v1/report",
            "--b",
            "skills/v1/report/",
            "scenarios/report.yaml",
            "--executor",
            "sim",
            "--runs",
            "2",
            "--quiet",
            "--store",
            store.to_str().expect("UTF-8"),
        ],
    );
    out.expect_stderr("--a and --b are the same directory");
}

/// `cowork <args>` run with its stdout a pipe whose reader is already gone (`… | head -1`
/// after `head` exited): exit code and stderr.
fn with_closed_stdout(cwd: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cowork"))
        .args(args)
        .current_dir(cwd)
        .env_remove("COWORK_COORDINATOR")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("running cowork");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_closed_stdout_ends_every_command_quietly() {
    let sandbox = Sandbox::with_project();
    let store = sandbox.store().display().to_string();
    let run = sandbox.run_batch(&["scenarios/report.yaml", "--executor", "sim", "--quiet"]);
    run.expect_code(0);
    for args in [
        vec!["run", "--help"],
        vec!["report", "--help"],
        vec!["batches", "--store", &store],
        vec![
            "report", "latest", "--store", &store, "--format", "markdown",
        ],
    ] {
        let (code, stderr) = with_closed_stdout(sandbox.path(), &args);
        assert!(
            code == Some(0) && !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "cowork {args:?} with a closed stdout: exit {code:?}, stderr:\n{stderr}"
        );
    }
}

#[test]
fn repeat_one_says_to_leave_the_flag_out() {
    let sandbox = Sandbox::with_project();
    sandbox
        .run_batch(&[
            "scenarios/report.yaml",
            "--executor",
            "sim",
            "--repeat",
            "1",
        ])
        .expect_code(2)
        .expect_stderr("for a single run leave --repeat out");
}

#[test]
fn history_commands_honour_cowork_coordinator_and_a_missing_batch_names_the_way_out() {
    let sandbox = Sandbox::with_project();
    let store = sandbox.store().display().to_string();
    sandbox
        .run_batch(&["scenarios/report.yaml", "--executor", "sim", "--quiet"])
        .expect_code(0);
    // A coordinator nobody listens on: a command that honours the variable fails to reach it;
    // one that ignores it reads the local store and succeeds.
    let unreachable = "http://127.0.0.1:9";
    for args in [
        vec!["batches", "--store", &store],
        vec!["report", "latest", "--store", &store, "--format", "json"],
        vec!["diff", "latest", "latest", "--store", &store],
        vec!["trend", "scenarios/report.yaml", "--store", &store],
    ] {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cowork"));
        command
            .args(&args)
            .current_dir(sandbox.path())
            .env("COWORK_COORDINATOR", unreachable);
        let output = command.output().expect("running cowork");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.code() == Some(2) && stderr.contains("127.0.0.1:9"),
            "cowork {args:?} with COWORK_COORDINATOR={unreachable}: exit {:?}, stderr:\n{stderr}",
            output.status.code()
        );
    }
    // A fleet batch's id looked up in the local store: the error points at --coordinator,
    // and a typo of a stored id gets the id it is closest to.
    let listed = cowork(
        sandbox.path(),
        &["batches", "--store", &store, "--format", "json"],
    );
    listed.expect_code(0);
    let stored: String = listed
        .stdout
        .split('"')
        .find(|part| part.len() == 22 && part.as_bytes().get(8) == Some(&b'-'))
        .unwrap_or_else(|| listed.fail("no batch id in the listing"))
        .to_owned();
    let mut typo = stored.clone();
    let last = if typo.ends_with('0') { '1' } else { '0' };
    typo.pop();
    typo.push(last);
    cowork(sandbox.path(), &["report", &typo, "--store", &store])
        .expect_code(2)
        .expect_stderr(&format!("did you mean {stored}?"))
        .expect_stderr("--coordinator URL (or COWORK_COORDINATOR)");
}

#[test]
fn the_release_binary_carries_no_debug_info() {
    let manifest = std::fs::read_to_string(crate::support::workspace_root().join("Cargo.toml"))
        .expect("reading the workspace manifest");
    let release = manifest
        .split("\n[profile.release]\n")
        .nth(1)
        .expect("a [profile.release] section")
        .split("\n[")
        .next()
        .unwrap_or_default();
    assert!(
        release.lines().any(|line| line.trim() == "debug = false")
            && release
                .lines()
                .any(|line| line.trim() == "strip = \"debuginfo\""),
        "[profile.release] keeps debug info:\n{release}"
    );
}

/// `cowork run <args>` under `script`, so its stderr is a terminal; everything it printed.
fn run_on_a_terminal(sandbox: &Sandbox, args: &[&str], no_color: bool) -> String {
    let mut line = vec![env!("CARGO_BIN_EXE_cowork").to_owned(), "run".to_owned()];
    line.extend(args.iter().map(|arg| (*arg).to_owned()));
    line.extend(["--store".to_owned(), sandbox.store().display().to_string()]);
    let mut command = std::process::Command::new("script");
    command
        .args(["-qec", &line.join(" "), "/dev/null"])
        .current_dir(sandbox.path())
        .env_remove("NO_COLOR");
    if no_color {
        command.env("NO_COLOR", "1");
    }
    let output = command.output().expect("running cowork under script");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_summary_is_coloured_on_a_terminal_unless_no_color_is_set() {
    let sandbox = Sandbox::with_project();
    let args = ["scenarios/report.yaml", "--executor", "sim"];
    let coloured = run_on_a_terminal(&sandbox, &args, false);
    assert!(
        coloured.contains("\x1b[32m\x1b[1mPASS\x1b[0m"),
        "no green PASS on a terminal:\n{coloured:?}"
    );
    let plain = run_on_a_terminal(&sandbox, &args, true);
    assert!(
        plain.contains("PASS") && !plain.contains("\x1b[32m"),
        "colour despite NO_COLOR:\n{plain:?}"
    );
}
