//! The scenario file: one test — a prompt, scripted answers and assertions
//! (harness-behaviour.md#job-bundle).
//!
//! [`Scenario::from_yaml`] is as strict as the CLI's loader: every top-level key of
//! `scenario.schema.json` is typed, an unknown key is an error (with a "did you mean" hint), and
//! each assertion entry's keys are checked against the assertion keys the schema lists. The
//! assertion values themselves are kept as authored (ordered JSON maps) and judged by the CLI;
//! the fleet only needs their keys and the inputs they name. The whole document is also kept as
//! [`Scenario::raw`] so that a matrix cell can be materialized from it
//! (harness-behaviour.md#choice-c1).
//!
//! Keys newer than the mirror's schema that the seed documents describe are accepted too:
//! `workspace_fixture` (top level, rule R4 of
//! harness-behaviour.md#path-resolution) and the 4.x assertion keys listed in
//! [`SEED_ASSERTION_KEYS`].

use std::path::Path;

use serde_json::Value;

use crate::load::{
    self, KeyLocations, LoadError, MapView, Node, NodeValue, Position, Reader, UnknownKeys,
};
use crate::session::{PathAnchor, PathField, PathKind};

/// Top-level keys of a scenario: the mirror schema's plus `workspace_fixture` ([4.x], rule R4 of
/// harness-behaviour.md#path-resolution).
pub const SCENARIO_KEYS: &[&str] = &[
    "name",
    "baseline",
    "session",
    "fidelity",
    "execution",
    "lane",
    "prompt",
    "timeout_ms",
    "answers",
    "on_unanswered",
    "expect_denied",
    "assert",
    "skills",
    "requires_capabilities",
    "allow_host_writes",
    "workspace_fixture",
];

/// Assertion keys listed by `scenario.schema.json` (`assert.items.properties`), in schema order.
pub const SCHEMA_ASSERTION_KEYS: &[&str] = &[
    "transcript_contains",
    "transcript_not_contains",
    "transcript_matches",
    "transcript_not_matches",
    "tool_result_contains",
    "tool_result_not_contains",
    "tool_result_matches",
    "tool_result_not_matches",
    "file_exists",
    "user_visible_artifact",
    "tool_called",
    "tool_not_called",
    "subagent_tool_used",
    "subagent_tool_absent",
    "no_vm_path_file_op",
    "vm_path_denied",
    "path_denied",
    "no_path_denied",
    "subagent_file_write",
    "subagent_dispatch_healthy",
    "subagent_dispatched",
    "subagent_declared_but_unused",
    "subagent_output_contains",
    "dispatch_count_max",
    "skill_triggered",
    "no_skill_triggered",
    "skill_available",
    "connector_available",
    "tool_available",
    "max_cost_usd",
    "max_tokens",
    "tool_calls_max",
    "tool_no_error",
    "tool_no_error_if_called",
    "max_tool_errors",
    "max_redundant_tool_calls",
    "skill_tool_used",
    "all_tasks_completed",
    "task_count_min",
    "task_status",
    "max_turns",
    "max_peak_rss_bytes",
    "compaction_occurred",
    "no_mcp_error",
    "hook_blocked",
    "no_hook_blocked",
    "no_scratchpad_leak",
    "present_files_called",
    "egress_denied",
    "egress_allowed",
    "no_delete_in_outputs",
    "no_unexpected_files",
    "file_absent",
    "artifact_text",
    "input_unmodified",
    "self_heal_ran",
    "no_lost_write_back",
    "transcript_no_host_path",
    "computer_links_resolve",
    "computer_links_resolve_if_present",
    "question_asked",
    "question_options",
    "questions_count_max",
    "gate_answers_delivered",
    "gate_answer_count_min",
    "result",
    "allow_permissive_auto_allow",
    "allow_outputs_delete",
    "no_delete_in_mounts",
    "allow_delete_in",
    "allow_l0_plugin_divergence",
    "allow_missing_capability",
    "allow_stall",
    "allow_undelivered_deliverables",
    "replay_protocol_fidelity",
    "artifact_json",
    "semantic_matches",
];

/// Assertion keys the seed documents describe that the mirror's schema lacks (the scenario
/// reference and the 4.2.1 → 4.4.0 docs diff).
pub const SEED_ASSERTION_KEYS: &[&str] = &[
    "question_context",
    "reference_read",
    "no_observed_reference_access",
    "question_option_count",
    "semantic_pairwise",
    "hook_output_contains",
    "hook_output_not_contains",
];

/// The assertion key that only `replay` synthesizes; authoring it is a load-time error in the
/// CLI.
const REPLAY_ONLY_ASSERTION: &str = "replay_protocol_fidelity";

/// Keys of one `answers:` entry.
const ANSWER_KEYS: &[&str] = &[
    "when_question",
    "choose",
    "answer",
    "when_tool",
    "decide",
    "allow_if",
    "else",
    "grant",
];

/// The `session:` value that means "no session file, all defaults" (rule R1 of
/// harness-behaviour.md#path-resolution).
pub const INLINE_SESSION: &str = "(inline)";

/// Largest `timeout_ms` the schema allows (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// The isolation tier a scenario asks for (`fidelity:`, default `container`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fidelity {
    Protocol,
    Container,
    Microvm,
    Hostloop,
    Cowork,
}

impl Fidelity {
    const NAMES: &[&str] = &["protocol", "container", "microvm", "hostloop", "cowork"];

    /// The value as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            Fidelity::Protocol => "protocol",
            Fidelity::Container => "container",
            Fidelity::Microvm => "microvm",
            Fidelity::Hostloop => "hostloop",
            Fidelity::Cowork => "cowork",
        }
    }

    fn parse(value: &str) -> Option<Fidelity> {
        match value {
            "protocol" => Some(Fidelity::Protocol),
            "container" => Some(Fidelity::Container),
            "microvm" => Some(Fidelity::Microvm),
            "hostloop" => Some(Fidelity::Hostloop),
            "cowork" => Some(Fidelity::Cowork),
            _ => None,
        }
    }
}

/// Where the run executes (`execution:`, default `local`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Execution {
    Local,
    /// Reserved by the CLI: authoring it is a load-time error there, so batches refuse it.
    CloudDescribe,
}

/// Which Cowork lane's delivery contract the run is held to (`lane:`, default `local`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    Local,
    Remote,
}

/// The scenario's own `on_unanswered:` policy. `Prompt` is parsed so that a batch can refuse it
/// by name (harness-behaviour.md#job-invocation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnansweredPolicy {
    Fail,
    Prompt,
    Llm,
    First,
}

impl UnansweredPolicy {
    /// The value as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            UnansweredPolicy::Fail => "fail",
            UnansweredPolicy::Prompt => "prompt",
            UnansweredPolicy::Llm => "llm",
            UnansweredPolicy::First => "first",
        }
    }
}

/// `choose:` of a scripted answer: one label or a list of labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choose {
    One(String),
    Many(Vec<String>),
}

/// One scripted answer (`answers[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answer {
    pub when_question: Option<String>,
    pub choose: Option<Choose>,
    pub answer: Option<String>,
    pub when_tool: Option<String>,
    /// `allow` or `deny`.
    pub decide: Option<String>,
    pub allow_if: Option<String>,
    /// `else:` — `allow` or `deny`.
    pub else_decision: Option<String>,
    /// `once` or `domain`.
    pub grant: Option<String>,
}

/// How a scenario refers to its session (rule R1 of harness-behaviour.md#path-resolution).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionRef<'a> {
    /// `(inline)` or absent: an all-defaults session with no file.
    Inline,
    /// A path as written, to be resolved against the scenario file's directory.
    Path(&'a str),
}

/// A loaded scenario file.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub name: Option<String>,
    pub baseline: Option<String>,
    /// The `session:` value as written; see [`Scenario::session_ref`].
    pub session: Option<String>,
    pub fidelity: Option<Fidelity>,
    pub execution: Option<Execution>,
    pub lane: Option<Lane>,
    pub prompt: String,
    pub timeout_ms: Option<u64>,
    pub answers: Vec<Answer>,
    pub on_unanswered: Option<UnansweredPolicy>,
    pub expect_denied: Vec<String>,
    /// Assertion entries, each an ordered map with its keys in authored order.
    pub assert: Vec<serde_json::Map<String, Value>>,
    pub skills: Vec<String>,
    pub requires_capabilities: Vec<String>,
    pub allow_host_writes: Option<bool>,
    /// [4.x] A directory copied into `outputs/` before turn 1, relative to the scenario file.
    pub workspace_fixture: Option<String>,
    /// The whole document as JSON, key order preserved.
    pub raw: Value,
    /// Where each key was written (empty for frozen scenarios read from JSON).
    pub locations: KeyLocations,
}

impl Scenario {
    /// Parses and validates a scenario document. `file` is used in error messages only.
    pub fn from_yaml(text: &str, file: &Path) -> Result<Scenario, Vec<LoadError>> {
        let root = load::parse_yaml(text, file).map_err(|e| vec![e])?;
        Scenario::from_node(&root, file, UnknownKeys::Reject)
    }

    /// Reads the scenario frozen inside a cassette. Like `replay`, unknown top-level keys are
    /// ignored; unknown assertion keys are still errors (the seed reference: frozen assertions
    /// are not loose).
    pub fn from_frozen(value: &Value, file: &Path) -> Result<Scenario, Vec<LoadError>> {
        Scenario::from_node(&Node::from_json(value), file, UnknownKeys::Ignore)
    }

    fn from_node(
        root: &Node,
        file: &Path,
        unknown: UnknownKeys,
    ) -> Result<Scenario, Vec<LoadError>> {
        let mut reader = Reader::new(file);
        let Some(map) = reader.mapping(root, "") else {
            return Err(reader.errors);
        };
        reader.check_keys(map, SCENARIO_KEYS, unknown);

        let name = reader.opt_string(map, "name");
        let baseline = reader.opt_string(map, "baseline");
        let session = reader.opt_string(map, "session");
        let fidelity = reader
            .opt_enum(map, "fidelity", Fidelity::NAMES)
            .and_then(|v| Fidelity::parse(&v));
        let execution = reader
            .opt_enum(map, "execution", &["local", "cloud-describe"])
            .map(|v| {
                if v == "local" {
                    Execution::Local
                } else {
                    Execution::CloudDescribe
                }
            });
        let lane = reader.opt_enum(map, "lane", &["local", "remote"]).map(|v| {
            if v == "local" {
                Lane::Local
            } else {
                Lane::Remote
            }
        });
        let prompt = reader.required_string(map, "prompt");
        let timeout_ms = reader.opt_integer(map, "timeout_ms", 1, MAX_SAFE_INTEGER);
        let answers = read_answers(&mut reader, map);
        let on_unanswered = reader
            .opt_enum(map, "on_unanswered", &["fail", "prompt", "llm", "first"])
            .map(|v| match v.as_str() {
                "fail" => UnansweredPolicy::Fail,
                "prompt" => UnansweredPolicy::Prompt,
                "llm" => UnansweredPolicy::Llm,
                _ => UnansweredPolicy::First,
            });
        let expect_denied = reader.string_list(map, "expect_denied", false);
        let assert = read_assertions(&mut reader, map);
        let skills = reader.string_list(map, "skills", false);
        let requires_capabilities = reader.string_list(map, "requires_capabilities", false);
        let allow_host_writes = reader.opt_bool(map, "allow_host_writes");
        let workspace_fixture = reader.nullable_string(map, "workspace_fixture", true);

        match prompt {
            Some(prompt) if reader.errors.is_empty() => Ok(Scenario {
                name,
                baseline,
                session,
                fidelity,
                execution,
                lane,
                prompt,
                timeout_ms,
                answers,
                on_unanswered,
                expect_denied,
                assert,
                skills,
                requires_capabilities,
                allow_host_writes,
                workspace_fixture,
                raw: root.to_json(),
                locations: KeyLocations::of(root),
            }),
            _ => Err(reader.errors),
        }
    }

    /// The effective scenario name (harness-behaviour.md#scenario-name): a non-empty `name:`, else
    /// the file's basename with a trailing `.yaml`/`.yml` removed (case-insensitive).
    pub fn effective_name(&self, file: &Path) -> String {
        match &self.name {
            Some(name) if !name.is_empty() => name.clone(),
            _ => name_from_file(file),
        }
    }

    /// How the scenario refers to its session (rule R1 of harness-behaviour.md#path-resolution).
    pub fn session_ref(&self) -> SessionRef<'_> {
        match self.session.as_deref() {
            None | Some(INLINE_SESSION) => SessionRef::Inline,
            Some(path) => SessionRef::Path(path),
        }
    }

    /// The inputs the scenario names besides its session, relative to the scenario file
    /// (rule R4 of harness-behaviour.md#path-resolution): `workspace_fixture` and each
    /// `semantic_pairwise.refs[]` entry. The assertion values are read by key: they are free-form
    /// and kept as authored (the CLI judges them).
    pub fn input_paths(&self) -> Vec<PathField> {
        let mut out = Vec::new();
        if let Some(fixture) = &self.workspace_fixture {
            out.push(self.path_field("workspace_fixture".to_owned(), fixture, PathKind::Dir));
        }
        for (index, entry) in self.assert.iter().enumerate() {
            let Some(Value::Object(pairwise)) = entry.get("semantic_pairwise") else {
                continue;
            };
            let Some(Value::Array(refs)) = pairwise.get("refs") else {
                continue;
            };
            for (ref_index, reference) in refs.iter().enumerate() {
                if let Value::String(reference) = reference {
                    let key = format!("assert[{index}].semantic_pairwise.refs[{ref_index}]");
                    // A reference store's layout is not documented in the seeds, so either a
                    // file or a directory is accepted.
                    out.push(self.path_field(key, reference, PathKind::Any));
                }
            }
        }
        out
    }

    fn path_field(&self, key: String, value: &str, kind: PathKind) -> PathField {
        PathField {
            position: self.locations.get(&key),
            key,
            value: value.to_owned(),
            kind,
            anchor: PathAnchor::DeclaringFile,
        }
    }

    /// The position of a dotted key in the source file, when known.
    pub fn position_of(&self, key: &str) -> Option<Position> {
        self.locations.get(key)
    }
}

/// The basename of `file` with a trailing `.yaml`/`.yml` removed, case-insensitively
/// (harness-behaviour.md#scenario-name).
pub fn name_from_file(file: &Path) -> String {
    let base = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lower = base.to_ascii_lowercase();
    for ext in [".yaml", ".yml"] {
        if lower.ends_with(ext) {
            return base[..base.len() - ext.len()].to_owned();
        }
    }
    base
}

fn read_answers(reader: &mut Reader<'_>, map: MapView<'_>) -> Vec<Answer> {
    let Some(node) = map.get("answers") else {
        return Vec::new();
    };
    let NodeValue::Sequence(items) = &node.value else {
        reader.error(
            node.position,
            "answers",
            format!("expected a sequence of mappings, got {}", node.kind_name()),
        );
        return Vec::new();
    };
    let mut answers = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let path = load::index_path("answers", index);
        let Some(entry) = reader.mapping(item, &path) else {
            continue;
        };
        reader.check_keys(entry, ANSWER_KEYS, UnknownKeys::Reject);
        let choose = entry.get("choose").and_then(|node| {
            let key = entry.child_path("choose");
            match &node.value {
                NodeValue::String(s) => Some(Choose::One(s.clone())),
                NodeValue::Sequence(_) => reader
                    .opt_string_list_node(node, &key, false)
                    .map(Choose::Many),
                _ => {
                    reader.error(
                        node.position,
                        &key,
                        format!(
                            "expected a string or a sequence of strings, got {}",
                            node.kind_name()
                        ),
                    );
                    None
                }
            }
        });
        answers.push(Answer {
            when_question: reader.opt_string(entry, "when_question"),
            choose,
            answer: reader.opt_string(entry, "answer"),
            when_tool: reader.opt_string(entry, "when_tool"),
            decide: reader.opt_enum(entry, "decide", &["allow", "deny"]),
            allow_if: reader.opt_string(entry, "allow_if"),
            else_decision: reader.opt_enum(entry, "else", &["allow", "deny"]),
            grant: reader.opt_enum(entry, "grant", &["once", "domain"]),
        });
    }
    answers
}

fn read_assertions(
    reader: &mut Reader<'_>,
    map: MapView<'_>,
) -> Vec<serde_json::Map<String, Value>> {
    let Some(node) = map.get("assert") else {
        return Vec::new();
    };
    let NodeValue::Sequence(items) = &node.value else {
        reader.error(
            node.position,
            "assert",
            format!("expected a sequence of mappings, got {}", node.kind_name()),
        );
        return Vec::new();
    };
    let allowed: Vec<&str> = SCHEMA_ASSERTION_KEYS
        .iter()
        .chain(SEED_ASSERTION_KEYS)
        .copied()
        .collect();
    let mut entries = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let path = load::index_path("assert", index);
        let Some(entry) = reader.mapping(item, &path) else {
            continue;
        };
        reader.check_keys(entry, &allowed, UnknownKeys::Reject);
        if let Some((key, _)) = entry.entries.iter().find(
            |(key, _)| matches!(&key.value, NodeValue::String(k) if k == REPLAY_ONLY_ASSERTION),
        ) {
            reader.error(
                key.position,
                &entry.child_path(REPLAY_ONLY_ASSERTION),
                "is synthesized by replay and cannot be authored in a scenario".to_owned(),
            );
        }
        if let Value::Object(object) = item.to_json() {
            entries.push(object);
        }
    }
    check_delete_conflict(reader, node, &entries);
    entries
}

/// The schema's `not` clause: `no_delete_in_outputs` contradicts `allow_outputs_delete` and an
/// `allow_delete_in` that lists `outputs`. Read by key: assertion values are kept as authored.
fn check_delete_conflict(
    reader: &mut Reader<'_>,
    node: &Node,
    entries: &[serde_json::Map<String, Value>],
) {
    let has = |key: &str| entries.iter().any(|e| e.contains_key(key));
    let allows_outputs = entries.iter().any(|e| {
        matches!(e.get("allow_delete_in"), Some(Value::Array(mounts))
            if mounts.iter().any(|m| m == "outputs"))
    });
    if has("no_delete_in_outputs") && (has("allow_outputs_delete") || allows_outputs) {
        reader.error(
            node.position,
            "assert",
            "no_delete_in_outputs contradicts allow_outputs_delete / allow_delete_in: [outputs]"
                .to_owned(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads `text` as `s.yaml` and compares the rendered errors (joined by newlines, or `ok`)
    /// with `expect`.
    fn check(text: &str, expect: &str) {
        let got = match Scenario::from_yaml(text, Path::new("s.yaml")) {
            Ok(_) => "ok".to_owned(),
            Err(errors) => errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        };
        assert_eq!(got, expect, "input {text:?}");
    }

    #[test]
    fn valid_scenarios_load() {
        check("prompt: hi\n", "ok");
        check(
            "name: n\nbaseline: latest\nsession: ../s.yaml\nfidelity: cowork\nexecution: local\nlane: remote\n\
             prompt: p\ntimeout_ms: 600000\nanswers:\n  - when_question: x\n    choose: [a, b]\n  - when_tool: Bash\n    \
             allow_if: ok\n    else: deny\non_unanswered: prompt\nexpect_denied: [h]\nassert:\n  - result: success\n\
             skills: [s]\nrequires_capabilities: [ocr]\nallow_host_writes: true\nworkspace_fixture: fx\n",
            "ok",
        );
    }

    #[test]
    fn schema_violations_name_line_and_key() {
        check(
            "baselne: latest\nprompt: p\n",
            "s.yaml:1:1: baselne: unknown key `baselne`, did you mean `baseline`?",
        );
        check("name: n\n", "s.yaml:1:1: prompt: missing required field");
        check(
            "prompt: 3\n",
            "s.yaml:1:9: prompt: expected a string, got an integer",
        );
        check(
            "prompt: p\ntimeout_ms: 0\n",
            "s.yaml:2:13: timeout_ms: expected an integer from 1 to 9007199254740991, got 0",
        );
        check(
            "prompt: p\nfidelity: vm\n",
            "s.yaml:2:11: fidelity: invalid value \"vm\"; expected one of: protocol, container, microvm, hostloop, cowork",
        );
        check(
            "prompt: p\nassert:\n  - result: success\n  - tool_caled: Write\n",
            "s.yaml:4:5: assert[1].tool_caled: unknown key `tool_caled`, did you mean `tool_called`?",
        );
        check(
            "prompt: p\nassert: [x]\n",
            "s.yaml:2:10: assert[0]: expected a mapping, got a string",
        );
        check(
            "prompt: p\nanswers:\n  - decide: maybe\n",
            "s.yaml:3:13: answers[0].decide: invalid value \"maybe\"; expected one of: allow, deny",
        );
        check("- a\n", "s.yaml:1:1: expected a mapping, got a sequence");
        check(
            "prompt: p\nassert:\n  - replay_protocol_fidelity: true\n",
            "s.yaml:3:5: assert[0].replay_protocol_fidelity: is synthesized by replay and cannot be authored in a scenario",
        );
        check(
            "prompt: p\nassert:\n  - no_delete_in_outputs: true\n  - allow_delete_in: [outputs]\n",
            "s.yaml:3:3: assert: no_delete_in_outputs contradicts allow_outputs_delete / allow_delete_in: [outputs]",
        );
    }

    #[test]
    fn every_problem_is_reported() {
        check(
            "profile: x\nprompt: [1]\nlane: far\n",
            "s.yaml:1:1: profile: unknown key `profile`; valid keys: name, baseline, session, fidelity, execution, lane, \
             prompt, timeout_ms, answers, on_unanswered, expect_denied, assert, skills, requires_capabilities, \
             allow_host_writes, workspace_fixture\n\
             s.yaml:3:7: lane: invalid value \"far\"; expected one of: local, remote\n\
             s.yaml:2:9: prompt: expected a string, got a sequence",
        );
    }

    #[test]
    fn assertion_key_order_is_kept() {
        let scenario = Scenario::from_yaml(
            "prompt: p\nassert:\n  - tool_called: X\n    result: success\n",
            Path::new("s.yaml"),
        )
        .expect("valid scenario");
        let keys: Vec<&String> = scenario.assert[0].keys().collect();
        assert_eq!(keys, ["tool_called", "result"]);
    }

    #[test]
    fn effective_name_follows_n1() {
        let load =
            |text: &str| Scenario::from_yaml(text, Path::new("x.yaml")).expect("valid scenario");
        assert_eq!(
            load("prompt: p\nname: given\n").effective_name(Path::new("dir/a.yaml")),
            "given"
        );
        assert_eq!(
            load("prompt: p\nname: ''\n").effective_name(Path::new("dir/a.YAML")),
            "a"
        );
        assert_eq!(
            load("prompt: p\n").effective_name(Path::new("dir/b.Yml")),
            "b"
        );
        assert_eq!(
            load("prompt: p\n").effective_name(Path::new("dir/c.txt")),
            "c.txt"
        );
        assert_eq!(
            load("prompt: p\n").effective_name(Path::new("d.yaml.yml")),
            "d.yaml"
        );
    }

    #[test]
    fn session_ref_and_input_paths() {
        let load =
            |text: &str| Scenario::from_yaml(text, Path::new("x.yaml")).expect("valid scenario");
        assert_eq!(load("prompt: p\n").session_ref(), SessionRef::Inline);
        assert_eq!(
            load("prompt: p\nsession: (inline)\n").session_ref(),
            SessionRef::Inline
        );
        assert_eq!(
            load("prompt: p\nsession: ../s.yaml\n").session_ref(),
            SessionRef::Path("../s.yaml")
        );
        let scenario = load(
            "prompt: p\nworkspace_fixture: fx\nassert:\n  - semantic_pairwise:\n      refs: [r1, r2]\n",
        );
        let keys: Vec<(String, PathKind, Option<u64>)> = scenario
            .input_paths()
            .into_iter()
            .map(|p| (p.key, p.kind, p.position.map(|pos| pos.line)))
            .collect();
        assert_eq!(
            keys,
            [
                ("workspace_fixture".to_owned(), PathKind::Dir, Some(2)),
                (
                    "assert[0].semantic_pairwise.refs[0]".to_owned(),
                    PathKind::Any,
                    Some(5)
                ),
                (
                    "assert[0].semantic_pairwise.refs[1]".to_owned(),
                    PathKind::Any,
                    Some(5)
                ),
            ]
        );
    }

    #[test]
    fn frozen_scenarios_ignore_unknown_top_level_keys() {
        let frozen =
            serde_json::json!({"prompt": "p", "futureKey": 1, "assert": [{"result": "success"}]});
        assert!(Scenario::from_frozen(&frozen, Path::new("c.json")).is_ok());
        let frozen = serde_json::json!({"prompt": "p", "assert": [{"future_assert": 1}]});
        let errors =
            Scenario::from_frozen(&frozen, Path::new("c.json")).expect_err("unknown assertion key");
        assert_eq!(
            errors[0].to_string(),
            "c.json: assert[0].future_assert: unknown key `future_assert`"
        );
    }
}
