//! What `cowork submit --watch` and `cowork status` tell a user of a fleet: the live page's
//! address, early; why a failed batch's runs failed and which job shows it; and, on Ctrl-C,
//! that the batch keeps running and how to follow or cancel it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use cowork_testkit::wait_until;

use crate::fleet::Fleet;
use crate::support::{Sandbox, copy_dir, fixture};

/// Generous: the machine is shared; only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_names_its_live_page_why_runs_failed_and_what_ctrl_c_leaves_running() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container,replay", "2");
    let sandbox = Sandbox::empty();
    copy_dir(&fixture("routing"), sandbox.path());
    sandbox.write("never.yaml", "rules:\n  - pass_rate: 0\n");
    let url = fleet.coordinator_url();

    // A batch whose runs all fail: the summary says why and names one job and the command
    // that fetches its files.
    let failed = fleet.submit_until_code(
        sandbox.path(),
        &[
            "scenarios/in-container.yaml",
            "--repeat",
            "2",
            "--executor",
            "sim",
            "--sim-profile",
            "never.yaml",
        ],
        1,
    );
    failed
        .expect_stderr("live page: ")
        .expect_stderr("/live.html")
        .expect_stderr("why runs failed (most frequent first):")
        .expect_stderr("2 runs: [result]")
        .expect_stderr("look in job f0/r0")
        .expect_stderr(&format!("--coordinator {url} --out DIR"));

    // A batch that waits on a tier no worker serves; Ctrl-C stops the watch, not the batch.
    let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut command);
    let mut child = command
        .args(["submit", "scenarios", "--executor", "sim", "--watch"])
        .args(["--coordinator", &url])
        .current_dir(sandbox.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting cowork submit --watch");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    let mut said: Vec<String> = Vec::new();
    let mut line_with = |needle: &str| {
        wait_until(format!("stderr says {needle:?}"))
            .within(PATIENCE)
            .try_receive(&lines, |line| {
                said.push(line.clone());
                line.contains(needle).then_some(line)
            })
            .unwrap_or_else(|timed_out| panic!("{timed_out}\n{}", said.join("\n")))
    };
    let live = line_with("live page: ");
    assert!(
        live.contains(&format!("{url}/v1/batches/")) && live.contains("/live.html"),
        "{live}"
    );
    assert!(
        live.contains("?token="),
        "the page needs the API token: {live}"
    );
    let batch = live
        .split("/v1/batches/")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("the live page names the batch")
        .to_owned();
    line_with("waiting: no live worker serves tier microvm");
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success());
    let note = line_with("stopped watching");
    assert!(
        note.contains(&format!("batch {batch} keeps running on the fleet"))
            && note.contains(&format!("`cowork watch {batch} --coordinator {url}`"))
            && note.contains(&format!("`cowork cancel {batch} --coordinator {url}`")),
        "{note}"
    );
    let ended = wait_until("cowork submit --watch ended")
        .within(PATIENCE)
        .every(Duration::from_millis(20))
        .try_poll(|| child.try_wait().expect("waiting for cowork"))
        .unwrap_or_else(|timed_out| {
            let _ = child.kill();
            panic!("{timed_out}")
        });
    assert_eq!(ended.code(), Some(130), "interrupted: exit 130");

    // The batch still runs, and `cowork status` names its live page too.
    let status = fleet.cowork(sandbox.path(), &["status", &batch]);
    status.expect_code(0);
    assert!(
        status.stdout.contains("state    running")
            && status
                .stdout
                .contains(&format!("live     {url}/v1/batches/{batch}/live.html")),
        "{}",
        status.context()
    );
}
