//! The GitHub Actions workflows of `examples/ci/`, run step by step as a runner would run them:
//! the `run:` steps of the job in order, in bash with `-eo pipefail`, each with the workflow's
//! and its own `env:`, the `${{ … }}` expressions it uses filled in, its `if:` judged, and
//! `$GITHUB_ENV`, `$GITHUB_PATH` and `$GITHUB_OUTPUT` carried to the later steps. The MinIO
//! service container is an s3s-fs server; `uses:` steps (checkout, artifact upload) are left
//! out: the work tree is already a fresh git copy of `examples/`, and the artifacts are checked
//! on disk. The real cowork-harness is the runner's `COWORK_HARNESS_BIN`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use cowork_testkit::S3Server;
use serde_json::Value;

use super::real_cli;
use crate::support::{copy_dir, workspace_root};

/// One workflow job run on this machine.
struct Runner {
    _dir: tempfile::TempDir,
    /// The checkout: a git work tree holding a copy of `examples/`.
    checkout: PathBuf,
    /// `$RUNNER_TEMP`.
    temp: PathBuf,
    s3: S3Server,
    harness: PathBuf,
    /// `env:` of the workflow, then what steps appended to `$GITHUB_ENV`.
    env: BTreeMap<String, String>,
    /// What steps appended to `$GITHUB_PATH`, newest first.
    path: Vec<String>,
    /// `steps.<id>.outputs`.
    outputs: BTreeMap<String, BTreeMap<String, String>>,
    failed: bool,
    /// Each step's name, exit code and output, for the failure message.
    log: Vec<String>,
}

impl Runner {
    fn new(harness: &Path) -> Runner {
        let dir = tempfile::tempdir().expect("temp dir");
        let checkout = dir.path().join("checkout");
        copy_dir(
            &workspace_root().join("examples"),
            &checkout.join("examples"),
        );
        let git = |args: &[&str]| {
            let status = Command::new("git")
                .args(args)
                .current_dir(&checkout)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.com")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.com")
                .status()
                .expect("git");
            assert!(status.success(), "git {args:?}");
        };
        git(&["init", "-q"]);
        git(&["add", "-A"]);
        git(&["commit", "-qm", "checkout"]);
        let temp = dir.path().join("runner-temp");
        std::fs::create_dir_all(&temp).expect("runner temp");
        Runner {
            _dir: dir,
            checkout,
            temp,
            s3: S3Server::start(),
            harness: std::path::absolute(harness).expect("absolute harness path"),
            env: BTreeMap::new(),
            path: Vec::new(),
            outputs: BTreeMap::new(),
            failed: false,
            log: Vec::new(),
        }
    }

    /// The value of one expression term of the ones the workflows use.
    fn term(&self, term: &str) -> Option<String> {
        let term = term.trim();
        if let Some(literal) = term.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
            return Some(literal.to_owned());
        }
        if let Some(name) = term.strip_prefix("secrets.") {
            return match name {
                "COWORK_S3_ACCESS_KEY_ID" => Some(self.s3.access_key.clone()),
                "COWORK_S3_SECRET_ACCESS_KEY" => Some(self.s3.secret_key.clone()),
                // No long-lived coordinator, no token, no model key: the throwaway fleet.
                _ => None,
            };
        }
        if term.starts_with("inputs.") || term.starts_with("vars.") {
            return None; // a scheduled or pull-request run has no inputs and no variables set
        }
        if term == "job.services.minio.ports['9000']" {
            let endpoint = self.s3.endpoint();
            return endpoint.rsplit(':').next().map(str::to_owned);
        }
        if term == "github.run_id" {
            return Some("4242".to_owned());
        }
        if term == "runner.temp" {
            return Some(self.temp.display().to_string());
        }
        if let Some(name) = term.strip_prefix("env.") {
            return self.env.get(name).cloned();
        }
        if let Some(rest) = term.strip_prefix("steps.") {
            let (step, output) = rest
                .split_once(".outputs.")
                .expect("steps.<id>.outputs.<name>");
            return self
                .outputs
                .get(step)
                .and_then(|outputs| outputs.get(output))
                .cloned();
        }
        panic!("the workflow uses an expression this test does not know: {term}");
    }

    /// `a || b || 'c'`: the first non-empty term.
    fn expression(&self, expression: &str) -> String {
        expression
            .split("||")
            .find_map(|term| self.term(term).filter(|value| !value.is_empty()))
            .unwrap_or_default()
    }

    /// `text` with every `${{ … }}` replaced by its value.
    fn fill(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${{") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find("}}").expect("an expression ends") + start;
            out.push_str(&self.expression(&rest[start + 3..end]));
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        out
    }

    /// A step's `if:` (absent: run while nothing failed), as GitHub judges the forms used.
    fn should_run(&self, condition: Option<&str>) -> bool {
        let Some(condition) = condition else {
            return !self.failed;
        };
        let mut status_function = false;
        let all = condition.split("&&").all(|part| {
            let part = part.trim();
            match part {
                "always()" => {
                    status_function = true;
                    true
                }
                "failure()" => {
                    status_function = true;
                    self.failed
                }
                _ => {
                    let (left, right, equal) = match part.split_once("!=") {
                        Some((left, right)) => (left, right, false),
                        None => {
                            let (left, right) = part.split_once("==").expect("a comparison");
                            (left, right, true)
                        }
                    };
                    (self.expression(left) == self.expression(right)) == equal
                }
            }
        });
        all && (status_function || !self.failed)
    }

    /// Runs one `run:` step; returns its exit code.
    fn run_step(&mut self, id: Option<&str>, name: &str, script: &str, step_env: &Value) -> i32 {
        let github_env = self.temp.join("github-env");
        let github_path = self.temp.join("github-path");
        let github_output = self.temp.join("github-output");
        for file in [&github_env, &github_path, &github_output] {
            std::fs::write(file, "").expect("reset runner file");
        }
        let mut command = Command::new("bash");
        command
            .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script])
            .current_dir(&self.checkout);
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy().into_owned();
            if key.starts_with("COWORK_") || key.starts_with("GITHUB_") || key == "CARGO_TARGET_DIR"
            {
                command.env_remove(key);
            }
        }
        let cowork_dir = Path::new(env!("CARGO_BIN_EXE_cowork"))
            .parent()
            .expect("cowork's dir")
            .display()
            .to_string();
        let mut path: Vec<String> = self.path.clone();
        path.push(cowork_dir);
        path.push(std::env::var("PATH").unwrap_or_default());
        command
            .env("PATH", path.join(":"))
            .env("CI", "true")
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_RUN_ID", "4242")
            .env("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567")
            .env("RUNNER_TEMP", &self.temp)
            .env("GITHUB_ENV", &github_env)
            .env("GITHUB_PATH", &github_path)
            .env("GITHUB_OUTPUT", &github_output)
            .env("GITHUB_STEP_SUMMARY", self.temp.join("step-summary.md"))
            // The runner's prerequisite (docs/ci.md): the pinned harness CLI.
            .env("COWORK_HARNESS_BIN", &self.harness)
            .env("NO_COLOR", "1");
        for (key, value) in &self.env {
            command.env(key, value);
        }
        if let Value::Object(map) = step_env {
            for (key, value) in map {
                command.env(key, self.fill(value.as_str().unwrap_or_default()));
            }
        }
        let output = command.output().expect("run bash");
        let code = output.status.code().unwrap_or(-1);
        self.log.push(format!(
            "--- step {name:?}: exit {code}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
        for (key, value) in key_values(&github_env) {
            self.env.insert(key, value);
        }
        let added = std::fs::read_to_string(&github_path).unwrap_or_default();
        for line in added.lines().filter(|line| !line.is_empty()) {
            self.path.insert(0, line.to_owned());
        }
        if let Some(id) = id {
            self.outputs
                .insert(id.to_owned(), key_values(&github_output));
        }
        code
    }

    /// Runs the job's steps; returns the names of the steps that ran.
    fn run_job(&mut self, workflow: &Value, job: &str) -> Vec<String> {
        if let Value::Object(map) = &workflow["env"] {
            for (key, value) in map {
                let value = self.fill(value.as_str().unwrap_or_default());
                self.env.insert(key.clone(), value);
            }
        }
        let steps = workflow["jobs"][job]["steps"]
            .as_array()
            .expect("steps")
            .clone();
        let mut ran = Vec::new();
        for step in &steps {
            let name = step["name"]
                .as_str()
                .or(step["uses"].as_str())
                .unwrap_or("?");
            let Some(script) = step["run"].as_str() else {
                continue; // `uses:` steps: checkout and artifact uploads
            };
            if !self.should_run(step["if"].as_str()) {
                continue;
            }
            let code = self.run_step(step["id"].as_str(), name, script, &step["env"]);
            if code != 0 {
                self.failed = true;
            }
            ran.push(format!("{name} (exit {code})"));
        }
        ran
    }

    fn context(&self) -> String {
        self.log.join("\n")
    }
}

impl Drop for Runner {
    /// A failed assertion must not leave the throwaway fleet running.
    fn drop(&mut self) {
        let pids = self.temp.join("cowork-fleet/pids");
        if pids.exists() {
            let _ = Command::new("bash")
                .arg(self.checkout.join("examples/ci/fleet.sh"))
                .arg("stop")
                .env("RUNNER_TEMP", &self.temp)
                .output();
        }
    }
}

/// `KEY=VALUE` lines of a runner file.
fn key_values(file: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

fn workflow(name: &str) -> Value {
    let path = workspace_root()
        .join("examples/ci/github-actions")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("read workflow");
    cowork_schema::load::parse_yaml(&text, &path)
        .expect("the workflow parses")
        .to_json()
}

#[test]
fn the_pr_replay_workflow_goes_green_as_shipped() {
    let Some(cli) = real_cli() else { return };
    let mut runner = Runner::new(&cli);
    let workflow = workflow("pr-replay.yml");
    assert_eq!(workflow["env"]["COWORK_EXECUTOR"], "harness");
    assert_eq!(
        workflow["env"]["COWORK_CASSETTES"],
        "examples/demo/cassettes"
    );
    let ran = runner.run_job(&workflow, "replay");
    assert!(!runner.failed, "{ran:?}\n{}", runner.context());
    assert_eq!(
        runner.outputs["replay"]
            .get("exit-code")
            .map(String::as_str),
        Some("0"),
        "{}",
        runner.context()
    );
    for step in ["Stop the fleet", "Fail on the batch verdict"] {
        let expected = step == "Stop the fleet";
        assert_eq!(
            ran.iter().any(|name| name.starts_with(step)),
            expected,
            "{step}: {ran:?}"
        );
    }
    let out = runner.temp.join("cowork-out");
    let envelope: Value = serde_json::from_str(
        std::fs::read_to_string(out.join("envelope.json"))
            .expect("envelope.json")
            .trim(),
    )
    .expect("the envelope parses");
    assert_eq!(envelope["ok"], true, "{}", runner.context());
    let results = envelope["results"].as_array().expect("results");
    assert!(
        results.len() == 2
            && results
                .iter()
                .all(|result| result["verdict"]["pass"] == true),
        "{envelope}"
    );
    assert_ne!(envelope["fleet"]["simulated"], true, "{envelope}");
    let junit = std::fs::read_to_string(out.join("junit.xml")).expect("junit.xml");
    assert!(junit.contains("failures=\"0\""), "{junit}");
    assert!(out.join("report.html").is_file());
    let summary =
        std::fs::read_to_string(runner.temp.join("step-summary.md")).expect("the job summary");
    assert!(summary.contains("csv-report"), "{summary}");
}

#[test]
fn the_nightly_workflow_runs_to_its_reports_on_the_simulator() {
    // As shipped it sweeps the container tier with a model key: this machine has neither the
    // agent image nor a key, so the workflow runs on the simulator (its own dry-run setting),
    // which checks every step's flags and plumbing; the harness judges the same files in the
    // examples cases.
    let Some(cli) = real_cli() else { return };
    let mut runner = Runner::new(&cli);
    let mut workflow = workflow("nightly-matrix.yml");
    assert_eq!(workflow["env"]["COWORK_EXECUTOR"], "harness");
    workflow["env"]["COWORK_EXECUTOR"] = Value::String("sim".to_owned());
    let ran = runner.run_job(&workflow, "sweep");
    let code = runner.outputs["sweep"].get("exit-code").cloned();
    assert!(
        matches!(code.as_deref(), Some("0" | "1")),
        "{code:?} {ran:?}\n{}",
        runner.context()
    );
    let out = runner.temp.join("cowork-out");
    for file in ["report.html", "junit.xml", "envelope.json"] {
        assert!(
            out.join(file).is_file(),
            "{file}: {ran:?}\n{}",
            runner.context()
        );
    }
    assert!(
        ran.iter()
            .any(|name| name.starts_with("Stop the fleet (exit 0)")),
        "{ran:?}\n{}",
        runner.context()
    );
}
