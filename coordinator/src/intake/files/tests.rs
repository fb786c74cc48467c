//! Batch preparation tests over temporary directory trees.

use std::path::{Path, PathBuf};

use super::*;
use cowork_schema::scenario::{Scenario, SessionRef};

/// A temporary bundle root holding `files` (path, contents).
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (rel, contents) in files {
        write(dir.path(), rel, contents);
    }
    dir
}

fn write(root: &Path, rel: &str, contents: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("fixture paths have a parent"))
        .expect("create fixture dir");
    fs::write(path, contents).expect("write fixture");
}

fn input(root: &Path, target: &str, matrix: Option<&str>, mode: BatchMode) -> PrepareInput {
    PrepareInput {
        target: root.join(target),
        matrix: matrix.map(|m| root.join(m)),
        bundle_root: root.to_path_buf(),
        mode,
        executor: ExecutorKind::Harness,
    }
}

fn run_input(root: &Path, target: &str) -> PrepareInput {
    input(root, target, None, BatchMode::Run)
}

/// Prepares and returns the errors with the temp root replaced by `<root>`.
fn errors(input: &PrepareInput) -> Vec<String> {
    let root = input.bundle_root.display().to_string();
    prepare(input)
        .expect_err("the batch must be refused")
        .iter()
        .map(|error| error.to_string().replace(&root, "<root>"))
        .collect()
}

fn ok(input: &PrepareInput) -> PreparedBatch {
    prepare(input).unwrap_or_else(|errors| {
        panic!(
            "prepare failed: {:#?}",
            errors.iter().map(ToString::to_string).collect::<Vec<_>>()
        )
    })
}

const SCENARIO: &str = "prompt: p\nsession: ../sessions/s.yaml\n";
const SESSION: &str = "model: m\nuploads: [../data/a.csv]\nfolders:\n  - from: ../data/project\nplugins:\n  \
                       marketplaces: [https://github.com/x/y.git]\n  local_plugins:\n    - ../skills/k\n";

fn example_tree() -> tempfile::TempDir {
    tree(&[
        ("scenarios/s.yaml", SCENARIO),
        ("sessions/s.yaml", SESSION),
        ("data/a.csv", "a,b\n"),
        ("data/project/notes.txt", "n\n"),
        ("data/project/.env", "TOKEN=x\n"),
        ("skills/k/.claude-plugin/plugin.json", "{}\n"),
        ("skills/k/skills/k/SKILL.md", "# k\n"),
        ("skills/k/.cowork-hashignore", "*.tmp\n"),
        ("skills/k/.env.local", "TOKEN=y\n"),
        ("skills/k/.git/config", "[core]\n"),
        ("unrelated/file.txt", "not shipped\n"),
    ])
}

#[test]
fn ships_every_reached_file_and_nothing_else() {
    let dir = example_tree();
    let batch = ok(&run_input(dir.path(), "scenarios/s.yaml"));
    let files: Vec<&str> = batch.files.iter().map(String::as_str).collect();
    assert_eq!(
        files,
        [
            "data/a.csv",
            "data/project/notes.txt",
            "scenarios/s.yaml",
            "sessions/s.yaml",
            "skills/k/.claude-plugin/plugin.json",
            "skills/k/.cowork-hashignore",
            "skills/k/skills/k/SKILL.md",
        ]
    );
    assert_eq!(batch.scenarios.len(), 1);
    let scenario = &batch.scenarios[0];
    assert_eq!(
        (scenario.rel_path.as_str(), scenario.name.as_str()),
        ("scenarios/s.yaml", "s")
    );
    let session = scenario.session.as_ref().expect("a session file");
    assert_eq!(session.rel_path, "sessions/s.yaml");
    assert_eq!(session.session.model.as_deref(), Some("m"));
    assert!(batch.matrix.is_none());
    assert_eq!(batch.root, dir.path());
}

#[test]
fn directory_targets_are_listed_like_the_cli() {
    let dir = tree(&[
        ("t/b.yaml", "prompt: p\n"),
        ("t/a.yml", "prompt: p\n"),
        ("t/C.yaml", "prompt: p\n"),
        ("t/upper.YAML", "prompt: p\n"),
        ("t/notes.txt", "x"),
        ("t/sub/deep.yaml", "prompt: p\n"),
    ]);
    let batch = ok(&run_input(dir.path(), "t"));
    let names: Vec<&str> = batch
        .scenarios
        .iter()
        .map(|s| s.rel_path.as_str())
        .collect();
    // Non-recursive, case-sensitive suffix, code-unit order (upper case sorts first).
    assert_eq!(names, ["t/C.yaml", "t/a.yml", "t/b.yaml"]);

    // A file target is used whatever its name.
    let dir = tree(&[("t/scenario.txt", "prompt: p\n")]);
    let batch = ok(&run_input(dir.path(), "t/scenario.txt"));
    assert_eq!(batch.scenarios[0].name, "scenario.txt");
}

#[test]
fn missing_and_empty_targets_are_usage_errors() {
    let dir = tree(&[("empty/readme.txt", "x")]);
    let got = errors(&run_input(dir.path(), "empty"));
    assert_eq!(
        got,
        ["<root>/empty: the target directory holds no *.yaml / *.yml files"]
    );
    let got = errors(&run_input(dir.path(), "nope.yaml"));
    assert_eq!(got.len(), 1);
    assert!(
        got[0].starts_with("<root>/nope.yaml: target does not exist"),
        "{got:?}"
    );
}

#[test]
fn every_problem_is_reported_with_file_line_and_key() {
    let dir = tree(&[
        ("s/a.yaml", "prompt: p\nbaselne: latest\n"),
        (
            "s/b.yaml",
            "prompt: p\non_unanswered: prompt\nsession: ../missing.yaml\n",
        ),
        ("s/c.yaml", "prompt: p\nsession: ../se/x.yaml\n"),
        ("s/d.yaml", "prompt: p\nsession: ../se/x.yaml\n"),
        ("se/x.yaml", "model: m\nuploads: [../data/none.csv]\n"),
    ]);
    let got = errors(&run_input(dir.path(), "s"));
    assert_eq!(
        got,
        [
            "<root>/s/a.yaml:2:1: baselne: unknown key `baselne`, did you mean `baseline`?",
            "<root>/s/b.yaml:2:1: on_unanswered: `prompt` is interactive and is refused by run (hint: use fail, first or llm)",
            "<root>/s/b.yaml:3:1: session: \"../missing.yaml\" does not exist",
            // The shared session is reported once, though two scenarios use it.
            "<root>/se/x.yaml:2:11: uploads[0]: \"../data/none.csv\" does not exist",
        ]
    );
}

#[test]
fn a_session_given_as_the_target_is_one_error() {
    let dir = example_tree();
    let got = errors(&run_input(dir.path(), "sessions/s.yaml"));
    assert_eq!(
        got,
        [
            "<root>/sessions/s.yaml: this is a session file, not a scenario: it has session keys \
          and no `prompt` (hint: run the scenario whose `session:` names this file, or a \
          directory of scenarios)"
        ]
    );
    // A scenario missing its prompt is still a scenario, and says so key by key.
    let dir = tree(&[("s.yaml", "baseline: latest\nmodel: m\n")]);
    let got = errors(&run_input(dir.path(), "s.yaml"));
    assert!(
        got.iter().any(|e| e.contains("unknown key `model`")),
        "{got:#?}"
    );
}

#[test]
fn session_typos_are_reported_with_the_scenario_typos() {
    let dir = tree(&[
        (
            "s/a.yaml",
            "prompt: p\nfidelty: container\nsession: ../se/x.yaml\n",
        ),
        (
            "s/b.yaml",
            "prompt: p\nbaselne: latest\nsession: ../se/x.yaml\n",
        ),
        (
            "s/c.yaml",
            "prompt: p\nbaselne: latest\nsession: (inline)\n",
        ),
        ("se/x.yaml", "model: m\nefort: high\n"),
    ]);
    let got = errors(&run_input(dir.path(), "s"));
    assert_eq!(
        got,
        [
            "<root>/s/a.yaml:2:1: fidelty: unknown key `fidelty`, did you mean `fidelity`?",
            "<root>/se/x.yaml:2:1: efort: unknown key `efort`, did you mean `effort`?",
            "<root>/s/b.yaml:2:1: baselne: unknown key `baselne`, did you mean `baseline`?",
            "<root>/s/c.yaml:2:1: baselne: unknown key `baselne`, did you mean `baseline`?",
        ]
    );
}

#[test]
fn paths_must_stay_inside_the_bundle_root() {
    let outer = tempfile::tempdir().expect("tempdir");
    let root = outer.path().join("root");
    write(outer.path(), "outside/secret.txt", "s");
    write(
        &root,
        "scenarios/abs.yaml",
        "prompt: p\nsession: /etc/passwd\n",
    );
    write(
        &root,
        "scenarios/tilde.yaml",
        "prompt: p\nsession: ~/s.yaml\n",
    );
    write(
        &root,
        "scenarios/escape.yaml",
        "prompt: p\nsession: ../../outside/secret.txt\n",
    );
    write(
        &root,
        "scenarios/link.yaml",
        "prompt: p\nsession: ../sessions/link.yaml\n",
    );
    write(
        &root,
        "scenarios/paths.yaml",
        "prompt: p\nsession: ../sessions/paths.yaml\n",
    );
    write(
        &root,
        "sessions/paths.yaml",
        "uploads: [../data, ../.env]\nprojects:\n  - {uuid: u, from: proj}\nmcp:\n  config: ~/mcp.json\nskills:\n  local: [../skills/s]\n",
    );
    write(&root, "data/x.csv", "x");
    write(&root, ".env", "TOKEN=x\n");
    write(&root, "skills/s/SKILL.md", "s");
    std::os::unix::fs::symlink(
        outer.path().join("outside/secret.txt"),
        root.join("sessions/link.yaml"),
    )
    .expect("symlink");
    std::os::unix::fs::symlink(outer.path().join("outside"), root.join("skills/s/escape"))
        .expect("symlink");
    let got = errors(&run_input(&root, "scenarios"));
    let root_hint = "(hint: every input must lie inside the bundle root <root>; pass a --bundle-root that contains it)";
    assert_eq!(
        got,
        [
            format!("<root>/scenarios/abs.yaml:2:1: session: absolute path \"/etc/passwd\" cannot be shipped in a bundle {root_hint}"),
            format!("<root>/scenarios/escape.yaml:2:1: session: \"../../outside/secret.txt\" resolves outside the bundle root {root_hint}"),
            format!("<root>/scenarios/link.yaml:2:1: session: \"../sessions/link.yaml\" resolves through a symlink (sessions/link.yaml) outside the bundle root {root_hint}"),
            "<root>/sessions/paths.yaml:1:11: uploads[0]: \"../data\" is not a file".to_owned(),
            "<root>/sessions/paths.yaml:1:20: uploads[1]: .env is a .env file; credentials come from the worker's environment and are never shipped".to_owned(),
            format!("<root>/sessions/paths.yaml:7:11: skills.local[0]: skills/s/escape is a symlink that resolves outside the bundle root {root_hint}"),
            format!("<root>/sessions/paths.yaml:5:3: mcp.config: \"~/mcp.json\": `~` paths are not supported; they would name the worker's home directory {root_hint}"),
            "<root>/sessions/paths.yaml:3:15: projects[0].from: is resolved against the worker's working directory, not the session file, so a relative value cannot be shipped (hint: projects[].from is not supported in fleet batches)".to_owned(),
            format!("<root>/scenarios/tilde.yaml:2:1: session: \"~/s.yaml\": `~` paths are not supported; they would name the worker's home directory {root_hint}"),
        ]
    );
}

#[test]
fn targets_outside_the_root_suggest_bundle_root() {
    let outer = tempfile::tempdir().expect("tempdir");
    write(outer.path(), "elsewhere/s.yaml", "prompt: p\n");
    write(outer.path(), "root/keep.txt", "x");
    let got = errors(&PrepareInput {
        target: outer.path().join("elsewhere/s.yaml"),
        matrix: None,
        bundle_root: outer.path().join("root"),
        mode: BatchMode::Run,
        executor: ExecutorKind::Harness,
    });
    assert_eq!(got.len(), 1);
    assert!(got[0].ends_with("elsewhere/s.yaml: the target lies outside the bundle root (hint: every input must lie inside the bundle root <root>; pass a --bundle-root that contains it)"), "{got:?}");
}

#[test]
fn symlinked_dirs_inside_the_root_are_followed_once() {
    let dir = tree(&[
        ("s.yaml", "prompt: p\nsession: se.yaml\n"),
        ("se.yaml", "skills:\n  local: [k]\n"),
        ("k/a.txt", "a"),
        ("shared/b.txt", "b"),
    ]);
    std::os::unix::fs::symlink("../shared", dir.path().join("k/shared")).expect("symlink");
    // A link back to the directory being walked is skipped instead of recursing forever.
    std::os::unix::fs::symlink(".", dir.path().join("k/loop")).expect("symlink");
    let batch = ok(&run_input(dir.path(), "s.yaml"));
    let files: Vec<&str> = batch.files.iter().map(String::as_str).collect();
    assert_eq!(files, ["k/a.txt", "k/shared/b.txt", "s.yaml", "se.yaml"]);
}

fn matrix_tree(session: &str, matrix: &str) -> tempfile::TempDir {
    tree(&[
        ("scenarios/s.yaml", SCENARIO),
        ("sessions/s.yaml", session),
        ("skills/k/SKILL.md", "k"),
        ("matrices/v1/k/SKILL.md", "v1"),
        ("matrices/v2/k/SKILL.md", "v2"),
        ("matrices/m.yaml", matrix),
    ])
}

#[test]
fn tc_35_matrix_file_validation() {
    let session = "plugins:\n  local_plugins: [../skills/k]\n";
    let matrix_input =
        |dir: &Path, target: &str| input(dir, target, Some("matrices/m.yaml"), BatchMode::Run);

    // Valid: candidates resolve against the matrix file's directory (rule R3 of
    // harness-behaviour.md#path-resolution) and are shipped.
    let dir = matrix_tree(session, "skill_dirs: [v1/k, ./v2/k]\nmodels: [a, a]\n");
    let batch = ok(&matrix_input(dir.path(), "scenarios/s.yaml"));
    let matrix = batch.matrix.as_ref().expect("a matrix");
    assert_eq!(
        matrix.skill_dirs,
        [
            ("v1/k".to_owned(), "matrices/v1/k".to_owned()),
            ("./v2/k".to_owned(), "matrices/v2/k".to_owned())
        ]
    );
    assert_eq!(matrix.rel_path, "matrices/m.yaml");
    assert!(batch.files.contains("matrices/v2/k/SKILL.md"));
    assert!(batch.files.contains("matrices/m.yaml"));

    // A directory target holding exactly one scenario slips through like in the CLI.
    let dir = matrix_tree(session, "models: [a]\n");
    ok(&matrix_input(dir.path(), "scenarios"));

    // Unknown key, empty file, null axis, non-string element: reported with file and line.
    let check = |matrix: &str, expect: &str| {
        let dir = matrix_tree(session, matrix);
        assert_eq!(
            errors(&matrix_input(dir.path(), "scenarios/s.yaml")),
            [expect],
            "{matrix:?}"
        );
    };
    check(
        "{baseline: [a]}\n",
        "<root>/matrices/m.yaml:1:2: baseline: unknown key `baseline`, did you mean `baselines`?",
    );
    check(
        "",
        "<root>/matrices/m.yaml: matrix file is empty; expected a mapping with baselines, models or skill_dirs",
    );
    check(
        "baselines:\n",
        "<root>/matrices/m.yaml:1:10: baselines: expected a sequence of strings, got null",
    );
    check(
        "baselines: [1.5]\n",
        "<root>/matrices/m.yaml:1:13: baselines[0]: expected a string, got a number",
    );
    check(
        "skill_dirs: [v3/k]\n",
        "<root>/matrices/m.yaml:1:14: skill_dirs[0]: \"v3/k\" does not exist",
    );

    // A missing matrix file.
    let dir = matrix_tree(session, "models: [a]\n");
    let got = errors(&input(
        dir.path(),
        "scenarios/s.yaml",
        Some("matrices/none.yaml"),
        BatchMode::Run,
    ));
    assert_eq!(got.len(), 1);
    assert!(
        got[0].starts_with("<root>/matrices/none.yaml: the matrix file does not exist"),
        "{got:?}"
    );

    // A directory target holding two scenario files.
    let dir = matrix_tree(session, "models: [a]\n");
    write(dir.path(), "scenarios/t.yaml", "prompt: p\n");
    assert_eq!(
        errors(&matrix_input(dir.path(), "scenarios")),
        [
            "<root>/scenarios: --matrix needs exactly one scenario file, the target holds 2 (hint: pass a single scenario file as the target)"
        ]
    );

    // A skill_dirs axis, even `[]`, needs exactly one local plugin.
    for (session, count, line) in [
        ("model: m\n", 0, ""),
        (
            "plugins:\n  local_plugins: [../skills/k, ../skills/k2]\n",
            2,
            ":2:3",
        ),
    ] {
        let dir = matrix_tree(session, "skill_dirs: []\n");
        write(dir.path(), "skills/k2/SKILL.md", "k2");
        assert_eq!(
            errors(&matrix_input(dir.path(), "scenarios/s.yaml")),
            [format!(
                "<root>/sessions/s.yaml{line}: plugins.local_plugins: the matrix matrices/m.yaml (line 1) has a skill_dirs \
                 axis, so the session must declare exactly one plugins.local_plugins entry; it declares {count}"
            )]
        );
    }
    // An (inline) session declares none.
    let dir = matrix_tree(session, "skill_dirs: []\n");
    write(dir.path(), "scenarios/s.yaml", "prompt: p\n");
    assert_eq!(
        errors(&matrix_input(dir.path(), "scenarios/s.yaml")),
        [
            "<root>/scenarios/s.yaml: session: the matrix matrices/m.yaml (line 1) has a skill_dirs axis, so the session \
          must declare exactly one plugins.local_plugins entry; it declares 0"
        ]
    );
}

#[test]
fn record_mode_ships_redaction_policies() {
    let dir = tree(&[
        ("s/a.yaml", "prompt: p\n"),
        ("s/.cowork-redact.json", "{}"),
        (".cowork-redact.json", "{}"),
    ]);
    let batch = ok(&input(dir.path(), "s/a.yaml", None, BatchMode::Record));
    let files: Vec<&str> = batch.files.iter().map(String::as_str).collect();
    assert_eq!(
        files,
        [".cowork-redact.json", "s/.cowork-redact.json", "s/a.yaml"]
    );
    let batch = ok(&run_input(dir.path(), "s/a.yaml"));
    assert_eq!(batch.files.len(), 1);
}

#[test]
fn replay_mode_reads_cassettes() {
    let cassette = r#"{"scenario": {"name": "", "prompt": "p", "session": "../sessions/s.yaml", "futureKey": 1}, "events": []}"#;
    let dir = tree(&[
        ("replays/one.cassette.json", cassette),
        ("replays/notes.yaml", "not a cassette"),
        ("sessions/s.yaml", "model: m\n"),
    ]);
    let batch = ok(&input(dir.path(), "replays", None, BatchMode::Replay));
    assert_eq!(batch.scenarios.len(), 1);
    assert_eq!(batch.scenarios[0].name, "one.cassette");
    let files: Vec<&str> = batch.files.iter().map(String::as_str).collect();
    assert_eq!(files, ["replays/one.cassette.json", "sessions/s.yaml"]);

    let dir = tree(&[("c.json", r#"{"events": []}"#)]);
    assert_eq!(
        errors(&input(dir.path(), "c.json", None, BatchMode::Replay)),
        [
            "<root>/c.json: not a cassette: expected an object with a `scenario` object and an `events` array"
        ]
    );
}

#[test]
fn input_errors_display_all_parts() {
    let error = InputError {
        file: PathBuf::from("s.yaml"),
        line: Some(2),
        column: Some(1),
        key: Some("session".to_owned()),
        message: "m".to_owned(),
        hint: Some("h".to_owned()),
    };
    assert_eq!(error.to_string(), "s.yaml:2:1: session: m (hint: h)");
}

#[test]
fn materialized_cells_resolve_inside_the_unpacked_bundle() {
    use cowork_fabric::bundle::{UnpackLimits, pack, unpack};
    use cowork_schema::batch::BatchFlags;

    let session = "model: m0\nuploads: [../data/a.csv]\nplugins:\n  local_plugins: [../skills/k]\n";
    let dir = matrix_tree(session, "models: [m1]\nskill_dirs: [v2/k]\n");
    write(dir.path(), "data/a.csv", "a\n");
    let batch = ok(&input(
        dir.path(),
        "scenarios/s.yaml",
        Some("matrices/m.yaml"),
        BatchMode::Run,
    ));
    let layout = cowork_core::plan::plan_units(&batch, &BatchFlags::default(), BatchMode::Run)
        .expect("plans");
    let packed = pack(&batch.root, &batch.files, &layout.derived_for_bundle()).expect("packs");
    let out = tempfile::tempdir().expect("tempdir");
    let unpacked = out.path().join("bundle");
    unpack(&packed.bytes, &unpacked, &UnpackLimits::default()).expect("unpacks");

    // Load the derived scenario from the unpacked bundle and follow its paths on disk, as the
    // CLI on a worker would.
    let scenario_path = unpacked.join(&layout.units[0].scenario_file);
    let text = fs::read_to_string(&scenario_path).expect("derived scenario exists");
    let scenario = Scenario::from_yaml(&text, &scenario_path).expect("derived scenario loads");
    assert_eq!(scenario.effective_name(&scenario_path), "s");
    let SessionRef::Path(session_value) = scenario.session_ref() else {
        panic!("the derived scenario names a session");
    };
    let session_path = scenario_path
        .parent()
        .expect("has a parent")
        .join(session_value);
    let text = fs::read_to_string(&session_path).expect("derived session exists");
    let session = Session::from_yaml(&text, &session_path).expect("derived session loads");
    assert_eq!(session.model.as_deref(), Some("m1"));
    let session_dir = session_path.parent().expect("has a parent");
    let plugin = fs::canonicalize(session_dir.join(&session.plugins.local_plugins[0]))
        .expect("plugin dir exists");
    assert_eq!(
        plugin,
        fs::canonicalize(unpacked.join("matrices/v2/k")).expect("candidate exists")
    );
    assert!(
        session_dir.join(&session.uploads[0]).is_file(),
        "uploads still resolve"
    );
}

#[test]
fn a_simulated_cassette_is_refused_for_the_real_harness_and_taken_by_the_simulator() {
    let simulated = r#"{"generator": "cowork-fleet-sim", "simulated": true, "scenario": {"name": "s", "prompt": "p"}, "events": []}"#;
    let dir = tree(&[("replays/s.json", simulated)]);
    let mut replay = input(dir.path(), "replays", None, BatchMode::Replay);
    for executor in [ExecutorKind::Harness, ExecutorKind::Container] {
        replay.executor = executor;
        assert_eq!(
            errors(&replay),
            [
                "<root>/replays/s.json: a simulated cassette (`\"simulated\": true`, written by the sim \
                 executor) holds no recorded run, so cowork-harness cannot replay it (hint: record a \
                 real cassette (`cowork run <scenario> --record`, or `cowork-harness record`) or \
                 replay this one with `--executor sim`)"
            ]
        );
    }
    replay.executor = ExecutorKind::Sim;
    assert_eq!(ok(&replay).scenarios.len(), 1);
}

#[test]
fn an_effort_the_model_has_no_selector_for_is_refused_at_the_session_line() {
    let session = "model: claude-sonnet-4-5\neffort: high\n";
    let dir = tree(&[
        ("s/a.yaml", "prompt: a\nsession: ../sessions/s.yaml\n"),
        ("s/b.yaml", "prompt: b\nsession: ../sessions/s.yaml\n"),
        ("sessions/s.yaml", session),
    ]);
    // Once for the session both scenarios share, in the harness's words, at its line.
    for mode in [BatchMode::Run, BatchMode::Record] {
        assert_eq!(
            errors(&input(dir.path(), "s", None, mode)),
            [
                "<root>/sessions/s.yaml:2:1: effort: model \"claude-sonnet-4-5\" has no effort \
                 selector — omit `effort:` (real Cowork always runs it at the medium fallback, with \
                 no UI picker)"
            ]
        );
    }
    // A model with the level, or a baseline from before the harness knew selectors, passes.
    write(
        dir.path(),
        "sessions/s.yaml",
        "model: claude-opus-4-8\neffort: high\n",
    );
    ok(&run_input(dir.path(), "s"));
    write(dir.path(), "sessions/s.yaml", session);
    write(
        dir.path(),
        "s/a.yaml",
        "prompt: a\nbaseline: desktop-1.18286.2\nsession: ../sessions/s.yaml\n",
    );
    ok(&run_input(dir.path(), "s/a.yaml"));
}
