//! Stopping a harness the way the real CLI expects, against the strict double
//! `tests/fixtures/strict-harness`: at container tier (with `STRICT_HARNESS_SIDECAR_DIR`) it
//! starts an egress sidecar, a marker file that only its SIGINT/SIGTERM handler removes, as the
//! CLI's handler removes its proxy container and networks, and then holds until signalled.
//! A timeout and a cancel send SIGTERM first and wait the grace, so nothing is left; a harness
//! whose cleanup outlasts the grace is killed, and the log says so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cowork_schema::batch::ExecutorKind;
use cowork_schema::job::{JobCommand, Tier};
use cowork_testkit::wait_until;
use cowork_worker::executor::{Classified, ExecOutput, Executor, HarnessConfig, HarnessExecutor};
use tokio_util::sync::CancellationToken;

use crate::support::{JobDirs, artifact_bytes, base_extra_env, fixtures_dir, job};

/// How long the double takes to start before a test gives up on it (a bound, not a timing).
const PATIENCE: Duration = Duration::from_secs(60);

/// A harness executor running the strict double with its sidecar in `sidecars`, whose
/// SIGTERM handler takes `cleanup_ms`, stopped with `grace`.
fn strict_executor(sidecars: Option<&Path>, cleanup_ms: u64, grace: Duration) -> HarnessExecutor {
    let mut extra_env = base_extra_env();
    if let Some(sidecars) = sidecars {
        extra_env.push((
            "STRICT_HARNESS_SIDECAR_DIR".to_owned(),
            sidecars.display().to_string(),
        ));
    }
    extra_env.push((
        "STRICT_HARNESS_CLEANUP_MS".to_owned(),
        cleanup_ms.to_string(),
    ));
    HarnessExecutor::new(HarnessConfig {
        program: fixtures_dir().join("strict-harness"),
        passthrough_env: vec!["HOME".to_owned()],
        extra_env,
        stop_grace: grace,
        ..HarnessConfig::default()
    })
}

/// The bundle of a container-tier scenario; the dir for the double's sidecar markers.
fn container_job_dirs() -> (JobDirs, PathBuf) {
    let dirs = JobDirs::new("unused");
    std::fs::write(
        dirs.bundle().join("scenarios/smoke.yaml"),
        "name: smoke\nfidelity: container\nsession: (inline)\nprompt: hi\n",
    )
    .expect("writing the scenario");
    let sidecars = dirs.root.path().join("sidecars");
    std::fs::create_dir(&sidecars).expect("creating the sidecar dir");
    (dirs, sidecars)
}

fn sidecar_markers(sidecars: &Path) -> Vec<String> {
    std::fs::read_dir(sidecars)
        .expect("reading the sidecar dir")
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Waits until the double has started its sidecar.
async fn wait_for_sidecar(sidecars: &Path) {
    wait_until("the double started its sidecar")
        .within(PATIENCE)
        .every(Duration::from_millis(20))
        .poll_async(async || !sidecar_markers(sidecars).is_empty())
        .await;
}

/// The job's stored stderr and the `TMPDIR` the double held with.
fn log_and_tmpdir(output: &ExecOutput) -> (String, PathBuf) {
    let log = String::from_utf8_lossy(&artifact_bytes(output, "harness.stderr.log")).into_owned();
    let tmpdir = log
        .lines()
        .find_map(|line| line.split_once("(TMPDIR ")?.1.strip_suffix(')'))
        .unwrap_or_else(|| panic!("the double never held (no sidecar started):\n{log}"));
    (log.clone(), PathBuf::from(tmpdir))
}

fn category(output: &ExecOutput) -> &str {
    match &output.classified {
        Classified::Error { category, .. } => category.as_str(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn timeout_sends_sigterm_and_the_sidecar_is_cleaned_up_within_the_grace() {
    let (dirs, sidecars) = container_job_dirs();
    let executor = strict_executor(Some(&sidecars), 300, Duration::from_secs(60));
    let mut job = job(
        JobCommand::Run,
        "scenarios/smoke.yaml",
        ExecutorKind::Harness,
    );
    job.tier = Tier::Container;
    // Long enough for the double to start its sidecar; the log line below proves it did.
    job.timeout_ms = 5_000;
    let output = executor
        .execute(&dirs.context(job), CancellationToken::new())
        .await;
    assert_eq!(category(&output), "timeout", "{output:#?}");
    let (log, tmpdir) = log_and_tmpdir(&output);
    assert!(
        log.contains(
            "the job's timeout of 5000 ms passed: sent SIGTERM to the harness, which exited after"
        ) && log.contains("of its 60000 ms grace (--harness-grace)"),
        "{log}"
    );
    assert_eq!(sidecar_markers(&sidecars), Vec::<String>::new(), "{log}");
    assert!(!tmpdir.exists(), "{} is left", tmpdir.display());
}

/// A container job of the double, cancelled once its sidecar runs: its output and the sidecar
/// markers left after it ended.
async fn cancel_once_the_sidecar_runs(
    cleanup_ms: u64,
    grace: Duration,
) -> (ExecOutput, Vec<String>) {
    let (dirs, sidecars) = container_job_dirs();
    let executor = strict_executor(Some(&sidecars), cleanup_ms, grace);
    let mut job = job(
        JobCommand::Run,
        "scenarios/smoke.yaml",
        ExecutorKind::Harness,
    );
    job.tier = Tier::Container;
    let cancel = CancellationToken::new();
    let context = dirs.context(job);
    let (output, ()) = tokio::join!(executor.execute(&context, cancel.clone()), async {
        wait_for_sidecar(&sidecars).await;
        cancel.cancel();
    });
    assert_eq!(category(&output), "cancelled", "{output:#?}");
    (output, sidecar_markers(&sidecars))
}

#[tokio::test]
async fn cancel_sends_sigterm_and_the_sidecar_is_cleaned_up_within_the_grace() {
    let (output, markers) = cancel_once_the_sidecar_runs(300, Duration::from_secs(60)).await;
    let (log, tmpdir) = log_and_tmpdir(&output);
    assert!(
        log.contains("the job was cancelled: sent SIGTERM to the harness, which exited after"),
        "{log}"
    );
    assert_eq!(markers, Vec::<String>::new(), "{log}");
    assert!(!tmpdir.exists(), "{} is left", tmpdir.display());
}

#[tokio::test]
async fn a_cleanup_longer_than_the_grace_is_cut_short_and_the_log_says_so() {
    // The handler would take ten minutes: a hung Docker daemon.
    let (output, markers) = cancel_once_the_sidecar_runs(600_000, Duration::from_millis(500)).await;
    let (log, tmpdir) = log_and_tmpdir(&output);
    assert!(
        log.contains(
            "which did not exit within its 500 ms grace (--harness-grace); its process group \
             was killed with SIGKILL"
        ),
        "{log}"
    );
    // SIGKILL leaves the sidecar, as it leaves the CLI's proxy container.
    assert_eq!(markers.len(), 1, "{log}");
    assert!(!tmpdir.exists(), "{} is left", tmpdir.display());
}

/// Runs `docker <args>` and returns its trimmed stdout; panics with its stderr when it fails.
fn docker(args: &[&str]) -> String {
    let output = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("running docker");
    assert!(
        output.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// Whether Docker has a container or network of this name.
fn docker_has(kind: &str, name: &str) -> bool {
    std::process::Command::new("docker")
        .args([kind, "inspect", name])
        .output()
        .is_ok_and(|output| output.status.success())
}

#[tokio::test]
async fn the_cli_containers_and_networks_a_job_left_in_docker_are_removed_after_it() {
    let (dirs, _sidecars) = container_job_dirs();
    // An image with no files: the containers are only created, never started, which is all
    // the sweep looks at (names and mounts).
    let empty = dirs.root.path().join("empty.tar");
    let status = std::process::Command::new("tar")
        .args([
            "cf",
            &empty.display().to_string(),
            "--files-from",
            "/dev/null",
        ])
        .status()
        .expect("running tar");
    assert!(status.success());
    docker(&[
        "import",
        &empty.display().to_string(),
        "cowork-fleet-test-empty:1",
    ]);
    let token = format!("rt{}", std::process::id());
    let proxy_dir = dirs.work().join("runs/smoke/local_x/proxy");
    std::fs::create_dir_all(&proxy_dir).expect("creating the proxy dir");
    let mount = format!("{}:/proxy", proxy_dir.display());
    let proxy = format!("cowork-proxy-{token}");
    // Another job's proxy on the same engine: it mounts a dir outside this job's work dir.
    let other = format!("cowork-proxy-{token}other");
    let other_mount = format!("{}:/proxy", dirs.root.path().join("elsewhere").display());
    docker(&[
        "create",
        "--name",
        &proxy,
        "-v",
        &mount,
        "cowork-fleet-test-empty:1",
        "/none",
    ]);
    docker(&[
        "create",
        "--name",
        &other,
        "-v",
        &other_mount,
        "cowork-fleet-test-empty:1",
        "/none",
    ]);
    let networks = [format!("cowork-int-{token}"), format!("cowork-out-{token}")];
    for network in &networks {
        docker(&["network", "create", network]);
    }

    let executor = strict_executor(None, 0, Duration::from_secs(30));
    let mut job = job(
        JobCommand::Run,
        "scenarios/smoke.yaml",
        ExecutorKind::Harness,
    );
    job.tier = Tier::Container;
    // Without a sidecar the double fails as on a host whose Docker build failed; the sweep
    // runs after every job all the same.
    let output = executor
        .execute(&dirs.context(job), CancellationToken::new())
        .await;
    let log = String::from_utf8_lossy(&artifact_bytes(&output, "harness.stderr.log")).into_owned();
    let other_left = docker_has("container", &other);
    docker(&["rm", "-f", &other]);
    assert!(!docker_has("container", &proxy), "{proxy} is left\n{log}");
    for network in &networks {
        assert!(!docker_has("network", network), "{network} is left\n{log}");
    }
    assert!(other_left, "another job's container was removed\n{log}");
    assert!(
        log.contains(&format!(
            "removed what the harness left in Docker: container {proxy}, network {}, network {}",
            networks[0], networks[1]
        )),
        "{log}"
    );
}
