//! The morning view after a nightly sweep: two 1,000-cell sweeps on the simulator in which
//! nothing changed (same profile, same seed), read with `cowork diff` and `cowork trend`. The
//! text views stay short (the steady units counted, the flaky ones listed, worst first, capped),
//! `--all` lists every unit, JSON keeps every unit with its flaky fields, and
//! `trend --suggest-quarantine` prints quarantine entries for the flaky units.

use serde_json::Value;

use crate::support::{Output, Sandbox, array, cowork, run_batch_from, workspace_root};

const CELLS: usize = 1000;

/// Rows the morning view lists before `… and N more (--all)`.
const MORNING_ROWS: usize = 15;

/// A store with two identical 1,000-cell sweeps (1,000 models, `--repeat 3`, bar 80%): 10
/// cells never pass, 300 pass 30% of their runs (failing, many with some runs passing),
/// 30 pass half their runs, the rest always pass.
fn two_sweeps() -> Sandbox {
    let sandbox = Sandbox::empty();
    let demo = sandbox.path().join("demo");
    crate::support::copy_dir(&workspace_root().join("examples/demo"), &demo);
    let models: Vec<String> = (0..CELLS).map(|i| format!("m{i:04}")).collect();
    std::fs::write(
        demo.join("matrix-1000.yaml"),
        format!(
            "models: [{}]\nskill_dirs:\n  - skills/v1/csv-report\n",
            models.join(", ")
        ),
    )
    .expect("the matrix");
    let mut rules = String::from("rules:\n");
    for i in (7..CELLS).step_by(100) {
        rules.push_str(&format!("  - model: {}\n    pass_rate: 0.0\n", models[i]));
    }
    for i in (1..CELLS).step_by(3).take(300) {
        rules.push_str(&format!("  - model: {}\n    pass_rate: 0.3\n", models[i]));
    }
    for i in (13..CELLS).step_by(33) {
        rules.push_str(&format!("  - model: {}\n    pass_rate: 0.5\n", models[i]));
    }
    rules.push_str("  - pass_rate: 1.0\n    cost_usd: 0.01\n    duration_ms: 1000\n");
    std::fs::write(demo.join("profile.yaml"), rules).expect("the profile");
    for _ in 0..2 {
        let run = run_batch_from(
            &demo,
            &sandbox.store(),
            &[
                "scenarios/csv-report.yaml",
                "--matrix",
                "matrix-1000.yaml",
                "--max-cells",
                "1000",
                "--repeat",
                "3",
                "--executor",
                "sim",
                "--sim-profile",
                "profile.yaml",
                "--min-pass-rate",
                "0.8",
                "--quiet",
            ],
        );
        if run.code != Some(1) {
            run.fail("a sweep with failing cells exits 1");
        }
    }
    sandbox
}

fn cowork_in(sandbox: &Sandbox, args: &[&str]) -> Output {
    let store = sandbox.store();
    let mut all = args.to_vec();
    all.extend(["--store", store.to_str().expect("a UTF-8 temp path")]);
    let out = cowork(&workspace_root(), &all);
    out.expect_code(0);
    out
}

fn json_of(out: &Output) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| out.fail(&format!("stdout is not JSON: {e}")))
}

/// Every unit of a JSON view has the flaky fields; nothing flipped between two identical
/// sweeps. Returns how many are flaky.
fn check_units(out: &Output) -> usize {
    let document = json_of(out);
    let units = array(&document, "units");
    if units.len() != CELLS {
        out.fail(&format!("JSON lists {} units, not {CELLS}", units.len()));
    }
    let mut flaky = 0;
    for unit in units {
        let reason = &unit["flakyReason"];
        match (unit["flaky"].as_bool(), reason.as_str()) {
            (Some(false), None) if reason.is_null() => {}
            (Some(true), Some("straddlesBar")) => flaky += 1,
            _ => out.fail(&format!("flaky fields of {unit}")),
        }
        if !array(unit, "flips").is_empty() {
            out.fail(&format!("nothing changed, yet {unit} flipped"));
        }
    }
    flaky
}

/// Fails unless `out` prints fewer than 60 lines, with the count line (`N steady failing, M
/// steady passing`), and says how many lines it printed.
fn check_short(out: &Output, what: &str) -> usize {
    let lines = out.stdout.lines().count();
    eprintln!("{what}: {lines} lines\n{}", out.stdout);
    if lines >= 60 {
        out.fail(&format!("{what} prints {lines} lines, not under 60"));
    }
    if !out.stdout.contains(" steady failing, ") || !out.stdout.contains(" steady passing") {
        out.fail("the view counts the steady failing and steady passing units");
    }
    lines
}

/// `YYYY-MM-DD` of today plus `days`, by the system clock.
fn date_in(days: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970");
    cowork_schema::quarantine::Date((now.as_secs() / 86_400) as i64 + days).to_string()
}

#[test]
fn two_unchanged_1000_cell_sweeps_give_a_short_morning_view() {
    let sandbox = two_sweeps();
    let target = "examples/demo/scenarios/csv-report.yaml";

    let diff = cowork_in(&sandbox, &["diff", "latest~1", "latest"]);
    check_short(&diff, "diff");
    let trend = cowork_in(&sandbox, &["trend", target, "--last", "2"]);
    check_short(&trend, "trend");
    if diff.stdout.contains("FLAKY") || trend.stdout.contains("FLAKY") {
        diff.fail("steady failing units are counted, not flagged FLAKY one by one");
    }

    // JSON keeps every unit; both views agree on which are flaky, and the text says how many.
    let diff_flaky = check_units(&cowork_in(
        &sandbox,
        &["diff", "latest~1", "latest", "--format", "json"],
    ));
    let trend_flaky = check_units(&cowork_in(
        &sandbox,
        &["trend", target, "--last", "2", "--format", "json"],
    ));
    assert_eq!(diff_flaky, trend_flaky);
    assert!(
        diff_flaky > MORNING_ROWS,
        "the profile must give more flaky units ({diff_flaky}) than the view lists"
    );
    for out in [&diff, &trend] {
        if !out.stdout.contains(&format!("; {diff_flaky} flaky"))
            && !out.stdout.contains(&format!(", {diff_flaky} flaky"))
        {
            out.fail(&format!("the count line says {diff_flaky} flaky"));
        }
        if !out.stdout.contains(" more ") || !out.stdout.contains("(--all)") {
            out.fail("the list is capped with `… and N more (--all)`");
        }
    }

    // `--all` lists every unit (Markdown keeps labels whole).
    for args in [
        vec![
            "diff", "latest~1", "latest", "--all", "--format", "markdown",
        ],
        vec![
            "trend", target, "--last", "2", "--all", "--format", "markdown",
        ],
    ] {
        let out = cowork_in(&sandbox, &args);
        for i in 0..CELLS {
            if !out.stdout.contains(&format!("model=m{i:04},")) {
                out.fail(&format!("--all does not list the cell of m{i:04}"));
            }
        }
    }

    // Quarantine suggestions: one entry per flaky unit, owner blank, expiring in 14 days.
    let before = date_in(14);
    let suggested = cowork_in(
        &sandbox,
        &["trend", target, "--last", "2", "--suggest-quarantine"],
    );
    let after = date_in(14);
    let text = &suggested.stdout;
    if !text.contains("\nquarantine:\n") {
        suggested.fail("the suggestions are a quarantine document");
    }
    assert_eq!(
        text.matches("\n  - scenario: csv-report\n").count(),
        trend_flaky
    );
    assert_eq!(text.matches("\n    owner: \"\"").count(), trend_flaky);
    assert_eq!(
        text.matches("\n      skill_dir: skills/v1/csv-report\n")
            .count(),
        trend_flaky
    );
    let expires = text.matches(&format!("\n    expires: {before}\n")).count()
        + if after == before {
            0
        } else {
            text.matches(&format!("\n    expires: {after}\n")).count()
        };
    assert_eq!(expires, trend_flaky, "{text}");
}
