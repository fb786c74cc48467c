//! One simulated run: the core draws, then the fault draws from their own stream, drawn into a
//! RunResult whose verdict, signals, failures, guards and outcome agree as the CLI's would.

use cowork_schema::batch::SimSpec;
use cowork_schema::job::JobSpec;
use serde_json::{Map, Value, json};

use super::assertions::{AssertionEntry, draw_assertions};
use super::facts::{RunFacts, Telemetry, insert_telemetry, models_of};
use super::profile::{ResolvedProfile, resolve_profile};
use super::stream::{FAULT_STREAM_SALT, SplitMix64, job_stream};
use super::{SIM_GENERATOR, SIM_VERSION};

/// Share of failing runs whose agent turn itself errors (`result: "error"`); the rest fail on
/// assertions.
const RESULT_ERROR_SHARE: f64 = 0.25;

/// Share of live runs without scan evidence (a `scan_unavailable` warning).
const SCAN_UNAVAILABLE_RATE: f64 = 0.05;

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

/// Simulates `job` under `spec`: a pure function of the job's outcome inputs and the spec.
pub fn simulate(job: &JobSpec, spec: &SimSpec) -> SimRun {
    simulate_scenario(job, spec, None)
}

/// [`simulate`] for a job whose scenario was read: the result carries one `assertions[]` entry
/// per authored assertion (see [`super::authored_assertions`]) instead of generic ones.
pub fn simulate_scenario(
    job: &JobSpec,
    spec: &SimSpec,
    authored: Option<Vec<(String, Map<String, Value>)>>,
) -> SimRun {
    let profile = resolve_profile(job, &spec.rules);
    let mut stream = job_stream(spec.seed, job);
    let draws = CoreDraws::draw(&mut stream);

    let mut facts = RunFacts::new(job);
    facts.authored = authored;
    // With the default spread of 0.5 this is `duration_ms × (0.5 + draw)`, as it always was,
    // so a profile that does not set the spread draws the same durations as before.
    let spread = profile.duration_spread;
    let duration_ms = (profile.duration_ms as f64 * (1.0 - spread + 2.0 * spread * draws.duration))
        .round() as u64;
    let telemetry = drawn_telemetry(&profile, &draws);
    let non_deterministic = draws.non_deterministic < profile.non_deterministic_rate;
    let scan_available = facts.replay || draws.scan_unavailable >= SCAN_UNAVAILABLE_RATE;

    if draws.unanswered < profile.unanswered_rate {
        let mut run = unanswered_run(&facts, duration_ms, telemetry.as_ref());
        run.time_scale = profile.time_scale;
        return run;
    }

    // Fault draws come from their own stream, so a fault profile never moves the outcomes of
    // the core draws above (an undisturbed batch and a faulty one agree run by run).
    let mut faults = job_stream(spec.seed ^ FAULT_STREAM_SALT, job);
    let usage_limited = faults.next_f64() < profile.usage_limit_rate;
    let infra_after_spend = faults.next_f64() < profile.infra_after_spend_rate;
    let pass = !usage_limited && draws.pass < profile.pass_rate;
    let result_error = !pass && (usage_limited || draws.result_error < RESULT_ERROR_SHARE);
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
    // The signals are built in the CLI's shape (see `signal`), so they are read back by key.
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
        verdict_pass,
        json!({
            "pass": verdict_pass,
            "exitCode": if verdict_pass { 0 } else { 1 },
            "signals": signals,
            "guards": guards(facts.replay, scan_available),
            "failures": failures,
        }),
    );

    let envelope = completed_envelope(&facts, &result, &skills_invoked, verdict_pass);
    SimRun {
        outcome: SimOutcome::Completed { result },
        exit_code: if verdict_pass { 0 } else { 1 },
        envelope,
        duration_ms,
        time_scale: profile.time_scale,
        infra_after_spend,
    }
}

/// The core draws of a run. They come first and always in this order, so that changing one
/// profile value moves only the outcomes that depend on it.
struct CoreDraws {
    unanswered: f64,
    pass: f64,
    result_error: f64,
    non_deterministic: f64,
    missing_telemetry: f64,
    scan_unavailable: f64,
    cost: f64,
    duration: f64,
    input_tokens: u64,
    output_tokens: u64,
}

impl CoreDraws {
    fn draw(stream: &mut SplitMix64) -> CoreDraws {
        // A struct expression evaluates its fields in the order written: this is the order of
        // the draws.
        CoreDraws {
            unanswered: stream.next_f64(),
            pass: stream.next_f64(),
            result_error: stream.next_f64(),
            non_deterministic: stream.next_f64(),
            missing_telemetry: stream.next_f64(),
            scan_unavailable: stream.next_f64(),
            cost: stream.next_f64(),
            duration: stream.next_f64(),
            input_tokens: 1_000 + stream.below(20_000) as u64,
            output_tokens: 100 + stream.below(4_000) as u64,
        }
    }
}

/// The run's cost and usage, unless it is drawn to report neither.
fn drawn_telemetry(profile: &ResolvedProfile, draws: &CoreDraws) -> Option<Telemetry> {
    (draws.missing_telemetry >= profile.missing_telemetry_rate).then(|| {
        // ±50% around the mean, rounded to 1e-8 USD like the SDK's figures.
        let usd = (profile.cost_usd * (0.5 + draws.cost) * 1e8).round() / 1e8;
        Telemetry {
            usd,
            input_tokens: draws.input_tokens,
            output_tokens: draws.output_tokens,
        }
    })
}

/// The stdout envelope of a completed run: its result with the run's provenance, marked
/// simulated.
fn completed_envelope(
    facts: &RunFacts,
    result: &Value,
    skills_invoked: &[&str],
    verdict_pass: bool,
) -> Value {
    let mut entry = result.clone();
    if let Value::Object(entry) = &mut entry {
        entry.insert("provenance".into(), provenance(facts, skills_invoked));
    }
    json!({
        "tool": "cowork-harness",
        "version": SIM_VERSION,
        "command": facts.command.as_str(),
        "ok": verdict_pass,
        "results": [entry],
        "error": null,
        "generator": SIM_GENERATOR,
        "simulated": true,
    })
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

/// The RunResult of a completed run, its keys in the CLI's order; `verdict_pass` is `verdict`'s
/// `pass`.
fn completed_result(
    facts: &RunFacts,
    draws: &CompletedDraws,
    assertions: &[AssertionEntry],
    telemetry: Option<&Telemetry>,
    skills_invoked: &[&str],
    verdict_pass: bool,
    verdict: Value,
) -> Value {
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
