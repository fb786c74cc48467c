//! Caps are caps with parallel slots: six scenario files × 20 runs on 8 slots of the sim
//! executor (prices within ±50% of the profile's), run by `cowork run`.
//!
//! - `--max-budget-usd`: every unit's spend, folded and discarded runs together, stays within
//!   its cap plus one run's price (the harness's own bound when it runs repeats in sequence);
//!   the summary and the envelope's `fleet` key show the discarded runs and their cost.
//! - `--stop-on-diverge`: at most the speculation bound of runs is discarded per unit.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::{Output, Sandbox, copy_dir, number, only_batch_dir, workspace_root};

/// A copy of the demo with six scenario files and jobs that take a few ms each, so that runs
/// of one unit overlap on the slots.
fn six_files() -> Sandbox {
    let sandbox = Sandbox::empty();
    copy_dir(&workspace_root().join("examples/demo"), sandbox.path());
    for name in ["csv-report", "skill-triggers"] {
        for copy in ["b", "c"] {
            let text = sandbox.read(&format!("scenarios/{name}.yaml"));
            sandbox.write(&format!("scenarios/{name}-{copy}.yaml"), &text);
        }
    }
    sandbox.append("sim-profile.yaml", "\n    time_scale: 0.0002\n");
    sandbox
}

fn run(sandbox: &Sandbox, extra: &[&str]) -> Output {
    let mut args = vec![
        "scenarios",
        "--repeat",
        "20",
        "--executor",
        "sim",
        "--seed",
        "3",
        "--sim-profile",
        "sim-profile.yaml",
        "--slots",
        "8",
        "--output-format",
        "json",
    ];
    args.extend_from_slice(extra);
    sandbox.run_batch(&args)
}

/// Per unit (rollup label): (spend of folded and discarded runs, most expensive run, runs
/// discarded).
fn spend_per_unit(envelope: &Value) -> BTreeMap<String, (f64, f64, u64)> {
    let labels: Vec<String> = envelope["rollups"]
        .as_array()
        .expect("a repeat batch has rollups")
        .iter()
        .map(|rollup| rollup["scenario"].as_str().expect("a label").to_owned())
        .collect();
    let mut units: BTreeMap<String, (f64, f64, u64)> = BTreeMap::new();
    let mut add = |label: &str, cost: Option<f64>, discarded: bool| {
        let unit = units.entry(label.to_owned()).or_default();
        let cost = cost.unwrap_or(0.0);
        unit.0 += cost;
        unit.1 = unit.1.max(cost);
        unit.2 += u64::from(discarded);
    };
    for result in envelope["results"].as_array().expect("results") {
        let label = result["scenario"].as_str().expect("a scenario");
        add(
            label,
            result.pointer("/cost/usd").and_then(Value::as_f64),
            false,
        );
    }
    for run in envelope["fleet"]["discarded"]
        .as_array()
        .expect("discarded")
    {
        // `<batch>/f<unit>/r<index>`
        let job = run["job"].as_str().expect("a job id");
        let unit: usize = job.split('/').nth(1).expect("a unit part")[1..]
            .parse()
            .expect("a unit index");
        add(&labels[unit], run["costUsd"].as_f64(), true);
    }
    units
}

#[test]
fn a_unit_budget_holds_within_one_run_with_parallel_slots() {
    const CAP: f64 = 0.3;
    let sandbox = six_files();
    let out = run(&sandbox, &["--max-budget-usd", "0.3"]);
    out.expect_code(1);
    let envelope = out.envelope();
    let units = spend_per_unit(&envelope);
    assert_eq!(units.len(), 6, "{units:?}");
    for (label, (spent, highest, _)) in &units {
        assert!(
            *spent <= CAP + highest + 1e-9,
            "{label} spent {spent} against a cap of {CAP} (one run: {highest})\n{}",
            out.context()
        );
    }
    let fleet = &envelope["fleet"];
    let most = units.values().map(|unit| unit.0).fold(0.0, f64::max);
    assert!((number(&fleet["admission"], "maxUnitSpentUsd") - most).abs() < 1e-9);
    assert_eq!(number(&fleet["admission"], "unitBudgetUsd"), CAP);
    let discarded = fleet["discarded"].as_array().expect("discarded").len();
    assert_eq!(number(&fleet["discardedTotal"], "runs"), discarded as f64);
    out.expect_stderr("unit budget $0.3000: the unit that spent most spent");
    if discarded > 0 {
        out.expect_stderr("spent outside the rollups");
    }
    // stdout is the stored envelope, byte for byte.
    let stored = std::fs::read(only_batch_dir(&sandbox.store()).join("envelope.json"))
        .expect("the stored envelope");
    assert!(
        stored == out.stdout.as_bytes(),
        "stdout differs from envelope.json"
    );
}

#[test]
fn stop_on_diverge_discards_at_most_the_speculation_bound_per_unit() {
    let sandbox = six_files();
    let out = run(&sandbox, &["--stop-on-diverge"]);
    let envelope = out.envelope();
    let fleet = &envelope["fleet"];
    assert_eq!(number(&fleet["admission"], "speculation"), 2.0);
    for (label, (_, _, discarded)) in spend_per_unit(&envelope) {
        assert!(
            discarded <= 2,
            "{label}: {discarded} runs discarded\n{}",
            out.context()
        );
    }
}
