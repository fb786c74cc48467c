//! The signals of a run, one step per signal family, emitted in the order of
//! harness-behaviour.md#signal-order (the check numbers are positions in that order; a step never
//! reorders the checks it holds).
//! Each step reads the CLI's result.json by key (why: see the `verdict` module doc).

use serde_json::Value;

use super::{
    Lane, Severity, Signal, assertion_objects, authored, is_true, modifier_on, non_empty_array,
};

/// Verdict-modifier keys: no-op assertions that only suppress a default fail
/// (harness-behaviour.md#signal-catalogue).
const VERDICT_MODIFIERS: [&str; 7] = [
    "allow_permissive_auto_allow",
    "allow_missing_capability",
    "allow_l0_plugin_divergence",
    "allow_stall",
    "allow_undelivered_deliverables",
    "allow_outputs_delete",
    "allow_delete_in",
];

/// The signals of `result` on `lane`, in emission order.
pub(super) fn signals(result: &Value, lane: Lane) -> Vec<Signal> {
    let facts = RunFacts::of(result);
    let mut emitted = Emitted::default();
    assertion_signals(&facts, &mut emitted);
    result_error_signal(&facts, &mut emitted);
    unmet_capability_signal(&facts, &mut emitted);
    infra_error_signals(&facts, &mut emitted);
    stall_signal(&facts, &mut emitted);
    if lane == Lane::Live {
        live_permission_signals(&facts, &mut emitted);
        ended_with_question_signal(&facts, &mut emitted);
        undelivered_signal(&facts, &mut emitted);
        delivery_unobservable_signal(&facts, &mut emitted);
        scan_signals(&facts, &mut emitted);
        plugin_divergence_signal(&facts, &mut emitted);
    }
    fidelity_signals(&facts, &mut emitted);
    emitted.0
}

/// The signals emitted so far.
#[derive(Default)]
struct Emitted(Vec<Signal>);

impl Emitted {
    fn push(&mut self, code: &'static str, severity: Severity, message: String) {
        self.0.push(Signal {
            code,
            severity,
            message,
        });
    }
}

/// The fields of a result that more than one step reads.
struct RunFacts<'a> {
    result: &'a Value,
    result_field: Option<&'a str>,
    stalled_on_question: bool,
    allow_stall: bool,
    allow_missing_capability: bool,
    allow_undelivered: bool,
    scan: Option<&'a Value>,
    lane_field: Option<&'a str>,
    workspace_files: Option<&'a Vec<Value>>,
}

impl<'a> RunFacts<'a> {
    fn of(result: &'a Value) -> RunFacts<'a> {
        RunFacts {
            result,
            result_field: result.get("result").and_then(Value::as_str),
            stalled_on_question: is_true(result.get("stalledOnQuestion")),
            allow_stall: modifier_on(result, "allow_stall"),
            allow_missing_capability: modifier_on(result, "allow_missing_capability"),
            allow_undelivered: modifier_on(result, "allow_undelivered_deliverables"),
            scan: result.get("scan"),
            lane_field: result.get("lane").and_then(Value::as_str),
            workspace_files: result.get("workspaceFiles").and_then(Value::as_array),
        }
    }
}

/// Check 1: one `assertion` signal per failing entry, in order.
fn assertion_signals(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    for entry in facts
        .result
        .get("assertions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if entry.get("pass") != Some(&Value::Bool(true)) {
            let message = entry
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("assertion failed");
            emitted.push("assertion", Severity::Fail, message.to_owned());
        }
    }
}

/// Check 2: at most one of usage_limit / transport_error / result_error.
fn result_error_signal(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    if facts.result_field == Some("error") {
        match facts.result.get("resultErrorKind").and_then(Value::as_str) {
            Some("usage_limit") => emitted.push(
                "usage_limit",
                Severity::Fail,
                "the agent hit a usage limit".to_owned(),
            ),
            Some("transport") => emitted.push(
                "transport_error",
                Severity::Fail,
                "the connection to the agent dropped before the run finished".to_owned(),
            ),
            _ => emitted.push(
                "result_error",
                Severity::Fail,
                "the agent run ended with result error".to_owned(),
            ),
        }
    }
}

/// Check 3: declared capabilities the tier could not satisfy.
fn unmet_capability_signal(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    if let Some(caps) = non_empty_array(
        facts
            .result
            .get("requiresCapabilityUnmet")
            .and_then(|unmet| unmet.get("caps")),
    ) && !facts.allow_missing_capability
    {
        emitted.push(
            "missing_capability",
            Severity::Fail,
            format!("required capabilities unmet: {}", joined_strings(caps)),
        );
    }
}

/// Checks 4 and 5: infrastructure errors: supervisor deaths fail, single exec failures warn.
fn infra_error_signals(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    let infra_errors = facts
        .result
        .get("infraErrors")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let is_exec =
        |entry: &&Value| entry.get("source").and_then(Value::as_str) == Some("hostloop-exec");
    let hard: Vec<String> = infra_errors
        .iter()
        .filter(|entry| !is_exec(entry))
        .map(|entry| {
            entry
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("unknown infrastructure error")
                .to_owned()
        })
        .collect();
    if !hard.is_empty() {
        emitted.push(
            "infra_error",
            Severity::Fail,
            format!("infrastructure error: {}", hard.join("; ")),
        );
    }
    let n_exec = infra_errors.iter().filter(is_exec).count();
    if n_exec > 0 {
        emitted.push(
            "exec_infra_error",
            Severity::Warn,
            format!("{n_exec} container exec call(s) failed for infrastructure reasons"),
        );
    }
}

/// Check 6: stalled on a question.
fn stall_signal(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    if facts.stalled_on_question && !facts.allow_stall {
        emitted.push(
            "stalled",
            Severity::Fail,
            "the run ended on a question with no productive work after its last gate".to_owned(),
        );
    }
}

/// Checks 7 and 8 (live only): off-registry auto-allows and observed use of omitted capabilities.
fn live_permission_signals(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    let result = facts.result;
    // 7) Off-registry auto-allows.
    if let Some(allows) = non_empty_array(result.get("permissiveAutoAllow"))
        && !modifier_on(result, "allow_permissive_auto_allow")
    {
        emitted.push(
            "permissive_auto_allow",
            Severity::Fail,
            format!("off-registry auto-allows: {}", joined_strings(allows)),
        );
    }

    // 8) Observed use of omitted capabilities.
    if let Some(used) = non_empty_array(result.get("missingCapabilityUse"))
        && !facts.allow_missing_capability
    {
        emitted.push(
            "missing_capability",
            Severity::Fail,
            format!(
                "the skill used capabilities the agent image omits: {}",
                joined_strings(used)
            ),
        );
    }
}

/// Check 9 (live only): ended with a question on an open-ended scenario without a deliverable.
fn ended_with_question_signal(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    let result = facts.result;
    let open_ended = assertion_objects(result).all(|object| {
        object
            .keys()
            .all(|key| key == "result" || VERDICT_MODIFIERS.contains(&key.as_str()))
    });
    let delivered_by_location = facts.lane_field != Some("remote")
        && facts.workspace_files.is_some_and(|files| {
            files
                .iter()
                .any(|file| file.get("class").and_then(Value::as_str) == Some("output"))
        });
    let asks = result
        .get("finalMessage")
        .and_then(Value::as_str)
        .is_some_and(contains_question);
    if facts.result_field == Some("success")
        && !facts.stalled_on_question
        && !facts.allow_stall
        && open_ended
        && facts.workspace_files.is_some()
        && !delivered_by_location
        && asks
    {
        emitted.push(
            "ended_with_question",
            Severity::Warn,
            "the final answer asks a question and no deliverable was written to outputs".to_owned(),
        );
    }
}

/// Check 10 (live only): scratchpad files that were neither presented nor delivered by location.
fn undelivered_signal(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    let result = facts.result;
    let presented = result.get("presentedFiles").and_then(Value::as_array);
    let turn_ok = result
        .get("turn")
        .and_then(Value::as_f64)
        .is_none_or(|turn| turn <= 1.0);
    if let (Some(files), Some(presented)) = (facts.workspace_files, presented)
        && facts.lane_field != Some("remote")
        && is_true(result.get("scratchpadEvidenceComplete"))
        && turn_ok
        && !facts.allow_undelivered
    {
        let undelivered: Vec<&str> = files
            .iter()
            .filter(|file| file.get("class").and_then(Value::as_str) == Some("scratchpad"))
            .filter_map(|file| file.get("path").and_then(Value::as_str))
            .filter(|path| !was_presented(presented, path))
            .collect();
        if !undelivered.is_empty() {
            emitted.push(
                "undelivered_deliverables",
                Severity::Warn,
                format!(
                    "file(s) outside every user-visible root were never delivered: {}",
                    undelivered.join(", ")
                ),
            );
        }
    }
}

/// Check 11 (live only, remote lane): delivery cannot be observed.
fn delivery_unobservable_signal(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    if facts.lane_field == Some("remote")
        && let Some(files) = facts.workspace_files
        && files
            .iter()
            .any(|file| file.get("class").and_then(Value::as_str) != Some("input"))
        && !facts.allow_undelivered
    {
        emitted.push(
            "delivery_unobservable",
            Severity::Warn,
            "delivery of the run's files cannot be observed on lane remote".to_owned(),
        );
    }
}

/// Checks 12 to 15 (live only): what the post-run scan saw (or that there was none).
fn scan_signals(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    let (result, scan) = (facts.result, facts.scan);
    // 12) No post-run scan.
    if scan.is_none() {
        emitted.push(
            "scan_unavailable",
            Severity::Warn,
            "post-run scan evidence unavailable".to_owned(),
        );
    }

    // 13) Deletes in outputs.
    if let Some(deletes) = non_empty_array(scan.and_then(|scan| scan.get("outputsDeletes")))
        && !authored(result, "no_delete_in_outputs")
        && !modifier_on(result, "allow_outputs_delete")
    {
        emitted.push(
            "outputs_delete",
            Severity::Fail,
            format!("files deleted in outputs: {}", joined_strings(deletes)),
        );
    }

    mount_delete_signal(facts, emitted);

    // 15) Host path in the transcript, except on tiers where host paths are the real paths.
    let fidelity = result.get("effectiveFidelity").and_then(Value::as_str);
    if is_true(scan.and_then(|scan| scan.get("hostPathLeaked")))
        && !matches!(fidelity, Some("hostloop" | "protocol"))
        && !authored(result, "transcript_no_host_path")
    {
        emitted.push(
            "host_path_leak",
            Severity::Fail,
            "a host path leaked into the transcript".to_owned(),
        );
    }
}

/// Check 14 (live only): deletes in other delete-denied mounts, unless waived per mount.
fn mount_delete_signal(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    let result = facts.result;
    let waived: Vec<&str> = assertion_objects(result)
        .filter_map(|object| object.get("allow_delete_in"))
        .flat_map(|value| match value {
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            Value::String(text) => vec![text.as_str()],
            _ => Vec::new(),
        })
        .collect();
    let mounts: Vec<&str> = facts
        .scan
        .and_then(|scan| scan.get("mountDeletes"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("mount").and_then(Value::as_str))
        .filter(|mount| *mount != "outputs" && !waived.contains(mount))
        .collect();
    if !mounts.is_empty() && !authored(result, "no_delete_in_mounts") {
        emitted.push(
            "mount_delete",
            Severity::Warn,
            format!("deletes in delete-denied mounts: {}", mounts.join(", ")),
        );
    }
}

/// Check 16 (live only): protocol tier with plugins.
fn plugin_divergence_signal(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    let result = facts.result;
    if is_true(result.get("l0PluginDivergence"))
        && !modifier_on(result, "allow_l0_plugin_divergence")
    {
        emitted.push(
            "l0_plugin_divergence",
            Severity::Fail,
            "the protocol tier ran with plugins and diverges from production".to_owned(),
        );
    }
}

/// Checks 17 and 18: warnings about how faithful the run was: non-deterministic decisions, which
/// never fail, and a missing prompt asset.
fn fidelity_signals(facts: &RunFacts<'_>, emitted: &mut Emitted) {
    let result = facts.result;
    // 17) Non-deterministic decisions (never fails).
    if is_true(result.get("nonDeterministic")) {
        emitted.push(
            "non_deterministic",
            Severity::Warn,
            "a gate was decided non-deterministically".to_owned(),
        );
    }

    // 18) Missing prompt asset.
    if let Some(warning) = result
        .get("fidelityWarnings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|warning| warning.contains("referenced asset not found"))
    {
        emitted.push("prompt_asset_missing", Severity::Warn, warning.to_owned());
    }
}

fn joined_strings(items: &[Value]) -> String {
    items
        .iter()
        .map(|item| match item {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `?` not immediately followed by an ASCII word character or one of `=&/#`
/// (harness-behaviour.md#signal-catalogue `ended_with_question`; the JavaScript `\w` class is
/// ASCII-only).
fn contains_question(text: &str) -> bool {
    let mut chars = text.chars().peekable();
    while let Some(current) = chars.next() {
        if current != '?' {
            continue;
        }
        match chars.peek() {
            None => return true,
            Some(next) if next.is_ascii_alphanumeric() || "_=&/#".contains(*next) => {}
            Some(_) => return true,
        }
    }
    false
}

fn was_presented(presented: &[Value], path: &str) -> bool {
    let suffix = format!("/{path}");
    presented.iter().any(|entry| {
        if is_true(entry.get("leaked")) {
            return false;
        }
        ["from", "to"].iter().any(|key| {
            entry
                .get(*key)
                .and_then(Value::as_str)
                .is_some_and(|candidate| candidate == path || candidate.ends_with(&suffix))
        })
    })
}
