//! Fleet-wide controls on a fleet of three workers: a budget for the whole
//! batch across all cells, and per-model concurrency limits shared by every worker. Both are
//! decided by the coordinator's admission, and both show in the envelope's `fleet` key.

use serde_json::Value;

use crate::faults::profile_file;
use crate::fleet::Fleet;
use crate::support::workspace_root;

/// The demo matrix (4 cells) × `repeat`, with runs of about `duration_ms` real ms costing
/// 0.02–0.06 USD (the profile's 0.04 ± 50%).
fn matrix_args(repeat: &str, duration_ms: u64, extra: &[&str]) -> Vec<String> {
    let profile = profile_file(duration_ms, 1.0);
    let mut args: Vec<String> = [
        "examples/demo/scenarios/csv-report.yaml",
        "--matrix",
        "examples/demo/matrix.yaml",
        "--repeat",
        repeat,
        "--executor",
        "sim",
        "--seed",
        "9",
        "--sim-profile",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.push(profile.display().to_string());
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

fn three_workers(fleet: &mut Fleet) {
    for name in ["w0", "w1", "w2"] {
        fleet.spawn_worker(name, "container", "3");
    }
}

fn number(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("a number: {value}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_budget_holds_across_all_cells_with_three_workers() {
    let mut fleet = Fleet::start();
    three_workers(&mut fleet);
    const CAP: f64 = 1.0;
    // Sandbox minutes priced at 0, so the cap is on model spend alone, as the bounds below say.
    let args = matrix_args(
        "25",
        300,
        &[
            "--batch-budget-usd",
            "1",
            "--sandbox-price",
            "container=0",
            "--model-price",
            "claude=0.04",
        ],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = fleet.submit(&workspace_root(), &args);
    let envelope = out.envelope();
    assert_eq!(
        out.code(),
        1,
        "budget-stopped cells fail without --allow-budget-stop\n{}",
        out.context()
    );
    let budget = &envelope["fleet"]["batchBudget"];
    assert_eq!(budget["stopped"], true, "{budget}");
    let spent = number(&budget["spentUsd"]);
    // Admission keeps spend + (in flight + 1) × mean price <= cap; each run costs at most 1.5×
    // the mean price, so the jobs in flight at the last admission overshoot by at most half of
    // what was left, plus one run's worth of estimation error.
    assert!(
        spent <= CAP * 1.5 + 0.06,
        "spent {spent} against a cap of {CAP}: {budget}"
    );
    assert!(
        spent >= CAP - 2.0 * 0.06,
        "the batch used its budget before stopping: {budget}"
    );
    let overshoot = number(&budget["overshootUsd"]);
    assert!(
        (overshoot - (spent - CAP).max(0.0)).abs() < 1e-9,
        "overshoot is reported: {budget}"
    );
    // Every cell is judged on what it folded; open cells stopped as budget stops.
    let cells = envelope["matrixRepeat"]["cells"]
        .as_array()
        .expect("matrix cells");
    let completed: u64 = cells
        .iter()
        .map(|cell| cell["rollup"]["completed"].as_u64().expect("completed"))
        .sum();
    assert!(completed < 100, "the budget stopped the batch early");
    let stopped: Vec<&Value> = cells
        .iter()
        .filter(|cell| cell["rollup"]["stoppedEarly"] == "budget")
        .collect();
    assert_eq!(
        stopped.len(),
        budget["stoppedUnits"].as_array().map_or(0, Vec::len),
        "{budget}"
    );
    assert!(!stopped.is_empty(), "{budget}");
    // Spend is the sum of every finished run's price, folded or not.
    let batch = crate::fleet::batch_of(&envelope);
    let workers: std::collections::BTreeSet<String> = fleet
        .finished_events(&batch, completed as usize)
        .await
        .into_iter()
        .map(|(_, worker, _)| worker)
        .collect();
    assert!(
        workers.len() >= 2,
        "several workers shared the batch: {workers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_limit_caps_that_models_jobs_across_three_workers() {
    let mut fleet = Fleet::start_with_env(&[("COWORK_MODEL_LIMITS", "claude-sonnet=2")]);
    three_workers(&mut fleet);
    let args = matrix_args("8", 400, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = fleet.submit(&workspace_root(), &args);
    let envelope = out.envelope();
    assert!(matches!(out.code(), 0 | 1), "{}", out.context());
    assert_eq!(envelope["results"].as_array().map(Vec::len), Some(32));
    let limits = &envelope["fleet"]["modelLimits"]["claude-sonnet=2"];
    assert!(
        limits["maxInFlight"].as_u64().is_some_and(|n| n <= 2),
        "{limits}"
    );
    assert!(
        limits["delayedAdmissions"].as_u64().is_some_and(|n| n > 0),
        "the limit held jobs back: {limits}"
    );

    // In the event stream's order, at most 2 sonnet jobs run at once; opus jobs (cells 2 and 3)
    // are not limited, and run more than 2 at once on 9 slots.
    let batch = crate::fleet::batch_of(&envelope);
    let most = most_at_once(&fleet.events(&batch).await, &envelope);
    assert!(
        most.get("claude-sonnet-4-5").copied().unwrap_or(0) <= 2,
        "sonnet jobs at once: {most:?}"
    );
    assert!(
        most.get("claude-opus-4-8").copied().unwrap_or(0) > 2,
        "opus is not limited (and ran alongside held sonnet jobs): {most:?}"
    );
}

/// The most jobs of each model running at once, counted from the workers' started and
/// finished events in the stream's order; a cell's model is read from the envelope.
pub(crate) fn most_at_once(
    events: &[cowork_schema::event::JobEvent],
    envelope: &serde_json::Value,
) -> std::collections::BTreeMap<String, u64> {
    use cowork_schema::event::JobEventKind;
    let model_of_cell: Vec<String> = envelope["matrixRepeat"]["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|cell| cell["axes"]["model"].as_str().expect("model").to_owned())
        .collect();
    let mut running: std::collections::BTreeMap<String, u64> = Default::default();
    let mut most: std::collections::BTreeMap<String, u64> = Default::default();
    let mut live = std::collections::BTreeSet::new();
    for event in events {
        let cell: usize = event
            .job_id
            .as_str()
            .split('/')
            .nth(1)
            .and_then(|unit| unit.strip_prefix('c'))
            .and_then(|index| index.parse().ok())
            .expect("a cell job id");
        let model = model_of_cell[cell].clone();
        match event.event {
            JobEventKind::Started => {
                if live.insert(event.job_id.to_string()) {
                    let now = running.entry(model.clone()).or_default();
                    *now += 1;
                    let top = most.entry(model).or_default();
                    *top = (*top).max(*now);
                }
            }
            JobEventKind::Finished { .. } => {
                if live.remove(event.job_id.as_str()) {
                    *running.entry(model).or_default() -= 1;
                }
            }
            JobEventKind::Failed { .. } => {}
        }
    }
    most
}
