//! Trust boundaries, each tried as an attacker would on a loopback fleet (real nats-server, s3s-fs, coordinator and worker processes):
//!
//! - a job whose `scenarioFile` names a host file reads nothing outside the bundle on
//!   the sim executor, as on the harness executor;
//! - control and bidi characters in a scenario name, a spec's `targetDisplay` or a
//!   fake worker heartbeat never reach a terminal or a Markdown listing raw;
//! - the NATS password of a `nats://user:password@…` URL is in no log line, even at
//!   `--log debug`;
//! - a read-only token reads everything the CLI and the pages read and changes nothing.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cowork_fabric::JobQueue as _;
use cowork_fabric::nats::NatsConfig;
use cowork_schema::BatchId;
use cowork_schema::event::JobEventKind;
use cowork_testkit::{NatsOptions, NatsServer, S3Server, wait_until};

use crate::fleet::{Fleet, TOKEN, batch_of};
use crate::hostile::{Api, SCENARIO, spec_for, valid_bundle};
use crate::support::{Output, Sandbox, forged_job};

/// A plain sim batch of the fixture project's scenario.
const SIM_BATCH: &[&str] = &[SCENARIO, "--repeat", "2", "--executor", "sim"];

/// `cowork <args…>` on `fleet` with `env` on top of its environment.
fn cowork_with(fleet: &Fleet, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    fleet.cowork_with_env(cwd, args, env)
}

/// Panics when `text` holds a control character other than a line break, or a bidi control.
fn expect_no_raw_controls(what: &str, text: &str) {
    let raw = text.chars().find(|&c| {
        c != '\n'
            && (c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
    });
    if let Some(c) = raw {
        panic!("{what} holds the raw character {c:?}:\n{text:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// The sim executor confines the scenario path to the bundle
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sim_job_naming_a_host_file_reads_nothing_outside_the_bundle() {
    let mut fleet = Fleet::start();
    // A host file shaped like a scenario, so the old simulator copied its assertion into the
    // stored result.
    let canary = "host-secret-7d1e9a";
    let host_file = fleet.dir.path().join("host-scenario.yaml");
    std::fs::write(
        &host_file,
        format!("prompt: hi\nassert:\n  - contains: {canary}\n"),
    )
    .expect("writing the host file");

    // A real batch on the container tier, which no worker serves yet, so it stays running.
    let sandbox = Sandbox::with_project();
    let batch = fleet.submit_detached(sandbox.path(), SIM_BATCH);
    // The batch's bundle, the only one in the store.
    let bundle_sha256 = fleet.only_bundle_sha256();

    // The forged job: the batch's own bundle and no flags, on a tier of its own, naming the
    // host file (absolute) as its scenario; a second one climbs out with `..`.
    let fabric = cowork_fabric::nats::connect(&NatsConfig::new(&fleet.nats_url))
        .await
        .expect("connecting to nats");
    let host_path = host_file.to_str().expect("a UTF-8 temp path").to_owned();
    let forged: Vec<(u32, String)> = vec![
        (90, host_path),
        (
            91,
            "../../../../../../../..".to_owned() + &host_file.display().to_string(),
        ),
    ];
    for (repeat, scenario_file) in &forged {
        let job = forged_job(&batch)
            .repeat_index(*repeat)
            .scenario_file(scenario_file)
            .bundle_sha256(&bundle_sha256)
            .build();
        fabric
            .queue
            .publish(&job)
            .await
            .expect("publishing the forged job");
    }
    fleet.spawn_worker("w0", "hostloop", "1");

    // Wait for both forged jobs to finish (a bound, not a sleep: the wait ends as soon as
    // they have).
    let finished = wait_until("the forged jobs finished")
        .within(Duration::from_secs(60))
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll_async(async || {
            let events = fleet.events(&batch).await;
            let finished: Vec<String> = events
                .iter()
                .filter(|event| {
                    forged
                        .iter()
                        .any(|(repeat, _)| event.job_id.as_str() == format!("{batch}/f0/r{repeat}"))
                })
                .filter(|event| matches!(event.event, JobEventKind::Finished { .. }))
                .map(|event| serde_json::to_string(event).expect("an event serializes"))
                .collect();
            if finished.len() >= forged.len() {
                Ok(finished)
            } else {
                Err(format!("events: {events:?}"))
            }
        })
        .await;
    for event in &finished {
        assert!(
            event.contains("must be a relative path inside the bundle"),
            "a forged job was not refused as a path outside the bundle: {event}"
        );
    }
    for key in fleet.object_keys() {
        let bytes = fleet.object(&key);
        assert!(
            !String::from_utf8_lossy(&bytes).contains(canary),
            "{key} holds the host file's content"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Control characters reach no terminal and no Markdown raw
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fake_worker_heartbeat_with_control_characters_forges_no_row() {
    let fleet = Fleet::start();
    let fabric = cowork_fabric::nats::connect(&NatsConfig::new(&fleet.nats_url))
        .await
        .expect("connecting to nats");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as u64;
    // An id that clears the screen, sets the window title and starts a forged second row;
    // the harness version reverses what follows it.
    let evil_id = "w-evil\u{1b}[2J\u{1b}]0;pwned\u{7}\nforged-row  container  99";
    let info: cowork_schema::registry::WorkerInfo = serde_json::from_value(serde_json::json!({
        "protocol": cowork_schema::job::PROTOCOL_VERSION,
        "workerId": evil_id,
        "tiers": ["container"],
        "slots": 1,
        "busy": 0,
        "executor": "sim",
        "harnessVersion": "2.0.0\u{202e}lmth.exe",
        "os": "linux\r",
        "arch": "x86_64",
        "hostname": "h\u{9b}31m",
        "jobsFinished": 0,
        "startedAtMs": now_ms,
        "heartbeatAtMs": now_ms,
        "heartbeatEveryMs": 600_000,
    }))
    .expect("a worker info");
    // Written as any NATS client can, under a plain key: the registry's own client would
    // refuse the id, an attacker's does not ask it.
    let bucket = fabric
        .jetstream
        .get_key_value(NatsConfig::new(&fleet.nats_url).workers_bucket)
        .await
        .expect("the workers bucket");
    bucket
        .put(
            "w-evil",
            serde_json::to_vec(&info)
                .expect("a heartbeat serializes")
                .into(),
        )
        .await
        .expect("writing the fake heartbeat");

    let sandbox = Sandbox::empty();
    wait_until("the fake worker is listed")
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(100))
        .poll_async(async || {
            let json = cowork_with(
                &fleet,
                sandbox.path(),
                &["workers", "--output-format", "json"],
                &[],
            );
            if json.stdout.contains("forged-row") {
                Ok(())
            } else {
                Err(json.context())
            }
        })
        .await;
    let out = cowork_with(&fleet, sandbox.path(), &["workers"], &[]);
    assert_eq!(out.code(), 0, "{}", out.context());
    expect_no_raw_controls("`cowork workers` stdout", &out.stdout);
    expect_no_raw_controls("`cowork workers` stderr", &out.stderr);
    assert!(
        !out.stdout
            .lines()
            .any(|line| line.starts_with("forged-row")),
        "the heartbeat forged a row:\n{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("w-evil\\x1b[2J"),
        "the id is shown with its escapes:\n{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_a_scenario_name_or_target_display_are_refused_at_intake() {
    let fleet = Fleet::start();
    // The coordinator: a spec whose targetDisplay would set the window title.
    let api = Api::new(&fleet);
    let bundle = valid_bundle();
    let mut spec = spec_for(&bundle);
    spec.target_display = "scenarios/report.yaml\u{1b}]0;pwned\u{7}".to_owned();
    let answer = api.submit(&spec, bundle).await;
    assert_eq!(answer.status, 400, "{}", answer.text);
    assert!(
        answer
            .problems
            .iter()
            .any(|problem| problem.starts_with("spec.targetDisplay: ") && problem.contains("\\x1b")),
        "{}",
        answer.text
    );

    // `cowork run` and `cowork submit` alike: a scenario named with ESC and a newline is a
    // usage error naming the file and the key, and nothing is run.
    let sandbox = Sandbox::with_project();
    sandbox.append(SCENARIO, "name: \"ok\\e[2J\\nFORGED PASS\"\n");
    for out in [
        sandbox.run_batch(&[SCENARIO, "--repeat", "2", "--executor", "sim"]),
        fleet.cowork(
            sandbox.path(),
            &["submit", SCENARIO, "--repeat", "2", "--executor", "sim"],
        ),
    ] {
        out.expect_code(2)
            .expect_stderr("report.yaml")
            .expect_stderr("name");
        expect_no_raw_controls("the refusal", &out.stderr);
    }
}

#[test]
fn markup_and_bidi_controls_in_the_markdown_batch_list_are_escaped() {
    // A target directory named with HTML and a right-to-left override: `cowork batches
    // --format markdown` shows the name as text, never as markup or reordered.
    let sandbox = Sandbox::with_project();
    let dir = "evil<script>alert(1)<\u{202e}fdp.exe";
    sandbox.write(&format!("{dir}/report.yaml"), &sandbox.read(SCENARIO));
    let run = sandbox.run_batch(&[dir, "--repeat", "2", "--executor", "sim"]);
    assert!(run.code() <= 1, "{}", run.context());
    let store = sandbox.store();
    let out = crate::support::cowork(
        sandbox.path(),
        &[
            "batches",
            "--format",
            "markdown",
            "--store",
            store.to_str().expect("a UTF-8 store path"),
        ],
    );
    assert_eq!(out.code(), 0, "{}", out.context());
    expect_no_raw_controls("the Markdown batch list", &out.stdout);
    assert!(
        !out.stdout.contains("<script>"),
        "raw markup in the Markdown batch list:\n{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("evil&lt;script&gt;"),
        "the target is not listed as text:\n{}",
        out.stdout
    );
}

// ---------------------------------------------------------------------------------------------
// The NATS password of the URL is in no log line
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nats_password_of_the_url_is_in_no_log_line_at_debug() {
    let password = "nats-pw-canary-5b2c81";
    let nats = NatsServer::start_with(NatsOptions {
        user_password: Some(("fleet".to_owned(), password.to_owned())),
        ..NatsOptions::default()
    });
    let url = nats
        .url()
        .replacen("nats://", &format!("nats://fleet:{password}@"), 1);
    let mut fleet = Fleet::with_servers(
        nats,
        S3Server::start(),
        &[("COWORK_NATS_URL", &url), ("COWORK_LOG", "debug")],
    );
    fleet.spawn_worker("w0", "container", "1");
    let sandbox = Sandbox::with_project();
    let out = fleet.submit(sandbox.path(), SIM_BATCH);
    assert!(out.code() <= 1, "{}\n{}", out.context(), fleet.logs());
    let batch: BatchId = batch_of(&out.envelope());
    let logs = fleet.logs();
    assert!(
        logs.contains("DEBUG"),
        "the processes did not log at debug:\n{logs}"
    );
    assert!(
        !logs.contains(password),
        "the NATS password is in a log line:\n{}",
        logs.lines()
            .filter(|line| line.contains(password))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(!out.stderr.contains(password), "{}", out.context());
    assert!(
        fleet
            .object_keys()
            .iter()
            .all(|key| { !String::from_utf8_lossy(&fleet.object(key)).contains(password) }),
        "the NATS password is in a stored object of batch {batch}"
    );

    // A wrong password: the worker's refusal names the server, not the password.
    let wrong = "wrong-pw-canary-77aa01";
    let wrong_url = fleet
        .nats
        .url()
        .replacen("nats://", &format!("nats://fleet:{wrong}@"), 1);
    let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut command);
    let args = Fleet::worker_args("w-wrong", "container", "1");
    command
        .args(&args)
        .env("COWORK_NATS_URL", &wrong_url)
        .env("COWORK_LOG", "debug")
        .current_dir(fleet.dir.path());
    let refused = Output::new(
        "cowork worker with a wrong NATS password".to_owned(),
        fleet.dir.path().to_path_buf(),
        command.output().expect("running cowork worker"),
    );
    assert_ne!(refused.code(), 0, "{}", refused.context());
    refused.expect_stderr("authorization violation");
    assert!(
        !refused.stderr.contains(wrong) && !refused.stdout.contains(wrong),
        "the wrong password is printed: {}",
        refused.context()
    );
}

// ---------------------------------------------------------------------------------------------
// A read-only token
// ---------------------------------------------------------------------------------------------

/// The read-only token of the read-only tests.
const READ_TOKEN: &str = "it-read-token-91c4";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_token_reads_everything_and_changes_nothing() {
    let mut fleet = Fleet::start_with_env(&[("COWORK_API_READ_TOKEN", READ_TOKEN)]);
    fleet.spawn_worker("w0", "container", "2");
    let sandbox = Sandbox::with_project();
    let out = fleet.submit(sandbox.path(), SIM_BATCH);
    assert!(out.code() <= 1, "{}\n{}", out.context(), fleet.logs());
    let batch = batch_of(&out.envelope());
    let read = [("COWORK_API_TOKEN", READ_TOKEN)];

    // Every read the CLI makes.
    for args in [
        vec!["status", batch.as_str()],
        vec!["results", batch.as_str()],
        vec!["workers"],
        vec!["batches"],
        vec!["report", batch.as_str(), "--format", "markdown"],
    ] {
        let out = cowork_with(&fleet, sandbox.path(), &args, &read);
        assert!(
            out.code() <= 1,
            "a read-only token could not read: {}",
            out.context()
        );
    }
    // Every page and JSON route a browser or a script reads.
    let http = reqwest::Client::new();
    let base = fleet.coordinator_url();
    for path in [
        format!("/v1/batches/{batch}"),
        "/v1/batches".to_owned(),
        format!("/v1/batches/{batch}/artifacts"),
        format!("/v1/batches/{batch}/live"),
        "/v1/workers".to_owned(),
        "/v1/fabric".to_owned(),
        format!("/v1/batches/{batch}/report?format=html"),
        "/v1/ui".to_owned(),
        format!("/v1/batches/{batch}/live.html"),
    ] {
        let response = http
            .get(format!("{base}{path}"))
            .bearer_auth(READ_TOKEN)
            .send()
            .await
            .expect("a GET");
        assert_eq!(
            response.status(),
            200,
            "GET {path} with the read-only token"
        );
    }
    let page = http
        .get(format!("{base}/v1/ui?token={READ_TOKEN}"))
        .send()
        .await
        .expect("a GET");
    assert_eq!(page.status(), 200, "the batch list with ?token=");

    // Every change: 403 with a message saying the token is read-only, and the same request
    // with the full token is not refused for its token.
    for (path, body) in [
        (format!("/v1/batches/{batch}/cancel"), "{}"),
        (format!("/v1/batches/{batch}/resume"), "{}"),
        (format!("/v1/batches/{batch}/pause"), "{}"),
        (format!("/v1/batches/{batch}/resume-dispatch"), "{}"),
        (format!("/v1/batches/{batch}/adjust"), "{\"models\":{}}"),
    ] {
        for (token, read_only) in [(READ_TOKEN, true), (TOKEN, false)] {
            let response = http
                .post(format!("{base}{path}"))
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .expect("a POST");
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            if read_only {
                assert_eq!(status, 403, "POST {path} with the read-only token: {text}");
                assert!(text.contains("read-only"), "POST {path}: {text}");
            } else {
                assert!(
                    status != 401 && status != 403,
                    "POST {path} with the full token: {status} {text}"
                );
            }
        }
    }
    // The CLI says so, as a usage error, and submits nothing.
    let before = fleet.object_keys().len();
    for args in [
        vec!["cancel", batch.as_str()],
        vec!["submit", SCENARIO, "--repeat", "2", "--executor", "sim"],
    ] {
        let out = cowork_with(&fleet, sandbox.path(), &args, &read);
        out.expect_code(2).expect_stderr("read-only");
    }
    assert_eq!(
        fleet.object_keys().len(),
        before,
        "a read-only submit stored something"
    );
}
