//! The strict double stays true: every transcript of the real cowork-harness 2.0.0 in
//! `fixtures/real-cli-cases/` is run against `worker/tests/fixtures/strict-harness`, and the
//! double must answer as the CLI did.
//!
//! Each case gets a fresh `<ROOT>`: a copy of the CLI's `examples/` and `e2e/`
//! (`fixtures/upstream/`), `<ROOT>/runs` as the `--run-dir`, `<ROOT>/tmp` as the `TMPDIR`, and
//! the extra inputs some transcripts name (`moved/` cassettes, a `gittree/` work tree holding an
//! untracked bundle). The double runs with the case's argv, cwd and environment, in a process
//! group of its own (one case kills its own group), and a case with a signal gets it once the
//! double says it holds its replay temp dir. Compared: the exit code or the killing signal, the
//! envelope's `ok`, `error.category` and `error.message` and the outline of each result, stdout
//! when it is not an envelope, the lines of stderr that carry the CLI's answer, the names left
//! in `TMPDIR`, and the files left under the run dir where the transcript lists them.
//!
//! Every file of the cases dir is checked unless it is listed in `NOT_REPRODUCIBLE` with the
//! reason, so a new transcript is checked the day it is copied in.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::support::{copy_dir, fixture, workspace_root};

/// Transcripts the double does not answer, each with the reason.
const NOT_REPRODUCIBLE: &[(&str, &str)] = &[(
    "verify-cassettes",
    "its findings come from the CLI's privacy and staleness scanners over cassette contents; \
     the fleet never runs verify-cassettes, and a double would have to reimplement the scanners",
)];

/// Cases that need another case's output first: (case, the case run before it in the same
/// `<ROOT>`).
const RUN_BEFORE: &[(&str, &str)] = &[("replay-recorded", "record-protocol-agent")];

fn strict_harness() -> PathBuf {
    workspace_root().join("worker/tests/fixtures/strict-harness")
}

fn cases_dir() -> PathBuf {
    fixture("real-cli-cases")
}

struct Case {
    name: String,
    json: Value,
}

impl Case {
    fn load(path: &Path) -> Case {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let json: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
        let name = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .expect("a case file name is UTF-8")
            .to_owned();
        Case { name, json }
    }

    fn strings(&self, key: &str) -> Vec<String> {
        self.json[key]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn text(&self, key: &str) -> String {
        self.json[key].as_str().unwrap_or_default().to_owned()
    }
}

/// One case's `<ROOT>` and the values its placeholders stand for.
struct Root {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Root {
    fn new() -> Root {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("root");
        copy_dir(&fixture("upstream/examples"), &root.join("examples"));
        copy_dir(&fixture("upstream/e2e"), &root.join("e2e"));
        std::fs::create_dir_all(root.join("tmp")).expect("tmp dir");
        std::fs::create_dir_all(root.join("home")).expect("home dir");
        // A cassette away from the session it names, and a copy of it with one artifact body
        // that no longer matches its sha256.
        let moved = root.join("moved");
        std::fs::create_dir_all(&moved).expect("moved dir");
        let pdf = root.join("examples/replays/example-pdf-skill.cassette.json");
        std::fs::copy(&pdf, moved.join("a.cassette.json")).expect("copy cassette");
        tamper(&pdf, &moved.join("tampered.cassette.json"));
        // A git work tree with one committed file and a bundle unpacked in it, untracked, as a
        // fleet's bundle cache inside a repository is.
        let tree = root.join("gittree");
        std::fs::create_dir_all(&tree).expect("gittree");
        std::fs::write(tree.join("README.md"), "a repository\n").expect("readme");
        git(&tree, &["init", "-q"]);
        git(&tree, &["add", "README.md"]);
        git(&tree, &["commit", "-qm", "init"]);
        for part in ["scenarios", "sessions", "skills", "data"] {
            copy_dir(
                &fixture(&format!("upstream/examples/{part}")),
                &tree.join("work/bundle").join(part),
            );
        }
        Root { _dir: dir, root }
    }

    fn root_text(&self) -> String {
        self.root.to_string_lossy().into_owned()
    }

    /// A transcript's text with `<ROOT>`, `<AGENT_DIR>`, `$PATH` and the PATH placeholder put
    /// in; any other `<…>` placeholder is a case this test does not know how to set up.
    fn expand(&self, case: &str, text: &str) -> String {
        let agent = std::path::absolute(fixture("upstream/agent")).expect("agent dir");
        let expanded = text
            .replace("<ROOT>", &self.root_text())
            .replace("<AGENT_DIR>", &agent.to_string_lossy())
            .replace("$PATH", &path_without_claude())
            .replace("<PATH less any dir with a claude>", &path_without_claude());
        if let Some(start) = expanded.find('<')
            && expanded[start..].contains('>')
        {
            panic!("case {case}: unknown placeholder in {text:?}: set it up in strict_double.rs");
        }
        expanded
    }

    /// The case's text with this root's path put back as `<ROOT>` and run ids blanked.
    fn normalise(&self, text: &str) -> String {
        blank_ids(&text.replace(&self.root_text(), "<ROOT>"))
    }
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .status()
        .expect("git");
    assert!(status.success(), "git {args:?} in {}", dir.display());
}

/// The test's `PATH` without any directory holding a `claude`: the transcripts were taken on a
/// machine with none, except where a case puts the agent double first.
fn path_without_claude() -> String {
    let dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .filter(|dir| !dir.join("claude").exists())
                .collect()
        })
        .unwrap_or_default();
    std::env::join_paths(dirs)
        .expect("PATH")
        .to_string_lossy()
        .into_owned()
}

/// A copy of a cassette whose first artifact body no longer matches its sha256.
fn tamper(from: &Path, to: &Path) {
    let text = std::fs::read_to_string(from).expect("cassette");
    let mut cassette: Value = serde_json::from_str(&text).expect("cassette json");
    let body = cassette["artifacts"]
        .as_array_mut()
        .and_then(|artifacts| artifacts.first_mut())
        .and_then(|artifact| artifact.get_mut("body"))
        .expect("the cassette has an artifact body to tamper with");
    *body = Value::String(format!("{}tampered", body.as_str().unwrap_or_default()));
    std::fs::write(to, serde_json::to_vec(&cassette).expect("json")).expect("write tampered");
}

/// `local_<base36>` run ids and `cwh-replay-<random>` names, which differ from run to run,
/// blanked to `local_<id>` and `cwh-replay-*`.
fn blank_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let next = [("local_", "local_<id>"), ("cwh-replay-", "cwh-replay-*")]
            .iter()
            .filter_map(|(prefix, blank)| rest.find(prefix).map(|at| (at, *prefix, *blank)))
            .min_by_key(|(at, _, _)| *at);
        let Some((at, prefix, blank)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..at]);
        let tail = &rest[at + prefix.len()..];
        let id_len = tail
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(tail.len());
        if id_len == 0 {
            out.push_str(prefix);
        } else {
            out.push_str(blank);
        }
        rest = &tail[id_len..];
    }
}

/// What the double did for one case.
struct Ran {
    command: String,
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn context(&self) -> String {
        format!(
            "command: {}\nexit: {:?} signal: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command,
            self.status.code(),
            self.status.signal(),
            self.stdout,
            self.stderr
        )
    }
}

/// Runs the double as the case ran the CLI. A signal is sent once the double says on stderr
/// that it holds its replay temp dir, so it always lands mid-replay.
fn run_case(root: &Root, case: &Case) -> Ran {
    let argv: Vec<String> = case
        .strings("argv")
        .iter()
        .skip(1)
        .map(|arg| root.expand(&case.name, arg))
        .collect();
    let cwd = PathBuf::from(root.expand(&case.name, &case.text("cwd")));
    let mut command = Command::new(strict_harness());
    command.args(&argv).current_dir(&cwd);
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if name_text.starts_with("COWORK_")
            || name_text.starts_with("FAKE_")
            || name_text.starts_with("STRICT_HARNESS_")
            || matches!(
                name_text.as_ref(),
                "ANTHROPIC_API_KEY" | "ANTHROPIC_AUTH_TOKEN" | "CLAUDE_CODE_OAUTH_TOKEN"
            )
        {
            command.env_remove(name);
        }
    }
    command
        .env("PATH", path_without_claude())
        .env("TMPDIR", root.root.join("tmp"))
        .env("HOME", root.root.join("home"));
    if let Some(env) = case.json["env"].as_object() {
        for (name, value) in env {
            command.env(
                name,
                root.expand(&case.name, value.as_str().unwrap_or_default()),
            );
        }
    }
    let signal = case.json["signal"].as_str().map(str::to_owned);
    if signal.is_some() {
        command.env("STRICT_HARNESS_HOLD", "replay");
    }
    // The protocol case without `claude` kills its own process group, as the CLI does.
    command
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let described = format!("strict-harness {} (in {})", argv.join(" "), cwd.display());
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {described}: {e}"));
    let mut stdout_pipe = child.stdout.take().expect("piped stdout");
    let stdout_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout_pipe.read_to_string(&mut text);
        text
    });
    let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
    let mut stderr_text = String::new();
    if let Some(signal) = &signal {
        let mut held = false;
        let mut line = String::new();
        while stderr.read_line(&mut line).expect("reading stderr") > 0 {
            stderr_text.push_str(&line);
            if line.starts_with("strict-harness: holding ") {
                held = true;
                break;
            }
            line.clear();
        }
        assert!(
            held,
            "case {}: the double never held its temp dir\n{stderr_text}",
            case.name
        );
        let name = signal.trim_start_matches("SIG");
        let status = Command::new("kill")
            .args(["-s", name, &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "case {}: kill -s {name}", case.name);
    }
    let _ = stderr.read_to_string(&mut stderr_text);
    let status = child.wait().expect("waiting for the double");
    Ran {
        command: described,
        status,
        stdout: stdout_reader.join().expect("stdout reader"),
        stderr: stderr_text,
    }
}

/// The outline of a result that the fleet reads, with this root's paths put back.
fn result_outline(root: &Root, result: &Value) -> Value {
    let text = |key: &str| {
        result[key]
            .as_str()
            .map(|value| Value::String(root.normalise(value)))
            .unwrap_or(Value::Null)
    };
    let staleness: Vec<Value> = result["staleness"]
        .as_array()
        .map(|entries| entries.iter().map(|entry| entry["class"].clone()).collect())
        .unwrap_or_default();
    serde_json::json!({
        "scenario": text("scenario"),
        "result": text("result"),
        "outDir": text("outDir"),
        "outcome": text("outcome"),
        "verdict.pass": result["verdict"]["pass"],
        "verdict.exitCode": result["verdict"]["exitCode"],
        "failures.kind": result["verdict"]["failures"]
            .as_array()
            .map(|failures| failures.iter().map(|f| f["kind"].clone()).collect::<Vec<_>>()),
        "staleness": staleness,
    })
}

/// The outline of an envelope: `ok`, the error's category and message, each result's outline.
fn envelope_outline(root: &Root, envelope: &Value) -> Value {
    let error = match &envelope["error"] {
        Value::Null => Value::Null,
        error => serde_json::json!({
            "category": error["category"],
            "message": error["message"]
                .as_str()
                .map(|message| Value::String(root.normalise(message))),
        }),
    };
    let results: Vec<Value> = envelope["results"]
        .as_array()
        .map(|results| results.iter().map(|r| result_outline(root, r)).collect())
        .unwrap_or_default();
    serde_json::json!({ "ok": envelope["ok"], "error": error, "results": results })
}

/// The envelope the transcript holds, with `<ROOT>` standing for the root (as it does there).
fn expected_outline(root: &Root, envelope: &Value) -> Value {
    let text = serde_json::to_string(envelope).expect("json");
    let placed: Value =
        serde_json::from_str(&text.replace("<ROOT>", &root.root_text())).expect("json");
    envelope_outline(root, &placed)
}

/// Names left in a dir, with random parts blanked, sorted.
fn left_names(root: &Root, dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| root.normalise(&entry.file_name().to_string_lossy()))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Every entry under a dir, relative, dirs ending in `/`, ids blanked, sorted.
fn tree_entries(root: &Root, dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                out.push(format!("{name}/"));
                walk(&entry.path(), &format!("{name}/"), out);
            } else {
                out.push(name);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out);
    let mut out: Vec<String> = out.iter().map(|name| root.normalise(name)).collect();
    out.sort();
    out
}

/// Every difference between what the double did and what the transcript shows.
fn differences(root: &Root, case: &Case, ran: &Ran) -> Vec<String> {
    let mut found = Vec::new();
    let expected_exit = case.json["exit_code"]
        .as_i64()
        .expect("a case has an exit_code");
    if expected_exit < 0 {
        let signal = i32::try_from(-expected_exit).expect("a signal number");
        if ran.status.signal() != Some(signal) {
            found.push(format!(
                "killed by signal {signal} expected, got {:?}",
                ran.status
            ));
        }
    } else if ran.status.code().map(i64::from) != Some(expected_exit) {
        found.push(format!(
            "exit {expected_exit} expected, got {:?}",
            ran.status
        ));
    }

    let stdout = case.text("stdout");
    if let Some(envelope) = case.json.get("envelope") {
        let last = ran
            .stdout
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty());
        match last.map(serde_json::from_str::<Value>) {
            Some(Ok(ours)) => {
                let want = expected_outline(root, envelope);
                let got = envelope_outline(root, &ours);
                if want != got {
                    found.push(format!("envelope differs\n  want: {want}\n  got:  {got}"));
                }
            }
            _ => found.push("no JSON envelope on the last stdout line".to_owned()),
        }
    } else if root.normalise(&ran.stdout) != stdout {
        found.push(format!("stdout {stdout:?} expected"));
    }

    // Without an envelope the answer is on stderr: its first line, and its last on a failure.
    if case.json.get("envelope").is_none() {
        let stderr = case.text("stderr");
        let ours: Vec<String> = ran
            .stderr
            .lines()
            .map(|line| root.normalise(line))
            .collect();
        let mut wanted: Vec<String> = stderr.lines().take(1).map(blank_ids).collect();
        if expected_exit != 0 {
            wanted.extend(stderr.lines().last().map(blank_ids));
        }
        for line in wanted {
            if !ours.contains(&line) {
                found.push(format!("stderr line {line:?} expected"));
            }
        }
    }

    let mut want_tmp: Vec<String> = case
        .strings("tmpdir_left")
        .iter()
        .map(|name| blank_ids(name))
        .collect();
    want_tmp.sort();
    let got_tmp = left_names(root, &root.root.join("tmp"));
    if want_tmp != got_tmp {
        found.push(format!(
            "TMPDIR left {want_tmp:?} expected, got {got_tmp:?}"
        ));
    }

    if let Some(left) = case.json["left_files"].as_object() {
        for (dir, entries) in left {
            let path = PathBuf::from(dir.replace("<ROOT>", &root.root_text()));
            match entries.as_array() {
                None if path.exists() => found.push(format!("{dir} should not exist")),
                None => {}
                Some(entries) => {
                    let mut want: Vec<String> = entries
                        .iter()
                        .filter_map(|entry| entry.as_str().map(blank_ids))
                        .collect();
                    want.sort();
                    let got = tree_entries(root, &path);
                    if want != got {
                        found.push(format!("{dir}: {want:?} expected, got {got:?}"));
                    }
                }
            }
        }
    }
    found
}

fn case_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("the cases dir")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_transcript_of_the_real_cli_is_answered_alike_by_the_strict_double() {
    let files = case_files();
    assert!(
        files.len() >= 30,
        "the cases dir lost transcripts: {files:?}"
    );
    let mut failures = BTreeMap::new();
    let mut checked = Vec::new();
    for file in &files {
        let case = Case::load(file);
        if NOT_REPRODUCIBLE.iter().any(|(name, _)| *name == case.name) {
            continue;
        }
        let root = Root::new();
        if let Some((_, before)) = RUN_BEFORE.iter().find(|(name, _)| *name == case.name) {
            let first = Case::load(&cases_dir().join(format!("{before}.json")));
            let ran = run_case(&root, &first);
            assert!(
                ran.status.success(),
                "case {}: its setup case {before} failed\n{}",
                case.name,
                ran.context()
            );
        }
        let ran = run_case(&root, &case);
        let found = differences(&root, &case, &ran);
        if !found.is_empty() {
            failures.insert(
                case.name.clone(),
                format!("{}\n{}", found.join("\n"), ran.context()),
            );
        }
        checked.push(case.name);
    }
    eprintln!(
        "strict double: {} cases checked: {}",
        checked.len(),
        checked.join(", ")
    );
    for (name, why) in NOT_REPRODUCIBLE {
        eprintln!("strict double: not reproducible: {name}: {why}");
    }
    if !failures.is_empty() {
        let report: Vec<String> = failures
            .iter()
            .map(|(name, why)| format!("=== {name}\n{why}"))
            .collect();
        panic!(
            "the strict double drifted from the real CLI in {} case(s):\n{}",
            failures.len(),
            report.join("\n")
        );
    }
}

#[test]
fn every_case_listed_as_not_reproducible_or_run_first_exists() {
    let names: Vec<String> = case_files()
        .iter()
        .map(|file| Case::load(file).name)
        .collect();
    for (name, why) in NOT_REPRODUCIBLE {
        assert!(
            names.contains(&name.to_string()),
            "listed case {name} is gone"
        );
        assert!(!why.is_empty(), "case {name} is listed without a reason");
    }
    for (name, before) in RUN_BEFORE {
        assert!(names.contains(&name.to_string()), "case {name} is gone");
        assert!(names.contains(&before.to_string()), "case {before} is gone");
    }
}

/// Where the transcripts' source sits beside the clone (as on the machines that took them),
/// the copy in the fixtures must be the same files: a transcript added there is checked here.
#[test]
fn the_copied_transcripts_equal_their_source_when_it_is_beside_the_clone() {
    let source = workspace_root().join("../shared/upstream/real-cli/cases");
    if !source.is_dir() {
        eprintln!(
            "strict double: {} is not here; the copy is checked alone",
            source.display()
        );
        return;
    }
    let names = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("cases dir")
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(&source),
        names(&cases_dir()),
        "copy {} into cli/tests/fixtures/real-cli-cases/",
        source.display()
    );
    for name in names(&source) {
        let theirs = std::fs::read(source.join(&name)).expect("source case");
        let ours = std::fs::read(cases_dir().join(&name)).expect("copied case");
        assert!(theirs == ours, "case {name} differs from its source");
    }
}
