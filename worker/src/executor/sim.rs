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
//! Profile rules ([`SimRule`]) are tried in order and the first rule that matches the job *and*
//! sets a field decides that field. A rule's `scenario` pattern is **not** a regex: it matches
//! as a plain substring of the scenario name, with an optional leading `^` (prefix) and
//! trailing `$` (suffix); `^name$` is an exact match. `baseline`, `model`, `skill_dir` and
//! `arm` match exactly.

use std::time::{Duration, Instant};

use cowork_schema::batch::{ExecutorKind, SimRule, SimSpec};
use cowork_schema::event::{ErrorCategory, InfraClass};
use cowork_schema::ids::UnitRef;
use cowork_schema::job::{JobCommand, JobSpec, Tier};
use cowork_schema::json_number;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    Artifact, ArtifactSource, Classified, ExecOutput, Executor, JobContext, scenario_in_bundle,
};
pub use cowork_core::sim_rules::{rule_matches, rules_matching_nothing, scenario_matches};

/// `generator` of every simulated result.
pub const SIM_GENERATOR: &str = "cowork-fleet-sim";

/// `version` of every simulated envelope, in place of the CLI version
/// (harness-behaviour.md#cli-version-pin).
pub const SIM_VERSION: &str = concat!("sim-", env!("CARGO_PKG_VERSION"));

/// Defaults of the profile fields (decisions.md#executors).
const DEFAULT_PASS_RATE: f64 = 0.9;
const DEFAULT_COST_USD: f64 = 0.05;
const DEFAULT_DURATION_MS: u64 = 45_000;
/// How far a run's duration strays from the mean by default: ±50%, like its cost.
const DEFAULT_DURATION_SPREAD: f64 = 0.5;

/// Model named in results when the cell has no model axis.
const DEFAULT_MODEL: &str = "claude-sonnet-4-5";
/// Skill offered in results when the cell has no skill-dir axis.
const DEFAULT_SKILL: &str = "sim-skill";

/// Share of failing runs whose agent turn itself errors (`result: "error"`); the rest fail on
/// assertions.
const RESULT_ERROR_SHARE: f64 = 0.25;
/// Share of live runs without scan evidence (a `scan_unavailable` warning).
const SCAN_UNAVAILABLE_RATE: f64 = 0.05;

/// Mixed into the seed of the fault-injection stream (usage limits, infra failures).
const FAULT_STREAM_SALT: u64 = 0xfa17_5eed_0bad_c0de;

/// Version tag hashed ahead of the inputs, so that a deliberate change of the model can change
/// every stream at once.
const STREAM_TAG: &[u8] = b"cowork-fleet-sim/v1";

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
        // (harness-behaviour.md#cassette-file).
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
        let mut output = run(&ctx.job, authored, &cancel).await;
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
    serde_json::to_vec_pretty(&cassette).expect("a JSON value always serializes")
}

async fn run(
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

    if simulated.time_scale > 0.0 {
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
                return spawned_error(
                    ErrorCategory::Cancelled,
                    "job was cancelled while the simulated run was in progress".to_owned(),
                );
            }
        }
        if timed_out {
            return spawned_error(
                ErrorCategory::Timeout,
                format!(
                    "job exceeded its timeout of {} ms (simulated run of {} ms at time scale {})",
                    job.timeout_ms, simulated.duration_ms, simulated.time_scale
                ),
            );
        }
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
            artifacts.push(json_artifact("result.json", &result));
            Classified::Completed { result }
        }
        SimOutcome::Unanswered {
            message,
            hint,
            partial_result,
        } => {
            artifacts.push(json_artifact("partial-result.json", &partial_result));
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
            serde_json::to_vec(value).expect("serializing a json value to memory cannot fail"),
        ),
    }
}

/// One simulated run.
#[derive(Clone, Debug, PartialEq)]
pub struct SimRun {
    /// The result, or the unanswered gate with its salvaged partial result.
    pub outcome: SimOutcome,
    /// The exit code the CLI would have had: 0 pass, 1 fail, 2 unanswered.
    pub exit_code: i32,
    /// The synthetic stdout envelope (harness-behaviour.md#envelope-success or
    /// harness-behaviour.md#envelope-error), marked simulated.
    pub envelope: Value,
    /// The simulated run duration (`durationMs`).
    pub duration_ms: u64,
    /// The profile's time scale; the executor sleeps `duration_ms * time_scale` when positive.
    pub time_scale: f64,
    /// Fault injection: the run "crashes" with an infrastructure failure after spending.
    pub infra_after_spend: bool,
}

/// How a simulated run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum SimOutcome {
    /// A completed run with its RunResult.
    Completed { result: Value },
    /// A run that stopped at an unanswered gate: the gate's message and hint, and the salvaged
    /// partial result (diagnostic only, never folded).
    Unanswered {
        message: String,
        hint: String,
        partial_result: Value,
    },
}

/// The profile in force for one job, after rule resolution and clamping.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedProfile {
    /// Probability that a completed run passes, in [0, 1].
    pub pass_rate: f64,
    /// Mean cost in USD; each run draws uniformly within ±50% of it.
    pub cost_usd: f64,
    /// Mean duration in milliseconds; each run draws uniformly within ±`duration_spread` of it.
    pub duration_ms: u64,
    /// How far durations stray from the mean, as a fraction in [0, 1] (default 0.5).
    pub duration_spread: f64,
    /// Probability that a run has neither `cost` nor `usage`, in [0, 1].
    pub missing_telemetry_rate: f64,
    /// Probability that a run is `nonDeterministic`, in [0, 1].
    pub non_deterministic_rate: f64,
    /// Probability that a run stops at an unanswered gate, in [0, 1].
    pub unanswered_rate: f64,
    /// Factor from simulated to real sleeping time; 0 = no sleep.
    pub time_scale: f64,
    /// Deliveries of the job that fail before the harness would spawn (fault injection).
    pub infra_failures: u32,
    /// Probability of an infrastructure failure after spend (fault injection), in [0, 1].
    pub infra_after_spend_rate: f64,
    /// Probability that a completed run hits the usage limit, in [0, 1].
    pub usage_limit_rate: f64,
}

/// Resolves the profile of `job`: per field, the first matching rule that sets it, else the
/// default. Rates are clamped to [0, 1]; a negative or non-finite value falls back to the
/// default (rates) or to 0 (cost, time scale).
pub fn resolve_profile(job: &JobSpec, rules: &[SimRule]) -> ResolvedProfile {
    let matching: Vec<&SimRule> = rules
        .iter()
        .filter(|rule| rule_matches(rule, job))
        .collect();
    let first_f64 =
        |field: fn(&SimRule) -> Option<f64>| matching.iter().find_map(|rule| field(rule));
    let rate = |field: fn(&SimRule) -> Option<f64>, default: f64| match first_f64(field) {
        Some(value) if value.is_finite() => value.clamp(0.0, 1.0),
        _ => default,
    };
    let non_negative = |field: fn(&SimRule) -> Option<f64>, default: f64| match first_f64(field) {
        Some(value) if value.is_finite() => value.max(0.0),
        Some(_) => 0.0,
        None => default,
    };
    ResolvedProfile {
        pass_rate: rate(|rule| rule.pass_rate, DEFAULT_PASS_RATE),
        cost_usd: non_negative(|rule| rule.cost_usd, DEFAULT_COST_USD),
        duration_ms: matching
            .iter()
            .find_map(|rule| rule.duration_ms)
            .unwrap_or(DEFAULT_DURATION_MS),
        duration_spread: rate(|rule| rule.duration_spread, DEFAULT_DURATION_SPREAD),
        missing_telemetry_rate: rate(|rule| rule.missing_telemetry_rate, 0.0),
        non_deterministic_rate: rate(|rule| rule.non_deterministic_rate, 0.0),
        unanswered_rate: rate(|rule| rule.unanswered_rate, 0.0),
        time_scale: non_negative(|rule| rule.time_scale, 0.0),
        infra_failures: matching
            .iter()
            .find_map(|rule| rule.infra_failures)
            .unwrap_or(0),
        infra_after_spend_rate: rate(|rule| rule.infra_after_spend_rate, 0.0),
        usage_limit_rate: rate(|rule| rule.usage_limit_rate, 0.0),
    }
}

/// FNV-1a, 64 bit.
#[derive(Clone, Copy, Debug)]
struct Fnv1a(u64);

impl Fnv1a {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Fnv1a {
        Fnv1a(Fnv1a::OFFSET_BASIS)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(Fnv1a::PRIME);
        }
    }

    /// Writes a length-prefixed string so that ("ab", "c") and ("a", "bc") hash differently.
    fn write_str(&mut self, text: &str) {
        self.write(&(text.len() as u64).to_le_bytes());
        self.write(text.as_bytes());
    }

    /// Writes a presence tag and then the value, so that `None` and `Some("")` differ.
    fn write_opt_str(&mut self, text: Option<&str>) {
        match text {
            None => self.write(&[0]),
            Some(text) => {
                self.write(&[1]);
                self.write_str(text);
            }
        }
    }
}

/// SplitMix64 (Steele, Lea and Flood), a small generator with a good 64-bit mix.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform draw in [0, 1) with 53 bits of precision.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform draw in `0..n` (`n > 0`); the modulo bias is below 2^-40 for the small `n`
    /// used here.
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// The generator of one job, seeded from the inputs that define its outcome.
fn job_stream(seed: u64, job: &JobSpec) -> SplitMix64 {
    let mut hash = Fnv1a::new();
    hash.write(STREAM_TAG);
    hash.write(&seed.to_le_bytes());
    hash.write_str(&job.scenario_name);
    let axes = job.axes.as_ref();
    hash.write_opt_str(axes.and_then(|axes| axes.baseline.as_deref()));
    hash.write_opt_str(axes.and_then(|axes| axes.model.as_deref()));
    hash.write_opt_str(axes.and_then(|axes| axes.skill_dir.as_deref()));
    hash.write_opt_str(job.arm.as_deref());
    match job.unit {
        UnitRef::File(index) => {
            hash.write(b"f");
            hash.write(&index.to_le_bytes());
        }
        UnitRef::Cell(index) => {
            hash.write(b"c");
            hash.write(&index.to_le_bytes());
        }
    }
    match job.repeat_index {
        None => hash.write(&[0]),
        Some(index) => {
            hash.write(&[1]);
            hash.write(&index.to_le_bytes());
        }
    }
    SplitMix64(hash.0)
}

/// One authored assertion the simulator can report.
#[derive(Clone, Copy, Debug)]
struct AssertionKind {
    key: &'static str,
    /// Whether it is about the skill being used (such assertions pass or fail together).
    about_skill: bool,
}

/// Assertions drawn after the leading `result: success`.
const ASSERTION_POOL: [AssertionKind; 4] = [
    AssertionKind {
        key: "tool_called",
        about_skill: true,
    },
    AssertionKind {
        key: "skill_triggered",
        about_skill: true,
    },
    AssertionKind {
        key: "transcript_contains",
        about_skill: false,
    },
    AssertionKind {
        key: "file_exists",
        about_skill: false,
    },
];

/// Simulates `job` under `spec`: a pure function of the job's outcome inputs and the spec.
pub fn simulate(job: &JobSpec, spec: &SimSpec) -> SimRun {
    simulate_scenario(job, spec, None)
}

/// [`simulate`] for a job whose scenario was read: the result carries one `assertions[]` entry
/// per authored assertion (see [`authored_assertions`]) instead of generic ones.
pub fn simulate_scenario(
    job: &JobSpec,
    spec: &SimSpec,
    authored: Option<Vec<(String, Map<String, Value>)>>,
) -> SimRun {
    let profile = resolve_profile(job, &spec.rules);
    let mut stream = job_stream(spec.seed, job);
    // The core draws come first and always in this order, so that changing one profile value
    // moves only the outcomes that depend on it.
    let draw_unanswered = stream.next_f64();
    let draw_pass = stream.next_f64();
    let draw_result_error = stream.next_f64();
    let draw_non_deterministic = stream.next_f64();
    let draw_missing_telemetry = stream.next_f64();
    let draw_scan_unavailable = stream.next_f64();
    let draw_cost = stream.next_f64();
    let draw_duration = stream.next_f64();
    let input_tokens = 1_000 + stream.below(20_000) as u64;
    let output_tokens = 100 + stream.below(4_000) as u64;

    let mut facts = RunFacts::new(job);
    facts.authored = authored;
    // With the default spread of 0.5 this is `duration_ms × (0.5 + draw)`, as it always was,
    // so a profile that does not set the spread draws the same durations as before.
    let spread = profile.duration_spread;
    let duration_ms =
        (profile.duration_ms as f64 * (1.0 - spread + 2.0 * spread * draw_duration)).round() as u64;
    let telemetry = (draw_missing_telemetry >= profile.missing_telemetry_rate).then(|| {
        // ±50% around the mean, rounded to 1e-8 USD like the SDK's figures.
        let usd = (profile.cost_usd * (0.5 + draw_cost) * 1e8).round() / 1e8;
        Telemetry {
            usd,
            input_tokens,
            output_tokens,
        }
    });
    let non_deterministic = draw_non_deterministic < profile.non_deterministic_rate;
    let scan_available = facts.replay || draw_scan_unavailable >= SCAN_UNAVAILABLE_RATE;

    if draw_unanswered < profile.unanswered_rate {
        let mut run = unanswered_run(&facts, duration_ms, telemetry.as_ref());
        run.time_scale = profile.time_scale;
        return run;
    }

    // Fault draws come from their own stream, so a fault profile never moves the outcomes of
    // the core draws above (an undisturbed batch and a faulty one agree run by run).
    let mut faults = job_stream(spec.seed ^ FAULT_STREAM_SALT, job);
    let usage_limited = faults.next_f64() < profile.usage_limit_rate;
    let infra_after_spend = faults.next_f64() < profile.infra_after_spend_rate;
    let pass = !usage_limited && draw_pass < profile.pass_rate;
    let result_error = !pass && (usage_limited || draw_result_error < RESULT_ERROR_SHARE);
    let assertions = draw_assertions(&mut stream, &facts, pass, result_error);
    let skill_failed = assertions
        .iter()
        .any(|entry| entry.kind.about_skill && !entry.pass);
    let skills_invoked: Vec<&str> = if facts.ablated || skill_failed {
        Vec::new()
    } else {
        vec![facts.skill.as_str()]
    };

    let (signals, failures) = verdict_signals(
        &assertions,
        usage_limited,
        result_error,
        scan_available,
        non_deterministic,
    );
    let verdict_pass = !signals
        .iter()
        .any(|signal| signal.get("severity").and_then(Value::as_str) == Some("fail"));
    debug_assert_eq!(verdict_pass, pass, "the drawn outcome decides the verdict");
    let result = completed_result(
        &facts,
        &CompletedDraws {
            usage_limited,
            result_error,
            non_deterministic,
            scan_available,
            duration_ms,
        },
        &assertions,
        telemetry.as_ref(),
        &skills_invoked,
        json!({
            "pass": verdict_pass,
            "exitCode": if verdict_pass { 0 } else { 1 },
            "signals": signals,
            "guards": guards(facts.replay, scan_available),
            "failures": failures,
        }),
    );

    let mut entry = result.clone();
    if let Value::Object(entry) = &mut entry {
        entry.insert("provenance".into(), provenance(&facts, &skills_invoked));
    }
    let envelope = json!({
        "tool": "cowork-harness",
        "version": SIM_VERSION,
        "command": job.command.as_str(),
        "ok": verdict_pass,
        "results": [entry],
        "error": null,
        "generator": SIM_GENERATOR,
        "simulated": true,
    });
    SimRun {
        outcome: SimOutcome::Completed { result },
        exit_code: if verdict_pass { 0 } else { 1 },
        envelope,
        duration_ms,
        time_scale: profile.time_scale,
        infra_after_spend,
    }
}

/// The verdict's signals and failures of a completed run: one per failing assertion, then the
/// guard that failed (a usage limit or an agent error), then the warnings.
fn verdict_signals(
    assertions: &[AssertionEntry],
    usage_limited: bool,
    result_error: bool,
    scan_available: bool,
    non_deterministic: bool,
) -> (Vec<Value>, Vec<Value>) {
    let mut signals = Vec::new();
    let mut failures = Vec::new();
    for entry in assertions.iter().filter(|entry| !entry.pass) {
        signals.push(signal("assertion", "fail", &entry.message));
        failures
            .push(json!({"assertion": entry.key(), "message": entry.message, "kind": "assertion"}));
    }
    if usage_limited {
        let message = "the agent hit a usage limit";
        signals.push(signal("usage_limit", "fail", message));
        failures.push(json!({"message": message, "kind": "guard"}));
    } else if result_error {
        let message = "the agent turn ended with an error (simulated)";
        signals.push(signal("result_error", "fail", message));
        failures.push(json!({"message": message, "kind": "guard"}));
    }
    if !scan_available {
        signals.push(signal(
            "scan_unavailable",
            "warn",
            "no scan evidence for this run (simulated)",
        ));
    }
    if non_deterministic {
        signals.push(signal(
            "non_deterministic",
            "warn",
            "a gate was decided non-deterministically (simulated)",
        ));
    }
    (signals, failures)
}

/// The draws of a completed run that shape its result beyond the assertions.
struct CompletedDraws {
    usage_limited: bool,
    result_error: bool,
    non_deterministic: bool,
    scan_available: bool,
    duration_ms: u64,
}

/// The RunResult of a completed run, its keys in the CLI's order.
fn completed_result(
    facts: &RunFacts,
    draws: &CompletedDraws,
    assertions: &[AssertionEntry],
    telemetry: Option<&Telemetry>,
    skills_invoked: &[&str],
    verdict: Value,
) -> Value {
    let verdict_pass = verdict.get("pass").and_then(Value::as_bool) == Some(true);
    let outcome = if draws.result_error {
        "errored"
    } else if verdict_pass {
        "delivered_clean"
    } else {
        "delivered_with_verdict_fail"
    };
    let mut result = facts.head(if draws.result_error {
        "error"
    } else {
        "success"
    });
    if draws.usage_limited {
        result.insert("resultErrorKind".into(), json!("usage_limit"));
        result.insert("errorSource".into(), json!("agent"));
        result.insert("resultSubtype".into(), json!("error_during_execution"));
    } else if draws.result_error {
        result.insert("resultErrorKind".into(), json!("agent"));
        result.insert("errorSource".into(), json!("agent"));
        result.insert("resultSubtype".into(), json!("error_during_execution"));
    } else {
        result.insert("resultSubtype".into(), json!("success"));
    }
    facts.insert_common(&mut result, &models_of(facts));
    result.insert(
        "assertions".into(),
        Value::Array(assertions.iter().map(AssertionEntry::to_json).collect()),
    );
    insert_telemetry(&mut result, telemetry);
    result.insert("skillsInvoked".into(), json!(skills_invoked));
    result.insert("durationMs".into(), json!(draws.duration_ms));
    result.insert("nonDeterministic".into(), json!(draws.non_deterministic));
    if draws.scan_available && !facts.replay {
        result.insert(
            "scan".into(),
            json!({"outputsDeletes": [], "hostPathLeaked": false, "selfHealRan": false}),
        );
    }
    facts.insert_tail(&mut result);
    result.insert("outcome".into(), json!(outcome));
    result.insert("verdict".into(), verdict);
    Value::Object(result)
}

/// The `models` list of a result: the cell's model axis or the default.
fn models_of(facts: &RunFacts) -> Vec<String> {
    vec![facts.model.clone()]
}

/// The part of a run that does not depend on the drawn outcome.
#[derive(Clone, Debug)]
struct RunFacts {
    command: JobCommand,
    scenario: String,
    fidelity: &'static str,
    baseline: String,
    model: String,
    skill: String,
    ablated: bool,
    label: Option<String>,
    replay: bool,
    out_dir: String,
    /// The scenario's authored assertions, when the simulator could read the scenario.
    authored: Option<Vec<(String, Map<String, Value>)>>,
}

impl RunFacts {
    fn new(job: &JobSpec) -> RunFacts {
        let axes = job.axes.as_ref();
        let skill = axes
            .and_then(|axes| axes.skill_dir.as_deref())
            .and_then(|dir| dir.trim_end_matches('/').rsplit('/').next())
            .filter(|name| !name.is_empty())
            .unwrap_or(DEFAULT_SKILL)
            .to_owned();
        let unit = match job.unit {
            UnitRef::File(index) => format!("f{index}"),
            UnitRef::Cell(index) => format!("c{index}"),
        };
        RunFacts {
            command: job.command,
            scenario: job.scenario_name.clone(),
            fidelity: match job.tier {
                Tier::Container | Tier::Replay => "container",
                Tier::Hostloop => "hostloop",
                Tier::Microvm => "microvm",
                Tier::Protocol => "protocol",
            },
            baseline: axes
                .and_then(|axes| axes.baseline.clone())
                .unwrap_or_else(|| "latest".to_owned()),
            model: axes
                .and_then(|axes| axes.model.clone())
                .unwrap_or_else(|| DEFAULT_MODEL.to_owned()),
            skill,
            ablated: job
                .forwarded_flags
                .iter()
                .any(|flag| flag == "--ablate-skill"),
            label: job
                .forwarded_flags
                .iter()
                .position(|flag| flag == "--label")
                .and_then(|at| job.forwarded_flags.get(at + 1))
                .cloned(),
            replay: job.command == JobCommand::Replay,
            out_dir: format!(
                "sim://{}/{unit}/{}",
                job.scenario_name,
                job.repeat_index.unwrap_or(0)
            ),
            authored: None,
        }
    }

    /// The leading keys of a result, in the CLI's order.
    fn head(&self, result: &str) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert("generator".into(), json!(SIM_GENERATOR));
        map.insert("simulated".into(), json!(true));
        map.insert("mode".into(), json!("run"));
        map.insert("command".into(), json!(self.command.as_str()));
        // `lane` is where the run executed (`local` or `remote`), not the verdict lane.
        map.insert("lane".into(), json!("local"));
        map.insert("scenario".into(), json!(self.scenario));
        map.insert("fidelity".into(), json!(self.fidelity));
        map.insert("baseline".into(), json!(self.baseline));
        map.insert("result".into(), json!(result));
        map
    }

    /// Decisions, models, context and egress.
    fn insert_common(&self, map: &mut Map<String, Value>, models: &[String]) {
        map.insert("decisions".into(), json!([]));
        map.insert("models".into(), json!(models));
        let available: Vec<Value> = if self.ablated {
            Vec::new()
        } else {
            vec![json!({"id": self.skill})]
        };
        map.insert("context".into(), json!({"availableSkills": available}));
        map.insert("egress".into(), json!([]));
    }

    /// Label, ablation, fidelity and run dir.
    fn insert_tail(&self, map: &mut Map<String, Value>) {
        if let Some(label) = &self.label {
            map.insert("runLabel".into(), json!(label));
        }
        if self.ablated {
            map.insert("ablated".into(), json!(true));
        }
        map.insert("effectiveFidelity".into(), json!(self.fidelity));
        map.insert("outDir".into(), json!(self.out_dir));
    }
}

#[derive(Clone, Copy, Debug)]
struct Telemetry {
    usd: f64,
    input_tokens: u64,
    output_tokens: u64,
}

fn insert_telemetry(map: &mut Map<String, Value>, telemetry: Option<&Telemetry>) {
    if let Some(telemetry) = telemetry {
        map.insert(
            "usage".into(),
            json!({
                "input_tokens": telemetry.input_tokens,
                "output_tokens": telemetry.output_tokens,
                "turns": 1,
            }),
        );
        map.insert(
            "cost".into(),
            json!({"usd": json_number::to_value(telemetry.usd)}),
        );
    }
}

/// One `assertions[]` entry of a simulated result.
#[derive(Clone, Debug)]
struct AssertionEntry {
    kind: AssertionKind,
    argument: Value,
    pass: bool,
    message: String,
    evidence: String,
    /// The scenario's own assertion object (key order as the CLI stores it), when the simulator
    /// read the scenario; it replaces `kind` and `argument` in the output.
    authored: Option<(String, Map<String, Value>)>,
}

impl AssertionEntry {
    fn new(kind: AssertionKind, skill: &str, pass: bool) -> AssertionEntry {
        let (argument, failure, evidence) = match kind.key {
            "result" => (
                json!("success"),
                "expected result success, got error".to_owned(),
                "result: success".to_owned(),
            ),
            "tool_called" => (
                json!("Skill"),
                "tool Skill was never called".to_owned(),
                "tool_called: Skill called 1 time".to_owned(),
            ),
            "skill_triggered" => (
                json!(skill),
                format!("skill {skill} was not triggered"),
                format!("skill_triggered: {skill} invoked"),
            ),
            "transcript_contains" => (
                json!("Summary"),
                "transcript does not contain \"Summary\"".to_owned(),
                "transcript_contains: found \"Summary\"".to_owned(),
            ),
            _ => (
                json!("outputs/report.md"),
                "file outputs/report.md does not exist".to_owned(),
                "file_exists: outputs/report.md".to_owned(),
            ),
        };
        AssertionEntry {
            kind,
            argument,
            pass,
            message: failure,
            evidence,
            authored: None,
        }
    }

    /// An entry for one authored assertion of the scenario.
    fn authored(key: String, object: Map<String, Value>, pass: bool) -> AssertionEntry {
        let argument = object.get(&key).cloned().unwrap_or(Value::Null);
        let shown = match &argument {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        AssertionEntry {
            kind: AssertionKind {
                key: "authored",
                about_skill: is_about_skill(&key, &argument),
            },
            message: format!("{key} {shown} did not hold (simulated)"),
            evidence: format!("{key}: {shown} held (simulated)"),
            argument,
            pass,
            authored: Some((key, object)),
        }
    }

    /// The assertion's first key, as the rollups label it.
    fn key(&self) -> &str {
        match &self.authored {
            Some((key, _)) => key,
            None => self.kind.key,
        }
    }

    fn to_json(&self) -> Value {
        let assertion = match &self.authored {
            Some((_, object)) => object.clone(),
            None => {
                let mut assertion = Map::new();
                assertion.insert(self.kind.key.to_owned(), self.argument.clone());
                assertion
            }
        };
        if self.pass {
            json!({"assertion": assertion, "pass": true, "evidence": self.evidence})
        } else {
            json!({"assertion": assertion, "pass": false, "message": self.message})
        }
    }
}

/// Draws 2–4 assertions consistent with the outcome: all pass on a pass; on a failure at least
/// one fails, and `result: success` fails exactly when the agent turn errored.
fn draw_assertions(
    stream: &mut SplitMix64,
    facts: &RunFacts,
    pass: bool,
    result_error: bool,
) -> Vec<AssertionEntry> {
    if let Some(authored) = facts.authored.as_deref().filter(|list| !list.is_empty()) {
        return draw_authored(stream, authored, pass, result_error);
    }
    let pool: Vec<AssertionKind> = ASSERTION_POOL
        .iter()
        .copied()
        .filter(|kind| !(facts.ablated && kind.about_skill))
        .collect();
    let n_extra = (1 + stream.below(3)).min(pool.len());
    // A partial Fisher–Yates shuffle picks `n_extra` distinct entries in drawn order.
    let mut order: Vec<usize> = (0..pool.len()).collect();
    for slot in 0..n_extra {
        let pick = slot + stream.below(order.len() - slot);
        order.swap(slot, pick);
    }
    let sure_failure = stream.below(n_extra);
    let mut extra_fails: Vec<bool> = (0..n_extra)
        .map(|slot| {
            let draw = stream.next_f64();
            match (pass, result_error) {
                (true, _) => false,
                (false, true) => draw < 0.5,
                (false, false) => slot == sure_failure || draw < 0.3,
            }
        })
        .collect();
    // Skill assertions describe one fact (was the skill used), so they fail together.
    let skill_failed = (0..n_extra).any(|slot| pool[order[slot]].about_skill && extra_fails[slot]);
    for (slot, fails) in extra_fails.iter_mut().enumerate() {
        if pool[order[slot]].about_skill && skill_failed {
            *fails = true;
        }
    }

    let result_kind = AssertionKind {
        key: "result",
        about_skill: false,
    };
    let mut entries = vec![AssertionEntry::new(
        result_kind,
        &facts.skill,
        !result_error,
    )];
    for slot in 0..n_extra {
        entries.push(AssertionEntry::new(
            pool[order[slot]],
            &facts.skill,
            !extra_fails[slot],
        ));
    }
    entries
}

/// One outcome per authored assertion, consistent with the drawn verdict: all pass on a pass;
/// on a failure `result` fails exactly when the agent turn errored, at least one assertion fails,
/// and assertions about the skill fail together.
fn draw_authored(
    stream: &mut SplitMix64,
    authored: &[(String, Map<String, Value>)],
    pass: bool,
    result_error: bool,
) -> Vec<AssertionEntry> {
    let n = authored.len();
    let others: Vec<usize> = (0..n).filter(|&i| authored[i].0 != "result").collect();
    let sure_failure = if others.is_empty() {
        None
    } else {
        Some(others[stream.below(others.len())])
    };
    let mut fails: Vec<bool> = (0..n)
        .map(|i| {
            let draw = stream.next_f64();
            let is_result = authored[i].0 == "result";
            match (pass, result_error, is_result) {
                (true, _, _) => false,
                (false, true, true) => true,
                (false, false, true) => false,
                (false, true, false) => draw < 0.5,
                (false, false, false) => Some(i) == sure_failure || draw < 0.3,
            }
        })
        .collect();
    if !pass && !fails.iter().any(|f| *f) {
        // Only `result` was authored and the turn did not error: it still has to explain the
        // failure.
        fails[0] = true;
    }
    let about_skill: Vec<bool> = authored
        .iter()
        .map(|(key, object)| is_about_skill(key, object.get(key).unwrap_or(&Value::Null)))
        .collect();
    let skill_failed = (0..n).any(|i| about_skill[i] && fails[i]);
    authored
        .iter()
        .enumerate()
        .map(|(i, (key, object))| {
            let failed = fails[i] || (about_skill[i] && skill_failed);
            AssertionEntry::authored(key.clone(), object.clone(), !failed)
        })
        .collect()
}

/// Whether an assertion is about the skill being used (such assertions pass or fail together).
fn is_about_skill(key: &str, argument: &Value) -> bool {
    key.starts_with("skill_") || (key == "tool_called" && argument.as_str() == Some("Skill"))
}

/// The scenario's assertions as the CLI stores them: each object's keys in the schema's
/// declaration order (harness-behaviour.md#repeat-rollup), paired with the first key. `None` when
/// the scenario cannot be read, in which case the simulator draws generic assertions.
pub fn authored_assertions(scenario: &Value) -> Option<Vec<(String, Map<String, Value>)>> {
    let entries = scenario.get("assert")?.as_array()?;
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let object = entry.as_object()?;
        let mut normalized = Map::new();
        for key in cowork_schema::scenario::SCHEMA_ASSERTION_KEYS {
            if let Some(value) = object.get(*key) {
                normalized.insert((*key).to_owned(), value.clone());
            }
        }
        for (key, value) in object {
            if !normalized.contains_key(key) {
                normalized.insert(key.clone(), value.clone());
            }
        }
        let first = normalized.keys().next()?.clone();
        out.push((first, normalized));
    }
    Some(out)
}

fn signal(code: &str, severity: &str, message: &str) -> Value {
    json!({"code": code, "severity": severity, "message": message})
}

/// The fixed guard roster of harness-behaviour.md#guard-roster; the replay lane drops the live-only
/// guards.
fn guards(replay: bool, scan_available: bool) -> Value {
    let live = |status: &'static str| if replay { "na" } else { status };
    let scanned = if scan_available { "ok" } else { "unverified" };
    json!([
        {"name": "capability-use", "status": "na"},
        {"name": "permissive-auto-allow", "status": live("ok")},
        {"name": "host-path", "status": live(scanned)},
        {"name": "outputs-delete", "status": live(scanned)},
    ])
}

/// Per-run provenance (harness-behaviour.md#provenance) for the envelope's result entry.
fn provenance(facts: &RunFacts, skills_invoked: &[&str]) -> Value {
    let skill = if facts.ablated {
        "not-offered"
    } else if skills_invoked.is_empty() {
        "offered,NOT-invoked"
    } else {
        "offered,invoked"
    };
    json!({"model": facts.model, "skill": skill, "ablated": facts.ablated})
}

/// A run that stopped at an unanswered gate: exit 2, an error envelope and a salvaged partial
/// result (harness-behaviour.md#outcome-classes) that is diagnostic only.
fn unanswered_run(facts: &RunFacts, duration_ms: u64, telemetry: Option<&Telemetry>) -> SimRun {
    let message =
        "no scripted answer matched the question \"Which format should the report use?\" \
                   (on_unanswered: fail; simulated)"
            .to_owned();
    let hint =
        "add an answers: rule for this question or run with --on-unanswered first".to_owned();
    let result_error = "the agent turn ended with an error (simulated)";

    let mut partial = facts.head("error");
    partial.insert("partial".into(), json!(true));
    partial.insert(
        "unansweredGate".into(),
        json!({"message": message, "hint": hint}),
    );
    partial.insert("resultErrorKind".into(), json!("agent"));
    facts.insert_common(&mut partial, &models_of(facts));
    partial.insert("assertions".into(), json!([]));
    insert_telemetry(&mut partial, telemetry);
    partial.insert("durationMs".into(), json!(duration_ms));
    partial.insert("nonDeterministic".into(), json!(false));
    if !facts.replay {
        partial.insert(
            "scan".into(),
            json!({"outputsDeletes": [], "hostPathLeaked": false, "selfHealRan": false}),
        );
    }
    facts.insert_tail(&mut partial);
    partial.insert("outcome".into(), json!("errored"));
    // `failures[]` (harness-behaviour.md#verdict-failures): with an unanswered gate the
    // result_error failure is replaced by the gate's message.
    partial.insert(
        "verdict".into(),
        json!({
            "pass": false,
            "exitCode": 1,
            "signals": [signal("result_error", "fail", result_error)],
            "guards": guards(facts.replay, !facts.replay),
            "failures": [{"message": message, "kind": "guard"}],
        }),
    );

    let envelope = json!({
        "tool": "cowork-harness",
        "version": SIM_VERSION,
        "command": facts.command.as_str(),
        "ok": false,
        "results": [],
        "error": {"category": "unanswered", "message": message, "hint": hint},
        "generator": SIM_GENERATOR,
        "simulated": true,
    });
    SimRun {
        outcome: SimOutcome::Unanswered {
            message,
            hint,
            partial_result: Value::Object(partial),
        },
        exit_code: 2,
        envelope,
        duration_ms,
        time_scale: 0.0,
        infra_after_spend: false,
    }
}

#[cfg(test)]
mod tests;
