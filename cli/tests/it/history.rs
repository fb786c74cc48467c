//! Batches and history on a store holding three batches of the README's demo (seeds 1, 2 and 3,
//! with the demo's simulation profile and `--min-pass-rate 0.8`): `cowork batches`, `latest`
//! and `latest~N`, `cowork diff` and `report --compare`, `cowork trend` and its flaky flag
//! across batches, `--dry-run` estimates from that history, and `cowork rollup` of a batch
//! that was interrupted. The same commands then read a coordinator's batches.
//!
//! Expected rows are computed here from each batch's own `rollup.json`, with the rules the
//! commands document, so the test does not depend on what the simulator draws; it also checks
//! that the draws cover the interesting cases (a flaky unit, a newly failing one).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::fleet::{Fleet, batch_of};
use crate::support::{
    Output, Sandbox, array, batch_dirs, cowork, number, read_json, run_batch_from, workspace_root,
};

const MIN_PASS_RATE: f64 = 0.8;

/// The demo as the README runs it, with `seed`.
fn demo_args(seed: &str) -> Vec<&str> {
    vec![
        "examples/demo/scenarios/csv-report.yaml",
        "--repeat",
        "5",
        "--matrix",
        "examples/demo/matrix.yaml",
        "--executor",
        "sim",
        "--sim-profile",
        "examples/demo/sim-profile.yaml",
        "--min-pass-rate",
        "0.8",
        "--seed",
        seed,
        "--quiet",
    ]
}

/// One demo batch as its rollup stored it.
struct DemoBatch {
    id: String,
    ok: bool,
    /// Per cell label: (completed, passes, total cost).
    cells: BTreeMap<String, (u32, u32, f64)>,
}

impl DemoBatch {
    /// The id of the batch stored in `dir`.
    fn read_id(dir: &Path) -> String {
        dir.file_name()
            .and_then(|name| name.to_str())
            .expect("a batch id")
            .to_owned()
    }

    fn read(dir: &Path) -> DemoBatch {
        let rollup = read_json(&dir.join("rollup.json"));
        let cells = array(&rollup["matrixRepeat"], "cells")
            .iter()
            .map(|cell| {
                let rollup = &cell["rollup"];
                let label = rollup["scenario"].as_str().expect("a label").to_owned();
                let counts = (
                    number(rollup, "completed") as u32,
                    number(rollup, "passes") as u32,
                    number(rollup, "totalCostUsd"),
                );
                (label, counts)
            })
            .collect();
        DemoBatch {
            id: DemoBatch::read_id(dir),
            ok: rollup["ok"] == Value::Bool(true),
            cells,
        }
    }

    fn passed(&self, label: &str) -> bool {
        let (completed, passes, _) = self.cells[label];
        f64::from(passes) / f64::from(completed) >= MIN_PASS_RATE
    }
}

/// A store with the three demo batches, oldest first.
struct History {
    sandbox: Sandbox,
    batches: Vec<DemoBatch>,
}

impl History {
    fn new() -> History {
        let sandbox = Sandbox::empty();
        let mut batches = Vec::new();
        for seed in ["1", "2", "3"] {
            let before = existing(&sandbox.store());
            let out = run_batch_from(&workspace_root(), &sandbox.store(), &demo_args(seed));
            if !matches!(out.code, Some(0 | 1)) {
                out.fail("a demo batch exits 0 or 1");
            }
            let new: Vec<PathBuf> = batch_dirs(&sandbox.store())
                .into_iter()
                .filter(|dir| !before.contains(dir))
                .collect();
            let [dir] = new.as_slice() else {
                out.fail("one new batch per run");
            };
            batches.push(DemoBatch::read(dir));
        }
        History { sandbox, batches }
    }

    /// `cowork <args> --store <store>` from the workspace root.
    fn cowork(&self, args: &[&str]) -> Output {
        let store = self.sandbox.store();
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--store", store.to_str().expect("a UTF-8 temp path")]);
        cowork(&workspace_root(), &all)
    }

    /// `cowork <args> --format json`, exit 0, stdout parsed.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["--format", "json"]);
        let out = self.cowork(&all);
        out.expect_code(0);
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| out.fail(&format!("stdout is not JSON: {e}")))
    }
}

fn existing(store: &Path) -> Vec<PathBuf> {
    if store.join("batches").is_dir() {
        batch_dirs(store)
    } else {
        Vec::new()
    }
}

/// The change `cowork diff` documents for a unit between two decided batches: the change of
/// verdict (flaky is a flag beside it, [`expected_flaky`]).
fn expected_change(then: &DemoBatch, now: &DemoBatch, label: &str) -> &'static str {
    match (then.passed(label), now.passed(label)) {
        (true, false) => "newly failing",
        (false, true) => "newly passing",
        (false, false) => "failing",
        (true, true) => "passing",
    }
}

/// The one flaky rule `diff` and `trend` document: the unit's verdict flipped between two of
/// the batches looked at, or its runs over them passed and failed with a pass rate whose 95%
/// Wilson interval straddles the bar (all batches here share one bar).
fn expected_flaky(batches: &[&DemoBatch], label: &str) -> bool {
    let verdicts: Vec<bool> = batches.iter().map(|batch| batch.passed(label)).collect();
    if verdicts.windows(2).any(|pair| pair[0] != pair[1]) {
        return true;
    }
    let (runs, passes) = batches.iter().fold((0, 0), |(runs, passes), batch| {
        let (completed, passed, _) = batch.cells[label];
        (runs + completed, passes + passed)
    });
    if passes == 0 || passes == runs {
        return false;
    }
    let (n, p, z) = (
        f64::from(runs),
        f64::from(passes) / f64::from(runs),
        1.96_f64,
    );
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    centre - half < MIN_PASS_RATE && MIN_PASS_RATE < centre + half
}

/// `label → flaky` from `cowork diff --format json`.
fn flaky_flags(diff: &Value) -> BTreeMap<String, bool> {
    array(diff, "units")
        .iter()
        .map(|unit| {
            (
                unit["label"].as_str().expect("a label").to_owned(),
                unit["flaky"].as_bool().expect("a flaky flag"),
            )
        })
        .collect()
}

/// Fails unless every line of `out`'s stdout fits a terminal of 100 columns.
fn fits_100_columns(out: &Output) {
    if let Some(line) = out.stdout.lines().find(|line| line.chars().count() > 100) {
        out.fail(&format!(
            "a line is {} columns wide: {line}",
            line.chars().count()
        ));
    }
}

/// `label → change` from `cowork diff --format json`.
fn changes(diff: &Value) -> BTreeMap<String, String> {
    array(diff, "units")
        .iter()
        .map(|unit| {
            (
                unit["label"].as_str().expect("a label").to_owned(),
                unit["change"].as_str().expect("a change").to_owned(),
            )
        })
        .collect()
}

#[test]
fn batches_diff_trend_and_dry_run_read_the_history_of_three_demo_batches() {
    let history = History::new();
    let [first, second, third] = history.batches.as_slice() else {
        unreachable!("three batches were run");
    };

    // `cowork batches`: newest first, with verdict, units, jobs, cost and state.
    let listed = history.json(&["batches"]);
    let rows = array(&listed, "batches");
    let ids: Vec<&str> = rows
        .iter()
        .map(|row| row["batchId"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, [&third.id, &second.id, &first.id]);
    for (row, batch) in rows.iter().zip([third, second, first]) {
        let verdict = row["verdict"].as_str().expect("a verdict");
        assert_eq!(verdict == "PASS", batch.ok, "{row}");
        assert_eq!(
            (number(row, "units"), number(row, "jobs")),
            (4.0, 20.0),
            "{row}"
        );
        assert_eq!(row["state"], "done", "{row}");
        let cost: f64 = batch.cells.values().map(|(_, _, cost)| cost).sum();
        assert!(
            (number(row, "costUsd") - cost).abs() < 1e-9,
            "{row} vs {cost}"
        );
        assert_eq!(row["target"], "examples/demo/scenarios/csv-report.yaml");
    }
    let text = history.cowork(&["batches"]);
    text.expect_code(0);
    let first_row = text.stdout.lines().nth(1).unwrap_or_default();
    if !first_row.starts_with(&third.id) {
        text.fail("the text table lists the newest batch first");
    }

    // `cowork diff` between each pair, by `latest~N`, ids and a batch dir.
    let dir_of_first = history.sandbox.store().join("batches").join(&first.id);
    let pairs: [(&DemoBatch, &DemoBatch, [&str; 2]); 3] = [
        (first, third, ["latest~2", "latest"]),
        (
            third,
            first,
            ["latest", dir_of_first.to_str().expect("UTF-8")],
        ),
        (second, third, [second.id.as_str(), third.id.as_str()]),
    ];
    let mut seen = Vec::new();
    for (then, now, [a, b]) in pairs {
        let diff = history.json(&["diff", a, b]);
        assert_eq!(diff["then"]["batchId"], then.id.as_str());
        assert_eq!(diff["now"]["batchId"], now.id.as_str());
        let expected: BTreeMap<String, String> = now
            .cells
            .keys()
            .map(|label| (label.clone(), expected_change(then, now, label).to_owned()))
            .collect();
        assert_eq!(changes(&diff), expected, "diff {a} {b}");
        let flags: BTreeMap<String, bool> = now
            .cells
            .keys()
            .map(|label| (label.clone(), expected_flaky(&[then, now], label)))
            .collect();
        assert_eq!(flaky_flags(&diff), flags, "diff {a} {b}");
        for side in ["then", "now"] {
            for unit in array(&diff, "units") {
                assert!(unit[side]["passed"].is_boolean(), "{side} verdict: {unit}");
            }
        }
        let text = history.cowork(&["diff", a, b]);
        text.expect_code(0);
        fits_100_columns(&text);
        if !text.stdout.contains("PASS ") && !text.stdout.contains("FAIL ") {
            text.fail("the diff table shows each side's verdict");
        }
        seen.extend(expected.into_values());
    }
    assert!(
        seen.iter().any(|change| change == "newly failing")
            && seen.iter().any(|change| change == "newly passing"),
        "the demo's draws must give both a newly failing and a newly passing unit: {seen:?}"
    );
    let compare = history.cowork(&["report", "--compare", "latest", "latest~2"]);
    compare.expect_code(0);
    fits_100_columns(&compare);
    // The text table may cut long labels to fit; the Markdown one keeps them whole.
    let compare = history.cowork(&[
        "report",
        "--compare",
        "latest",
        "latest~2",
        "--format",
        "markdown",
    ]);
    compare.expect_code(0);
    for label in third.cells.keys() {
        let change = expected_change(third, first, label);
        let row = compare
            .stdout
            .lines()
            // Markdown cells are escaped (`\[`, `\_`) as every Markdown output escapes text.
            .find(|line| {
                line.starts_with(&format!(
                    "| {} |",
                    cowork_core::report::markdown::escape_md(label)
                ))
            })
            .unwrap_or_else(|| compare.fail(&format!("no row for {label}")));
        if !row.contains(&format!("| {change} |")) {
            compare.fail(&format!("{label} should be {change}"));
        }
    }
    // `-o` writes the comparison in the format asked; a format it has no rendering for
    // (HTML) is refused with exit 2 and writes nothing.
    let compare_to = |format: &str, file: &Path| {
        let path = file.to_str().expect("UTF-8");
        history.cowork(&[
            "report",
            "--compare",
            "latest",
            "latest~2",
            "--format",
            format,
            "-o",
            path,
        ])
    };
    let markdown_file = history.sandbox.path().join("cmp.md");
    let markdown_path = markdown_file.display();
    let to_file = compare_to("markdown", &markdown_file);
    to_file.expect_code(0);
    let written = std::fs::read_to_string(&markdown_file)
        .unwrap_or_else(|e| to_file.fail(&format!("{markdown_path} not written: {e}")));
    if !written.contains("| unit") || to_file.stdout.contains("| unit") {
        to_file.fail(&format!(
            "the Markdown table goes to the file, not stdout:\n{written}"
        ));
    }
    let html_file = history.sandbox.path().join("cmp.html");
    let html = compare_to("html", &html_file);
    html.expect_code(2)
        .expect_stderr("--compare has no html rendering");
    if html_file.exists() || !html.stdout.is_empty() {
        html.fail("a refused --compare writes nothing");
    }

    // `cowork trend`: every cell, one column per batch, flaky when its verdict flipped or its
    // pass rate straddles the bar.
    let trend = history.json(&[
        "trend",
        "examples/demo/scenarios/csv-report.yaml",
        "--last",
        "3",
    ]);
    assert_eq!(
        trend["batches"],
        serde_json::json!([&first.id, &second.id, &third.id])
    );
    let mut flaky_units = 0;
    for unit in array(&trend, "units") {
        let label = unit["label"].as_str().expect("a label");
        let flaky = expected_flaky(&[first, second, third], label);
        assert_eq!(unit["flaky"], flaky, "{label}");
        flaky_units += usize::from(flaky);
        let runs: u32 = history.batches.iter().map(|b| b.cells[label].0).sum();
        let passes: u32 = history.batches.iter().map(|b| b.cells[label].1).sum();
        assert_eq!(
            (number(unit, "runs"), number(unit, "passes")),
            (f64::from(runs), f64::from(passes))
        );
        assert_eq!(array(unit, "batches").len(), 3);
    }
    assert_eq!(array(&trend, "units").len(), 4);
    assert!(flaky_units > 0, "the demo's draws must make a unit flaky");
    // The text table heads its batch columns b1.. and names them below: it fits 100 columns
    // (batch ids as headers made it ~230 wide).
    let trend_text = history.cowork(&[
        "trend",
        "examples/demo/scenarios/csv-report.yaml",
        "--last",
        "3",
    ]);
    trend_text.expect_code(0);
    fits_100_columns(&trend_text);
    for (column, batch) in ["b1", "b2", "b3"].iter().zip([first, second, third]) {
        if !trend_text
            .stdout
            .contains(&format!("{column} = {}", batch.id))
        {
            trend_text.fail(&format!("the legend names {column}"));
        }
    }
    let by_name = history.json(&["trend", "csv-report", "--last", "2"]);
    assert_eq!(
        by_name["batches"],
        serde_json::json!([&second.id, &third.id])
    );

    // `--dry-run`: the estimate comes from these batches, and nothing is run or written.
    let before = all_files(&history.sandbox.store());
    let mut args = vec!["run"];
    args.extend(demo_args("4"));
    args.push("--dry-run");
    let dry = history.cowork(&args);
    dry.expect_code(0);
    assert_eq!(
        all_files(&history.sandbox.store()),
        before,
        "a dry run writes nothing"
    );
    let lines: Vec<&str> = dry.stdout.lines().collect();
    for label in third.cells.keys() {
        // A label too long for one line of 100 columns has a line of its own, its row's cells
        // on the next.
        let at = lines
            .iter()
            .position(|line| line.starts_with(label.as_str()))
            .unwrap_or_else(|| dry.fail(&format!("no plan row for {label}")));
        let row = if lines[at].trim_end() == label.as_str() {
            lines.get(at + 1).copied().unwrap_or_default()
        } else {
            lines[at]
        };
        if !row.ends_with("3 batches") {
            dry.fail(&format!("{label}: the estimate should draw on 3 batches"));
        }
    }
    let cost_line = dry
        .stdout
        .lines()
        .find(|line| line.starts_with("estimated cost: $"))
        .unwrap_or_else(|| dry.fail("no estimated cost"));
    let estimate: f64 = cost_line["estimated cost: $".len()..]
        .split_whitespace()
        .next()
        .and_then(|usd| usd.parse().ok())
        .unwrap_or_else(|| dry.fail("the estimate is not a number"));
    // 20 runs at the demo's mean price of $0.05, each drawn within ±50%.
    assert!((0.5..=1.5).contains(&estimate), "{cost_line}");
    for fragment in [
        "plan: 20 jobs in 4 units × 5 runs",
        "cap --min-pass-rate",
        "nothing was run",
        // The demo profile leaves time_scale at 0: the simulator takes no wall time.
        "about 0 s of wall time",
    ] {
        if !dry.stdout.contains(fragment) {
            dry.fail(&format!("the dry run does not say {fragment:?}"));
        }
    }
    fits_100_columns(&dry);
    // The same plan on the harness executor: the simulated history never estimates real runs
    // (it printed "estimated cost: $2.01 (median cost per run in 1 earlier batch)").
    let real_args: Vec<&str> = demo_args("4")
        .into_iter()
        .filter(|arg| {
            !["--executor", "sim", "--sim-profile"].contains(arg)
                && !arg.ends_with("sim-profile.yaml")
        })
        .chain(["--dry-run"])
        .collect();
    let mut args = vec!["run"];
    args.extend(real_args);
    let real = history.cowork(&args);
    real.expect_code(0);
    if !real
        .stdout
        .contains("estimated cost: no history (no earlier real batch")
    {
        real.fail("a harness dry run estimates from the simulated batches");
    }
    if real.stdout.contains("3 batches") {
        real.fail("a harness plan row draws on simulated batches");
    }
}

/// Every file below `dir`, relative, sorted.
fn all_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, root: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("listing").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, root, found);
            } else {
                found.push(
                    path.strip_prefix(root)
                        .expect("below the root")
                        .to_path_buf(),
                );
            }
        }
    }
    let mut found = Vec::new();
    walk(dir, dir, &mut found);
    found.sort();
    found
}

#[test]
fn rollup_of_an_interrupted_batch_judges_what_ran_and_names_what_did_not() {
    let sandbox = Sandbox::empty();
    let out = run_batch_from(&workspace_root(), &sandbox.store(), &demo_args("1"));
    if !matches!(out.code, Some(0 | 1)) {
        out.fail("the demo batch exits 0 or 1");
    }
    let [dir] = batch_dirs(&sandbox.store()).try_into().expect("one batch");
    let stored = read_json(&dir.join("rollup.json"));
    // What a batch killed mid-way leaves: no rollup or envelope, cell 2 never started and the
    // last two runs of cell 3 never either.
    for gone in [
        "rollup.json",
        "envelope.json",
        "jobs/c2",
        "jobs/c3/r3",
        "jobs/c3/r4",
    ] {
        let path = dir.join(gone);
        if path.is_dir() {
            std::fs::remove_dir_all(&path).expect("removing a job dir");
        } else {
            std::fs::remove_file(&path).expect("removing a batch file");
        }
    }
    let store = sandbox.store();
    let store = store.to_str().expect("UTF-8");
    let out = cowork(
        sandbox.path(),
        &[
            "rollup",
            "latest",
            "--store",
            store,
            "--output-format",
            "json",
        ],
    );
    out.expect_code(1);
    out.expect_stderr("INCOMPLETE: 7 jobs of 20 never ran");
    out.expect_stderr("never ran: c2/r0 c2/r1 c2/r2 c2/r3 c2/r4 c3/r3 c3/r4");
    let envelope = out.envelope();
    assert_eq!(envelope["ok"], false);
    assert_eq!(envelope["fleet"]["incomplete"], true);
    assert_eq!(array(&envelope["fleet"], "neverRan").len(), 7);
    let cells = array(&envelope["matrixRepeat"], "cells");
    let stored_cells = array(&stored["matrixRepeat"], "cells");
    // Complete cells are judged exactly as the batch judged them.
    assert_eq!(cells[0], stored_cells[0]);
    assert_eq!(cells[1], stored_cells[1]);
    // Cell 3 is judged on its three runs, with no stop reason; cell 2 has none.
    let c3 = &cells[3]["rollup"];
    assert_eq!(
        (number(c3, "completed"), number(c3, "requested")),
        (3.0, 5.0)
    );
    assert!(c3.get("stoppedEarly").is_none(), "{c3}");
    assert_eq!(number(&cells[2]["rollup"], "completed"), 0.0);
    assert_eq!(array(&envelope, "results").len(), 13);
    // The batch dir works as well as `latest`, and the store is left as it was.
    let by_dir = cowork(sandbox.path(), &["rollup", dir.to_str().expect("UTF-8")]);
    by_dir.expect_code(1).expect_stderr("INCOMPLETE");
    assert!(!dir.join("rollup.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_latest_diff_and_dry_run_read_a_coordinator() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w0", "container", "4");
    let mut ids = Vec::new();
    for seed in ["1", "2"] {
        let args: Vec<&str> = demo_args(seed)
            .into_iter()
            .filter(|arg| *arg != "--quiet")
            .collect();
        let out = fleet.submit(&workspace_root(), &args);
        if !matches!(out.code, Some(0 | 1)) {
            out.fail(&format!("a demo batch exits 0 or 1\n{}", fleet.logs()));
        }
        ids.push(batch_of(&out.envelope()).to_string());
    }
    let sandbox = Sandbox::empty();
    let listed = fleet.cowork(sandbox.path(), &["batches", "--format", "json"]);
    listed.expect_code(0);
    let listed: Value = serde_json::from_str(&listed.stdout).expect("JSON");
    let rows = array(&listed, "batches");
    let listed_ids: Vec<&str> = rows
        .iter()
        .map(|row| row["batchId"].as_str().expect("id"))
        .collect();
    assert_eq!(listed_ids, [ids[1].as_str(), ids[0].as_str()]);
    for row in rows {
        assert_eq!(row["state"], "done", "{row}");
        assert_eq!(number(row, "jobs"), 20.0, "{row}");
    }
    let status = fleet.cowork(sandbox.path(), &["status", "latest~1"]);
    status.expect_code(0);
    if !status.stdout.contains(&format!("batch    {}", ids[0])) {
        status.fail("`status latest~1` shows the older batch");
    }
    let diff = fleet.cowork(
        sandbox.path(),
        &["diff", "latest~1", "latest", "--format", "json"],
    );
    diff.expect_code(0);
    let diff: Value = serde_json::from_str(&diff.stdout).expect("JSON");
    assert_eq!(
        (
            diff["then"]["batchId"].as_str(),
            diff["now"]["batchId"].as_str()
        ),
        (Some(ids[0].as_str()), Some(ids[1].as_str()))
    );
    assert_eq!(array(&diff, "units").len(), 4);
    // A dry run of the same sweep on the fleet draws on the coordinator's two batches.
    let mut args = vec!["submit"];
    args.extend(demo_args("3").into_iter().filter(|arg| *arg != "--quiet"));
    args.push("--dry-run");
    let dry = fleet.cowork(&workspace_root(), &args);
    dry.expect_code(0);
    let with_history = dry
        .stdout
        .lines()
        .filter(|line| line.ends_with("2 batches"))
        .count();
    if with_history != 4 {
        dry.fail("every unit's estimate should draw on the coordinator's 2 batches");
    }
    // The fleet's free slots are unknown here, but the simulator at the demo's time scale of 0
    // takes no wall time on any number of them.
    if !dry.stdout.contains("about 0 s of wall time (time_scale 0") {
        dry.fail("a simulated batch at time_scale 0 takes no wall time on a fleet either");
    }
    let listed = fleet.cowork(sandbox.path(), &["batches", "--format", "json"]);
    let listed: Value = serde_json::from_str(&listed.stdout).expect("JSON");
    assert_eq!(
        array(&listed, "batches").len(),
        2,
        "a dry run submits nothing"
    );
}

/// The `estimated time:` line of a dry run.
fn time_line(dry: &Output) -> &str {
    dry.stdout
        .lines()
        .find(|line| line.starts_with("estimated time:"))
        .unwrap_or_else(|| dry.fail("no estimated time"))
}

#[test]
fn a_simulated_dry_run_estimates_wall_time_at_the_profiles_time_scale() {
    let sandbox = Sandbox::with_project();
    // Runs that say they took a minute each; at the default time scale of 0 the simulator does
    // not sleep, so a batch of them takes no wall time (it estimated "about 7.6 min").
    sandbox.write(
        "minute.yaml",
        "rules:\n  - duration_ms: 60000\n    pass_rate: 1.0\n",
    );
    sandbox.write(
        "scaled.yaml",
        "rules:\n  - duration_ms: 60000\n    pass_rate: 1.0\n    time_scale: 0.001\n",
    );
    let batch = |profile: &'static str| {
        vec![
            "scenarios/report.yaml",
            "--executor",
            "sim",
            "--sim-profile",
            profile,
            "--repeat",
            "8",
            "--slots",
            "1",
            "--quiet",
        ]
    };
    sandbox.run_batch(&batch("minute.yaml")).expect_code(0);
    let mut args = batch("minute.yaml");
    args.push("--dry-run");
    let dry = sandbox.run_batch(&args);
    dry.expect_code(0);
    let line = time_line(&dry);
    for fragment in [
        "of simulated runs",
        "about 0 s of wall time",
        "(time_scale 0: runs do not sleep)",
    ] {
        if !line.contains(fragment) {
            dry.fail(&format!("the time line does not say {fragment:?}"));
        }
    }
    if !dry.stdout.contains("time_scale (docs/sim-profile.md)") {
        dry.fail("the dry run does not say where the time scale comes from");
    }
    fits_100_columns(&dry);
    if !dry.stdout.contains("estimated cost: $") {
        dry.fail("the cost estimate is gone");
    }
    // At a time scale of 0.001 the 8 simulated minutes take about half a second.
    let mut args = batch("scaled.yaml");
    args.push("--dry-run");
    let dry = sandbox.run_batch(&args);
    dry.expect_code(0);
    let line = time_line(&dry);
    if !line.contains("ms of wall time") || !line.contains("at time_scale 0.001") {
        dry.fail("the wall time is not scaled by the profile's time_scale");
    }
}

/// `cowork diff THEN NOW --format json` in `sandbox`, and its stderr tally.
fn diff_of(sandbox: &Sandbox, then: &str, now: &str) -> (Value, String) {
    let store = sandbox.store().display().to_string();
    let out = cowork(
        sandbox.path(),
        &["diff", then, now, "--store", &store, "--format", "json"],
    );
    out.expect_code(0);
    let diff: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| out.fail(&format!("stdout is not JSON: {e}")));
    (diff, out.stderr.clone())
}

/// Runs the sandbox's scenario (2 runs) with the sim profile `profile`; returns the id of the
/// new batch (ids of one second need not sort in run order, so `latest` is not used).
fn sim_batch(sandbox: &Sandbox, profile: &str) -> String {
    let before = existing(&sandbox.store());
    let out = sandbox.run_batch(&[
        "scenarios/report.yaml",
        "--executor",
        "sim",
        "--sim-profile",
        profile,
        "--repeat",
        "2",
        "--quiet",
    ]);
    if !matches!(out.code, Some(0..=2)) {
        out.fail("a batch that ran exits 0, 1 or 2");
    }
    let new: Vec<PathBuf> = batch_dirs(&sandbox.store())
        .into_iter()
        .filter(|dir| !before.contains(dir))
        .collect();
    let [dir] = new.as_slice() else {
        out.fail("one new batch per run");
    };
    DemoBatch::read_id(dir)
}

#[test]
fn diff_says_a_unit_errored_rather_than_calling_it_new() {
    let sandbox = Sandbox::with_project();
    sandbox.write("stuck.yaml", "rules:\n  - unanswered_rate: 1.0\n");
    sandbox.write("fine.yaml", "rules:\n  - pass_rate: 1.0\n");
    let stuck = sim_batch(&sandbox, "stuck.yaml");
    let stuck_again = sim_batch(&sandbox, "stuck.yaml");
    let fine = sim_batch(&sandbox, "fine.yaml");
    // Both batches ran the unit and it errored in both: not "new" (it said so).
    let (diff, tally) = diff_of(&sandbox, &stuck, &stuck_again);
    let [unit] = array(&diff, "units") else {
        panic!("one unit: {diff}");
    };
    assert_eq!(unit["change"], "errored both times", "{diff}");
    assert!(tally.contains("1 errored both times"), "{tally}");
    // It errored then and passes now, and the other way round.
    let (diff, _) = diff_of(&sandbox, &stuck, &fine);
    assert_eq!(diff["units"][0]["change"], "errored then", "{diff}");
    let (diff, _) = diff_of(&sandbox, &fine, &stuck);
    assert_eq!(diff["units"][0]["change"], "errored now", "{diff}");
    // The table says which side errored.
    let store = sandbox.store().display().to_string();
    let out = cowork(sandbox.path(), &["diff", &fine, &stuck, "--store", &store]);
    out.expect_code(0);
    let row = out
        .stdout
        .lines()
        .find(|line| line.starts_with("report"))
        .unwrap_or_else(|| out.fail("no row for the unit"));
    if !row.contains("ERROR") || !row.contains("errored now") {
        out.fail("the row does not say the unit errored now");
    }
}
