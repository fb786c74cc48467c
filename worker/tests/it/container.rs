//! The container executor against this machine's Docker engine.
//!
//! The image is built here, from nothing that needs a registry: the stand-in CLI
//! `tests/fixtures/container-image/fake_harness.rs` is compiled as a static binary and put into
//! a `FROM scratch` image whose tag is derived from its inputs, so reruns reuse it. Without an
//! engine these tests fail; they never skip.
//!
//! Each test uses its own owner label, so tests running at once never see (or reap) each
//! other's containers. Running containers are observed through a FIFO in the job's work dir:
//! the stand-in blocks opening it until the test opens it for writing, so "the test's open
//! returned" means "the container is running" without any sleep.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, ContainerInspectResponse};
use bollard::query_parameters::{
    InspectContainerOptions, ListContainersOptions, RemoveContainerOptions,
};
use cowork_schema::batch::ExecutorKind;
use cowork_schema::event::InfraClass;
use cowork_schema::job::{JobCommand, JobSpec};
use cowork_worker::executor::container::{LABEL_BATCH, LABEL_JOB, LABEL_OWNER, reap_leftovers};
use cowork_worker::executor::{
    Classified, ContainerConfig, ContainerExecutor, ExecOutput, Executor,
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::support::{JobDirs, artifact_bytes, artifact_json, job_builder};

/// `worker/tests/fixtures/container-image`.
fn image_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/container-image")
}

fn run_checked(command: &mut Command) -> Vec<u8> {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("cannot run {command:?}: {err}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// The test image's tag, building the image once per test process unless the engine has it.
fn test_image() -> String {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let source = image_dir().join("fake_harness.rs");
        let dockerfile = image_dir().join("Dockerfile");
        let mut inputs = Sha256::new();
        for path in [&source, &dockerfile] {
            inputs.update(
                std::fs::read(path).unwrap_or_else(|err| panic!("{}: {err}", path.display())),
            );
        }
        inputs.update(run_checked(Command::new("rustc").arg("-V")));
        let digest: String = inputs
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let tag = format!("cowork-fleet-test-harness:{}", &digest[..16]);
        let present = Command::new("docker")
            .args(["image", "inspect", "--format", "{{.Id}}", &tag])
            .output()
            .unwrap_or_else(|err| panic!("the docker CLI is needed by these tests: {err}"));
        if present.status.success() {
            return tag;
        }
        let context = tempfile::tempdir().expect("creating the build context dir");
        run_checked(
            Command::new("rustc")
                .args([
                    "--edition",
                    "2024",
                    "-O",
                    "-C",
                    "target-feature=+crt-static",
                ])
                .args(["--target", "x86_64-unknown-linux-gnu", "-o"])
                .arg(context.path().join("cowork-harness"))
                .arg(&source),
        );
        std::fs::copy(&dockerfile, context.path().join("Dockerfile"))
            .expect("copying the Dockerfile into the build context");
        // The classic builder needs no buildx plugin, and `FROM scratch` pulls nothing.
        run_checked(
            Command::new("docker")
                .env("DOCKER_BUILDKIT", "0")
                .args(["build", "--quiet", "--tag", &tag])
                .arg(context.path()),
        );
        tag
    })
    .clone()
}

/// A client of the local engine, version-negotiated.
async fn docker() -> Docker {
    Docker::connect_with_defaults()
        .expect("a docker engine is needed by these tests")
        .negotiate_version()
        .await
        .expect("the docker engine must answer /version")
}

/// An owner label unique to this test process and test.
fn owner(test: &str) -> String {
    format!("cowork-test-{}-{test}", std::process::id())
}

/// Removes every container of an owner when dropped, so that a failing test leaves nothing
/// behind. It uses the docker CLI because it also runs while a panic unwinds, outside async.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let listed = Command::new("docker")
            .args(["ps", "--all", "--quiet", "--filter"])
            .arg(format!("label={LABEL_OWNER}={}", self.0))
            .output();
        let Ok(listed) = listed else { return };
        let ids = String::from_utf8_lossy(&listed.stdout).into_owned();
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            let _ = Command::new("docker")
                .args(["rm", "--force"])
                .args(&ids)
                .output();
        }
    }
}

fn config(owner: &str) -> ContainerConfig {
    let image = test_image();
    ContainerConfig {
        extra_env: vec![("COWORK_TEST_MARKER".to_owned(), "marker value".to_owned())],
        ..ContainerConfig::new(&image, owner)
    }
}

fn container_job(timeout_ms: u64) -> JobSpec {
    job_builder(
        JobCommand::Run,
        "scenarios/smoke.yaml",
        ExecutorKind::Container,
    )
    .timeout_ms(timeout_ms)
    .build()
}

/// Every container of `owner`, running or not.
async fn containers_of(docker: &Docker, owner: &str) -> Vec<String> {
    let filters = HashMap::from([("label".to_owned(), vec![format!("{LABEL_OWNER}={owner}")])]);
    docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..ListContainersOptions::default()
        }))
        .await
        .expect("listing containers")
        .into_iter()
        .filter_map(|container| container.id)
        .collect()
}

/// Every container of `owner` running `job_id`, running or not.
async fn containers_of_job(docker: &Docker, owner: &str, job_id: &str) -> Vec<String> {
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![
            format!("{LABEL_OWNER}={owner}"),
            format!("{LABEL_JOB}={job_id}"),
        ],
    )]);
    docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..ListContainersOptions::default()
        }))
        .await
        .expect("listing containers")
        .into_iter()
        .filter_map(|container| container.id)
        .collect()
}

/// Inspects the single container of `owner` running `job_id`.
async fn the_container_of(docker: &Docker, owner: &str, job_id: &str) -> ContainerInspectResponse {
    let ids = containers_of_job(docker, owner, job_id).await;
    let [id] = ids.as_slice() else {
        panic!("expected one container of {owner}, found {ids:?}");
    };
    docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .expect("inspecting the job's container")
}

/// Creates `<work>/gate.fifo`.
fn make_gate(dirs: &JobDirs) -> PathBuf {
    let fifo = dirs.work().join("gate.fifo");
    run_checked(Command::new("mkfifo").arg(&fifo));
    fifo
}

/// Runs `executor` on `ctx` and, once the stand-in has passed the gate (so its container is
/// running), runs `while_running`; the gate is held open until `while_running` returns.
async fn execute_through_gate<F>(
    executor: &ContainerExecutor,
    dirs: &JobDirs,
    job: JobSpec,
    cancel: CancellationToken,
    while_running: F,
) -> ExecOutput
where
    F: AsyncFnOnce(),
{
    let fifo = make_gate(dirs);
    let context = dirs.context(job);
    let execution = executor.execute(&context, cancel);
    tokio::pin!(execution);
    let opening = {
        let fifo = fifo.clone();
        // Opening a FIFO for writing blocks until the stand-in opens it for reading.
        tokio::task::spawn_blocking(move || {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&fifo)
                .unwrap_or_else(|err| panic!("opening {} for writing: {err}", fifo.display()))
        })
    };
    let gate: File = tokio::select! {
        output = &mut execution => {
            // Unblock the pending open so that the runtime can shut down, then fail.
            let _reader = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo);
            panic!("the job ended before its container passed the gate: {output:#?}");
        }
        opened = opening => opened.expect("the FIFO opener panicked"),
    };
    while_running().await;
    drop(gate);
    execution.await
}

fn completed(output: &ExecOutput) -> &Value {
    match &output.classified {
        Classified::Completed { result } => result,
        other => panic!("expected a completed job, got {other:?}; output {output:#?}"),
    }
}

fn error_category(output: &ExecOutput) -> &str {
    match &output.classified {
        Classified::Error { category, .. } => category.as_str(),
        other => panic!("expected an error, got {other:?}; output {output:#?}"),
    }
}

/// Creates (without starting) a container of the test image with these labels.
async fn create_labelled(docker: &Docker, labels: &[(&str, &str)]) -> String {
    let labels = labels
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect();
    docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            ContainerCreateBody {
                image: Some(test_image()),
                labels: Some(labels),
                ..ContainerCreateBody::default()
            },
        )
        .await
        .expect("creating a labelled container")
        .id
}

async fn exists(docker: &Docker, id: &str) -> bool {
    match docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
    {
        Ok(_) => true,
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => false,
        Err(err) => panic!("inspecting container {id}: {err}"),
    }
}

async fn remove(docker: &Docker, id: &str) {
    docker
        .remove_container(
            id,
            Some(RemoveContainerOptions {
                force: true,
                ..RemoveContainerOptions::default()
            }),
        )
        .await
        .unwrap_or_else(|err| panic!("removing container {id}: {err}"));
}

#[tokio::test]
async fn pass_job_runs_in_a_labelled_limited_container_that_is_removed_after() {
    let docker = docker().await;
    let owner = owner("pass");
    let _cleanup = RemoveOnDrop(owner.clone());
    // A leftover of this owner from an earlier job: reaped after this job.
    let leftover = create_labelled(
        &docker,
        &[(LABEL_OWNER, owner.as_str()), (LABEL_JOB, "b0/leftover")],
    )
    .await;
    let executor = ContainerExecutor::new(ContainerConfig {
        memory_limit_bytes: Some(256 * 1024 * 1024),
        cpu_limit_millis: Some(500),
        docker_socket: Some(PathBuf::from("/var/run/docker.sock")),
        ..config(&owner)
    });
    let dirs = JobDirs::new("gate");
    let job = container_job(120_000);
    let job_id = job.job_id.to_string();
    let work_dir = dirs.work();
    let bundle_dir = dirs.bundle();

    let output = execute_through_gate(
        &executor,
        &dirs,
        job,
        CancellationToken::new(),
        async || {
            let running = the_container_of(&docker, &owner, &job_id).await;
            let state = running.state.as_ref().expect("container state");
            assert_eq!(state.running, Some(true), "{running:#?}");
            let config = running.config.as_ref().expect("container config");
            let labels = config.labels.clone().unwrap_or_default();
            assert_eq!(labels.get(LABEL_BATCH).map(String::as_str), Some("b1"));
            assert_eq!(labels.get(LABEL_JOB), Some(&job_id));
            assert_eq!(labels.get(LABEL_OWNER), Some(&owner));
            let host = running.host_config.as_ref().expect("host config");
            assert_eq!(host.memory, Some(256 * 1024 * 1024));
            assert_eq!(host.nano_cpus, Some(500_000_000));
            assert_eq!(host.init, Some(true));
            let binds = host.binds.clone().unwrap_or_default();
            let work = work_dir.display();
            let bundle = bundle_dir.display();
            assert!(binds.contains(&format!("{work}:{work}:rw")), "{binds:?}");
            assert!(
                binds.contains(&format!("{bundle}:{bundle}:ro")),
                "{binds:?}"
            );
            assert!(
                binds.contains(&"/var/run/docker.sock:/var/run/docker.sock".to_owned()),
                "{binds:?}"
            );
        },
    )
    .await;

    let result = completed(&output);
    // The stand-in wrote its run dir inside the container; the executor read it on the host
    // at the same path: the on-disk copy, not the envelope's.
    assert_eq!(result["doubleCopy"], "disk");
    assert_eq!(artifact_json(&output, "result.json")["doubleCopy"], "disk");
    let out_dir = result["outDir"].as_str().expect("outDir string");
    assert!(
        Path::new(out_dir).starts_with(dirs.work().join("runs")),
        "{out_dir}"
    );
    assert!(Path::new(out_dir).join("turns/1/result.json").is_file());
    assert_eq!(output.exit_code, Some(0));
    assert!(output.spawned);
    assert_eq!(
        output.harness_version.as_deref(),
        Some("2.0.0-fake-container")
    );
    // Same argv as the harness executor.
    let argv: Vec<String> = serde_json::from_value(result["fakeArgv"].clone()).expect("argv");
    let scenario = dirs.bundle().join("scenarios/smoke.yaml");
    assert_eq!(
        argv,
        [
            "--run-dir".to_owned(),
            dirs.work().join("runs").display().to_string(),
            "run".to_owned(),
            scenario.display().to_string(),
            "--output-format".to_owned(),
            "json".to_owned(),
        ]
    );
    // The allow-list and extra variables arrive; the host's PATH does not.
    let env = &result["fakeEnv"];
    assert_eq!(env["COWORK_TEST_MARKER"], "marker value");
    assert_eq!(env["PATH"], "/usr/local/bin");
    assert_eq!(result["fakeDockerSocket"], true);
    // Both streams were captured from the container's logs.
    let envelope = artifact_json(&output, "envelope.json");
    assert_eq!(envelope["results"][0]["doubleCopy"], "envelope");
    let stderr =
        String::from_utf8_lossy(&artifact_bytes(&output, "harness.stderr.log")).into_owned();
    assert!(
        stderr.starts_with(&format!("[status] {out_dir}")),
        "{stderr}"
    );

    assert_eq!(containers_of(&docker, &owner).await, Vec::<String>::new());
    assert!(
        !exists(&docker, &leftover).await,
        "the leftover was not reaped"
    );
}

#[tokio::test]
async fn failing_verdict_completes_with_exit_code_1() {
    let docker = docker().await;
    let owner = owner("fail");
    let _cleanup = RemoveOnDrop(owner.clone());
    let executor = ContainerExecutor::new(config(&owner));
    let dirs = JobDirs::new("fail");
    let output = executor
        .execute(
            &dirs.context(container_job(120_000)),
            CancellationToken::new(),
        )
        .await;
    let result = completed(&output);
    assert_eq!(result["verdict"]["pass"], false);
    assert_eq!(result["doubleCopy"], "disk");
    assert_eq!(output.exit_code, Some(1));
    assert_eq!(containers_of(&docker, &owner).await, Vec::<String>::new());
}

#[tokio::test]
async fn timeout_kills_and_removes_the_container() {
    let docker = docker().await;
    let owner = owner("timeout");
    let _cleanup = RemoveOnDrop(owner.clone());
    let executor = ContainerExecutor::new(config(&owner));
    let dirs = JobDirs::new("hang");
    let output = executor
        .execute(
            &dirs.context(container_job(1_500)),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(error_category(&output), "timeout", "{output:#?}");
    let Classified::Error { message, .. } = &output.classified else {
        unreachable!("checked above");
    };
    assert!(message.contains("1500 ms"), "{message}");
    assert!(
        message.contains("container was killed and removed"),
        "{message}"
    );
    assert!(output.spawned);
    assert_eq!(output.exit_code, None);
    let stderr =
        String::from_utf8_lossy(&artifact_bytes(&output, "harness.stderr.log")).into_owned();
    assert!(stderr.contains("fake-harness: hanging"), "{stderr}");
    assert_eq!(containers_of(&docker, &owner).await, Vec::<String>::new());
}

#[tokio::test]
async fn cancel_kills_and_removes_the_running_container() {
    let docker = docker().await;
    let owner = owner("cancel");
    let _cleanup = RemoveOnDrop(owner.clone());
    let executor = ContainerExecutor::new(config(&owner));
    let dirs = JobDirs::new("hang");
    let cancel = CancellationToken::new();
    let job = container_job(600_000);
    let job_id = job.job_id.to_string();
    let output = execute_through_gate(&executor, &dirs, job, cancel.clone(), async || {
        let running = the_container_of(&docker, &owner, &job_id).await;
        let state = running.state.as_ref().expect("container state");
        assert_eq!(state.running, Some(true), "{running:#?}");
        cancel.cancel();
    })
    .await;
    assert_eq!(error_category(&output), "cancelled", "{output:#?}");
    assert!(output.spawned);
    assert_eq!(containers_of(&docker, &owner).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_process_killed_by_a_signal_is_a_crash() {
    let docker = docker().await;
    let owner = owner("abort");
    let _cleanup = RemoveOnDrop(owner.clone());
    let executor = ContainerExecutor::new(config(&owner));
    let dirs = JobDirs::new("abort");
    let output = executor
        .execute(
            &dirs.context(container_job(120_000)),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(error_category(&output), "crashed", "{output:#?}");
    let Classified::Error { message, .. } = &output.classified else {
        unreachable!("checked above");
    };
    assert_eq!(message, "killed by signal 6");
    assert_eq!(containers_of(&docker, &owner).await, Vec::<String>::new());
}

fn assert_sandbox_start_failure(output: &ExecOutput, expect_in_message: &str) {
    match &output.classified {
        Classified::Infra {
            class: InfraClass::SandboxStart,
            message,
        } => assert!(
            message.contains(expect_in_message),
            "{message:?} lacks {expect_in_message:?}"
        ),
        other => panic!("expected a sandbox start failure, got {other:?}; output {output:#?}"),
    }
    // Nothing ran, nothing was spent: the job may be retried (harness-behaviour.md#choice-c8).
    assert!(!output.spawned, "{output:#?}");
    assert_eq!(output.exit_code, None);
}

#[tokio::test]
async fn a_missing_image_is_a_sandbox_start_failure_handed_back() {
    let docker = docker().await;
    let owner = owner("missing");
    let _cleanup = RemoveOnDrop(owner.clone());
    let image = format!("cowork-fleet-test-missing:{}", std::process::id());
    let executor = ContainerExecutor::new(ContainerConfig::new(&image, &owner));
    let dirs = JobDirs::new("pass");
    let output = executor
        .execute(
            &dirs.context(container_job(120_000)),
            CancellationToken::new(),
        )
        .await;
    assert_sandbox_start_failure(&output, &image);
    assert_eq!(containers_of(&docker, &owner).await, Vec::<String>::new());
}

#[tokio::test]
async fn an_unreachable_engine_is_a_sandbox_start_failure_handed_back() {
    let socket_dir = tempfile::tempdir().expect("creating a temp dir");
    let socket = socket_dir.path().join("no-engine.sock");
    let executor = ContainerExecutor::new(ContainerConfig {
        docker_host: Some(format!("unix://{}", socket.display())),
        ..ContainerConfig::new("cowork-fleet-test-any:1", &owner("unreachable"))
    });
    let dirs = JobDirs::new("pass");
    let output = executor
        .execute(
            &dirs.context(container_job(120_000)),
            CancellationToken::new(),
        )
        .await;
    assert_sandbox_start_failure(&output, "cannot connect to the docker engine");
}

#[tokio::test]
async fn reaping_removes_only_the_owners_containers_of_jobs_not_running() {
    let docker = docker().await;
    let owner = owner("reap");
    let _cleanup = RemoveOnDrop(owner.clone());
    let marker = format!("cowork-test-marker-{}", std::process::id());
    let leftover = create_labelled(
        &docker,
        &[
            (LABEL_OWNER, owner.as_str()),
            (LABEL_BATCH, "b9"),
            (LABEL_JOB, "b9/f0"),
        ],
    )
    .await;
    let running = create_labelled(
        &docker,
        &[(LABEL_OWNER, owner.as_str()), (LABEL_JOB, "b9/f1")],
    )
    .await;
    let unlabelled = create_labelled(&docker, &[("cowork.test/marker", marker.as_str())]).await;
    let other_owner = owner.clone() + "-other";
    let others = create_labelled(
        &docker,
        &[(LABEL_OWNER, other_owner.as_str()), (LABEL_JOB, "b9/f0")],
    )
    .await;

    let running_jobs = HashSet::from(["b9/f1".to_owned()]);
    let removed = reap_leftovers(&docker, &owner, &running_jobs)
        .await
        .expect("reaping");
    assert_eq!(removed, std::slice::from_ref(&leftover));
    assert!(!exists(&docker, &leftover).await);
    assert!(exists(&docker, &running).await);
    assert!(exists(&docker, &unlabelled).await);
    assert!(exists(&docker, &others).await);

    // The executor's own reap (as at worker start) runs no job, so `b9/f1` goes too.
    let executor = ContainerExecutor::new(config(&owner));
    let removed = executor.reap_leftovers().await.expect("reaping at start");
    assert_eq!(removed, std::slice::from_ref(&running));
    assert!(exists(&docker, &unlabelled).await);
    assert!(exists(&docker, &others).await);

    remove(&docker, &unlabelled).await;
    remove(&docker, &others).await;
}
