//! The examples Cowork Fleet ships, against the real cowork-harness CLI: every scenario, session
//! and matrix under `examples/` is accepted by the CLI and by the fleet's own validation, the
//! demo's cassettes replay as recorded, the demo batches end with the CLI's verdicts, and the PR
//! workflow of `examples/ci/` goes green as shipped.
//!
//! Each case copies the repository's `examples/` into a fresh git work tree (the harness stages
//! committed files only). The agent double plays the demo cassettes at fidelity protocol, so
//! the protocol twins of the demo scenarios (`examples/demo/protocol/`) run end to end without a
//! model; the container scenarios would need Docker and the agent image, so the CLI checks them
//! with `lint`, and their twins — the same session, prompt, answers and assertions — run.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{cli_envelope, expect_same, path_without_claude, real_cli, stored_results};
use crate::support::{
    Output, array, batch_dirs, copy_dir, fixture, only_batch_dir, workspace_root,
};

/// A git work tree holding a copy of the repository's `examples/`, a private `TMPDIR`, and the
/// harness wrapper the jobs run (it points the agent double at the demo cassettes).
struct Examples {
    _dir: tempfile::TempDir,
    root: PathBuf,
    tmp: PathBuf,
    harness: PathBuf,
    cli: PathBuf,
}

impl Examples {
    fn new(cli: &Path) -> Examples {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("repo");
        copy_dir(&workspace_root().join("examples"), &root.join("examples"));
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&tmp).expect("tmp dir");
        let cli = std::path::absolute(cli).expect("absolute CLI path");
        let harness = dir.path().join("harness");
        std::fs::write(
            &harness,
            format!(
                "#!/bin/sh\nexport FAKE_CLAUDE_CASSETTES='{}'\nexec '{}' \"$@\"\n",
                root.join("examples/demo/cassettes").display(),
                cli.display()
            ),
        )
        .expect("write wrapper");
        std::fs::set_permissions(&harness, std::fs::Permissions::from_mode(0o755))
            .expect("chmod wrapper");
        let examples = Examples {
            _dir: dir,
            root,
            tmp,
            harness,
            cli,
        };
        examples.git(&["init", "-q"]);
        examples.commit_all();
        examples
    }

    fn git(&self, args: &[&str]) {
        let status = Command::new("git")
            .args(args)
            .current_dir(&self.root)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .status()
            .expect("git");
        assert!(status.success(), "git {args:?}");
    }

    fn commit_all(&self) {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-qm", "examples"]);
    }

    /// `PATH` with the agent double first and no other `claude`.
    fn path_with_agent(&self) -> std::ffi::OsString {
        let mut dirs = vec![std::path::absolute(fixture("upstream/agent")).expect("agent dir")];
        dirs.extend(path_without_claude());
        std::env::join_paths(dirs).expect("PATH")
    }

    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(program);
        command.args(args).current_dir(&self.root);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("COWORK_") {
                command.env_remove(name);
            }
        }
        command
            .env("PATH", self.path_with_agent())
            .env("TMPDIR", &self.tmp)
            .env(
                "FAKE_CLAUDE_CASSETTES",
                self.root.join("examples/demo/cassettes"),
            )
            .env("NO_COLOR", "1");
        command
    }

    fn output(&self, program: &Path, args: &[&str]) -> Output {
        let output = self.command(program, args).output().expect("spawn");
        Output::new(
            format!("{} {}", program.display(), args.join(" ")),
            self.root.clone(),
            output,
        )
    }

    /// `cowork <args>` with the harness executor and the wrapper.
    fn cowork(&self, args: &[&str]) -> Output {
        let harness = self.harness.to_string_lossy().into_owned();
        let mut all = args.to_vec();
        all.extend(["--executor", "harness", "--harness-bin", &harness]);
        self.output(env!("CARGO_BIN_EXE_cowork").as_ref(), &all)
    }

    /// The CLI itself, `--run-dir` first.
    fn cli(&self, args: &[&str]) -> Output {
        let runs = self.root.join("../cli-runs").to_string_lossy().into_owned();
        let mut all = vec!["--run-dir", runs.as_str()];
        all.extend(args);
        self.output(&self.cli, &all)
    }

    fn store(&self) -> PathBuf {
        self.root.join(".cowork")
    }
}

/// What an example YAML file is, from its top-level keys.
#[derive(Debug, PartialEq)]
enum Kind {
    Scenario,
    Session,
    Matrix,
    SimProfile,
}

fn kind_of(path: &Path) -> Kind {
    let text = std::fs::read_to_string(path).expect("read example");
    let node = cowork_schema::load::parse_yaml(&text, path).expect("example YAML parses");
    let document = node.to_json();
    let has = |key: &str| document.get(key).is_some();
    if has("prompt") {
        Kind::Scenario
    } else if has("rules") {
        Kind::SimProfile
    } else if has("models") || has("baselines") || has("skill_dirs") {
        Kind::Matrix
    } else if has("model") || has("plugins") || has("uploads") {
        Kind::Session
    } else {
        panic!("{}: an example of no kind this test knows", path.display());
    }
}

/// Every `*.yaml` under `examples/demo`, relative to the examples root, sorted.
fn demo_yaml(root: &Path) -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|ext| ext == "yaml") {
                let rel = path.strip_prefix(root).expect("under the root");
                out.push(rel.display().to_string());
            }
        }
    }
    let mut files = Vec::new();
    walk(&root.join("examples/demo"), root, &mut files);
    files.sort();
    files
}

/// The scenario as data, without what a protocol twin changes: `fidelity` and the L0 opt-in.
fn twin_shape(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("read scenario");
    let mut document = cowork_schema::load::parse_yaml(&text, path)
        .expect("scenario parses")
        .to_json();
    let map = document.as_object_mut().expect("a mapping");
    map.remove("fidelity");
    if let Some(Value::Array(asserts)) = map.get_mut("assert") {
        asserts.retain(|assert| assert.get("allow_l0_plugin_divergence").is_none());
    }
    document
}

#[test]
fn every_example_is_accepted_by_the_cli_and_by_the_fleet() {
    let Some(cli) = real_cli() else { return };
    let examples = Examples::new(&cli);
    let files = demo_yaml(&examples.root);
    let of_kind = |kind: Kind| -> Vec<&String> {
        files
            .iter()
            .filter(|file| kind_of(&examples.root.join(file)) == kind)
            .collect()
    };
    let (scenarios, sessions, matrices) = (
        of_kind(Kind::Scenario),
        of_kind(Kind::Session),
        of_kind(Kind::Matrix),
    );
    assert!(
        scenarios.len() >= 4 && !sessions.is_empty() && !matrices.is_empty(),
        "{files:?}"
    );
    for scenario in &scenarios {
        // The CLI's own check of a scenario file, no model needed.
        let lint = examples.cli(&["lint", scenario, "--output-format", "json"]);
        lint.expect_code(0);
        // The fleet's: validated, planned and priced, nothing run.
        examples
            .cowork(&["run", scenario, "--dry-run"])
            .expect_code(0);
        let twin = scenario.replace("/scenarios/", "/protocol/");
        if twin == **scenario {
            continue;
        }
        // A container scenario has a protocol twin that differs only in where it runs.
        assert_eq!(
            twin_shape(&examples.root.join(scenario)),
            twin_shape(&examples.root.join(&twin)),
            "{scenario} and its protocol twin {twin} drifted apart"
        );
    }
    // Every protocol scenario (so every session the scenarios name) runs through the CLI.
    let protocol: Vec<&&String> = scenarios
        .iter()
        .filter(|file| file.contains("/protocol/"))
        .collect();
    assert!(!protocol.is_empty());
    for scenario in protocol {
        let out = examples.cli(&["run", scenario, "--output-format", "json"]);
        out.expect_code(0);
        assert_eq!(cli_envelope(&out)["ok"], true, "{}", out.context());
    }
    for session in &sessions {
        assert!(
            scenarios.iter().any(|scenario| {
                std::fs::read_to_string(examples.root.join(scenario))
                    .unwrap_or_default()
                    .contains(
                        Path::new(session)
                            .file_name()
                            .and_then(|n| n.to_str())
                            .unwrap_or("?"),
                    )
            }),
            "{session} is named by no example scenario, so nothing checks it"
        );
    }
    for matrix in &matrices {
        let out = examples.cli(&[
            "run",
            "examples/demo/protocol/csv-report.yaml",
            "--matrix",
            matrix,
            "--output-format",
            "json",
        ]);
        out.expect_code(0);
        let cells = array(&cli_envelope(&out)["matrix"], "cells").to_vec();
        assert!(
            cells.len() == 4 && cells.iter().all(|cell| cell["pass"] == true),
            "{}",
            out.context()
        );
        examples
            .cowork(&[
                "run",
                "examples/demo/scenarios/csv-report.yaml",
                "--matrix",
                matrix,
                "--repeat",
                "5",
                "--dry-run",
            ])
            .expect_code(0);
    }
    // The demo cassettes: replayed and verified by the CLI, validated by the fleet.
    examples
        .cli(&[
            "replay",
            "examples/demo/cassettes/",
            "--output-format",
            "json",
        ])
        .expect_code(0);
    examples
        .cli(&["verify-cassettes", "examples/demo/cassettes/"])
        .expect_code(0);
    examples
        .cowork(&["run", "--replay", "examples/demo/cassettes", "--dry-run"])
        .expect_code(0);
}

#[test]
fn the_demo_batches_end_with_the_cli_verdicts() {
    let Some(cli) = real_cli() else { return };
    let examples = Examples::new(&cli);
    // The PR gate: each cassette's stored result is the CLI's own replay of it.
    let out = examples.cowork(&[
        "run",
        "--replay",
        "examples/demo/cassettes",
        "--output-format",
        "json",
    ]);
    out.expect_code(0);
    let stored = stored_results(&only_batch_dir(&examples.store()));
    assert_eq!(stored.len(), 2, "{}", out.context());
    for result in &stored {
        let name = result["scenario"].as_str().unwrap_or_default();
        let theirs = examples.cli(&[
            "replay",
            &format!("examples/demo/cassettes/{name}.cassette.json"),
            "--output-format",
            "json",
        ]);
        theirs.expect_code(0);
        expect_same(name, result, &array(&cli_envelope(&theirs), "results")[0]);
    }
    // The demo session and matrix, run: every cell judged as the CLI judges it.
    let matrix = [
        "run",
        "examples/demo/protocol/csv-report.yaml",
        "--matrix",
        "examples/demo/matrix.yaml",
        "--output-format",
        "json",
    ];
    let ours = examples.cowork(&matrix);
    let theirs = examples.cli(&matrix);
    assert_eq!(
        ours.code,
        theirs.code,
        "{}\n{}",
        ours.context(),
        theirs.context()
    );
    ours.expect_code(0);
    let pass_of = |envelope: &Value| -> Vec<Value> {
        array(&envelope["matrix"], "cells")
            .iter()
            .map(|cell| cell["pass"].clone())
            .collect()
    };
    assert_eq!(pass_of(&ours.envelope()), pass_of(&cli_envelope(&theirs)));
    // And the sweep the README shows, with repeats: PASS, every cell.
    examples
        .cowork(&[
            "run",
            "examples/demo/protocol/csv-report.yaml",
            "--matrix",
            "examples/demo/matrix.yaml",
            "--repeat",
            "2",
        ])
        .expect_code(0)
        .expect_stderr("verdict: PASS (exit 0)");
    examples
        .cowork(&["run", "examples/demo/protocol", "--repeat", "2"])
        .expect_code(0);
}

#[test]
fn what_the_cli_refuses_before_a_run_the_fleet_refuses_at_validation_in_its_words() {
    let Some(cli) = real_cli() else { return };
    let examples = Examples::new(&cli);
    // The demo session as it shipped before: `effort: high` on claude-sonnet-4-5.
    let session = examples.root.join("examples/demo/sessions/csv-report.yaml");
    let text = std::fs::read_to_string(&session).expect("session");
    std::fs::write(
        &session,
        text.replace(
            "model: claude-sonnet-4-5\n",
            "model: claude-sonnet-4-5\neffort: high\n",
        ),
    )
    .expect("write session");
    examples.commit_all();
    let line = std::fs::read_to_string(&session)
        .expect("session")
        .lines()
        .position(|line| line == "effort: high")
        .expect("the effort line")
        + 1;
    let scenario = "examples/demo/protocol/csv-report.yaml";
    let theirs = examples.cli(&["run", scenario, "--output-format", "json"]);
    theirs.expect_code(2);
    let words = cli_envelope(&theirs)["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        words.contains("has no effort selector"),
        "{}",
        theirs.context()
    );
    let ours = examples.cowork(&["run", scenario]);
    ours.expect_code(2).expect_stderr(&format!(
        "examples/demo/sessions/csv-report.yaml:{line}:1: effort: {words}"
    ));
    assert!(batch_dirs_empty(&examples), "{}", ours.context());
    // Under a matrix the CLI fails the sonnet cells with those words and runs the others.
    let matrix = [
        "run",
        scenario,
        "--matrix",
        "examples/demo/matrix.yaml",
        "--output-format",
        "json",
    ];
    let theirs = examples.cli(&matrix);
    let ours = examples.cowork(&matrix);
    assert_eq!(
        (ours.code(), theirs.code()),
        (1, 1),
        "{}\n{}",
        ours.context(),
        theirs.context()
    );
    let cells = |envelope: &Value| -> Vec<(Value, Option<String>)> {
        array(&envelope["matrix"], "cells")
            .iter()
            .map(|cell| {
                (
                    cell["pass"].clone(),
                    cell["error"].as_str().map(str::to_owned),
                )
            })
            .collect()
    };
    let (ours_cells, theirs_cells) = (cells(&ours.envelope()), cells(&cli_envelope(&theirs)));
    assert_eq!(ours_cells.len(), theirs_cells.len());
    for (ours_cell, theirs_cell) in ours_cells.iter().zip(&theirs_cells) {
        assert_eq!(ours_cell.0, theirs_cell.0, "{}", ours.context());
        match (&ours_cell.1, &theirs_cell.1) {
            (Some(ours_error), Some(theirs_error)) => assert!(
                ours_error.ends_with(theirs_error.as_str()),
                "{ours_error} / {theirs_error}"
            ),
            (None, None) => {}
            other => panic!("cell errors differ: {other:?}\n{}", ours.context()),
        }
    }

    // A cassette of the simulator, as examples/demo/cassettes held before: the CLI replays it
    // as a failure with no reason; the fleet refuses it before any job, naming it.
    let simulated = examples.root.join("examples/demo/cassettes/simulated.json");
    std::fs::write(
        &simulated,
        r#"{"generator": "cowork-fleet-sim", "simulated": true, "cassetteVersion": 12,
            "scenario": {"name": "csv-report", "session": "../sessions/csv-report.yaml",
                         "prompt": "p", "assert": [{"result": "success"}]},
            "events": [], "controlOut": []}"#,
    )
    .expect("write simulated cassette");
    let theirs = examples.cli(&["replay", "examples/demo/cassettes/simulated.json"]);
    assert_ne!(theirs.code(), 0, "{}", theirs.context());
    let before = batch_dirs(&examples.store()).len();
    let ours = examples.cowork(&["run", "--replay", "examples/demo/cassettes"]);
    ours.expect_code(2)
        .expect_stderr("examples/demo/cassettes/simulated.json: a simulated cassette")
        .expect_stderr("--executor sim");
    assert_eq!(
        batch_dirs(&examples.store()).len(),
        before,
        "{}",
        ours.context()
    );
    let sim = examples.output(
        env!("CARGO_BIN_EXE_cowork").as_ref(),
        &[
            "run",
            "--replay",
            "examples/demo/cassettes",
            "--executor",
            "sim",
        ],
    );
    assert_ne!(sim.code(), 2, "{}", sim.context());
}

fn batch_dirs_empty(examples: &Examples) -> bool {
    !examples.store().join("batches").exists() || batch_dirs(&examples.store()).is_empty()
}
