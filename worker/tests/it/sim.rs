//! The simulator through the `Executor` trait: determinism, the pass-rate rule, schema
//! validity, unanswered runs and simulated time.

use cowork_schema::batch::{SimRule, SimSpec};
use cowork_schema::event::ErrorCategory;
use cowork_schema::ids::{BatchId, JobId, UnitRef};
use cowork_schema::job::JobSpec;
use cowork_worker::executor::{Classified, ExecOutput, Executor, JobContext, SimExecutor};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::support::{artifact_bytes, artifact_json, fixture_json, sim_job};

fn context(job: JobSpec) -> JobContext {
    // The simulator touches no files; the paths only have to be well-formed.
    JobContext {
        job,
        bundle_dir: "bundle".into(),
        work_dir: "work".into(),
        attempt: 1,
    }
}

async fn execute(job: JobSpec) -> ExecOutput {
    SimExecutor::new()
        .execute(&context(job), CancellationToken::new())
        .await
}

fn profile(seed: u64, rule: SimRule) -> SimSpec {
    SimSpec {
        seed,
        rules: vec![rule],
    }
}

/// Every artifact's bytes plus the classification: what "the same result" means.
fn fingerprint(output: &ExecOutput) -> (String, Vec<(String, Vec<u8>)>) {
    let artifacts = output
        .artifacts
        .iter()
        .map(|artifact| {
            (
                artifact.name.clone(),
                artifact_bytes(output, &artifact.name),
            )
        })
        .collect();
    (format!("{:?}", output.classified), artifacts)
}

#[tokio::test]
async fn same_inputs_give_the_same_bytes() {
    let spec = profile(
        3,
        SimRule {
            pass_rate: Some(0.5),
            unanswered_rate: Some(0.2),
            ..SimRule::default()
        },
    );
    for repeat_index in 0..20 {
        let job = sim_job("csv-metrics", UnitRef::Cell(1), Some(repeat_index), &spec);
        let first = execute(job.clone()).await;
        let second = execute(job.clone()).await;
        assert_eq!(fingerprint(&first), fingerprint(&second));
        // Neither the batch nor the job id is an input of the outcome.
        let mut elsewhere = job;
        elsewhere.batch_id = BatchId::new("other-batch").expect("valid literal");
        elsewhere.job_id = JobId::new(&elsewhere.batch_id, UnitRef::Cell(1), Some(repeat_index));
        assert_eq!(fingerprint(&first), fingerprint(&execute(elsewhere).await));
        assert_eq!(first.harness_version.as_deref(), Some("sim-0.1.0"));
        assert!(first.spawned);
    }
}

#[tokio::test]
async fn repeat_index_changes_the_outcome() {
    let spec = profile(
        5,
        SimRule {
            pass_rate: Some(0.5),
            ..SimRule::default()
        },
    );
    let mut verdicts = Vec::new();
    let mut costs = Vec::new();
    for repeat_index in 0..40 {
        let output = execute(sim_job("s", UnitRef::File(0), Some(repeat_index), &spec)).await;
        let Classified::Completed { result } = &output.classified else {
            panic!("no unanswered rate: {:?}", output.classified);
        };
        verdicts.push(result["verdict"]["pass"] == true);
        costs.push(result["cost"]["usd"].to_string());
    }
    assert!(
        verdicts.contains(&true) && verdicts.contains(&false),
        "{verdicts:?}"
    );
    costs.sort();
    costs.dedup();
    assert!(costs.len() > 30, "costs vary between repeats: {costs:?}");
}

#[tokio::test]
async fn pass_rate_rule_is_honoured() {
    let spec = SimSpec {
        seed: 2024,
        rules: vec![
            SimRule {
                scenario: Some("^hard".to_owned()),
                pass_rate: Some(0.3),
                ..SimRule::default()
            },
            SimRule {
                pass_rate: Some(0.7),
                ..SimRule::default()
            },
        ],
    };
    for (scenario, expect) in [("easy-one", 0.7), ("hard-one", 0.3)] {
        let mut n_pass = 0u32;
        for repeat_index in 0..2_000 {
            let output = execute(sim_job(
                scenario,
                UnitRef::File(0),
                Some(repeat_index),
                &spec,
            ))
            .await;
            let Classified::Completed { result } = &output.classified else {
                panic!("no unanswered rate: {:?}", output.classified);
            };
            n_pass += u32::from(result["verdict"]["pass"] == true);
        }
        let rate = f64::from(n_pass) / 2_000.0;
        // The stream is seeded, so this is not flaky; the bound (about 4.5 standard
        // deviations) only fails if the rule is not applied.
        assert!(
            (rate - expect).abs() < 0.045,
            "{scenario}: {rate} vs {expect}"
        );
    }
}

#[tokio::test]
async fn simulated_results_validate_against_the_run_result_schema() {
    let schema = fixture_json("run-result.schema.json");
    let validator = jsonschema::validator_for(&schema).expect("the upstream schema compiles");
    let spec = profile(
        99,
        SimRule {
            pass_rate: Some(0.6),
            cost_usd: Some(1.0),
            missing_telemetry_rate: Some(0.2),
            non_deterministic_rate: Some(0.2),
            unanswered_rate: Some(0.1),
            ..SimRule::default()
        },
    );
    let (mut n_completed, mut n_partial) = (0, 0);
    for index in 0..200u32 {
        let mut job = sim_job("schema-check", UnitRef::Cell(index % 7), Some(index), &spec);
        if index % 5 == 0 {
            job.forwarded_flags = vec!["--ablate-skill".to_owned()];
        }
        if index % 11 == 0 {
            job.command = cowork_schema::job::JobCommand::Replay;
        }
        let output = execute(job).await;
        let (name, result) = match &output.classified {
            Classified::Completed { result } => {
                n_completed += 1;
                assert_eq!(&artifact_json(&output, "result.json"), result);
                ("result.json", result.clone())
            }
            Classified::Unanswered { .. } => {
                n_partial += 1;
                (
                    "partial-result.json",
                    artifact_json(&output, "partial-result.json"),
                )
            }
            other => panic!("unexpected {other:?}"),
        };
        let errors: Vec<String> = validator
            .iter_errors(&result)
            .map(|error| format!("{} at {}", error, error.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{name} #{index} is invalid: {errors:?}\n{result}"
        );
        assert_eq!(result["simulated"], true);
        assert_eq!(result["generator"], "cowork-fleet-sim");
        assert!(
            output.artifact("envelope.json").is_none(),
            "the simulated envelope is not stored"
        );
    }
    assert!(
        n_completed > 100 && n_partial > 5,
        "{n_completed} / {n_partial}"
    );
}

#[tokio::test]
async fn unanswered_runs_are_classified_and_salvaged() {
    let spec = profile(
        1,
        SimRule {
            unanswered_rate: Some(1.0),
            ..SimRule::default()
        },
    );
    let output = execute(sim_job("s", UnitRef::File(0), None, &spec)).await;
    let Classified::Unanswered { message, hint } = &output.classified else {
        panic!("expected unanswered, got {:?}", output.classified);
    };
    assert!(message.contains("no scripted answer"), "{message}");
    assert!(hint.is_some());
    assert_eq!(output.exit_code, Some(2));
    let partial = artifact_json(&output, "partial-result.json");
    assert_eq!(partial["partial"], true);
    assert_eq!(
        partial["unansweredGate"]["message"],
        Value::from(message.clone())
    );
    assert!(output.artifact("result.json").is_none());
    let envelope =
        cowork_worker::executor::sim::simulate(&sim_job("s", UnitRef::File(0), None, &spec), &spec)
            .envelope;
    assert_eq!(envelope["error"]["category"], "unanswered");
    assert_eq!(envelope["simulated"], true);
}

#[tokio::test]
async fn missing_sim_spec_is_a_usage_error() {
    let mut job = sim_job("s", UnitRef::File(0), None, &profile(0, SimRule::default()));
    job.sim = None;
    let output = execute(job).await;
    assert_eq!(
        output.classified,
        Classified::Error {
            category: "usage".into(),
            message: "job b1/f0 uses the sim executor but carries no sim spec".to_owned(),
        }
    );
    assert!(!output.spawned);
}

fn scaled(time_scale: f64, timeout_ms: u64) -> JobSpec {
    let spec = profile(
        8,
        SimRule {
            duration_ms: Some(60_000),
            time_scale: Some(time_scale),
            ..SimRule::default()
        },
    );
    let mut job = sim_job("s", UnitRef::File(0), None, &spec);
    job.timeout_ms = timeout_ms;
    job
}

#[tokio::test(start_paused = true)]
async fn time_scale_sleeps_in_simulated_time() {
    let started = tokio::time::Instant::now();
    let output = execute(scaled(1.0, 600_000)).await;
    let Classified::Completed { result } = &output.classified else {
        panic!("expected a completed run, got {:?}", output.classified);
    };
    let duration_ms = result["durationMs"].as_u64().expect("durationMs");
    assert_eq!(
        started.elapsed(),
        std::time::Duration::from_millis(duration_ms),
        "the paused clock advanced by exactly the simulated duration"
    );
}

#[tokio::test(start_paused = true)]
async fn scaled_run_longer_than_the_timeout_times_out() {
    // 60 s ± 50% is at least 30 s, far above the 1 s limit.
    let output = execute(scaled(1.0, 1_000)).await;
    let Classified::Error { category, .. } = &output.classified else {
        panic!("expected a timeout, got {:?}", output.classified);
    };
    assert_eq!(*category, ErrorCategory::Timeout);
    assert!(output.spawned);
}

#[tokio::test(start_paused = true)]
async fn cancel_interrupts_a_scaled_run() {
    let cancel = CancellationToken::new();
    let context = context(scaled(1.0, 600_000));
    let executor = SimExecutor::new();
    let (output, ()) = tokio::join!(executor.execute(&context, cancel.clone()), async {
        // Virtual time: this 10 ms timer fires before the simulated run's (at least 30 s).
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        cancel.cancel();
    });
    assert_eq!(
        output.classified,
        Classified::Error {
            category: "cancelled".into(),
            message: "job was cancelled while the simulated run was in progress".to_owned(),
        }
    );
}
