//! The conformance suite: `cowork` against the real `cowork-harness` CLI, as a user drives it.
//!
//! The CLI is `COWORK_HARNESS_BIN`, else `cowork-harness` on `PATH`; `.ci/run` unpacks
//! cowork-harness 2.0.0 from `../shared/upstream/real-cli/` and points the variable at it.
//! Without a CLI every case says why and passes, except under `CI=true`, where a missing CLI
//! fails the run. At fidelity protocol the CLI spawns `claude` from `PATH`;
//! `fixtures/upstream/agent/claude` stands in for it, playing the recorded cassettes whose
//! prompt matches (no model, no token, no network). `fixtures/upstream/` also holds the CLI's
//! own examples and e2e scenarios, which each case copies into a fresh git repository, so
//! every case runs from inside a work tree, where people run it.
//!
//! Each case compares what `cowork` stored with what the CLI itself prints for the same input:
//! results and rollups equal the CLI's own, apart from run times, run ids and temp paths.

#[path = "conformance_examples.rs"]
mod examples;
#[path = "conformance_workflows.rs"]
mod workflows;

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cowork_testkit::wait_until;
use serde_json::Value;

use crate::fleet::Fleet;
use crate::support::{Output, array, batch_dirs, copy_dir, fixture, only_batch_dir, read_json};

/// The CLI under test, or `None` (with the reason printed) when there is none outside CI.
fn real_cli() -> Option<PathBuf> {
    let found = match std::env::var_os("COWORK_HARNESS_BIN") {
        Some(bin) if !bin.is_empty() => Some(PathBuf::from(bin)),
        _ => std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("cowork-harness"))
                .find(|candidate| candidate.is_file())
        }),
    };
    let Some(cli) = found else {
        let why = "no cowork-harness: set COWORK_HARNESS_BIN or put it on PATH (.ci/run unpacks \
                   ../shared/upstream/real-cli/cowork-harness-2.0.0.tar.gz)";
        if std::env::var("CI").is_ok_and(|ci| ci == "true") {
            panic!("conformance: {why}; CI=true requires the real CLI");
        }
        eprintln!("conformance: skipped: {why}");
        return None;
    };
    let version = Command::new(&cli)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("conformance: {} --version: {e}", cli.display()));
    assert!(
        version.status.success(),
        "conformance: {} --version failed",
        cli.display()
    );
    eprintln!(
        "conformance: cowork-harness {} at {}",
        String::from_utf8_lossy(&version.stdout).trim(),
        cli.display()
    );
    Some(cli)
}

/// A git repository holding a copy of the CLI's examples and e2e scenarios, committed, plus a
/// private `TMPDIR` and the wrapper the jobs run the CLI through.
struct Repo {
    _dir: tempfile::TempDir,
    root: PathBuf,
    /// The `TMPDIR` of every process of the case; checked for leftovers.
    tmp: PathBuf,
    /// `cowork-harness` with the agent double's cassette dir set: the harness gets a cleared
    /// environment, so the double's variable is set by this wrapper.
    harness: PathBuf,
    cli: PathBuf,
}

impl Repo {
    fn new(cli: &Path) -> Repo {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("repo");
        copy_dir(&fixture("upstream/examples"), &root.join("examples"));
        copy_dir(&fixture("upstream/e2e"), &root.join("e2e"));
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&tmp).expect("tmp dir");
        let harness = dir.path().join("harness");
        let cli = std::path::absolute(cli).expect("absolute CLI path");
        std::fs::write(
            &harness,
            format!(
                "#!/bin/sh\nexport FAKE_CLAUDE_CASSETTES='{}'\nexec '{}' \"$@\"\n",
                root.join("examples/replays").display(),
                cli.display()
            ),
        )
        .expect("write wrapper");
        std::fs::set_permissions(&harness, std::fs::Permissions::from_mode(0o755))
            .expect("chmod wrapper");
        let repo = Repo {
            _dir: dir,
            root,
            tmp,
            harness,
            cli,
        };
        repo.git(&["init", "-q"]);
        repo.commit_all();
        repo
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
        self.git(&["commit", "-qm", "fixture"]);
    }

    /// `PATH` with the agent double first.
    fn path_with_agent(&self) -> OsString {
        let agent = std::path::absolute(fixture("upstream/agent")).expect("agent dir");
        let mut dirs = vec![agent];
        dirs.extend(path_without_claude());
        std::env::join_paths(dirs).expect("PATH")
    }

    /// A command in the repo with the case's environment: no `COWORK_*` of the test's own,
    /// the agent double on `PATH`, the private `TMPDIR`, and a model credential variable
    /// (`record` wants one set; nothing is called).
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
            .env("ANTHROPIC_API_KEY", "sk-ant-not-a-key")
            .env("FAKE_CLAUDE_CASSETTES", self.root.join("examples/replays"))
            .env("NO_COLOR", "1");
        command
    }

    /// `cowork <args> --executor harness --harness-bin <wrapper>` from the repo's root.
    fn cowork(&self, args: &[&str]) -> Output {
        let mut all: Vec<&str> = args.to_vec();
        let harness = self.harness.to_string_lossy().into_owned();
        all.extend(["--executor", "harness", "--harness-bin", &harness]);
        self.output(env!("CARGO_BIN_EXE_cowork").as_ref(), &all)
    }

    fn output(&self, program: &Path, args: &[&str]) -> Output {
        let mut command = self.command(program, args);
        let output = command.output().expect("spawn");
        Output::new(
            format!("{} {}", program.display(), args.join(" ")),
            self.root.clone(),
            output,
        )
    }

    /// The CLI itself, `--run-dir <runs>` first, as a user would run it.
    fn cli(&self, runs: &Path, args: &[&str]) -> Output {
        let runs = runs.to_string_lossy().into_owned();
        let mut all = vec!["--run-dir", runs.as_str()];
        all.extend(args);
        self.output(&self.cli, &all)
    }

    fn store(&self) -> PathBuf {
        self.root.join(".cowork")
    }

    /// Panics when anything of a job is left in the case's `TMPDIR`.
    fn expect_tmp_clean(&self, out: &Output) {
        let mut left = Vec::new();
        collect_names(&self.tmp, &mut left);
        let leaked: Vec<&String> = left
            .iter()
            .filter(|name| name.contains("cwh-replay-") || name.contains("cowork-job-"))
            .collect();
        if !leaked.is_empty() {
            out.fail(&format!("left in TMPDIR: {leaked:?}"));
        }
    }
}

fn collect_names(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        out.push(entry.path().display().to_string());
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            collect_names(&entry.path(), out);
        }
    }
}

/// The test's `PATH` without any directory holding a `claude`.
fn path_without_claude() -> Vec<PathBuf> {
    std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .filter(|dir| !dir.join("claude").exists())
                .collect()
        })
        .unwrap_or_default()
}

/// A value with what differs between two runs of the same input blanked: times, run ids, the
/// run dir and temp paths.
fn comparable(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !is_volatile_key(key))
                .map(|(key, value)| (key.clone(), comparable(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(comparable).collect()),
        Value::String(text)
            if text.contains('/') && (text.contains("cwh-") || text.contains("/tmp")) =>
        {
            Value::String("<path>".to_owned())
        }
        other => other.clone(),
    }
}

fn is_volatile_key(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    key.ends_with("Ms")
        || key.ends_with("At")
        || lower.ends_with("_ms")
        || lower.contains("duration")
        || lower.contains("time")
        || matches!(
            key,
            "outDir" | "runId" | "sessionId" | "scenario" | "scenarioFile" | "evidence" | "path"
        )
}

/// Panics unless `ours` equals `theirs` once volatile fields are blanked, naming where they
/// differ.
#[track_caller]
fn expect_same(what: &str, ours: &Value, theirs: &Value) {
    let (ours, theirs) = (comparable(ours), comparable(theirs));
    let mut differences = Vec::new();
    differ("", &ours, &theirs, &mut differences);
    if !differences.is_empty() {
        panic!(
            "{what}: cowork's differs from the CLI's own at:\n{}",
            differences.join("\n")
        );
    }
}

fn differ(at: &str, ours: &Value, theirs: &Value, out: &mut Vec<String>) {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|key| !a.contains_key(*key))) {
                let here = format!("{at}/{key}");
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => differ(&here, x, y, out),
                    (x, y) => out.push(format!("{here}: cowork {x:?}, cli {y:?}")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                differ(&format!("{at}/{index}"), x, y, out);
            }
        }
        (x, y) if x != y => out.push(format!("{at}: cowork {x}, cli {y}")),
        _ => {}
    }
}

/// `true` when the store holds no batch (or does not exist).
fn no_batches(store: &Path) -> bool {
    !store.join("batches").exists() || batch_dirs(store).is_empty()
}

/// The envelope of the CLI's own invocation (its last stdout line).
#[track_caller]
fn cli_envelope(out: &Output) -> Value {
    let line = out
        .stdout
        .lines()
        .last()
        .unwrap_or_else(|| out.fail("no envelope"));
    serde_json::from_str(line).unwrap_or_else(|e| out.fail(&format!("envelope: {e}")))
}

/// The stored `result.json` of every job of a batch, in job order.
fn stored_results(batch: &Path) -> Vec<Value> {
    let mut files = Vec::new();
    find_files(&batch.join("jobs"), "result.json", &mut files);
    files.sort();
    files.iter().map(|file| read_json(file)).collect()
}

fn find_files(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "run") {
                continue;
            }
            find_files(&path, name, out);
        } else if path.file_name().is_some_and(|n| n == name) {
            out.push(path);
        }
    }
}

/// The CLI's own replay result of one cassette.
fn cli_replay(repo: &Repo, cassette: &str) -> Value {
    let runs = repo.root.join("cli-runs");
    let out = repo.cli(&runs, &["replay", cassette, "--output-format", "json"]);
    out.expect_code(0);
    array(&cli_envelope(&out), "results")[0].clone()
}

/// The replay results of a batch, keyed by their scenario name.
fn by_scenario(results: &[Value]) -> std::collections::BTreeMap<String, Value> {
    results
        .iter()
        .map(|result| {
            (
                result["scenario"].as_str().unwrap_or_default().to_owned(),
                result.clone(),
            )
        })
        .collect()
}

#[test]
fn replay_of_the_cli_cassettes_equals_its_own_replay_at_no_cost() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    let out = repo.cowork(&["run", "--replay", "examples/replays/"]);
    out.expect_code(0);
    let batch = only_batch_dir(&repo.store());
    let ours = by_scenario(&stored_results(&batch));
    assert_eq!(ours.len(), 3, "{}", out.context());
    for cassette in [
        "example-multiselect-gate",
        "example-pdf-skill",
        "hostloop-computer-links",
    ] {
        let theirs = cli_replay(&repo, &format!("examples/replays/{cassette}.cassette.json"));
        let name = theirs["scenario"].as_str().unwrap_or_default().to_owned();
        let Some(stored) = ours.get(&name) else {
            out.fail(&format!("no stored result for {name}"));
        };
        expect_same(cassette, stored, &theirs);
    }
    // A replay spends nothing: the table says $0 (the recorded cost labelled), the progress
    // line ends at $0, and the batch list prices the batch at $0.
    out.expect_stderr("$0 (recorded $");
    out.expect_stderr("$0.0000\n");
    let list = repo.output(env!("CARGO_BIN_EXE_cowork").as_ref(), &["batches"]);
    assert!(list.stdout.contains("$0.0000"), "{}", list.context());
    // So do the reports: the batch's cost is $0, the recorded cost labelled beside it, in
    // every format that shows a cost.
    for format in ["markdown", "html"] {
        let report = repo.output(
            env!("CARGO_BIN_EXE_cowork").as_ref(),
            &["report", "latest", "--format", format],
        );
        assert!(
            report.stdout.contains("$0.0000 (recorded $0.7182)")
                && report.stdout.contains("$0.0000 (recorded $0.2908)")
                && !report.stdout.contains("cost of folded runs $0.7182"),
            "{format}: {}",
            report.context()
        );
    }
    let json = repo.output(
        env!("CARGO_BIN_EXE_cowork").as_ref(),
        &["report", "latest", "--format", "json"],
    );
    let document: Value = serde_json::from_str(&json.stdout).expect("the JSON report parses");
    assert_eq!(document["totals"]["costUsd"], 0.0, "{}", json.context());
    let recorded = document["totals"]["recordedCostUsd"]
        .as_f64()
        .unwrap_or_default();
    assert!((recorded - 0.71816525).abs() < 1e-9, "{}", json.context());
    let dry = repo.cowork(&["run", "--replay", "examples/replays/", "--dry-run"]);
    dry.expect_code(0);
    assert!(
        dry.stdout.contains("estimated cost: $0.00"),
        "{}",
        dry.context()
    );
    repo.expect_tmp_clean(&out);
}

#[test]
fn replay_of_a_corpus_of_copies_passes_like_the_originals() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    let replays = repo.root.join("examples/replays");
    let mut n_copies = 0;
    for original in [
        "example-multiselect-gate",
        "example-pdf-skill",
        "hostloop-computer-links",
    ] {
        for copy in 0..4 {
            std::fs::copy(
                replays.join(format!("{original}.cassette.json")),
                replays.join(format!("copy{copy}-{original}.cassette.json")),
            )
            .expect("copy cassette");
            n_copies += 1;
        }
    }
    repo.commit_all();
    let out = repo.cowork(&[
        "run",
        "--replay",
        "examples/replays/",
        "--output-format",
        "json",
    ]);
    out.expect_code(0);
    let envelope = out.envelope();
    assert_eq!(envelope["ok"], true);
    let results = stored_results(&only_batch_dir(&repo.store()));
    assert_eq!(results.len(), 3 + n_copies, "{}", out.context());
    for result in &results {
        let name = result["scenario"].as_str().unwrap_or_default();
        let original = match name {
            "smoke-multiselect" => "example-multiselect-gate",
            "example-pdf-skill" => "example-pdf-skill",
            _ => "hostloop-computer-links",
        };
        let theirs = cli_replay(&repo, &format!("examples/replays/{original}.cassette.json"));
        expect_same(name, result, &theirs);
    }
    repo.expect_tmp_clean(&out);
}

/// The files of the CLI's own run dir of one run, relative, without the result and the
/// `status.json` it rewrites.
fn run_dir_files(run_dir: &Path) -> Vec<String> {
    let mut all = Vec::new();
    collect_names(run_dir, &mut all);
    let prefix = format!("{}/", run_dir.display());
    let mut files: Vec<String> = all
        .iter()
        .filter(|path| Path::new(path).is_file())
        .map(|path| path.trim_start_matches(&prefix).to_owned())
        .collect();
    files.sort();
    files
}

/// Where `cowork` stores the run-dir file `relative` of a job: the ones with names of their
/// own at the job's top level, the rest under `run/`.
fn stored_name(relative: &str) -> String {
    match relative {
        "events.jsonl" | "control-out.jsonl" | "agent.stderr.log" | "status.json" => {
            relative.to_owned()
        }
        "turns/1/result.json" => "result.json".to_owned(),
        "turns/1/trace.json" => "trace.json".to_owned(),
        other => format!("run/{other}"),
    }
}

#[test]
fn repeat_at_protocol_equals_the_cli_rollup_and_stores_every_run_dir_file() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    let scenario = "e2e/scenarios/smoke-multiselect.yaml";
    let out = repo.cowork(&["run", scenario, "--repeat", "3", "--output-format", "json"]);
    out.expect_code(0);
    let ours = out.envelope();
    let runs = repo.root.join("cli-runs");
    let theirs_out = repo.cli(
        &runs,
        &["run", scenario, "--repeat", "3", "--output-format", "json"],
    );
    theirs_out.expect_code(0);
    let theirs = cli_envelope(&theirs_out);
    expect_same("rollups", &ours["rollups"], &theirs["rollups"]);
    assert_eq!(ours["ok"], theirs["ok"]);

    // Every file the CLI writes into a run dir is stored with the run.
    let cli_run = std::fs::read_dir(runs.join("smoke-multiselect"))
        .expect("the CLI's run dirs")
        .flatten()
        .next()
        .expect("one run dir")
        .path();
    let expected = run_dir_files(&cli_run);
    assert!(
        expected.iter().any(|file| file == "timeline.jsonl")
            && expected.iter().any(|file| file == "mounts.json")
            && expected.iter().any(|file| file == "turns/1/run.jsonl"),
        "the CLI's run dir: {expected:?}"
    );
    let job = only_batch_dir(&repo.store()).join("jobs/f0/r0");
    for file in &expected {
        let stored = job.join(stored_name(file));
        if !stored.is_file() {
            out.fail(&format!(
                "{file} of the run dir is not stored as {}",
                stored.display()
            ));
        }
    }
    repo.expect_tmp_clean(&out);
}

#[test]
fn matrix_at_protocol_judges_like_the_cli() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    std::fs::write(
        repo.root.join("e2e/baselines.yaml"),
        "baselines: [desktop-1.17377.2, desktop-1.18286.0]\n",
    )
    .expect("matrix");
    repo.commit_all();
    let scenario = "e2e/scenarios/smoke-multiselect.yaml";
    let out = repo.cowork(&[
        "run",
        scenario,
        "--matrix",
        "e2e/baselines.yaml",
        "--output-format",
        "json",
    ]);
    let runs = repo.root.join("cli-runs");
    let theirs_out = repo.cli(
        &runs,
        &[
            "run",
            scenario,
            "--matrix",
            "e2e/baselines.yaml",
            "--output-format",
            "json",
        ],
    );
    assert_eq!(
        out.code,
        theirs_out.code,
        "{}\n{}",
        out.context(),
        theirs_out.context()
    );
    let (ours, theirs) = (out.envelope(), cli_envelope(&theirs_out));
    assert_eq!(ours["ok"], theirs["ok"]);
    let pass_of = |envelope: &Value| -> Vec<Value> {
        array(&envelope["matrix"], "cells")
            .iter()
            .map(|cell| cell["pass"].clone())
            .collect()
    };
    assert_eq!(pass_of(&ours), pass_of(&theirs), "{}", out.context());
    assert_eq!(pass_of(&ours).len(), 2);
}

#[test]
fn record_at_protocol_from_inside_the_repo_replays_once_put_back() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    // The default store, `.cowork/` inside the work tree and not ignored.
    let out = repo.cowork(&["run", "e2e/scenarios/smoke-multiselect.yaml", "--record"]);
    out.expect_code(0);
    let batch = only_batch_dir(&repo.store());
    let cassette = batch.join("jobs/f0/cassette.json");
    let recorded = read_json(&cassette);
    assert_eq!(
        recorded["scenario"]["session"], "../e2e/sessions/minimal.yaml",
        "the cassette names its session relative to cassettes/ at the bundle root"
    );
    std::fs::create_dir_all(repo.root.join("cassettes")).expect("cassettes dir");
    std::fs::copy(
        &cassette,
        repo.root.join("cassettes/smoke-multiselect.cassette.json"),
    )
    .expect("copy cassette");
    repo.commit_all();
    let replay = repo.cowork(&["run", "--replay", "cassettes/", "--output-format", "json"]);
    replay.expect_code(0);
    assert_eq!(replay.envelope()["ok"], true);
    let theirs = cli_replay(&repo, "cassettes/smoke-multiselect.cassette.json");
    let newest = batch_dirs(&repo.store())
        .into_iter()
        .find(|dir| dir != &batch)
        .expect("the replay batch");
    expect_same("replayed recording", &stored_results(&newest)[0], &theirs);
    repo.expect_tmp_clean(&replay);
}

#[test]
fn record_flags_the_cli_refuses_are_refused_before_any_batch_exists() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    for flags in [
        &["--label", "x"][..],
        &["--ablate-skill"][..],
        &["--decider-model", "m"][..],
    ] {
        let mut args = vec!["run", "e2e/scenarios/smoke-multiselect.yaml", "--record"];
        args.extend(flags);
        let out = repo.cowork(&args);
        out.expect_code(2).expect_stderr(flags[0]);
        assert!(no_batches(&repo.store()), "{}", out.context());
    }
    // The CLI's own refusal of the same flags, for the record.
    let runs = repo.root.join("cli-runs");
    let theirs = repo.cli(
        &runs,
        &[
            "record",
            "--label",
            "x",
            "e2e/scenarios/smoke-multiselect.yaml",
            "--output-format",
            "json",
        ],
    );
    theirs.expect_code(2);
    assert_eq!(
        cli_envelope(&theirs)["error"]["message"],
        "unknown flag: --label"
    );
}

#[test]
fn usage_refusals_exit_2_and_write_nothing() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    for args in [
        &[
            "run",
            "e2e/scenarios/smoke-multiselect.yaml",
            "--repeat",
            "1",
        ][..],
        &["run", "--replay", "examples/replays/nope.cassette.json"][..],
        &["run", "--bogus"][..],
    ] {
        let out = repo.cowork(args);
        out.expect_code(2);
        assert!(no_batches(&repo.store()), "{}", out.context());
    }
}

#[test]
fn a_committed_skill_scenario_from_inside_its_repo_gets_past_staging() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    // The multiselect scenario with the skill session: the CLI stages the local plugin, and
    // the agent double plays the multiselect recording (its prompt matches).
    let scenario = std::fs::read_to_string(repo.root.join("e2e/scenarios/smoke-multiselect.yaml"))
        .expect("scenario")
        .replace("session: ../sessions/minimal.yaml", "session: ../../examples/sessions/skill.yaml")
        // Plugins load another way at protocol; the scenario opts in, as the CLI asks.
        + "  - allow_l0_plugin_divergence: true\n";
    std::fs::write(
        repo.root.join("e2e/scenarios/skill-protocol.yaml"),
        scenario,
    )
    .expect("write");
    repo.commit_all();
    let out = repo.cowork(&["run", "e2e/scenarios/skill-protocol.yaml"]);
    out.expect_code(0);
    // The container tier then stops where the CLI needs Docker, not at staging.
    let out = repo.cowork(&[
        "run",
        "examples/scenarios/skill-loads.yaml",
        "--output-format",
        "json",
    ]);
    let stored =
        std::fs::read_to_string(only_batch_dir_newest(&repo.store()).join("jobs/f0/envelope.json"))
            .unwrap_or_default();
    assert!(
        !stored.contains("git-tracked"),
        "{}\n{stored}",
        out.context()
    );
    assert!(
        !out.stderr.contains("boundary"),
        "staging refused the committed skill\n{}",
        out.context()
    );
}

fn only_batch_dir_newest(store: &Path) -> PathBuf {
    let mut dirs = batch_dirs(store);
    dirs.sort_by_key(|dir| {
        std::fs::metadata(dir.join("spec.json"))
            .and_then(|meta| meta.modified())
            .ok()
    });
    dirs.pop().expect("a batch")
}

#[test]
fn protocol_without_claude_names_the_missing_agent_binary() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    let mut command = repo.command(
        env!("CARGO_BIN_EXE_cowork").as_ref(),
        &[
            "run",
            "e2e/scenarios/smoke-multiselect.yaml",
            "--executor",
            "harness",
            "--harness-bin",
            &repo.harness.to_string_lossy(),
        ],
    );
    command.env(
        "PATH",
        std::env::join_paths(path_without_claude()).expect("PATH"),
    );
    let out = Output::new(
        "cowork run (no claude on PATH)".to_owned(),
        repo.root.clone(),
        command.output().expect("spawn"),
    );
    out.expect_code(2)
        .expect_stderr("agent binary `claude`")
        .expect_stderr("not on the PATH");
    assert!(no_batches(&repo.store()), "{}", out.context());

    // A harness that loses `claude` after the check (here: a wrapper that drops it from PATH)
    // is SIGKILLed by the CLI itself; the job says what is known, not only the signal.
    let wrapper = repo.root.join("../no-claude-harness");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexport PATH='{}'\nexec '{}' \"$@\"\n",
            std::env::join_paths(path_without_claude())
                .expect("PATH")
                .to_string_lossy(),
            repo.cli.display()
        ),
    )
    .expect("wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = repo.output(
        env!("CARGO_BIN_EXE_cowork").as_ref(),
        &[
            "run",
            "e2e/scenarios/smoke-multiselect.yaml",
            "--executor",
            "harness",
            "--harness-bin",
            &wrapper.to_string_lossy(),
        ],
    );
    let message =
        std::fs::read_to_string(only_batch_dir(&repo.store()).join("jobs/f0/outcome.json"))
            .unwrap_or_default();
    assert!(
        message.contains("killed by signal 9 before it printed an envelope")
            && message.contains("last stderr: [status]"),
        "{}\n{message}",
        out.context()
    );
}

/// A harness that leaks a replay temp dir like the CLI does (a tampered cassette), then
/// touches `started` and hangs until it is killed.
fn leaking_harness(repo: &Repo) -> PathBuf {
    let tampered = repo.root.join("../tampered.cassette.json");
    tamper(
        &repo
            .root
            .join("examples/replays/example-pdf-skill.cassette.json"),
        &tampered,
    );
    let script = repo.root.join("../leaking-harness");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$1\" in --version) exec '{cli}' --version;; esac\n\
             '{cli}' replay '{tampered}' --output-format json >/dev/null 2>&1\n\
             touch '{started}'\nexec sleep 1000\n",
            cli = repo.cli.display(),
            tampered = tampered.display(),
            started = repo.root.join("../started").display(),
        ),
    )
    .expect("write");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    script
}

/// A copy of a cassette with one artifact body that no longer matches its sha256.
fn tamper(from: &Path, to: &Path) {
    let text = std::fs::read_to_string(from).expect("cassette");
    let mut cassette: Value = serde_json::from_str(&text).expect("json");
    let mut done = false;
    tamper_first_body(&mut cassette, &mut done);
    assert!(done, "the cassette has an artifact body to tamper with");
    std::fs::write(to, serde_json::to_vec(&cassette).expect("json")).expect("write");
}

fn tamper_first_body(value: &mut Value, done: &mut bool) {
    match value {
        Value::Object(map) => {
            if !*done && map.contains_key("sha256") {
                for key in ["content", "body", "contentBase64", "data"] {
                    if let Some(Value::String(body)) = map.get_mut(key) {
                        body.push_str("tampered");
                        *done = true;
                        return;
                    }
                }
            }
            for child in map.values_mut() {
                tamper_first_body(child, done);
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| tamper_first_body(item, done)),
        _ => {}
    }
}

#[test]
fn a_tampered_cassette_leaves_no_replay_temp_dir() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    let tampered = repo.root.join("examples/replays/tampered.cassette.json");
    tamper(
        &repo
            .root
            .join("examples/replays/example-pdf-skill.cassette.json"),
        &tampered,
    );
    // The CLI alone leaks its temp dir on this cassette.
    let alone = repo.cli(
        &repo.root.join("cli-runs"),
        &[
            "replay",
            "examples/replays/tampered.cassette.json",
            "--output-format",
            "json",
        ],
    );
    alone.expect_code(2);
    let mut left = Vec::new();
    collect_names(&repo.tmp, &mut left);
    assert!(
        left.iter().any(|name| name.contains("cwh-replay-")),
        "{}",
        alone.context()
    );
    std::fs::remove_dir_all(&repo.tmp).expect("clear tmp");
    std::fs::create_dir_all(&repo.tmp).expect("tmp");
    repo.commit_all();

    let out = repo.cowork(&["run", "--replay", "examples/replays/tampered.cassette.json"]);
    out.expect_code(2);
    repo.expect_tmp_clean(&out);
    let log =
        std::fs::read_to_string(only_batch_dir(&repo.store()).join("jobs/f0/harness.stderr.log"))
            .unwrap_or_default();
    assert!(
        log.contains("removed the job's TMPDIR") && log.contains("cwh-replay-"),
        "{log}"
    );
}

#[test]
fn a_replay_job_ended_by_its_timeout_leaves_no_replay_temp_dir() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    let harness = leaking_harness(&repo);
    let out = repo.output(
        env!("CARGO_BIN_EXE_cowork").as_ref(),
        &[
            "run",
            "--replay",
            "examples/replays/example-pdf-skill.cassette.json",
            "--job-timeout",
            "3s",
            "--executor",
            "harness",
            "--harness-bin",
            &harness.to_string_lossy(),
        ],
    );
    assert!(repo.root.join("../started").exists(), "{}", out.context());
    out.expect_stderr("timeout");
    repo.expect_tmp_clean(&out);
}

#[test]
fn ctrl_c_twice_during_a_replay_leaves_no_replay_temp_dir() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    let harness = leaking_harness(&repo);
    let mut command = repo.command(
        env!("CARGO_BIN_EXE_cowork").as_ref(),
        &[
            "run",
            "--replay",
            "examples/replays/example-pdf-skill.cassette.json",
            "--executor",
            "harness",
            "--harness-bin",
            &harness.to_string_lossy(),
        ],
    );
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cowork");
    let started = repo.root.join("../started");
    // Waits for the harness to have leaked its temp dir and started to hang: a file the
    // harness writes, polled, not a guess at how long that takes.
    wait_until("the harness started")
        .within(std::time::Duration::from_secs(60))
        .every(std::time::Duration::from_millis(20))
        .poll(|| started.exists());
    // Stderr is read line by line, so that the second Ctrl-C is sent only once cowork said it
    // handled the first.
    let stderr = child.stderr.take().expect("piped stderr");
    let (sender, lines) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = sender.send(line);
        }
    });
    let pid = child.id().to_string();
    let interrupt = || {
        let status = Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill");
        assert!(status.success());
    };
    interrupt();
    let mut seen = Vec::new();
    loop {
        match lines.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(line) => {
                let stopping = line.contains("stopping: waiting for ");
                seen.push(line);
                if stopping {
                    break;
                }
            }
            Err(_) => panic!("cowork never said it was stopping\n{}", seen.join("\n")),
        }
    }
    interrupt();
    let mut output = child.wait_with_output().expect("wait");
    let _ = reader.join();
    seen.extend(lines.try_iter());
    output.stderr = seen.join("\n").into_bytes();
    let out = Output::new(
        "cowork run --replay (Ctrl-C twice)".to_owned(),
        repo.root.clone(),
        output,
    );
    out.expect_code(130);
    repo.expect_tmp_clean(&out);
}

#[test]
fn the_fleet_replays_like_cowork_run_and_the_cli() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    let path = repo.path_with_agent().to_string_lossy().into_owned();
    let tmp = repo.tmp.to_string_lossy().into_owned();
    let mut fleet = Fleet::start_with_env(&[("PATH", path.as_str()), ("TMPDIR", tmp.as_str())]);
    let harness = repo.harness.to_string_lossy().into_owned();
    for name in ["w1", "w2"] {
        fleet.spawn(
            name,
            &[
                "worker",
                "--executor",
                "harness",
                "--harness-bin",
                &harness,
                "--tiers",
                "replay,protocol",
                "--slots",
                "2",
                "--worker-id",
                name,
                "--cache-dir",
                &format!("{name}/cache"),
                "--work-dir",
                &format!("{name}/work"),
            ],
        );
    }
    let out = fleet.submit(&repo.root, &["--replay", "examples/replays/"]);
    out.expect_code(0);
    let envelope = out.envelope();
    let results = array(&envelope, "results");
    assert_eq!(results.len(), 3, "{}", out.context());
    for result in results {
        let name = result["scenario"].as_str().unwrap_or_default();
        let cassette = match name {
            "smoke-multiselect" => "example-multiselect-gate",
            "example-pdf-skill" => "example-pdf-skill",
            _ => "hostloop-computer-links",
        };
        let theirs = cli_replay(&repo, &format!("examples/replays/{cassette}.cassette.json"));
        let mut ours = result.clone();
        if let Some(map) = ours.as_object_mut() {
            // Envelope decorations the CLI's result.json lacks.
            map.remove("provenance");
            map.remove("outcome");
            map.remove("verdict");
        }
        let mut theirs = theirs;
        if let Some(map) = theirs.as_object_mut() {
            map.remove("provenance");
            map.remove("outcome");
            map.remove("verdict");
        }
        expect_same(name, &ours, &theirs);
    }
    // A protocol run on the fleet equals the CLI's own run too.
    let out = fleet.submit(
        &repo.root,
        &["e2e/scenarios/smoke-multiselect.yaml", "--repeat", "2"],
    );
    out.expect_code(0);
    let runs = repo.root.join("cli-runs");
    let theirs = repo.cli(
        &runs,
        &[
            "run",
            "e2e/scenarios/smoke-multiselect.yaml",
            "--repeat",
            "2",
            "--output-format",
            "json",
        ],
    );
    expect_same(
        "fleet rollups",
        &out.envelope()["rollups"],
        &cli_envelope(&theirs)["rollups"],
    );
    let mut left = Vec::new();
    collect_names(&repo.tmp, &mut left);
    assert!(
        !left
            .iter()
            .any(|name| name.contains("cwh-replay-") || name.contains("cowork-job-")),
        "{left:?}\n{}",
        fleet.logs()
    );
}

#[test]
fn cancel_with_kill_running_on_the_fleet_leaves_no_replay_temp_dir() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    let harness = leaking_harness(&repo).to_string_lossy().into_owned();
    let tmp = repo.tmp.to_string_lossy().into_owned();
    let mut fleet = Fleet::start_with_env(&[("TMPDIR", tmp.as_str())]);
    fleet.spawn(
        "w1",
        &[
            "worker",
            "--executor",
            "harness",
            "--harness-bin",
            &harness,
            "--tiers",
            "replay",
            "--slots",
            "1",
            "--worker-id",
            "w1",
            "--cache-dir",
            "w1/cache",
            "--work-dir",
            "w1/work",
        ],
    );
    let batch = fleet.submit_detached(
        &repo.root,
        &[
            "--replay",
            "examples/replays/example-pdf-skill.cassette.json",
        ],
    );
    // Waits for the harness to have leaked its temp dir and started to hang: a file the
    // harness writes, polled, not a guess at how long that takes.
    let started = repo.root.join("../started");
    wait_until("the harness started")
        .within(std::time::Duration::from_secs(120))
        .every(std::time::Duration::from_millis(20))
        .context(|| fleet.logs())
        .poll(|| started.exists());
    let cancel = fleet.cowork(&repo.root, &["cancel", batch.as_str(), "--kill-running"]);
    assert_eq!(cancel.code(), 0, "{}\n{}", cancel.context(), fleet.logs());
    // `watch` of a cancelled batch ends with exit 1 and no verdict, once its running job ended.
    let watched = fleet.watch(&repo.root, &batch);
    assert_eq!(watched.code(), 1, "{}\n{}", watched.context(), fleet.logs());
    watched.expect_stderr("cancelled");
    repo.expect_tmp_clean(&watched);
    // What the killed harness left is named in the job's stored log.
    let logs: Vec<String> = fleet
        .object_keys()
        .into_iter()
        .filter(|key| key.ends_with("harness.stderr.log"))
        .collect();
    let named = logs
        .iter()
        .any(|key| String::from_utf8_lossy(&fleet.object(key)).contains("cwh-replay-"));
    assert!(
        named,
        "no stored harness.stderr.log names the removed temp dir: {logs:?}\n{}",
        fleet.logs()
    );
}

/// A corpus beside `examples/replays/` (so each cassette's session paths resolve as they do
/// from there): `copies` copies of each of the CLI's three example cassettes, plus one
/// tampered cassette when `tampered` is set. Returns the corpus's cassette names, sorted.
fn replay_corpus(repo: &Repo, copies: usize, tampered: bool) -> Vec<String> {
    let replays = repo.root.join("examples/replays");
    let corpus = repo.root.join("examples/corpus");
    std::fs::create_dir_all(&corpus).expect("corpus dir");
    let mut names = Vec::new();
    for original in [
        "example-multiselect-gate",
        "example-pdf-skill",
        "hostloop-computer-links",
    ] {
        for copy in 0..copies {
            let name = format!("c{copy:03}-{original}.cassette.json");
            std::fs::copy(
                replays.join(format!("{original}.cassette.json")),
                corpus.join(&name),
            )
            .expect("copy cassette");
            names.push(name);
        }
    }
    if tampered {
        let name = "c050-tampered.cassette.json".to_owned();
        tamper(
            &replays.join("example-pdf-skill.cassette.json"),
            &corpus.join(&name),
        );
        names.push(name);
    }
    names.sort();
    repo.commit_all();
    names
}

/// A wrapper of the case's harness that logs every invocation's arguments (one line each) to
/// `<repo>/../harness-calls` before it runs the CLI.
fn counting_harness(repo: &Repo) -> (PathBuf, PathBuf) {
    let calls = repo.root.join("../harness-calls");
    let script = repo.root.join("../counting-harness");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{calls}'\nexec '{harness}' \"$@\"\n",
            calls = calls.display(),
            harness = repo.harness.display(),
        ),
    )
    .expect("write wrapper");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (script, calls)
}

/// The stderr lines of the CLI itself in a stored `harness.stderr.log` (cowork's own notes
/// about the temp dir it removed left out).
fn cli_stderr_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|line| !line.is_empty() && !line.starts_with("[cowork-fleet:"))
        .map(str::to_owned)
        .collect()
}

/// Checks every job of a stored replay batch against the CLI's replay of that cassette alone:
/// result, envelope, exit code and stderr lines.
fn expect_each_job_as_alone(repo: &Repo, batch: &Path, corpus: &[String]) {
    let mut alone: std::collections::BTreeMap<String, (Value, i32, Vec<String>)> =
        Default::default();
    let jobs = batch.join("jobs");
    let mut n_jobs = 0;
    for entry in std::fs::read_dir(&jobs).expect("jobs dir").flatten() {
        n_jobs += 1;
        let dir = entry.path();
        let outcome = read_json(&dir.join("outcome.json"));
        let envelope = read_json(&dir.join("envelope.json"));
        let result = &array(&envelope, "results")[0];
        // The job's cassette: the stub of a corrupt one names it; a replayed one names its
        // scenario, which is the same for every copy of one original.
        let scenario = result["scenario"].as_str().unwrap_or_default().to_owned();
        let cassette = match scenario.as_str() {
            "smoke-multiselect" => "examples/replays/example-multiselect-gate.cassette.json",
            "example-pdf-skill" => "examples/replays/example-pdf-skill.cassette.json",
            "hostloop-computer-links" => "examples/replays/hostloop-computer-links.cassette.json",
            path => path,
        }
        .to_owned();
        let (theirs, code, lines) = alone.entry(cassette.clone()).or_insert_with(|| {
            let out = repo.cli(
                &repo.root.join("cli-runs"),
                &["replay", &cassette, "--output-format", "json"],
            );
            let code = out.code();
            (cli_envelope(&out), code, cli_stderr_lines(&out.stderr))
        });
        let what = format!("{} ({cassette})", dir.display());
        expect_same(&what, &envelope, theirs);
        // A corrupt cassette's job fails with no result.json (the CLI exits 2 for it), as
        // alone.
        if *code == 2 {
            assert!(!dir.join("result.json").exists(), "{what}");
        } else {
            expect_same(
                &what,
                &read_json(&dir.join("result.json")),
                &array(theirs, "results")[0],
            );
        }
        // The stub of a corrupt cassette names it by the path the CLI was given: the job's
        // own, never the pack's.
        assert_eq!(
            result["scenario"],
            array(theirs, "results")[0]["scenario"],
            "{what}"
        );
        assert_eq!(outcome["exitCode"], *code, "{what}");
        let log = std::fs::read_to_string(dir.join("harness.stderr.log")).unwrap_or_default();
        assert_eq!(&cli_stderr_lines(&log), lines, "{what}: stderr");
    }
    assert_eq!(n_jobs, corpus.len());
}

/// Checks that the envelope `out` printed holds `n_results` results, every one passing.
fn expect_passing_results(out: &Output, n_results: usize) {
    let envelope = out.envelope();
    let results = array(&envelope, "results");
    assert_eq!(results.len(), n_results, "{}", out.context());
    assert!(
        results
            .iter()
            .all(|result| result["verdict"]["pass"] == true),
        "{}",
        out.context()
    );
}

#[test]
fn a_corpus_replayed_in_packs_stores_what_each_cassette_alone_gives() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    let corpus = replay_corpus(&repo, 10, true);
    let (harness, calls) = counting_harness(&repo);
    let out = repo.output(
        env!("CARGO_BIN_EXE_cowork").as_ref(),
        &[
            "run",
            "--replay",
            "examples/corpus/",
            "--slots",
            "2",
            "--executor",
            "harness",
            "--harness-bin",
            &harness.to_string_lossy(),
            "--output-format",
            "json",
        ],
    );
    // Checked before the CLI's own calls below, which leak into the same TMPDIR.
    repo.expect_tmp_clean(&out);
    // As the CLI's dir replay: the tampered cassette does not stop the batch; every other
    // cassette keeps its result in the envelope, which fails with exit 2 and no error.
    out.expect_code(2);
    let envelope = out.envelope();
    assert_eq!(envelope["ok"], false, "{}", out.context());
    assert!(envelope["error"].is_null(), "{}", out.context());
    expect_passing_results(&out, corpus.len() - 1);
    // The tampered job's outcome names the CLI's reason, not only its exit code.
    let tampered_outcome = std::fs::read_dir(only_batch_dir(&repo.store()).join("jobs"))
        .expect("jobs")
        .flatten()
        .map(|entry| read_json(&entry.path().join("outcome.json")))
        .find(|outcome| outcome["exitCode"] == 2)
        .expect("the tampered job's outcome");
    let message = tampered_outcome["outcome"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.starts_with("replay: ") && message.contains("tampered"),
        "{tampered_outcome}"
    );
    // The CLI's own dir replay of the same corpus: one tampered cassette fails the call with 2.
    let theirs = repo.cli(
        &repo.root.join("cli-runs"),
        &["replay", "examples/corpus", "--output-format", "json"],
    );
    theirs.expect_code(2);
    let ok = cli_envelope(&theirs)["ok"].clone();
    assert_eq!(ok, false);
    // The tampered job fails and no other: every other job's stored outcome is a pass.
    let batch = only_batch_dir(&repo.store());
    let mut failed = Vec::new();
    for entry in std::fs::read_dir(batch.join("jobs"))
        .expect("jobs")
        .flatten()
    {
        let envelope = read_json(&entry.path().join("envelope.json"));
        if envelope["ok"] != true {
            failed.push(array(&envelope, "results")[0]["scenario"].clone());
        }
    }
    assert_eq!(failed.len(), 1, "{failed:?}\n{}", out.context());
    assert!(
        failed[0]
            .as_str()
            .is_some_and(|path| path.ends_with("examples/corpus/c050-tampered.cassette.json")),
        "{failed:?}\n{}",
        out.context()
    );
    expect_each_job_as_alone(&repo, &batch, &corpus);
    // Many to one process: 31 jobs on 2 slots took a handful of harness processes (one per
    // slot when every job was queued before the first pull), each a dir replay.
    let calls = std::fs::read_to_string(&calls).unwrap_or_default();
    let replays: Vec<&str> = calls
        .lines()
        .filter(|line| line.contains(" replay "))
        .collect();
    assert!(
        !replays.is_empty() && replays.len() <= 4,
        "{} harness replay calls:\n{calls}\n{}",
        replays.len(),
        out.context()
    );
}

#[test]
fn a_worker_killed_mid_pack_loses_no_replay_and_counts_none_twice() {
    let Some(cli) = real_cli() else { return };
    let repo = Repo::new(&cli);
    let corpus = replay_corpus(&repo, 5, false);
    let path = repo.path_with_agent().to_string_lossy().into_owned();
    let tmp = repo.tmp.to_string_lossy().into_owned();
    // A short ack deadline: the killed worker's deliveries come back soon.
    let mut fleet = Fleet::start_with_env(&[
        ("PATH", path.as_str()),
        ("TMPDIR", tmp.as_str()),
        ("COWORK_ACK_WAIT", "2s"),
    ]);
    // The first worker's harness hangs in its replays once it has said so, like a pack that
    // is still running when its worker dies.
    let started = repo.root.join("../started");
    let hanging = repo.root.join("../hanging-harness");
    std::fs::write(
        &hanging,
        format!(
            "#!/bin/sh\ncase \"$*\" in *' replay '*) touch '{started}'; exec sleep 1000;; esac\n\
             exec '{harness}' \"$@\"\n",
            started = started.display(),
            harness = repo.harness.display(),
        ),
    )
    .expect("write");
    std::fs::set_permissions(&hanging, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let worker = |name: &str, harness: &Path| -> Vec<String> {
        [
            "worker",
            "--executor",
            "harness",
            "--harness-bin",
            &harness.to_string_lossy(),
            "--tiers",
            "replay",
            "--slots",
            "2",
            "--worker-id",
            name,
            "--cache-dir",
            &format!("{name}/cache"),
            "--work-dir",
            &format!("{name}/work"),
        ]
        .iter()
        .map(|arg| (*arg).to_owned())
        .collect()
    };
    let args = worker("w1", &hanging);
    fleet.spawn("w1", &args.iter().map(String::as_str).collect::<Vec<_>>());
    let batch = fleet.submit_detached(&repo.root, &["--replay", "examples/corpus/"]);
    // Polls for the file the hanging harness writes, not a guess at how long a pull takes.
    wait_until("w1 started a replay")
        .within(std::time::Duration::from_secs(120))
        .every(std::time::Duration::from_millis(20))
        .context(|| fleet.logs())
        .poll(|| started.exists());
    fleet.kill("w1");
    let (harness, calls) = counting_harness(&repo);
    let args = worker("w2", &harness);
    fleet.spawn("w2", &args.iter().map(String::as_str).collect::<Vec<_>>());
    let out = fleet.watch(&repo.root, &batch);
    out.expect_code(0);
    // Every job once: no job lost with the killed worker, none counted twice.
    expect_passing_results(&out, corpus.len());
    let calls = std::fs::read_to_string(calls).unwrap_or_default();
    assert!(
        calls.lines().any(|line| line.contains("/view/")),
        "w2 replayed in packs:\n{calls}"
    );
    let mut left = Vec::new();
    collect_names(&repo.tmp, &mut left);
    assert!(
        !left.iter().any(|name| name.contains("cwh-replay-")),
        "{left:?}\n{}",
        fleet.logs()
    );
}
