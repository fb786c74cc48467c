//! The whole cost under a batch budget: sandbox minutes at a tier's price count beside model
//! spend, a budget over a tier or model nothing prices is refused at submit (exit 2, nothing
//! stored) unless `--allow-unpriced`, and an eval's report gives each arm's whole cost. Embedded
//! (`cowork run`, `cowork eval`) and on a fleet of a real nats-server and s3s-fs.

use serde_json::Value;

use crate::fleet::Fleet;
use crate::support::{Output, Sandbox, batch_dirs, copy_dir, number, workspace_root};

/// Runs of exactly one simulated minute (no real sleeping) costing about $0.01 of model spend.
const MINUTE_RUNS: &str = "rules:\n  - pass_rate: 1\n    cost_usd: 0.01\n    duration_ms: 60000\n    duration_spread: 0\n    time_scale: 0\n";

/// The demo with [`MINUTE_RUNS`] as `minute.yaml`.
fn demo() -> Sandbox {
    let sandbox = Sandbox::empty();
    copy_dir(&workspace_root().join("examples/demo"), sandbox.path());
    sandbox.write("minute.yaml", MINUTE_RUNS);
    sandbox
}

/// `cowork run scenarios/csv-report.yaml --repeat <n> --executor sim` on [`MINUTE_RUNS`].
fn run(sandbox: &Sandbox, repeat: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "scenarios/csv-report.yaml",
        "--repeat",
        repeat,
        "--executor",
        "sim",
        "--sim-profile",
        "minute.yaml",
        "--slots",
        "2",
        "--output-format",
        "json",
    ];
    args.extend_from_slice(extra);
    sandbox.run_batch(&args)
}

/// No batch in the sandbox's store (the store not even created).
fn nothing_stored(sandbox: &Sandbox) -> bool {
    !sandbox.store().join("batches").exists() || batch_dirs(&sandbox.store()).is_empty()
}

fn spend(envelope: &Value) -> &Value {
    &envelope["fleet"]["spend"]
}

#[test]
fn a_budget_over_an_unpriced_tier_and_model_is_refused_and_stores_nothing() {
    let sandbox = demo();
    let out = run(&sandbox, "5", &["--batch-budget-usd", "1"]);
    out.expect_code(2)
        .expect_stderr("tier container has no sandbox price")
        .expect_stderr("--sandbox-price container=")
        .expect_stderr("model \"default\" has no price")
        .expect_stderr("--model-price default=")
        .expect_stderr("--allow-unpriced");
    assert!(
        nothing_stored(&sandbox),
        "a refused batch stores nothing\n{}",
        out.context()
    );
    // A bad price is a usage error too, named by its flag.
    run(
        &sandbox,
        "5",
        &["--batch-budget-usd", "1", "--sandbox-price", "docker=0.02"],
    )
    .expect_code(2)
    .expect_stderr("--sandbox-price: unknown tier \"docker\"");
}

#[test]
fn allow_unpriced_runs_and_the_summary_names_what_counted_zero() {
    let sandbox = demo();
    let out = run(
        &sandbox,
        "3",
        &["--batch-budget-usd", "5", "--allow-unpriced"],
    );
    out.expect_code(0)
        .expect_stderr("ran unpriced (counted $0 against any budget): tier container");
    let envelope = out.envelope();
    let spend = spend(&envelope);
    assert_eq!(
        spend["unpricedTiers"],
        serde_json::json!(["container"]),
        "{spend}"
    );
    // Every sim run reports cost.usd, so the model is priced by its own runs.
    assert!(spend.get("unpricedModels").is_none(), "{spend}");
    assert_eq!(number(spend, "sandboxUsd"), 0.0, "{spend}");
    assert!(
        (number(spend, "sandboxMinutes") - 3.0).abs() < 1e-9,
        "{spend}"
    );
}

#[test]
fn sandbox_minutes_stop_a_batch_its_model_spend_alone_would_not() {
    let sandbox = demo();
    // 20 runs of ~$0.01 model spend (at most $0.30 with the ±50% spread) stay under $0.50;
    // with a minute of sandbox at $0.10 each, a run costs ~$0.11 and the budget stops it.
    let out = run(
        &sandbox,
        "20",
        &[
            "--batch-budget-usd",
            "0.5",
            "--sandbox-price",
            "container=0.1",
            "--model-price",
            "default=0.01",
        ],
    );
    out.expect_code(1).expect_stderr("= model $");
    let envelope = out.envelope();
    let budget = &envelope["fleet"]["batchBudget"];
    assert_eq!(budget["stopped"], true, "{budget}");
    let spend = spend(&envelope);
    let (model, sandbox_usd, total) = (
        number(spend, "modelUsd"),
        number(spend, "sandboxUsd"),
        number(spend, "totalUsd"),
    );
    assert!(model < 0.5 && sandbox_usd > model, "{spend}");
    assert!((total - (model + sandbox_usd)).abs() < 1e-9, "{spend}");
    assert!(
        (number(budget, "spentUsd") - total).abs() < 1e-9,
        "the budget counts the whole cost: {budget} {spend}"
    );
    let minutes = number(spend, "sandboxMinutes");
    assert!((sandbox_usd - minutes * 0.1).abs() < 1e-9, "{spend}");
    let completed = envelope["rollup"]["completed"]
        .as_u64()
        .or_else(|| envelope["rollups"][0]["completed"].as_u64())
        .expect("a completed count");
    assert!(
        completed < 20,
        "stopped early: {completed} runs\n{}",
        out.context()
    );
    // The rollup's own cost stays the harness CLI's sum of cost.usd.
    assert!(total > model, "{spend}");
}

#[test]
fn an_eval_reports_each_arms_whole_cost_and_refuses_an_unpriced_budget() {
    let sandbox = demo();
    let store = sandbox.store().display().to_string();
    let eval = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--a",
            "skills/v1/csv-report",
            "--b",
            "skills/v2/csv-report",
            "scenarios/csv-report.yaml",
            "--runs",
            "3",
            "--executor",
            "sim",
            "--sim-profile",
            "minute.yaml",
            "--fail-on",
            "never",
            "--output-format",
            "json",
            "--store",
            &store,
        ];
        args.extend_from_slice(extra);
        crate::support::cowork(sandbox.path(), &args)
    };
    eval(&["--batch-budget-usd", "10"])
        .expect_code(2)
        .expect_stderr("--sandbox-price container=");
    assert!(nothing_stored(&sandbox));

    let out = eval(&[
        "--batch-budget-usd",
        "10",
        "--sandbox-price",
        "container=0.1",
        "--model-price",
        "default=0.01",
    ]);
    out.expect_code(0)
        .expect_stderr("whole cost (model + sandbox): arm A $");
    let report: Value = serde_json::from_str(out.stdout.trim()).expect("the eval report");
    for arm in report["report"]["overall"]["arms"]
        .as_array()
        .or_else(|| report["overall"]["arms"].as_array())
        .expect("arms")
    {
        let (model, sandbox_usd, whole) = (
            number(arm, "costUsd"),
            number(arm, "sandboxCostUsd"),
            number(arm, "wholeCostUsd"),
        );
        // Three runs of one minute at $0.10.
        assert!((sandbox_usd - 0.3).abs() < 1e-9, "{arm}");
        assert!((whole - (model + sandbox_usd)).abs() < 1e-9, "{arm}");
    }
}

#[test]
fn the_coordinator_prices_tiers_for_every_batch_and_refuses_an_unpriced_model() {
    let mut fleet = Fleet::start_with_env(&[("COWORK_SANDBOX_PRICES", "container=0.1")]);
    fleet.spawn_worker("w0", "container", "2");
    let sandbox = demo();
    let args = [
        "scenarios/csv-report.yaml",
        "--repeat",
        "20",
        "--executor",
        "sim",
        "--sim-profile",
        "minute.yaml",
        "--batch-budget-usd",
        "0.5",
    ];
    // The coordinator prices the tier; nothing prices the model yet.
    let refused = fleet.submit(sandbox.path(), &args);
    refused
        .expect_code(2)
        .expect_stderr("model \"default\" has no price")
        .expect_stderr("--model-price default=");
    assert!(
        !fleet
            .object_keys()
            .iter()
            .any(|key| key.starts_with("batches/") || key.starts_with("bundles/")),
        "a refused submit stores nothing: {:?}",
        fleet.object_keys()
    );
    let mut priced: Vec<&str> = args.to_vec();
    priced.extend_from_slice(&["--model-price", "default=0.01"]);
    let out = fleet.submit_until_code(sandbox.path(), &priced, 1);
    let envelope = out.envelope();
    let spend = spend(&envelope);
    assert_eq!(envelope["fleet"]["batchBudget"]["stopped"], true, "{spend}");
    let minutes = number(spend, "sandboxMinutes");
    assert!(
        (number(spend, "sandboxUsd") - minutes * 0.1).abs() < 1e-9,
        "the coordinator's price was charged: {spend}"
    );
    assert!(number(spend, "modelUsd") < 0.5, "{spend}");
}
