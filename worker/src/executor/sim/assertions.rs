//! The assertions a simulated result reports: generic ones drawn from a pool, or the scenario's
//! own authored ones, each passing or failing consistently with the drawn verdict.

use serde_json::{Map, Value, json};

use super::facts::RunFacts;
use super::stream::SplitMix64;

/// One authored assertion the simulator can report.
#[derive(Clone, Copy, Debug)]
pub(super) struct AssertionKind {
    pub(super) key: &'static str,
    /// Whether it is about the skill being used (such assertions pass or fail together).
    pub(super) about_skill: bool,
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

/// One `assertions[]` entry of a simulated result.
#[derive(Clone, Debug)]
pub(super) struct AssertionEntry {
    pub(super) kind: AssertionKind,
    argument: Value,
    pub(super) pass: bool,
    pub(super) message: String,
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
    pub(super) fn key(&self) -> &str {
        match &self.authored {
            Some((key, _)) => key,
            None => self.kind.key,
        }
    }

    pub(super) fn to_json(&self) -> Value {
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
pub(super) fn draw_assertions(
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
/// the scenario cannot be read, in which case the simulator draws generic assertions. Read by
/// key: the assertion values are the scenario's free-form fields, kept as authored.
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
