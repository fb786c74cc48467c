//! `--help` exits 0 and documents every batch flag of contract §4.1 and §5.1, plus the fleet's
//! own `run` and `rollup` flags and the exit codes.

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

/// The batch flags of contract §4.1 and §5.1.
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
