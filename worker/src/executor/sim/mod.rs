//! The `sim` executor: a seeded simulator of the CLI (decisions.md#executors).
//!
//! The outcome of a job is a pure function of `(seed, scenario_name, axes, arm, unit,
//! repeat_index)`, and of nothing else: not the batch id, the worker, the clock or the delivery
//! attempt. The same batch therefore gives byte-identical results on any number of workers and
//! in any order, which is what the determinism of rollups rests on. The inputs are hashed with
//! FNV-1a (64 bit) and drive an inline SplitMix64 generator; no `rand` crate, so the stream can
//! never change under us with a dependency update.
//!
//! Every result is schema-valid (`run-result.json`), carries `"generator": "cowork-fleet-sim"`
//! and `"simulated": true`, and its verdict, signals, failures, guards and outcome agree with
//! each other as the CLI's would (harness-behaviour.md#verdict).
//!
//! Profile rules ([`SimRule`](cowork_schema::batch::SimRule)) are tried in order and the first
//! rule that matches the job *and* sets a field decides that field. A rule's `scenario` pattern
//! is **not** a regex: it matches as a plain substring of the scenario name, with an optional
//! leading `^` (prefix) and trailing `$` (suffix); `^name$` is an exact match. `baseline`,
//! `model`, `skill_dir` and `arm` match exactly.
//!
//! Modules: `stream` (the seeded generator), `profile` (rule resolution), `facts` (what a run
//! is regardless of its draws), `assertions` (the assertions a result reports), `simulate` (one
//! run drawn into a result and envelope) and `run` (the executor's side: sleeping, faults,
//! output).

mod assertions;
mod facts;
mod profile;
mod run;
mod simulate;
mod stream;

use std::time::Instant;

use cowork_schema::batch::ExecutorKind;
use cowork_schema::event::{ErrorCategory, InfraClass};
use cowork_schema::job::{JobCommand, JobSpec};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub use self::assertions::authored_assertions;
pub use self::profile::{ResolvedProfile, resolve_profile};
pub use self::simulate::{SimOutcome, SimRun, simulate, simulate_scenario};
use super::{
    Artifact, ArtifactSource, Classified, ExecOutput, Executor, JobContext, scenario_in_bundle,
};
pub use cowork_core::sim_rules::{rule_matches, rules_matching_nothing, scenario_matches};

/// `generator` of every simulated result.
pub const SIM_GENERATOR: &str = "cowork-fleet-sim";

/// `version` of every simulated envelope, in place of the CLI version
/// (harness-behaviour.md#cli-version-pin).
pub const SIM_VERSION: &str = concat!("sim-", env!("CARGO_PKG_VERSION"));

/// Runs jobs with the simulator.
#[derive(Debug, Default)]
pub struct SimExecutor {}

impl SimExecutor {
    /// Creates the simulator; it has no state.
    pub fn new() -> SimExecutor {
        SimExecutor {}
    }
}

#[async_trait::async_trait]
impl Executor for SimExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Sim
    }

    #[tracing::instrument(skip_all, fields(job_id = %ctx.job.job_id, executor = "sim"))]
    async fn execute(&self, ctx: &JobContext, cancel: CancellationToken) -> ExecOutput {
        let started = Instant::now();
        // The same confinement as the harness executor's: a path outside the bundle is a usage
        // error of the job, and nothing is read.
        let scenario_path = match scenario_in_bundle(&ctx.job, &ctx.bundle_dir) {
            Ok(path) => path,
            Err(error) => {
                return ExecOutput {
                    classified: Classified::error(ErrorCategory::Usage, error.to_string()),
                    exit_code: None,
                    harness_version: None,
                    spawned: false,
                    artifacts: Vec::new(),
                    run_ms: 0,
                };
            }
        };
        // The scenario is read for its assertions only; an unreadable one falls back to generic
        // assertions rather than failing the simulated run.
        let document = tokio::fs::read_to_string(&scenario_path)
            .await
            .ok()
            .and_then(|text| cowork_schema::load::yaml_to_json(&text, &scenario_path).ok());
        // A cassette (replay) freezes its scenario under `scenario`
        // (harness-behaviour.md#cassette-file). Read by key: the cassette is the CLI's document,
        // its shape open across CLI versions.
        let scenario = match &document {
            Some(doc) if ctx.job.command == JobCommand::Replay => doc.get("scenario").cloned(),
            other => other.clone(),
        };
        let authored = scenario.as_ref().and_then(authored_assertions);
        if let Some(spec) = &ctx.job.sim {
            let profile = resolve_profile(&ctx.job, &spec.rules);
            if ctx.attempt <= profile.infra_failures {
                // Fault injection: the sandbox "failed to start", so nothing was spent and the
                // worker may hand the job back (harness-behaviour.md#choice-c8).
                return ExecOutput {
                    classified: Classified::Infra {
                        class: InfraClass::Spawn,
                        message: format!(
                            "simulated sandbox start failure (attempt {} of the first {} that fail)",
                            ctx.attempt, profile.infra_failures
                        ),
                    },
                    exit_code: None,
                    harness_version: None,
                    spawned: false,
                    artifacts: Vec::new(),
                    run_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                };
            }
        }
        let mut output = run::run(&ctx.job, authored, &cancel).await;
        if ctx.job.command == JobCommand::Record
            && matches!(output.classified, Classified::Completed { .. })
        {
            output.artifacts.push(Artifact {
                name: "cassette.json".to_owned(),
                source: ArtifactSource::Bytes(sim_cassette(&ctx.job, scenario.as_ref())),
            });
        }
        output.run_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        output
    }
}

/// A cassette for a simulated `record` job: the frozen scenario and no events, marked simulated
/// so it can never pass for a real recording.
fn sim_cassette(job: &JobSpec, scenario: Option<&Value>) -> Vec<u8> {
    let mut frozen = scenario.cloned().unwrap_or_else(|| json!({"prompt": ""}));
    if let Value::Object(map) = &mut frozen {
        map.insert("name".into(), json!(job.scenario_name));
    }
    let cassette = json!({
        "generator": SIM_GENERATOR,
        "simulated": true,
        "cassetteVersion": 12,
        "scenario": frozen,
        "events": [],
        "controlOut": [],
    });
    cowork_schema::json_number::to_vec_pretty(&cassette).expect("a JSON value always serializes")
}

#[cfg(test)]
mod tests;
