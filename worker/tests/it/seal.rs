//! What reaches the store from a harness job, against the strict double: a canary credential
//! the double writes where the real CLI leaves values unscrubbed (its stdout envelope, its
//! stderr, `timeline.jsonl`, `mounts.json`, `work/`) is in no artifact, and a diagnostic file
//! past the upload limit is cut with a note while the envelope is not.

use cowork_schema::batch::ExecutorKind;
use cowork_schema::job::{JobCommand, Tier};
use cowork_worker::executor::{ExecOutput, Executor, HarnessConfig, HarnessExecutor};
use tokio_util::sync::CancellationToken;

use crate::support::{JobDirs, artifact_bytes, artifact_names, base_extra_env, fixtures_dir, job};

const CANARY: &str = "sk-ant-canary-5f0c9d2e7a41b8";

/// A container job of the double that leaks `ANTHROPIC_API_KEY` (the canary), stored with
/// `upload_limit_bytes`.
async fn leaking_job(upload_limit_bytes: usize) -> ExecOutput {
    let dirs = JobDirs::new("unused");
    std::fs::write(
        dirs.bundle().join("scenarios/smoke.yaml"),
        "name: smoke\nfidelity: container\nsession: (inline)\nprompt: hi\n",
    )
    .expect("writing the scenario");
    let mut extra_env = base_extra_env();
    extra_env.push(("ANTHROPIC_API_KEY".to_owned(), CANARY.to_owned()));
    extra_env.push((
        "STRICT_HARNESS_LEAK".to_owned(),
        "ANTHROPIC_API_KEY".to_owned(),
    ));
    let executor = HarnessExecutor::new(HarnessConfig {
        program: fixtures_dir().join("strict-harness"),
        passthrough_env: vec!["HOME".to_owned()],
        extra_env,
        upload_limit_bytes,
        ..HarnessConfig::default()
    });
    let mut job = job(
        JobCommand::Run,
        "scenarios/smoke.yaml",
        ExecutorKind::Harness,
    );
    job.tier = Tier::Container;
    executor
        .execute(&dirs.context(job), CancellationToken::new())
        .await
}

#[tokio::test]
async fn a_canary_in_the_envelope_stderr_and_run_dir_files_is_in_no_artifact() {
    let output = leaking_job(1 << 20).await;
    let names: Vec<String> = artifact_names(&output)
        .into_iter()
        .map(str::to_owned)
        .collect();
    for expected in [
        "envelope.json",
        "harness.stderr.log",
        "run/timeline.jsonl",
        "run/mounts.json",
        "run/work/outputs/leak.txt",
    ] {
        assert!(
            names.iter().any(|name| name == expected),
            "{expected} not in {names:?}"
        );
        let text = String::from_utf8_lossy(&artifact_bytes(&output, expected)).into_owned();
        assert!(
            text.contains("[REDACTED]"),
            "{expected} was not scrubbed: {text}"
        );
    }
    let encoded = "c2stYW50LWNhbmFyeS01ZjBjOWQyZTdhNDFiOA==";
    for name in &names {
        let text = String::from_utf8_lossy(&artifact_bytes(&output, name)).into_owned();
        assert!(
            !text.contains("canary") && !text.contains(encoded),
            "{name} holds the canary: {text}"
        );
    }
}

#[tokio::test]
async fn a_file_past_the_upload_limit_is_cut_with_a_note_and_the_envelope_is_whole() {
    let output = leaking_job(256).await;
    let timeline =
        String::from_utf8_lossy(&artifact_bytes(&output, "run/timeline.jsonl")).into_owned();
    assert!(
        timeline.contains("[cowork-fleet: cut at 256 of ") && timeline.len() < 400,
        "{timeline}"
    );
    let envelope = artifact_bytes(&output, "envelope.json");
    let parsed: serde_json::Value =
        serde_json::from_slice(&envelope).expect("the envelope is never cut");
    assert_eq!(parsed["error"]["category"], "internal", "{parsed}");
}
