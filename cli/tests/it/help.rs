//! `--help` exits 0 and documents every batch flag of harness-behaviour.md#repeat-flags and
//! harness-behaviour.md#matrix-flags, plus the fleet's own `run` and `rollup` flags and the exit
//! codes.

use crate::support::{Sandbox, cowork};

/// Runs `cowork <args>` and checks exit 0 and that stdout mentions every fragment.
fn check(args: &[&str], expect: &[&str]) {
    let sandbox = Sandbox::empty();
    let out = cowork(sandbox.path(), args);
    out.expect_code(0);
    for fragment in expect {
        if !out.stdout.contains(fragment) {
            out.fail(&format!("help does not mention {fragment:?}"));
        }
    }
}

/// The batch flags of harness-behaviour.md#repeat-flags and harness-behaviour.md#matrix-flags.
const CONTRACT_FLAGS: &[&str] = &[
    "--repeat",
    "--min-pass-rate",
    "--stop-on-diverge",
    "--max-budget-usd",
    "--allow-budget-stop",
    "--matrix",
    "--max-cells",
    "--allow-truncated-matrix",
    "--concurrency",
];

#[test]
fn top_level_help_lists_the_commands_and_exit_codes() {
    check(&["--help"], &["run", "rollup", "Exit codes", "--log"]);
    // Every code the CLI exits with (cli/src/exit.rs and the batch verdicts), with its meaning.
    check(
        &["--help"],
        &[
            "0 the batch passed",
            "1 the batch verdict failed",
            "2 usage or input error",
            "3 a boundary error",
            "130 interrupted",
        ],
    );
}

#[test]
fn run_help_mentions_every_batch_flag() {
    check(&["run", "--help"], CONTRACT_FLAGS);
    check(
        &["run", "--help"],
        &[
            "--executor",
            "--harness-bin",
            "--store",
            "--slots",
            "--seed",
            "--output-format",
            "--bundle-root",
            "--on-unanswered",
            "--ablate-skill",
            "--label",
        ],
    );
}

#[test]
fn rollup_help_mentions_its_judging_flags() {
    check(
        &["rollup", "--help"],
        &[
            "--min-pass-rate",
            "--stop-on-diverge",
            "--max-budget-usd",
            "--allow-budget-stop",
            "--allow-truncated-matrix",
            "--rollup-out",
            "--output-format",
        ],
    );
}

/// Runs `cowork <args>` with the terminal width `columns` (stdout is a pipe, so clap reads
/// `COLUMNS`).
fn help_at(columns: &str, args: &[&str]) -> crate::support::Output {
    let sandbox = Sandbox::empty();
    let program = env!("CARGO_BIN_EXE_cowork");
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .current_dir(sandbox.path())
        .env("COLUMNS", columns);
    // Help shows each flag's variable with its value when set (`[env: COWORK_…=…]`): the
    // test's own environment (CI sets COWORK_HARNESS_BIN) must not change what it measures.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("COWORK_") {
            command.env_remove(name);
        }
    }
    let output = command.output().expect("cowork runs");
    let out = crate::support::Output::new(
        format!("COLUMNS={columns} cowork {}", args.join(" ")),
        sandbox.path().to_path_buf(),
        output,
    );
    out.expect_code(0);
    out
}

/// The example lines of a help text: the indented lines after `Examples:`.
fn example_lines(help: &str) -> Vec<&str> {
    help.split("\nExamples:\n")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .take_while(|line| line.starts_with("  "))
        .map(str::trim)
        .collect()
}

#[test]
fn examples_are_never_wrapped_and_help_follows_the_terminal_width() {
    for command in [
        "run",
        "eval",
        "rollup",
        "submit",
        "report",
        "batches",
        "diff",
        "trend",
        "pause",
        "resume-dispatch",
        "adjust",
    ] {
        for flag in ["--help", "-h"] {
            let narrow = help_at("60", &[command, flag]);
            let wide = help_at("200", &[command, flag]);
            let examples = example_lines(&narrow.stdout);
            if examples.is_empty() {
                narrow.fail("no examples");
            }
            for line in &examples {
                if !line.starts_with("cowork ") {
                    narrow.fail(&format!("an example line was wrapped: {line:?}"));
                }
            }
            assert_eq!(examples, example_lines(&wide.stdout), "{command} {flag}");
        }
    }
    // The line `cowork eval --help` used to split between `--b` and its directory.
    let eval = help_at("80", &["eval", "--help"]);
    if !eval.stdout.lines().any(|line| {
        line.contains("--a examples/demo/skills/v1/csv-report --b examples/demo/eval/skills/")
    }) {
        eval.fail("the eval example is not on one line");
    }
    // Prose wraps to the terminal: narrow help stays narrow, wide help uses the width.
    let narrow = help_at("60", &["run", "--help"]);
    let prose = narrow
        .stdout
        .split("\nExamples:\n")
        .next()
        .unwrap_or_default();
    if let Some(line) = prose.lines().find(|line| line.chars().count() > 60) {
        narrow.fail(&format!("a help line is wider than 60 columns: {line:?}"));
    }
    let wide = help_at("200", &["run", "--help"]);
    if !wide.stdout.lines().any(|line| line.chars().count() > 100) {
        wide.fail("help at 200 columns is still wrapped at 100");
    }
}

#[test]
fn job_timeout_says_it_needs_a_unit() {
    for command in ["run", "eval", "submit"] {
        let out = help_at("100", &[command, "--help"]);
        // Words of one sentence may sit on two lines.
        let text = out.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
        for fragment in ["--job-timeout", "45m", "a bare number is refused"] {
            if !text.contains(fragment) {
                out.fail(&format!("help does not mention {fragment:?}"));
            }
        }
    }
    let sandbox = Sandbox::with_project();
    let out = sandbox.run_batch(&[
        "scenarios/report.yaml",
        "--executor",
        "sim",
        "--job-timeout",
        "5",
    ]);
    out.expect_code(2).expect_stderr("needs a unit");
}

#[test]
fn help_cites_no_spec_a_user_cannot_read() {
    let mut commands = vec![vec!["--help"]];
    for command in [
        "run",
        "eval",
        "rollup",
        "submit",
        "status",
        "watch",
        "cancel",
        "resume",
        "results",
        "report",
        "batches",
        "diff",
        "trend",
        "workers",
        "coordinator",
        "worker",
    ] {
        commands.push(vec![command, "--help"]);
    }
    for args in commands {
        let out = help_at("100", &args);
        for marker in ["contract", "\u{a7}", "brief", "choice C", "(C9", "issue "] {
            if out.stdout.contains(marker) {
                out.fail(&format!("help mentions {marker:?}"));
            }
        }
    }
}

/// The files and directories an example reads, by its tokens: every argument with a `/` or a
/// file extension, except URLs, outputs (`-o`, `>`, `--rollup-out`, `--download`), the store
/// (`--store`, `.cowork/…`, written by an earlier `cowork run`) and `KEY=value` settings.
fn example_inputs(line: &str) -> Vec<&str> {
    let mut inputs = Vec::new();
    let mut previous = "";
    for token in line.split_whitespace() {
        let output = matches!(
            previous,
            "-o" | ">" | ">>" | "--output" | "--rollup-out" | "--download" | "--store"
        );
        let path_like = token.contains('/')
            || [".yaml", ".json", ".csv"]
                .iter()
                .any(|extension| token.ends_with(extension));
        if path_like
            && !output
            && !token.contains("://")
            && !token.contains('=')
            && !token.starts_with(".cowork/")
            && !token.starts_with('"')
        {
            inputs.push(token);
        }
        previous = token;
    }
    inputs
}

#[test]
fn every_help_example_reads_only_files_a_clone_has() {
    let root = crate::support::workspace_root();
    for command in [
        "run",
        "eval",
        "rollup",
        "submit",
        "cancel",
        "resume",
        "report",
        "batches",
        "diff",
        "trend",
        "coordinator",
        "worker",
    ] {
        let out = help_at("100", &[command, "--help"]);
        for line in example_lines(&out.stdout) {
            for input in example_inputs(line) {
                if !root.join(input).exists() {
                    out.fail(&format!(
                        "the example {line:?} reads {input}, which a clone does not have"
                    ));
                }
            }
        }
    }
}

#[test]
fn report_help_says_an_unfinished_batch_is_reported_with_a_note() {
    let out = help_at("100", &["report", "--help"]);
    let text = out.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.contains("a batch that is not done") {
        out.fail("report --help still says a batch that is not done exits 2");
    }
    if !text.contains("a batch that never finished (interrupted or cancelled) is reported too") {
        out.fail("report --help does not say how an unfinished batch is reported");
    }
}
