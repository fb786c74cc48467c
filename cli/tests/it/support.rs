//! Shared test support: a temp dir per test (optionally holding a copy of the fixture project),
//! the `cowork` binary run with a clean `COWORK_*` environment, and assertions that panic with
//! the command, its cwd, its exit code, stdout and stderr.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The workspace root: the demo batch is run from here, like the README says.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .expect("the cli crate lives one level below the workspace root")
        .to_path_buf()
}

/// A file or directory under `cli/tests/fixtures/`.
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// The strict double of the CLI (`worker/tests/fixtures/strict-harness`): the real command line's
/// flag tables, and a run scripted by a `strict-harness: <behaviour>` line of the scenario file.
pub fn strict_harness() -> PathBuf {
    workspace_root().join("worker/tests/fixtures/strict-harness")
}

/// One test's private directory. It is the cwd of every command the test runs (except the demo,
/// which runs from the workspace root), so the default bundle root is this directory.
pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    /// An empty sandbox.
    pub fn empty() -> Sandbox {
        let dir = tempfile::Builder::new()
            .prefix("cowork-it-")
            .tempdir()
            .unwrap_or_else(|e| panic!("creating a temp dir: {e}"));
        Sandbox { dir }
    }

    /// A sandbox holding a copy of `fixtures/project`: a valid scenario, session, upload, two
    /// versions of a skill (`skills/v1/report`, `skills/v2/report`), a skill dir with another
    /// basename (`skills/v3/summary`) and a 2 × 2 matrix.
    pub fn with_project() -> Sandbox {
        let sandbox = Sandbox::empty();
        copy_dir(&fixture("project"), sandbox.path());
        sandbox
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The store every batch of this sandbox writes to.
    pub fn store(&self) -> PathBuf {
        self.path().join(".cowork")
    }

    fn file(&self, rel: &str) -> PathBuf {
        self.path().join(rel)
    }

    /// Writes `contents` to `rel`, creating parent directories.
    pub fn write(&self, rel: &str, contents: &str) {
        let path = self.file(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
        }
        std::fs::write(&path, contents)
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    pub fn read(&self, rel: &str) -> String {
        let path = self.file(rel);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    }

    /// Appends `text` to `rel`.
    pub fn append(&self, rel: &str, text: &str) {
        let contents = self.read(rel) + text;
        self.write(rel, &contents);
    }

    /// Replaces the one occurrence of `from` in `rel` with `to`.
    pub fn replace(&self, rel: &str, from: &str, to: &str) {
        let contents = self.read(rel);
        assert_eq!(
            contents.matches(from).count(),
            1,
            "{rel} must hold {from:?} exactly once:\n{contents}"
        );
        self.write(rel, &contents.replacen(from, to, 1));
    }

    /// Removes a file or a directory tree.
    pub fn remove(&self, rel: &str) {
        let path = self.file(rel);
        let result = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        result.unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
    }

    /// Copies a fixture file into the sandbox at `rel`.
    pub fn copy_in(&self, from: &Path, rel: &str) {
        let contents = std::fs::read_to_string(from)
            .unwrap_or_else(|e| panic!("reading {}: {e}", from.display()));
        self.write(rel, &contents);
    }

    /// `cowork run <args> --store <store>` with this sandbox as the cwd.
    pub fn run_batch<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        run_batch_from(self.path(), &self.store(), args)
    }
}

/// `cowork run <args> --store <store>` from `cwd`.
pub fn run_batch_from<S: AsRef<OsStr>>(cwd: &Path, store: &Path, args: &[S]) -> Output {
    let mut all: Vec<OsString> = vec!["run".into()];
    all.extend(args.iter().map(|arg| arg.as_ref().to_owned()));
    all.push("--store".into());
    all.push(store.into());
    cowork(cwd, &all)
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("creating {}: {e}", to.display()));
    let listing =
        std::fs::read_dir(from).unwrap_or_else(|e| panic!("listing {}: {e}", from.display()));
    for entry in listing {
        let entry = entry.unwrap_or_else(|e| panic!("listing {}: {e}", from.display()));
        let source = entry.path();
        let target = to.join(entry.file_name());
        if source.is_dir() {
            copy_dir(&source, &target);
        } else {
            std::fs::copy(&source, &target).unwrap_or_else(|e| {
                panic!("copying {} to {}: {e}", source.display(), target.display())
            });
        }
    }
}

/// What one `cowork` invocation did.
pub struct Output {
    pub command: String,
    pub cwd: PathBuf,
    /// `None` when the process was killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the `cowork` binary in `cwd`. Every `COWORK_*` variable of the test's own environment is
/// removed so that a developer's settings (a store, an executor, a harness) cannot leak in.
pub fn cowork<S: AsRef<OsStr>>(cwd: &Path, args: &[S]) -> Output {
    let program = env!("CARGO_BIN_EXE_cowork");
    let mut command = Command::new(program);
    command.current_dir(cwd).args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("COWORK_") {
            command.env_remove(name);
        }
    }
    let shown = std::iter::once(program.to_owned())
        .chain(
            args.iter()
                .map(|arg| arg.as_ref().to_string_lossy().into_owned()),
        )
        .collect::<Vec<_>>()
        .join(" ");
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("spawning `{shown}` in {}: {e}", cwd.display()));
    Output {
        command: shown,
        cwd: cwd.to_path_buf(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

impl Output {
    /// Wraps a finished process for the assertions below.
    pub fn new(command: String, cwd: PathBuf, output: std::process::Output) -> Output {
        Output {
            command,
            cwd,
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// The full context of this invocation, for panic messages.
    pub fn context(&self) -> String {
        let mut text = String::new();
        let _ = writeln!(text, "command: {}", self.command);
        let _ = writeln!(text, "cwd:     {}", self.cwd.display());
        let _ = writeln!(text, "exit:    {:?}", self.code);
        let _ = writeln!(text, "--- stdout ---\n{}", self.stdout);
        let _ = writeln!(text, "--- stderr ---\n{}", self.stderr);
        text
    }

    /// Panics with `why` and the full context.
    #[track_caller]
    pub fn fail(&self, why: &str) -> ! {
        panic!("{why}\n{}", self.context())
    }

    /// The exit code; panics if the process was killed by a signal.
    #[track_caller]
    pub fn code(&self) -> i32 {
        match self.code {
            Some(code) => code,
            None => self.fail("cowork was killed by a signal"),
        }
    }

    #[track_caller]
    pub fn expect_code(&self, expected: i32) -> &Output {
        if self.code != Some(expected) {
            self.fail(&format!("expected exit code {expected}"));
        }
        self
    }

    /// Panics unless stderr holds `fragment`.
    #[track_caller]
    pub fn expect_stderr(&self, fragment: &str) -> &Output {
        if !self.stderr.contains(fragment) {
            self.fail(&format!("stderr does not mention {fragment:?}"));
        }
        self
    }

    /// Panics unless stdout holds `fragment`.
    #[track_caller]
    pub fn expect_stdout(&self, fragment: &str) -> &Output {
        if !self.stdout.contains(fragment) {
            self.fail(&format!("stdout does not mention {fragment:?}"));
        }
        self
    }

    /// The envelope: stdout must be exactly one line of JSON.
    #[track_caller]
    pub fn envelope(&self) -> Value {
        let Some(line) = self.stdout.strip_suffix('\n') else {
            self.fail("stdout does not end with a newline");
        };
        if line.contains('\n') {
            self.fail("stdout holds more than one line");
        }
        match serde_json::from_str(line) {
            Ok(value) => value,
            Err(e) => self.fail(&format!("stdout is not JSON: {e}")),
        }
    }
}

/// The batch directories under `<store>/batches`, sorted.
pub fn batch_dirs(store: &Path) -> Vec<PathBuf> {
    let batches = store.join("batches");
    let listing = std::fs::read_dir(&batches)
        .unwrap_or_else(|e| panic!("listing {}: {e}", batches.display()));
    let mut dirs: Vec<PathBuf> = listing
        .map(|entry| {
            entry
                .unwrap_or_else(|e| panic!("listing {}: {e}", batches.display()))
                .path()
        })
        .collect();
    dirs.sort();
    dirs
}

/// The one batch directory of a store that ran one batch.
pub fn only_batch_dir(store: &Path) -> PathBuf {
    let dirs = batch_dirs(store);
    match dirs.as_slice() {
        [one] => one.clone(),
        _ => panic!(
            "expected exactly one batch under {}, found {dirs:?}",
            store.display()
        ),
    }
}

pub fn read_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

pub fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&read_bytes(path))
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The keys of a JSON object, in document order (`serde_json/preserve_order` is on).
pub fn keys(value: &Value) -> Vec<&str> {
    match value.as_object() {
        Some(object) => object.keys().map(String::as_str).collect(),
        None => panic!("expected a JSON object, got {value}"),
    }
}

/// `value[key]` as an array.
pub fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    match value.get(key).and_then(Value::as_array) {
        Some(items) => items,
        None => panic!("expected an array at {key:?} in {value}"),
    }
}

/// `value[key]` as a number.
pub fn number(value: &Value, key: &str) -> f64 {
    match value.get(key).and_then(Value::as_f64) {
        Some(number) => number,
        None => panic!("expected a number at {key:?} in {value}"),
    }
}

/// `value[key]` as a boolean.
pub fn boolean(value: &Value, key: &str) -> bool {
    match value.get(key).and_then(Value::as_bool) {
        Some(flag) => flag,
        None => panic!("expected a boolean at {key:?} in {value}"),
    }
}

/// `rollupPasses` of harness-behaviour.md#batch-verdict, recomputed from a stored rollup's fields:
/// an early stop other than `budget` fails, `budget` fails unless allowed, else `passRate >=
/// minPassRate`.
pub fn rollup_passes(rollup: &Value, min_pass_rate: f64, allow_budget_stop: bool) -> bool {
    match rollup.get("stoppedEarly").and_then(Value::as_str) {
        Some("budget") if !allow_budget_stop => false,
        Some("budget") | None => number(rollup, "passRate") >= min_pass_rate,
        Some(_) => false,
    }
}

/// A job as a test forges it on the queue, one the coordinator never published: `run` of file
/// unit 0 (scenario `forged`) on the hostloop tier by the `sim` executor (seed 1, no rules),
/// with a 60 s timeout.
pub fn forged_job(batch: &cowork_schema::BatchId) -> cowork_testkit::specs::JobSpecBuilder {
    cowork_testkit::job_spec()
        .batch_id(batch.clone())
        .tier(cowork_schema::job::Tier::Hostloop)
        .scenario_name("forged")
        .sim(cowork_schema::batch::SimSpec {
            seed: 1,
            rules: Vec::new(),
        })
}

/// The job messages in the jobs stream `stream`: every message but a coordinator term's fence
/// markers (`cowork.jobs.fence.<n>`, decisions.md#coordinator-lease), which a leading
/// coordinator keeps there and no worker is ever handed.
pub async fn job_messages(fabric: &cowork_fabric::nats::NatsFabric, stream: &str) -> u64 {
    use futures::TryStreamExt;
    let stream = fabric
        .jetstream
        .get_stream(stream)
        .await
        .unwrap_or_else(|e| panic!("reading stream {stream}: {e}"));
    let subjects: Vec<(String, usize)> = stream
        .info_with_subjects("cowork.jobs.>")
        .await
        .expect("the jobs stream's subjects")
        .try_collect()
        .await
        .expect("the jobs stream's subjects");
    subjects
        .iter()
        .filter(|(subject, _)| !subject.starts_with("cowork.jobs.fence."))
        .map(|(_, count)| *count as u64)
        .sum()
}
