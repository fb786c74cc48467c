//! `record` jobs against the strict double: the CLI reports nearly every failure of a
//! recording as `usage`, exit 1; the executor classifies it by what it says, and keeps the
//! result of a run that was paid for.

use std::os::unix::fs::PermissionsExt;

use cowork_schema::batch::ExecutorKind;
use cowork_schema::event::InfraClass;
use cowork_schema::job::{JobCommand, Tier};
use cowork_worker::executor::{Classified, ExecOutput, Executor, HarnessConfig, HarnessExecutor};
use tokio_util::sync::CancellationToken;

use crate::support::{
    JobDirs, artifact_bytes, artifact_json, artifact_names, base_extra_env, child_path,
    fixtures_dir, job,
};

/// A `record` job of a scenario at `fidelity`, with a stand-in `claude` on the double's PATH
/// and `more_env` set for the double.
async fn record_job(fidelity: &str, more_env: &[(&str, &str)]) -> ExecOutput {
    harness_job(JobCommand::Record, fidelity, more_env).await
}

/// A `command` job of a scenario at `fidelity`, as [`record_job`] describes.
async fn harness_job(command: JobCommand, fidelity: &str, more_env: &[(&str, &str)]) -> ExecOutput {
    let dirs = JobDirs::new("unused");
    std::fs::write(
        dirs.bundle().join("scenarios/smoke.yaml"),
        format!("name: smoke\nfidelity: {fidelity}\nsession: (inline)\nprompt: hi\n"),
    )
    .expect("writing the scenario");
    // The double only looks for `claude` on PATH; with no recording for the prompt, the run
    // ends in an error result, a failing verdict.
    let bin = dirs.root.path().join("bin");
    std::fs::create_dir(&bin).expect("creating bin");
    std::fs::write(bin.join("claude"), "#!/bin/sh\nexit 1\n").expect("writing claude");
    std::fs::set_permissions(bin.join("claude"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod claude");
    let mut extra_env = base_extra_env();
    extra_env.retain(|(name, _)| name != "PATH");
    extra_env.push((
        "PATH".to_owned(),
        format!("{}:{}", bin.display(), child_path()),
    ));
    extra_env.push((
        "ANTHROPIC_API_KEY".to_owned(),
        "sk-ant-test-key-0000".to_owned(),
    ));
    extra_env.extend(
        more_env
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned())),
    );
    let executor = HarnessExecutor::new(HarnessConfig {
        program: fixtures_dir().join("strict-harness"),
        passthrough_env: vec!["HOME".to_owned()],
        extra_env,
        ..HarnessConfig::default()
    });
    let mut job = job(command, "scenarios/smoke.yaml", ExecutorKind::Harness);
    job.tier = if fidelity == "protocol" {
        Tier::Protocol
    } else {
        Tier::Container
    };
    executor
        .execute(&dirs.context(job), CancellationToken::new())
        .await
}

#[tokio::test]
async fn a_recording_refused_for_its_failing_verdict_is_a_judged_sample_with_its_result() {
    let output = record_job("protocol", &[]).await;
    assert_eq!(output.exit_code, Some(1));
    match &output.classified {
        Classified::Completed { result } => {
            assert_eq!(result["result"], "error", "{result}");
            assert_eq!(result["verdict"]["pass"], false, "{result}");
        }
        other => panic!("expected the paid run's result, got {other:?}"),
    }
    let stored = artifact_json(&output, "result.json");
    assert_eq!(stored["result"], "error", "{stored}");
}

/// The job's sandbox did not start (the double has no Docker daemon, as a worker whose engine
/// is down): handed back for another worker, nothing spent.
fn assert_sandbox_start_failure(output: &ExecOutput) {
    match &output.classified {
        Classified::Infra {
            class: InfraClass::SandboxStart,
            message,
        } => assert!(message.contains("cowork-egress-proxy"), "{message}"),
        other => panic!("expected a sandbox start failure, got {other:?}"),
    }
    assert!(!output.spawned, "{output:#?}");
}

#[tokio::test]
async fn a_recording_that_failed_in_docker_is_a_sandbox_start_failure() {
    let output = record_job("container", &[]).await;
    assert_eq!(output.exit_code, Some(1));
    assert_sandbox_start_failure(&output);
}

#[tokio::test]
async fn a_run_that_failed_in_docker_is_a_sandbox_start_failure() {
    let output = harness_job(JobCommand::Run, "container", &[]).await;
    assert_eq!(output.exit_code, Some(2));
    assert_sandbox_start_failure(&output);
}

#[tokio::test]
async fn a_quarantined_recording_is_named_in_the_log_and_never_stored() {
    let output = record_job("protocol", &[("STRICT_HARNESS_HOST_INVENTORY", "1")]).await;
    assert_eq!(output.exit_code, Some(1));
    let names = artifact_names(&output);
    assert!(
        !names
            .iter()
            .any(|name| name.contains("quarantine") || name.ends_with(".cassette.json")),
        "{names:?}"
    );
    let log = String::from_utf8_lossy(&artifact_bytes(&output, "harness.stderr.log")).into_owned();
    assert!(
        log.contains("[cowork-fleet: the harness quarantined smoke-")
            && log.contains("not stored, and removed with the job's work dir]"),
        "{log}\n{names:?}\n{:?}",
        output.classified
    );
    // The paid run's result is kept all the same.
    assert!(names.contains(&"partial-result.json"), "{names:?}");
}
