//! The executor's side of a simulated run: the scaled sleep under the job's timeout and cancel
//! token, the injected loss after spend, and the output with its artifacts.

use std::time::Duration;

use cowork_schema::event::{ErrorCategory, InfraClass};
use cowork_schema::job::JobSpec;
use cowork_schema::layout::names;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::SIM_VERSION;
use super::simulate::{SimOutcome, SimRun, simulate_scenario};
use crate::executor::{Artifact, ArtifactSource, Classified, ExecOutput};

/// Runs `job`'s simulation: refuses a cancelled job or one without a sim spec, sleeps when the
/// profile scales time, and turns the drawn run into the executor's output.
pub(super) async fn run(
    job: &JobSpec,
    authored: Option<Vec<(String, Map<String, Value>)>>,
    cancel: &CancellationToken,
) -> ExecOutput {
    let not_run = |category: ErrorCategory, message: String| ExecOutput {
        classified: Classified::error(category, message),
        exit_code: None,
        harness_version: None,
        spawned: false,
        artifacts: Vec::new(),
        run_ms: 0,
    };
    if cancel.is_cancelled() {
        return not_run(
            ErrorCategory::Cancelled,
            "job was cancelled before the simulated run started".to_owned(),
        );
    }
    let Some(spec) = &job.sim else {
        return not_run(
            ErrorCategory::Usage,
            format!(
                "job {} uses the sim executor but carries no sim spec",
                job.job_id
            ),
        );
    };
    let simulated = simulate_scenario(job, spec, authored);

    if simulated.time_scale > 0.0
        && let Some(ended) = sleep_scaled(job, &simulated, cancel).await
    {
        return ended;
    }

    if simulated.infra_after_spend {
        // Fault injection: the sandbox died after the agent ran, so the spend happened and
        // the job must not be retried (harness-behaviour.md#choice-c8).
        return ExecOutput {
            classified: Classified::Infra {
                class: InfraClass::WorkerLost,
                message: "simulated sandbox loss after the agent started (spend happened)"
                    .to_owned(),
            },
            exit_code: None,
            harness_version: Some(SIM_VERSION.to_owned()),
            spawned: true,
            artifacts: Vec::new(),
            run_ms: 0,
        };
    }
    // The simulated stdout envelope is not stored: it says nothing the result does not, and
    // every stored object is a durable write per job that benchmarks of the fleet would pay.
    let mut artifacts = Vec::new();
    let classified = match simulated.outcome {
        SimOutcome::Completed { result } => {
            artifacts.push(json_artifact(names::RESULT, &result));
            Classified::Completed { result }
        }
        SimOutcome::Unanswered {
            message,
            hint,
            partial_result,
        } => {
            artifacts.push(json_artifact(names::PARTIAL_RESULT, &partial_result));
            Classified::Unanswered {
                message,
                hint: Some(hint),
            }
        }
    };
    ExecOutput {
        classified,
        exit_code: Some(simulated.exit_code),
        harness_version: Some(SIM_VERSION.to_owned()),
        spawned: true,
        artifacts,
        run_ms: 0,
    }
}

/// Sleeps for the run's simulated duration times its time scale, at most the job's timeout;
/// the output of a job that was cancelled meanwhile or timed out, else `None`.
async fn sleep_scaled(
    job: &JobSpec,
    simulated: &SimRun,
    cancel: &CancellationToken,
) -> Option<ExecOutput> {
    let scaled_ms = simulated.duration_ms as f64 * simulated.time_scale;
    let timed_out = scaled_ms > job.timeout_ms as f64;
    let sleep_ms = if timed_out {
        job.timeout_ms as f64
    } else {
        scaled_ms
    };
    // `sleep_ms` is finite and at most the timeout, so the conversion cannot fail; the
    // fallback only keeps this function free of panics.
    let sleep_for = Duration::try_from_secs_f64(sleep_ms / 1000.0).unwrap_or(Duration::MAX);
    let sleep = tokio::time::sleep(sleep_for);
    // Dropping the sleep on cancellation leaves nothing behind: the simulator holds no
    // resources while it waits.
    tokio::select! {
        () = sleep => {}
        () = cancel.cancelled() => {
            return Some(spawned_error(
                ErrorCategory::Cancelled,
                "job was cancelled while the simulated run was in progress".to_owned(),
            ));
        }
    }
    if timed_out {
        return Some(spawned_error(
            ErrorCategory::Timeout,
            format!(
                "job exceeded its timeout of {} ms (simulated run of {} ms at time scale {})",
                job.timeout_ms, simulated.duration_ms, simulated.time_scale
            ),
        ));
    }
    None
}

fn spawned_error(category: ErrorCategory, message: String) -> ExecOutput {
    ExecOutput {
        classified: Classified::error(category, message),
        exit_code: None,
        harness_version: None,
        spawned: true,
        artifacts: Vec::new(),
        run_ms: 0,
    }
}

fn json_artifact(name: &str, value: &Value) -> Artifact {
    Artifact {
        name: name.to_owned(),
        source: ArtifactSource::Bytes(
            cowork_schema::json_number::to_vec(value)
                .expect("serializing a json value to memory cannot fail"),
        ),
    }
}
