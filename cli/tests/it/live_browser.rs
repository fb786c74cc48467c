//! A real browser on the live page: headless Chromium, driven over the DevTools protocol
//! ([`crate::cdp`]), opens the live page of a running batch — on a loopback fleet (real
//! nats-server, s3s-fs, coordinator and two workers as processes) and under `cowork run --ui`
//! — and the test judges what the RENDERED page shows: cells filling in while the batch runs,
//! the state after Pause, Resume and Cancel (clicked with the mouse, the cancel through its
//! confirmation). That a pause stops new starts is checked in the batch's events, not by
//! timing; a resumed batch must end with the rollup of an undisturbed run, byte for byte.
//! Screenshots at 1,400 and 800 px go to `$CARGO_TARGET_TMPDIR/test-output/browser/`, and the
//! page must not overflow sideways at 800 px.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use cowork_schema::BatchId;
use cowork_schema::event::{JobEvent, JobEventKind};
use serde_json::Value;

use crate::browser::output_dir;
use crate::cdp::Browser;
use crate::faults::{
    batch_args, fault_fleet, finish_and_check, profile_file, reference_rollup, submit, submit_of,
};
use crate::fleet::{Fleet, TOKEN};
use crate::report::http_get;
use crate::support::{only_batch_dir, read_bytes, workspace_root};

/// Run length of the batches' sim jobs, in ms (real time): 200 jobs on 8 slots run for about
/// 25 s, long enough to be watched, paused and cancelled mid-way.
const RUN_MS: u64 = 1000;
/// Run length of the batch that is cancelled: long enough that it is still running then.
const LONG_RUN_MS: u64 = 2000;

/// The sum of the finished runs the heatmap's cells show (`passed/finished`, `·` for none).
const CELLS_FINISHED: &str = "[...document.querySelectorAll('#heatmap .cell')]\
    .map((td) => td.textContent.includes('/') ? Number(td.textContent.split('/')[1]) : 0)\
    .reduce((a, b) => a + b, 0)";

fn started(events: &[JobEvent]) -> usize {
    events
        .iter()
        .filter(|event| matches!(event.event, JobEventKind::Started))
        .count()
}

/// The text of the element `id` as a number.
fn number_of(id: &str) -> String {
    format!("Number(document.getElementById('{id}').textContent)")
}

/// Screenshots at 1,400 and 800 px, and no sideways overflow at 800.
async fn screenshots(browser: &mut Browser, name: &str) {
    let dir = output_dir();
    for width in [1400, 800] {
        let path = browser.screenshot(&dir, name, width).await;
        let fits = browser
            .eval("[document.documentElement.scrollWidth, innerWidth]")
            .await;
        assert!(
            fits[0].as_u64() <= fits[1].as_u64(),
            "{name} at {width} px overflows sideways: scrollWidth, innerWidth = {fits}"
        );
        assert!(
            std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) > 10_000,
            "{} is a real screenshot",
            path.display()
        );
    }
}

/// Waits until the page shows the batch running with some cells filled in and more to come;
/// returns the runs the cells show then.
async fn filling_in(browser: &mut Browser, planned: u64) -> u64 {
    let condition = format!(
        "document.body.dataset.state === 'running' && {CELLS_FINISHED} > 0 && {} < {planned}",
        number_of("p-finished")
    );
    let first = browser
        .wait_for(&condition, CELLS_FINISHED, "cells filled in while running")
        .await;
    let first = first.as_u64().expect("a count");
    // More land while it runs: the page follows them without a reload.
    let more = format!("document.body.dataset.state === 'running' && {CELLS_FINISHED} > {first}");
    browser
        .wait_for(&more, CELLS_FINISHED, "more cells filled in while running")
        .await;
    first
}

/// Clicks Pause and waits until the page shows the batch paused with nothing queued or
/// running; returns the runs finished then.
async fn pause_and_drain(browser: &mut Browser) -> u64 {
    browser.click("#pause").await;
    let drained = format!(
        "document.body.dataset.state === 'paused' && {} === 0 && {} === 0 && !document.getElementById('resume').disabled",
        number_of("p-running"),
        number_of("p-queued")
    );
    browser
        .wait_for(&drained, &number_of("p-finished"), "paused and drained")
        .await
        .as_u64()
        .expect("a count")
}

/// Checks that nothing finished while paused, clicks Resume and waits for the verdict with
/// every one of the 200 runs shown.
async fn resume_to_the_verdict(browser: &mut Browser, finished_at_pause: u64) {
    assert_eq!(
        browser.eval(&number_of("p-finished")).await,
        finished_at_pause,
        "nothing finished while paused"
    );
    browser.click("#resume").await;
    let word = verdict(browser).await;
    assert!(matches!(word.as_str(), "PASS" | "FAIL"), "{word}");
    assert_eq!(browser.eval(CELLS_FINISHED).await, 200, "every run shown");
}

/// The verdict the page shows once the batch is decided (`PASS`, `FAIL`, `CANCELLED`).
async fn verdict(browser: &mut Browser) -> String {
    browser
        .wait_for(
            "!document.getElementById('verdict').hidden && document.getElementById('verdict').dataset.verdict",
            "document.getElementById('verdict').dataset.verdict",
            "the verdict",
        )
        .await
        .as_str()
        .expect("a verdict word")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_page_of_a_fleet_batch_fills_in_pauses_resumes_to_the_undisturbed_rollup_and_cancels()
 {
    let fleet = fault_fleet(&[], &[]);
    let mut browser = Browser::launch().await;
    let batch = submit(&fleet, RUN_MS);
    browser.open(&page_url(&fleet, &batch)).await;
    filling_in(&mut browser, 200).await;

    // A cell's strip: its runs, each finished one linking its stored result.
    browser.click("#heatmap .cell").await;
    let strip = browser
        .wait_for(
            "document.querySelectorAll('#strip .run').length === 50",
            "[...document.querySelectorAll('#strip a.run')].map((a) => a.getAttribute('href'))",
            "the strip of the first cell",
        )
        .await;
    let first_link = strip[0].as_str().expect("a finished run links its result");
    let (status, _, _) = http_get(fleet.api_port, first_link, None);
    assert_eq!(status, 200, "{first_link}");

    let finished_at_pause = pause_and_drain(&mut browser).await;
    assert!(finished_at_pause < 200, "paused mid-batch");
    let at_pause = fleet.events(&batch).await;
    // Time passes while paused (the screenshots); then the events since the pause are read.
    screenshots(&mut browser, "live-fleet-paused").await;
    let before_resume = fleet.events(&batch).await;
    assert_eq!(
        started(&before_resume[at_pause.len()..]),
        0,
        "no job started after the pause took effect"
    );
    resume_to_the_verdict(&mut browser, finished_at_pause).await;
    let changes = browser
        .eval("document.getElementById('changes').innerText")
        .await;
    let changes = changes.as_str().unwrap_or_default();
    assert!(
        changes.contains("live page · dispatch: running → paused")
            && changes.contains("live page · dispatch: paused → running"),
        "{changes}"
    );
    let report = browser
        .eval("document.getElementById('report-link').getAttribute('href')")
        .await;
    let report = report.as_str().expect("the verdict links the report");
    let (status, _, page) = http_get(fleet.api_port, report, None);
    assert!(
        status == 200 && page.contains("<html"),
        "{report}: {status}"
    );
    screenshots(&mut browser, "live-fleet-decided").await;
    // 0 lost, 0 counted twice, the rollup byte-identical to an undisturbed run's.
    finish_and_check(&fleet, &batch, RUN_MS).await;

    // A second batch, cancelled from its page through the confirmation.
    let second = submit_of(&fleet, 50, LONG_RUN_MS);
    browser.open(&page_url(&fleet, &second)).await;
    filling_in(&mut browser, 200).await;
    browser.click("#cancel").await;
    let asked = browser
        .wait_for(
            "!document.getElementById('confirm').hidden",
            "document.getElementById('confirm-text').textContent",
            "the confirmation",
        )
        .await;
    assert!(
        asked.as_str().is_some_and(|text| text.contains("Cancel")),
        "{asked}"
    );
    screenshots(&mut browser, "live-fleet-confirm-cancel").await;
    browser.click("#confirm-yes").await;
    assert_eq!(verdict(&mut browser).await, "CANCELLED");
    let (status, _, body) = http_get(
        fleet.api_port,
        &format!("/v1/batches/{second}"),
        Some(TOKEN),
    );
    assert_eq!(status, 200, "{body}");
    let status: Value = serde_json::from_str(&body).expect("status json");
    assert_eq!(status["record"]["state"], "cancelled", "{status}");
}

fn page_url(fleet: &Fleet, batch: &BatchId) -> String {
    format!(
        "{}/v1/batches/{batch}/live.html?token={TOKEN}",
        fleet.coordinator_url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cowork_run_ui_serves_the_live_page_whose_pause_and_resume_end_with_the_undisturbed_rollup()
{
    let mut browser = Browser::launch().await;
    let store = tempfile::tempdir().expect("temp dir");
    let (mut child, url, rest) = start_run_ui(store.path());
    // Without the token the page is refused, as the coordinator's is.
    let port: u16 = url["http://127.0.0.1:".len()..]
        .split('/')
        .next()
        .and_then(|port| port.parse().ok())
        .expect("a port");
    let path_without_token = url["http://127.0.0.1:".len()..]
        .split_once('/')
        .map(|(_, path)| format!("/{}", path.split('?').next().unwrap_or_default()))
        .expect("a path");
    assert_eq!(http_get(port, &path_without_token, None).0, 401);

    browser.open(&url).await;
    filling_in(&mut browser, 200).await;
    let finished_at_pause = pause_and_drain(&mut browser).await;
    assert!(finished_at_pause < 200, "paused mid-batch");
    screenshots(&mut browser, "live-run-ui-paused").await;
    resume_to_the_verdict(&mut browser, finished_at_pause).await;
    // Its server closes with the run: no link to a report it would no longer serve.
    assert_eq!(
        browser
            .eval("document.getElementById('report-link') === null")
            .await,
        true
    );
    screenshots(&mut browser, "live-run-ui-decided").await;

    let status = child.wait().expect("waiting for cowork");
    let rest = rest.join().unwrap_or_default();
    assert!(matches!(status.code(), Some(0 | 1)), "{status:?}\n{rest}");
    let rollup = read_bytes(&only_batch_dir(store.path()).join("rollup.json"));
    assert!(
        rollup == reference_rollup(RUN_MS),
        "the paused and resumed run's rollup is the undisturbed run's"
    );
}

/// `cowork run --ui` of the 200-job batch into `store`: the process, its page's URL (read
/// from its stderr) and a thread reading the rest of its stderr.
fn start_run_ui(
    store: &std::path::Path,
) -> (std::process::Child, String, std::thread::JoinHandle<String>) {
    let mut args = vec!["run".to_owned()];
    args.extend(batch_args(&profile_file(RUN_MS, 1.0), 50));
    args.extend(
        [
            "--store",
            &store.display().to_string(),
            "--slots",
            "8",
            "--quiet",
            "--ui",
        ]
        .map(str::to_owned),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_cowork"))
        .args(&args)
        .current_dir(workspace_root())
        .env_remove("COWORK_STORE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting cowork run --ui");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut said = Vec::new();
    let url = loop {
        let mut line = String::new();
        let read = stderr
            .read_line(&mut line)
            .expect("reading cowork's stderr");
        assert!(read > 0, "cowork ended without a live page: {said:?}");
        said.push(line.clone());
        if let Some(url) = line.trim().strip_prefix("live page: ") {
            break url.to_owned();
        }
    };
    assert!(
        url.starts_with("http://127.0.0.1:") && url.contains("/live.html?token="),
        "{url}"
    );
    // Keeps reading, so cowork never blocks on a full pipe.
    let rest = std::thread::spawn(move || {
        let mut rest = said.concat();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        rest
    });
    (child, url, rest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cowork_run_ui_cancel_from_the_page_ends_the_run_as_the_first_ctrl_c_does() {
    let mut browser = Browser::launch().await;
    let store = tempfile::tempdir().expect("temp dir");
    let (mut child, url, rest) = start_run_ui(store.path());
    browser.open(&url).await;
    filling_in(&mut browser, 200).await;
    browser.click("#cancel").await;
    browser
        .wait_for(
            "!document.getElementById('confirm').hidden",
            "true",
            "the confirmation",
        )
        .await;
    browser.click("#confirm-yes").await;
    assert_eq!(verdict(&mut browser).await, "CANCELLED");
    let status = child.wait().expect("waiting for cowork");
    let said = rest.join().unwrap_or_default();
    assert_eq!(status.code(), Some(130), "{said}");
    assert!(
        said.contains("cancelled from its live page") && said.contains("`cowork resume "),
        "{said}"
    );
}
