//! Sharing the fleet, as a user and an operator set it up: a batch's `--priority` reaches its
//! stored spec (`run`, `submit`), a bad class is refused (exit 2, nothing stored), and a
//! coordinator's `--token-policy` caps the class a token submits, names the batches it accepts
//! and stops the coordinator at start when it is wrong.

use std::path::Path;
use std::process::Command;

use cowork_schema::BatchId;
use serde_json::Value;

use crate::fleet::{Fleet, TOKEN, batch_of};
use crate::hostile::SCENARIO;
use crate::support::{Output, Sandbox, batch_dirs, only_batch_dir, read_json};

/// A plain sim batch of the fixture project's scenario.
const SIM_BATCH: &[&str] = &[SCENARIO, "--repeat", "2", "--executor", "sim"];

/// `cowork <args>` with the fleet's environment and `env` in `cwd`, to its exit; `timeout`
/// only bounds a coordinator that was not refused.
fn exit_of(fleet: &Fleet, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new("timeout");
    fleet.env(&mut command);
    command
        .envs(env.iter().copied())
        .args(["60", env!("CARGO_BIN_EXE_cowork")])
        .args(args)
        .current_dir(cwd);
    let out = command.output().expect("running cowork");
    Output::new(format!("cowork {}", args.join(" ")), cwd.to_path_buf(), out)
}

/// The keys of batches and bundles in the bucket (a worker's own probe objects come and go
/// beside them).
fn batch_keys(fleet: &Fleet) -> Vec<String> {
    let mut keys = fleet.object_keys();
    keys.retain(|key| key.starts_with("batches/") || key.starts_with("bundles/"));
    keys
}

/// `spec.flags.priority` of a stored spec.json (`None` when absent: normal).
fn stored_priority(spec: &Value) -> Option<&str> {
    spec["spec"]["flags"]["priority"].as_str()
}

#[test]
fn a_run_stores_its_priority_and_a_bad_class_is_refused() {
    let sandbox = Sandbox::with_project();
    let mut args = SIM_BATCH.to_vec();
    args.extend(["--priority", "urgent"]);
    let out = sandbox.run_batch(&args);
    assert!(out.code() <= 1, "{}", out.context());
    let spec = read_json(&only_batch_dir(&sandbox.store()).join("spec.json"));
    assert_eq!(stored_priority(&spec), Some("urgent"), "{spec}");

    // COWORK_PRIORITY sets it too.
    let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("COWORK_") {
            command.env_remove(name);
        }
    }
    let store = sandbox.store();
    let out = command
        .current_dir(sandbox.path())
        .arg("run")
        .args(SIM_BATCH)
        .arg("--store")
        .arg(&store)
        .env("COWORK_PRIORITY", "batch")
        .output()
        .expect("running cowork");
    let out = Output::new(
        "COWORK_PRIORITY=batch cowork run".to_owned(),
        store.clone(),
        out,
    );
    assert!(out.code() <= 1, "{}", out.context());
    let batches = batch_dirs(&store);
    let priorities: Vec<Option<String>> = batches
        .iter()
        .map(|dir| stored_priority(&read_json(&dir.join("spec.json"))).map(str::to_owned))
        .collect();
    assert!(
        priorities.contains(&Some("batch".to_owned())),
        "{priorities:?}"
    );

    // A class that is none of the three: exit 2 naming them, nothing run or stored.
    let mut args = SIM_BATCH.to_vec();
    args.extend(["--priority", "high"]);
    sandbox
        .run_batch(&args)
        .expect_code(2)
        .expect_stderr("--priority: must be urgent, normal or batch, got \"high\"");
    let eval = crate::support::cowork(
        sandbox.path(),
        &[
            "eval",
            "--a",
            "skills/v1/report",
            "--b",
            "skills/v2/report",
            SCENARIO,
            "--executor",
            "sim",
            "--priority",
            "asap",
            "--store",
            &store.display().to_string(),
        ],
    );
    eval.expect_code(2)
        .expect_stderr("--priority: must be urgent, normal or batch, got \"asap\"");
    assert_eq!(
        batch_dirs(&store).len(),
        batches.len(),
        "a refused batch was stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_policy_caps_the_class_its_token_submits_and_names_its_batches() {
    let digest = cowork_fabric::sha256_hex(TOKEN.as_bytes());
    let policy = format!("ci=sha256:{digest},max-priority=normal,max-slots=4");
    let mut fleet = Fleet::start_with_env(&[("COWORK_TOKEN_POLICIES", &policy)]);
    fleet.spawn_worker("w0", "container", "2");
    let sandbox = Sandbox::with_project();

    // Above the token's class: refused with the class to use, exit 2, nothing stored.
    let before = batch_keys(&fleet);
    let mut urgent = vec!["submit"];
    urgent.extend(SIM_BATCH);
    urgent.extend(["--priority", "urgent"]);
    let out = fleet.cowork(sandbox.path(), &urgent);
    out.expect_code(2).expect_stderr(
        "priority urgent is above what this token may use (normal); submit with --priority \
         normal or ask the fleet's operator",
    );
    assert_eq!(
        batch_keys(&fleet),
        before,
        "a refused submit stored something"
    );

    // At the token's class: accepted under the policy's name.
    let mut normal = SIM_BATCH.to_vec();
    normal.extend(["--priority", "normal"]);
    let out = fleet.submit(sandbox.path(), &normal);
    assert!(out.code() <= 1, "{}\n{}", out.context(), fleet.logs());
    let batch = batch_of(&out.envelope());
    let status: Value =
        serde_json::from_str(&fleet.api_get(&format!("/v1/batches/{batch}"))).expect("JSON");
    assert_eq!(status["record"]["tokenName"], "ci", "{status}");

    // Below it: accepted, its class in the stored spec.
    let mut low = SIM_BATCH.to_vec();
    low.extend(["--priority", "batch"]);
    let batch: BatchId = fleet.submit_detached(sandbox.path(), &low);
    let spec: Value = serde_json::from_slice(&fleet.object(&format!("batches/{batch}/spec.json")))
        .expect("spec.json is JSON");
    assert_eq!(stored_priority(&spec), Some("batch"), "{spec}");
    let status: Value =
        serde_json::from_str(&fleet.api_get(&format!("/v1/batches/{batch}"))).expect("JSON");
    assert_eq!(status["record"]["tokenName"], "ci", "{status}");

    // A policy that binds no configured token, or cannot be read, stops a coordinator at start.
    let other = cowork_fabric::sha256_hex(b"a token nobody configured");
    for (policy, says) in [
        (format!("ci=sha256:{other}"), "--token-policy ci: sha256:"),
        (
            format!("ci=sha256:{digest},max-priority=highest"),
            "max-priority must be urgent, normal or batch",
        ),
        ("ci=deadbeef".to_owned(), "is not sha256:<64 hex digits>"),
    ] {
        let out = exit_of(
            &fleet,
            sandbox.path(),
            &[
                "coordinator",
                "--listen",
                "127.0.0.1:0",
                "--scratch-dir",
                "scratch",
            ],
            &[("COWORK_TOKEN_POLICIES", &policy)],
        );
        out.expect_code(2).expect_stderr(says);
        if out.stderr.contains("listening") {
            out.fail("a coordinator with a bad token policy listened");
        }
    }
}
