//! Shared helpers: fixture paths, job builders and a runner that keeps each job's directories.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cowork_schema::batch::{ExecutorKind, SimSpec};
use cowork_schema::ids::{BatchId, UnitRef};
use cowork_schema::job::{JobCommand, JobSpec, Tier};
use cowork_testkit::job_spec;
use cowork_testkit::specs::JobSpecBuilder;
use cowork_worker::executor::{
    ArtifactSource, ExecOutput, Executor, HarnessConfig, HarnessExecutor, JobContext,
};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// `worker/tests/fixtures`.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Reads and parses a JSON fixture.
pub fn fixture_json(name: &str) -> serde_json::Value {
    let path = fixtures_dir().join(name);
    let bytes =
        std::fs::read(&path).unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|err| panic!("parsing {}: {err}", path.display()))
}

/// The strict double of the CLI, made executable in place (a checkout may lose the mode bit).
/// Changing the mode opens no file for writing, so a concurrent spawn cannot hit ETXTBSY.
pub fn strict_harness() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let path = fixtures_dir().join("strict-harness");
        let mode = std::fs::metadata(&path)
            .unwrap_or_else(|err| panic!("strict harness {}: {err}", path.display()))
            .permissions()
            .mode();
        if mode & 0o111 != 0o111 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .unwrap_or_else(|err| panic!("chmod {}: {err}", path.display()));
        }
        path
    })
    .clone()
}

/// `PATH` for the strict double: the directory of the real python3 binary (not a version
/// manager's shim, which would add variables of its own) and the system directories.
pub fn child_path() -> String {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let output = std::process::Command::new("python3")
            .args([
                "-c",
                "import os, sys; print(os.path.dirname(os.path.realpath(sys.executable)))",
            ])
            .output()
            .unwrap_or_else(|err| panic!("python3 is needed by the strict double: {err}"));
        assert!(output.status.success(), "python3 failed: {output:?}");
        let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        format!("{dir}:/usr/bin:/bin")
    })
    .clone()
}

/// Variables every strict-harness run gets; PYTHONCOERCECLOCALE=0 stops Python from adding
/// LC_CTYPE to its own environment, which the env test compares exactly.
pub fn base_extra_env() -> Vec<(String, String)> {
    vec![
        ("PATH".to_owned(), child_path()),
        ("PYTHONCOERCECLOCALE".to_owned(), "0".to_owned()),
    ]
}

/// Worker variables the tests pass through (one of them is never set).
pub const PASSTHROUGH: [&str; 2] = ["HOME", "COWORK_TEST_NEVER_SET_VARIABLE"];

/// A harness executor running the strict double.
pub fn strict_executor(extra_env: &[(&str, &str)], stdout_limit_bytes: usize) -> HarnessExecutor {
    let mut env = base_extra_env();
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    HarnessExecutor::new(HarnessConfig {
        program: strict_harness(),
        passthrough_env: PASSTHROUGH.iter().map(|name| (*name).to_owned()).collect(),
        extra_env: env,
        stdout_limit_bytes,
        guard: None,
        ..HarnessConfig::default()
    })
}

/// A job of batch `b1` on the protocol tier (scenario `smoke`, a 60 s timeout), for a test to
/// adjust before it builds it.
pub fn job_builder(
    command: JobCommand,
    scenario_file: &str,
    executor: ExecutorKind,
) -> JobSpecBuilder {
    job_spec()
        .command(command)
        .tier(Tier::Protocol)
        .scenario_file(scenario_file)
        .scenario_name("smoke")
        .bundle_sha256("0".repeat(64))
        .executor(executor)
}

/// A job of batch `b1`.
pub fn job(command: JobCommand, scenario_file: &str, executor: ExecutorKind) -> JobSpec {
    job_builder(command, scenario_file, executor).build()
}

/// A sim job of `scenario` with the given spec.
pub fn sim_job(scenario: &str, unit: UnitRef, repeat_index: Option<u32>, sim: &SimSpec) -> JobSpec {
    job_builder(
        JobCommand::Run,
        &format!("{scenario}.yaml"),
        ExecutorKind::Sim,
    )
    .unit(unit)
    .repeat_index(repeat_index)
    .scenario_name(scenario)
    .sim(sim.clone())
    .build()
}

/// The directories of one job: a bundle with the scenario and an empty work dir.
pub struct JobDirs {
    pub root: TempDir,
}

impl JobDirs {
    /// Creates a bundle holding `scenarios/smoke.yaml` scripted with `strict-harness: <behaviour>`.
    pub fn new(behaviour: &str) -> JobDirs {
        let root = tempfile::tempdir().expect("creating a temp dir");
        let scenarios = root.path().join("bundle/scenarios");
        std::fs::create_dir_all(&scenarios).expect("creating the bundle dir");
        std::fs::create_dir_all(root.path().join("work")).expect("creating the work dir");
        std::fs::write(
            scenarios.join("smoke.yaml"),
            format!("# strict-harness: {behaviour}\nname: smoke\nprompt: hi\n"),
        )
        .expect("writing the scenario");
        JobDirs { root }
    }

    pub fn bundle(&self) -> PathBuf {
        self.root.path().join("bundle")
    }

    pub fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    pub fn context(&self, job: JobSpec) -> JobContext {
        JobContext {
            job,
            bundle_dir: self.bundle(),
            work_dir: self.work(),
            attempt: 1,
        }
    }
}

/// Runs `behaviour` as a `run` job with the default strict executor.
pub async fn run_scripted(behaviour: &str) -> (ExecOutput, JobDirs) {
    run_scripted_job(behaviour, JobCommand::Run, &strict_executor(&[], 1 << 20)).await
}

/// Runs `behaviour` as a job of `command` with `executor`.
pub async fn run_scripted_job(
    behaviour: &str,
    command: JobCommand,
    executor: &dyn Executor,
) -> (ExecOutput, JobDirs) {
    let dirs = JobDirs::new(behaviour);
    let job = job(command, "scenarios/smoke.yaml", ExecutorKind::Harness);
    let output = executor
        .execute(&dirs.context(job), CancellationToken::new())
        .await;
    (output, dirs)
}

/// The bytes of an artifact, read from memory or disk; panics with the artifact list.
pub fn artifact_bytes(output: &ExecOutput, name: &str) -> Vec<u8> {
    let names: Vec<&str> = output.artifacts.iter().map(|a| a.name.as_str()).collect();
    let artifact = output
        .artifact(name)
        .unwrap_or_else(|| panic!("no artifact {name} among {names:?}; output {output:#?}"));
    match &artifact.source {
        ArtifactSource::Bytes(bytes) => bytes.clone(),
        ArtifactSource::File(path) => std::fs::read(path)
            .unwrap_or_else(|err| panic!("reading artifact {name} at {}: {err}", path.display())),
    }
}

/// An artifact parsed as JSON.
pub fn artifact_json(output: &ExecOutput, name: &str) -> serde_json::Value {
    let bytes = artifact_bytes(output, name);
    serde_json::from_slice(&bytes).unwrap_or_else(|err| {
        panic!(
            "artifact {name} is not json ({err}): {}",
            String::from_utf8_lossy(&bytes)
        )
    })
}

/// The artifact names, in order.
pub fn artifact_names(output: &ExecOutput) -> Vec<&str> {
    output.artifacts.iter().map(|a| a.name.as_str()).collect()
}

/// A batch record of generation 0 with no controls, as the coordinator writes one.
pub fn batch_record(
    batch_id: BatchId,
    state: cowork_schema::registry::BatchState,
    spec_sha256: String,
    n_jobs: u64,
) -> cowork_schema::registry::BatchRecord {
    cowork_schema::registry::BatchRecord {
        batch_id,
        state,
        spec_sha256,
        n_jobs,
        created_at_ms: 0,
        updated_at_ms: 0,
        ok: None,
        exit_code: None,
        eval_verdict: None,
        owner: None,
        generation: 0,
        kill_running: false,
        controls: Default::default(),
        listing: Default::default(),
    }
}
