//! Broken and hostile input files fail with errors that name the file, the line and the key.

use std::path::Path;

use cowork_schema::load::yaml_to_json;
use cowork_schema::matrix::MatrixFile;
use cowork_schema::scenario::Scenario;
use cowork_schema::session::Session;

use crate::support::{fixture, read};

/// Which loader a negative fixture goes through.
#[derive(Clone, Copy)]
enum Kind {
    Scenario,
    Session,
    Matrix,
}

/// Loads `negative/<name>` with the loader for `kind` and checks that the rendered errors
/// contain each of `expect`.
fn check(kind: Kind, name: &str, expect: &[&str]) {
    let path = fixture(&format!("negative/{name}"));
    let text = read(&path);
    let errors = match kind {
        Kind::Scenario => Scenario::from_yaml(&text, &path).map(|_| ()),
        Kind::Session => Session::from_yaml(&text, &path).map(|_| ()),
        Kind::Matrix => MatrixFile::from_yaml(&text, &path).map(|_| ()),
    }
    .expect_err(name);
    let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let joined = rendered.join("\n");
    for needle in expect {
        assert!(
            joined.contains(needle),
            "{name}: {needle:?} not in\n{joined}"
        );
    }
    for line in &rendered {
        assert!(
            line.contains(name),
            "{name}: error does not name the file: {line}"
        );
    }
}

#[test]
fn negative_fixtures_name_file_line_and_key() {
    check(
        Kind::Scenario,
        "malformed.yaml",
        &["malformed.yaml:5:18: unclosed bracket"],
    );
    check(
        Kind::Scenario,
        "unknown-key.yaml",
        &["unknown-key.yaml:2:1: baselne: unknown key `baselne`, did you mean `baseline`?"],
    );
    check(
        Kind::Scenario,
        "wrong-type.yaml",
        &[
            "wrong-type.yaml:2:13: timeout_ms: expected an integer from 1 to 9007199254740991, got \"soon\"",
        ],
    );
    check(
        Kind::Scenario,
        "missing-prompt.yaml",
        &["missing-prompt.yaml:1:1: prompt: missing required field"],
    );
    check(
        Kind::Scenario,
        "alias-bomb.yaml",
        &["alias-bomb.yaml:", "refused"],
    );
    check(
        Kind::Scenario,
        "duplicate-key.yaml",
        &["duplicate-key.yaml:4:1: prompt: duplicate key (first at line 1)"],
    );
    check(
        Kind::Scenario,
        "unknown-assertion-key.yaml",
        &[
            "unknown-assertion-key.yaml:5:5: assert[2].transcript_contain: unknown key `transcript_contain`, did you mean `transcript_contains`?",
        ],
    );
    check(
        Kind::Session,
        "session-unknown-nested.yaml",
        &[
            "session-unknown-nested.yaml:5:3: plugins.local_plugin: unknown key `local_plugin`, did you mean `local_plugins`?",
        ],
    );
    check(
        Kind::Matrix,
        "matrix-unknown-key.yaml",
        &["matrix-unknown-key.yaml:2:1: model: unknown key `model`, did you mean `models`?"],
    );
}

#[test]
fn a_session_is_not_a_scenario() {
    // A directory target treats every YAML file as a scenario
    // (harness-behaviour.md#dir-target-yaml); a session file fails with errors that name its keys.
    let path = fixture("upstream-examples/sessions/skill.yaml");
    let errors = Scenario::from_yaml(&read(&path), &path).expect_err("a session is not a scenario");
    let joined: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(joined.iter().any(|e| e.ends_with(": model: unknown key `model`; valid keys: name, baseline, session, fidelity, execution, lane, prompt, timeout_ms, answers, on_unanswered, expect_denied, assert, skills, requires_capabilities, allow_host_writes, workspace_fixture")), "{joined:?}");
    assert!(
        joined
            .iter()
            .any(|e| e.ends_with(": prompt: missing required field")),
        "{joined:?}"
    );
}

#[test]
fn yaml_to_json_keeps_order_and_core_scalars() {
    let value = yaml_to_json(
        "zeta: yes\nalpha: [1, 0x10, '2', ~, True]\n",
        Path::new("v.yaml"),
    )
    .expect("valid yaml");
    assert_eq!(
        value.to_string(),
        r#"{"zeta":"yes","alpha":[1,16,"2",null,true]}"#
    );
}
