//! Table tests of the rows `cowork diff` and `cowork trend` print, the flaky rule (within one
//! batch and across batches), and history read back from a `rollup.json`.

use serde_json::json;

use super::*;

fn unit(label: &str, runs: u32, passes: u32) -> UnitCounts {
    UnitCounts {
        label: label.to_owned(),
        scenario: label.split(' ').next().unwrap_or(label).to_owned(),
        axes: None,
        runs,
        passes,
        cost_usd: 0.1 * f64::from(runs),
        priced_runs: runs,
    }
}

fn batch(id: &str, min_pass_rate: f64, units: Vec<UnitCounts>) -> BatchCounts {
    BatchCounts {
        batch_id: BatchId::new(id).expect("valid id"),
        min_pass_rate,
        units,
    }
}

/// Compares `then` with `now` and checks each row's label, change and flaky flag, in order.
fn check_compare(then: &BatchCounts, now: &BatchCounts, expect: &[(&str, Change, bool)]) {
    let got: Vec<(String, Change, bool)> = compare(then, now)
        .into_iter()
        .map(|row| (row.flaky(), row.label, row.change))
        .map(|(flaky, label, change)| (label, change, flaky))
        .collect();
    let expect: Vec<(String, Change, bool)> = expect
        .iter()
        .map(|(label, change, flaky)| ((*label).to_owned(), *change, *flaky))
        .collect();
    assert_eq!(got, expect);
}

#[test]
fn compare_names_every_kind_of_change_most_urgent_first() {
    let then = batch(
        "b1",
        1.0,
        vec![
            unit("steady", 5, 5),
            unit("broke", 5, 5),
            unit("fixed", 5, 3),
            unit("wobbly", 5, 4),
            unit("bad", 5, 0),
            unit("dropped", 5, 5),
            unit("errored", 0, 0),
            unit("stalled", 5, 5),
            unit("broken", 0, 0),
        ],
    );
    let now = batch(
        "b2",
        1.0,
        vec![
            unit("steady", 5, 5),
            unit("broke", 5, 4),
            unit("fixed", 5, 5),
            unit("wobbly", 5, 2),
            unit("bad", 5, 0),
            unit("added", 3, 3),
            unit("errored", 2, 1),
            unit("stalled", 0, 0),
            unit("broken", 0, 0),
        ],
    );
    check_compare(
        &then,
        &now,
        &[
            // Flaky is said beside the change of verdict, never instead of it.
            // A changed verdict is a flip: flaky.
            ("broke", Change::NewlyFailing, true),
            ("stalled", Change::ErroredNow, false),
            ("fixed", Change::NewlyPassing, true),
            // Failed some runs both times, but 6 of 10 is clearly below a bar of 100%: failing,
            // not flaky.
            ("wobbly", Change::Failing, false),
            ("bad", Change::Failing, false),
            ("broken", Change::ErroredBoth, false),
            // A unit that produced no run then was in the batch: it errored then, it is not new.
            // One judged batch cannot flip, and 1 of 2 is below 100% for sure.
            ("errored", Change::ErroredThen, false),
            ("added", Change::New, false),
            ("dropped", Change::Gone, false),
            ("steady", Change::Passing, false),
        ],
    );
}

#[test]
fn compare_judges_each_batch_at_its_own_bar() {
    // 4/5 fails at 1.0 and passes at 0.8: the verdict changed although the runs did not.
    let then = batch("b1", 1.0, vec![unit("s", 5, 4)]);
    let now = batch("b2", 0.8, vec![unit("s", 5, 4)]);
    check_compare(&then, &now, &[("s", Change::NewlyPassing, true)]);
    // Passing both times, but 7 of 10 runs cannot tell whether the unit meets a bar of 50%
    // (its interval is about 40%–89%): flaky.
    let now = batch("b2", 0.5, vec![unit("s", 5, 3)]);
    let then = batch("b1", 0.5, vec![unit("s", 5, 4)]);
    check_compare(&then, &now, &[("s", Change::Passing, true)]);
    // Every run passed in one batch and every run failed in the other: a flip.
    let then = batch("b1", 0.5, vec![unit("s", 5, 5)]);
    let now = batch("b2", 0.5, vec![unit("s", 5, 0)]);
    check_compare(&then, &now, &[("s", Change::NewlyFailing, true)]);
}

/// `(low, high)` in whole tenths of a percent, to compare intervals without float noise.
fn permille(interval: Option<(f64, f64)>) -> Option<(i64, i64)> {
    interval.map(|(low, high)| {
        (
            (low * 1000.0).round() as i64,
            (high * 1000.0).round() as i64,
        )
    })
}

#[test]
fn wilson_interval_at_95_percent() {
    assert_eq!(permille(wilson_interval(4, 5)), Some((376, 964)));
    assert_eq!(permille(wilson_interval(5, 5)), Some((566, 1000)));
    assert_eq!(permille(wilson_interval(0, 5)), Some((0, 434)));
    assert_eq!(permille(wilson_interval(45, 50)), Some((786, 957)));
    assert_eq!(wilson_interval(0, 0), None);
}

#[test]
fn one_batch_is_flaky_only_when_its_runs_straddle_the_bar() {
    // 4 of 5 may or may not meet 80%: flaky. Against 100% it fails for sure (a failed run is
    // below the bar whatever the rest do), and 45 of 50 is above 50% for sure: not flaky.
    assert!(flaky(4, 5, 0.8) && flaky(1, 2, 0.5));
    assert!(!flaky(4, 5, 1.0) && !flaky(45, 50, 0.5) && !flaky(1, 10, 0.9));
    // Runs that all passed or all failed are steady, however few.
    assert!(!flaky(5, 5, 0.8) && !flaky(0, 5, 0.2) && !flaky(0, 0, 0.5));
    assert!(unit("s", 5, 4).flaky(0.8) && !unit("s", 5, 4).flaky(1.0));
}

fn judged(batch: usize, passes: u32, runs: u32, min_pass_rate: f64) -> Judged {
    Judged {
        batch,
        passes,
        runs,
        min_pass_rate,
    }
}

#[test]
fn a_steady_unit_with_failed_runs_is_not_flaky() {
    // Failing every night against 100% with one run in five failing: steady, failing.
    let steady = flakiness(&[
        judged(0, 4, 5, 1.0),
        judged(1, 4, 5, 1.0),
        judged(2, 3, 5, 1.0),
    ]);
    assert_eq!(steady.reason, None);
    assert_eq!(steady.verdicts, [(0, false), (1, false), (2, false)]);
    assert!(steady.flips.is_empty() && steady.path().is_empty());
    // Passing every night against 50% with a few failed runs: steady, passing.
    let passing = flakiness(&[judged(0, 45, 50, 0.5), judged(1, 44, 50, 0.5)]);
    assert!(!passing.flaky());
}

#[test]
fn a_flipping_unit_is_flaky_and_shows_its_flips() {
    // A batch that judged no run is skipped: the flips are between judging batches.
    let flipping = flakiness(&[
        judged(0, 5, 5, 1.0),
        judged(1, 4, 5, 1.0),
        judged(2, 0, 0, 1.0),
        judged(3, 4, 5, 1.0),
        judged(4, 5, 5, 1.0),
    ]);
    assert_eq!(flipping.reason, Some(FlakyReason::Flipped));
    assert_eq!(flipping.flips, [1, 4]);
    assert_eq!(flipping.path(), "PASS→FAIL→PASS");
    assert_eq!(FlakyReason::Flipped.as_str(), "flipped");
}

#[test]
fn a_steady_verdict_whose_interval_straddles_the_bar_is_flaky() {
    // Passing 80% every time against a bar of 80%: 8 of 10 runs cannot say it meets the bar.
    let unsure = flakiness(&[judged(0, 4, 5, 0.8), judged(1, 4, 5, 0.8)]);
    assert_eq!(unsure.reason, Some(FlakyReason::StraddlesBar));
    assert!(unsure.flips.is_empty() && unsure.path().is_empty());
    assert_eq!(permille(unsure.interval), Some((490, 943)));
    assert_eq!(FlakyReason::StraddlesBar.as_str(), "straddlesBar");
    // The newest bar is the one judged against.
    let raised = flakiness(&[judged(0, 4, 5, 0.5), judged(1, 4, 5, 1.0)]);
    assert_eq!(raised.reason, Some(FlakyReason::Flipped));
    assert_eq!(flakiness(&[]).reason, None);
}

#[test]
fn trend_flags_units_whose_runs_passed_and_failed() {
    let batches = [
        batch(
            "b1",
            1.0,
            vec![unit("a", 5, 5), unit("b", 5, 4), unit("c", 5, 5)],
        ),
        batch(
            "b2",
            1.0,
            vec![unit("a", 5, 4), unit("b", 5, 3), unit("other", 1, 1)],
        ),
        batch(
            "b3",
            1.0,
            vec![unit("a", 5, 5), unit("b", 5, 4), unit("c", 5, 5)],
        ),
    ];
    let rows = trend(&batches, &|scenario| scenario != "other");
    let got: Vec<(&str, bool, u32, u32)> = rows
        .iter()
        .map(|row| (row.label.as_str(), row.flaky(), row.passes, row.runs))
        .collect();
    // `a` passed in b1 and b3 and failed in b2: flipped, flaky. `b` failed in every batch
    // with mixed runs, clearly below 100%: steady, failing, not flaky. `c` passed every run;
    // b2 did not run it.
    assert_eq!(
        got,
        [
            ("a", true, 14, 15),
            ("b", false, 11, 15),
            ("c", false, 10, 10)
        ]
    );
    assert_eq!(rows[0].flakiness.path(), "PASS→FAIL→PASS");
    assert_eq!(rows[0].flakiness.flips, [1, 2]);
    assert_eq!(rows[2].flakiness.verdicts, [(0, true), (2, true)]);
    assert!(rows[0].verdict_changed() && !rows[1].verdict_changed());
    let c = &rows[2];
    assert_eq!(
        c.cells.iter().map(Option::is_some).collect::<Vec<_>>(),
        [true, false, true]
    );
    assert_eq!((c.batches_passed, c.batches_failed), (2, 0));
    assert_eq!(
        c.cost_per_run_usd().map(|usd| (usd * 100.0).round()),
        Some(10.0)
    );
}

#[test]
fn trend_orders_units_newest_batch_first() {
    let batches = [
        batch("b1", 1.0, vec![unit("old", 1, 1)]),
        batch("b2", 1.0, vec![unit("new", 1, 1), unit("old", 1, 0)]),
    ];
    let labels: Vec<String> = trend(&batches, &|_| true)
        .into_iter()
        .map(|row| row.label)
        .collect();
    assert_eq!(labels, ["new", "old"]);
}

fn stored(kind: &str, repeat: Option<u32>, units: &[(&str, &str, bool)]) -> StoredBatch {
    let units: Vec<Value> = units
        .iter()
        .enumerate()
        .map(|(index, (label, name, cell_error))| {
            let mut unit = json!({
                "unit": {"kind": if kind == "matrix" { "cell" } else { "file" }, "index": index},
                "label": label,
                "scenarioName": name,
                "tier": "container",
            });
            if *cell_error {
                unit["cellError"] = json!("bad skill dir");
            }
            unit
        })
        .collect();
    serde_json::from_value(json!({
        "batchId": "b1",
        "spec": {
            "schemaVersion": 1, "mode": "run", "targetDisplay": "t", "target": "t",
            "scenarioFiles": ["t.yaml"], "executor": "sim", "bundleSha256": "00",
            "flags": {"repeat": repeat, "minPassRate": 0.5, "stopOnDiverge": false,
                      "allowBudgetStop": false, "maxCells": 16, "allowTruncatedMatrix": false,
                      "ablateSkill": false},
        },
        "plan": {"kind": kind, "repeat": repeat, "requestedCells": units.len(),
                 "truncated": false, "nJobs": 0, "units": units},
    }))
    .expect("a valid stored batch")
}

fn result(scenario: &str, pass: bool, usd: f64, ms: u64) -> Value {
    json!({"scenario": scenario, "cost": {"usd": usd}, "durationMs": ms, "verdict": {"pass": pass}})
}

fn repeat_rollup(label: &str, completed: u32, passes: u32, cost: f64) -> Value {
    json!({"scenario": label, "requested": 3, "completed": completed, "passes": passes,
           "passRate": 0, "signalHistogram": {}, "perAssertion": [], "totalCostUsd": cost,
           "nonDeterministicRuns": 0,
           "provenance": {"models": [], "skills": [], "ablatedRuns": 0}})
}

fn rollup_doc(keys: Value) -> RollupDoc {
    let mut doc = json!({"schemaVersion": 1, "command": "run", "ok": false, "exitCode": 1,
        "fleet": {"minPassRate": 0.5, "allowBudgetStop": false, "allowTruncatedMatrix": false,
                  "stopOnDiverge": false, "foldOrder": "index", "resultsOrder": "index",
                  "simulatedRuns": 0, "budgetTelemetryMissing": []}});
    for (key, value) in keys.as_object().expect("an object of rollup keys") {
        doc[key] = value.clone();
    }
    serde_json::from_value(doc).expect("a valid rollup document")
}

/// (label, folded, passes, priced runs, median cost, median ms) of each unit.
type StatsRow = (String, u32, u32, u32, Option<f64>, Option<u64>);

fn stats_rows(stats: &BatchStats) -> Vec<StatsRow> {
    stats
        .units
        .iter()
        .map(|unit| {
            (
                unit.label.clone(),
                unit.folded,
                unit.passes,
                unit.priced_runs,
                unit.median_cost_usd,
                unit.median_run_ms,
            )
        })
        .collect()
}

#[test]
fn history_from_a_repeat_rollup_splits_the_results_per_unit() {
    let stored = stored("files", Some(3), &[("a", "a", false), ("b", "b", false)]);
    let rollup = rollup_doc(json!({"rollups": [
        repeat_rollup("a", 3, 2, 0.6),
        // Stopped early after two runs.
        repeat_rollup("b", 2, 2, 0.3),
    ]}));
    let results = [
        result("a", true, 0.1, 10),
        result("a", false, 0.2, 30),
        result("a", true, 0.3, 20),
        result("b", true, 0.1, 5),
        result("b", true, 0.2, 7),
    ];
    let stats = stats_from_rollup(&stored, &rollup, &results);
    assert_eq!(
        stats_rows(&stats),
        [
            ("a".to_owned(), 3, 2, 3, Some(0.2), Some(20)),
            ("b".to_owned(), 2, 2, 2, Some(0.15000000000000002), Some(5)),
        ]
    );
    // Results that do not line up with the plan are not guessed at: the rollup's totals stay.
    let stats = stats_from_rollup(&stored, &rollup, &results[1..]);
    assert_eq!(
        stats_rows(&stats),
        [
            ("a".to_owned(), 3, 2, 3, Some(0.19999999999999998), None),
            ("b".to_owned(), 2, 2, 2, Some(0.15), None),
        ]
    );
    let counts = counts_from_rollup(&stored, &rollup, &results);
    assert_eq!(counts.min_pass_rate, 0.5);
    assert_eq!(counts.units[0].passed(counts.min_pass_rate), Some(true));
}

#[test]
fn history_from_a_matrix_repeat_rollup_skips_cell_errors() {
    let stored = stored(
        "matrix",
        Some(3),
        &[
            ("s [m=1]", "s", false),
            ("s [m=2]", "s", true),
            ("s [m=3]", "s", false),
        ],
    );
    let cell = |index: u32, rollup: Option<Value>| {
        let mut cell = json!({"index": index, "axes": {}});
        match rollup {
            Some(rollup) => cell["rollup"] = rollup,
            None => cell["error"] = json!("bad skill dir"),
        }
        cell
    };
    let rollup = rollup_doc(json!({"matrixRepeat": {"cells": [
        cell(0, Some(repeat_rollup("s [m=1]", 1, 1, 0.1))),
        cell(1, None),
        cell(2, Some(repeat_rollup("s [m=3]", 2, 0, 0.5))),
    ], "requested": 3, "ranCells": 3, "truncated": false, "anyFail": true}}));
    let results = [
        result("s", true, 0.1, 1),
        result("s", false, 0.2, 2),
        result("s", false, 0.3, 3),
    ];
    assert_eq!(
        stats_rows(&stats_from_rollup(&stored, &rollup, &results)),
        [
            ("s [m=1]".to_owned(), 1, 1, 1, Some(0.1), Some(1)),
            ("s [m=3]".to_owned(), 2, 0, 2, Some(0.25), Some(2)),
        ]
    );
}

#[test]
fn history_from_plain_batches_takes_one_run_per_unit() {
    let stored_matrix = stored(
        "matrix",
        None,
        &[("s [m=1]", "s", false), ("s [m=2]", "s", false)],
    );
    let cell = |index: u32, pass: bool, error: Option<&str>| {
        let mut cell = json!({"index": index, "axes": {}, "pass": pass, "failedAssertions": [],
                              "signals": []});
        if let Some(error) = error {
            cell["error"] = json!(error);
        }
        cell
    };
    let rollup = rollup_doc(json!({"matrix": {"cells": [
        cell(0, false, Some("crashed")),
        cell(1, true, None),
    ], "requested": 2, "ranCells": 2, "truncated": false, "anyFail": true}}));
    // The errored cell has no result; the one result belongs to the second cell.
    let results = [result("s", true, 0.4, 9)];
    assert_eq!(
        stats_rows(&stats_from_rollup(&stored_matrix, &rollup, &results)),
        [("s [m=2]".to_owned(), 1, 1, 1, Some(0.4), Some(9))]
    );

    let stored_files = stored("files", None, &[("a", "a", false), ("b", "b", false)]);
    let rollup = rollup_doc(json!({}));
    let results = [result("b", false, 0.2, 4)];
    let counts = counts_from_rollup(&stored_files, &rollup, &results);
    assert_eq!(
        counts.units,
        [UnitCounts {
            label: "b".to_owned(),
            scenario: "b".to_owned(),
            axes: None,
            runs: 1,
            passes: 0,
            cost_usd: 0.2,
            priced_runs: 1,
        }]
    );
}

#[test]
fn counts_from_stats_keep_folded_runs() {
    let stats = BatchStats {
        batch_id: BatchId::new("b1").expect("valid id"),
        decided_at_ms: 0,
        wall_ms: 0,
        units: vec![UnitStats {
            label: "a".to_owned(),
            scenario: "a".to_owned(),
            axes: None,
            arm: None,
            runs: 7,
            folded: 5,
            passes: 4,
            priced_runs: 0,
            cost_usd: 0.0,
            median_cost_usd: None,
            median_run_ms: None,
            max_run_ms: None,
        }],
    };
    let counts = counts_from_stats(&stats, 0.8);
    let unit = &counts.units[0];
    assert_eq!(
        (unit.runs, unit.passes, unit.cost_per_run_usd()),
        (5, 4, None)
    );
    assert_eq!(unit.passed(0.8), Some(true));
    assert!(unit.flaky(0.8));
}

#[test]
fn the_morning_view_puts_units_failing_now_first() {
    let batches = [
        batch(
            "b1",
            0.8,
            vec![
                unit("healed", 5, 0),
                unit("broke", 5, 5),
                unit("unsure", 5, 3),
            ],
        ),
        batch(
            "b2",
            0.8,
            vec![
                unit("healed", 5, 5),
                unit("broke", 5, 1),
                unit("unsure", 5, 3),
            ],
        ),
    ];
    let mut rows = trend(&batches, &|_| true);
    rows.sort_by_key(TrendRow::attention);
    let labels: Vec<&str> = rows.iter().map(|row| row.label.as_str()).collect();
    // Failing now first (a flip before an uncertain rate), then passing now.
    assert_eq!(labels, ["broke", "unsure", "healed"]);
    assert!(rows.iter().all(TrendRow::flaky));
}
