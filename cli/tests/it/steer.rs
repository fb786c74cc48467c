//! Steering a running fleet batch: `cowork pause`, a coordinator restart while paused,
//! `cowork resume-dispatch` and `cowork adjust`, with a real nats-server, s3s-fs, coordinator
//! and workers as separate processes. The pause is followed through the batch's own live
//! stream (`/v1/batches/{id}/live/events`), never by sleeping.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use cowork_schema::BatchId;
use cowork_schema::event::{JobEvent, JobEventKind};
use cowork_testkit::wait_until;
use serde_json::Value;

use crate::faults::{
    EventFollower, fault_fleet, finish_and_check, finish_and_check_of, submit, submit_of,
};
use crate::fleet::{Fleet, TOKEN};
use crate::report::http_get;
use crate::support::workspace_root;

/// Run length of the steered batch's jobs, in ms.
const RUN_MS: u64 = 300;
/// Mean run length of the adjusted batch's jobs, in ms: long enough that 8 run at once when
/// the cap goes down.
const ADJUSTED_RUN_MS: u64 = 1000;
/// Runs per cell of the adjusted batch: 4 cells × 16 = 64 jobs.
const ADJUSTED_REPEAT: usize = 16;

/// Reads the batch's live stream until `wanted` holds for the view (a snapshot with its
/// deltas applied); returns that view.
fn live_until(fleet: &Fleet, batch: &BatchId, wanted: impl Fn(&Value) -> bool) -> Value {
    let mut stream = TcpStream::connect(("127.0.0.1", fleet.api_port)).expect("connecting");
    let request = format!(
        "GET /v1/batches/{batch}/live/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("sending");
    let mut view = Value::Null;
    for line in BufReader::new(stream).lines() {
        let line = line.expect("reading the live stream");
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let Ok(body) = serde_json::from_str::<Value>(data.trim()) else {
            continue;
        };
        if view.is_null() {
            view = body;
        } else if let Some(fields) = body.as_object() {
            for (key, value) in fields {
                if key == "cells" {
                    continue;
                }
                view[key] = value.clone();
            }
        }
        if wanted(&view) {
            return view;
        }
    }
    panic!(
        "the live stream ended before the wanted view; last: {view}\n{}",
        fleet.logs()
    );
}

fn started_events(events: &[JobEvent]) -> usize {
    events
        .iter()
        .filter(|event| matches!(event.event, JobEventKind::Started))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_restart_resume_loses_nothing_counts_and_pays_nothing_twice_with_the_undisturbed_rollup()
 {
    let mut fleet = fault_fleet(&[], &[]);
    let root = workspace_root();
    let batch = submit(&fleet, RUN_MS);
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    follower.until_finished(&fleet, 30).await;

    let out = fleet.cowork(&root, &["pause", batch.as_str(), "--by", "it"]);
    assert_eq!(out.code(), 0, "{}", out.context());
    // Paused: the queued jobs are taken back and the running ones finish.
    let drained = live_until(&fleet, &batch, |view| {
        view["dispatch"]["paused"] == true
            && view["progress"]["queued"] == 0
            && view["progress"]["running"] == 0
    });
    let finished_at_pause = drained["progress"]["finished"].as_u64().expect("finished");
    assert!(finished_at_pause < 200, "paused mid-batch: {drained}");
    let started_at_pause = started_events(&fleet.events(&batch).await);
    check_pages_of_a_paused_batch(&fleet, &batch);

    fleet.kill("coordinator");
    fleet.spawn_coordinator();
    // The restarted coordinator keeps it paused: nothing is queued, nothing starts.
    let after_restart = live_until(&fleet, &batch, |view| {
        view["dispatch"]["paused"] == true && view["progress"]["finished"] == finished_at_pause
    });
    assert_eq!(after_restart["progress"]["queued"], 0, "{after_restart}");
    assert_eq!(after_restart["state"], "paused", "{after_restart}");
    assert_eq!(
        started_events(&fleet.events(&batch).await),
        started_at_pause,
        "no job started while paused"
    );

    let out = fleet.cowork(&root, &["resume-dispatch", batch.as_str(), "--by", "it"]);
    assert_eq!(out.code(), 0, "{}", out.context());
    // 0 lost, 0 counted twice, the rollup byte-identical to an undisturbed run's.
    let fleet_key = finish_and_check(&fleet, &batch, RUN_MS).await;
    // 0 paid twice: every job ran once.
    let runs = crate::spend::runs_per_job(&fleet.events(&batch).await);
    crate::spend::assert_each_ran_once(&runs, 200);

    // The changes are in the record, with who and what.
    let (status, _, body) = http_get(fleet.api_port, &format!("/v1/batches/{batch}"), Some(TOKEN));
    assert_eq!(status, 200, "{body}");
    let record: Value = serde_json::from_str(&body).expect("status json");
    let changes: Vec<String> = record["record"]["controls"]["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|change| {
            format!(
                "{} {} {}->{}",
                change["by"], change["control"], change["old"], change["new"]
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            r#""it" "dispatch" "running"->"paused""#,
            r#""it" "dispatch" "paused"->"running""#
        ],
        "{fleet_key}"
    );

    // The report shows them too.
    let (status, _, page) = http_get(
        fleet.api_port,
        &format!("/v1/batches/{batch}/report?format=html"),
        Some(TOKEN),
    );
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("Changes of the controls")
            && page.contains("<td>it</td><td>dispatch</td><td>running</td><td>paused</td>")
            && page.contains("<td>it</td><td>dispatch</td><td>paused</td><td>running</td>"),
        "the report lists the changes"
    );

    // A decided batch, an unknown one and a negative budget: a clear error, exit 2, nothing
    // changed.
    for (args, says) in [
        (vec!["pause", batch.as_str()], "already done"),
        (
            vec!["adjust", "20990101-000000-ffffff", "--max-running", "2"],
            "not found",
        ),
        (
            vec!["adjust", batch.as_str(), "--max-budget-usd", "-1"],
            "0 or more",
        ),
        (vec!["adjust", batch.as_str()], "nothing to adjust"),
    ] {
        let out = fleet.cowork(&root, &args);
        assert_eq!(out.code(), 2, "{args:?}: {}", out.context());
        assert!(out.stderr.contains(says), "{args:?}: {}", out.context());
    }
    let (_, _, again) = http_get(fleet.api_port, &format!("/v1/batches/{batch}"), Some(TOKEN));
    let again: Value = serde_json::from_str(&again).expect("status json");
    assert_eq!(
        again["record"], record["record"],
        "refusals changed nothing"
    );
}

/// The live page, its script, the batch list and the controls' guard, on a paused batch.
fn check_pages_of_a_paused_batch(fleet: &Fleet, batch: &BatchId) {
    let port = fleet.api_port;
    let (status, head, page) = http_get(
        port,
        &format!("/v1/batches/{batch}/live.html?token={TOKEN}"),
        None,
    );
    assert_eq!(status, 200, "{page}");
    let csp = head
        .lines()
        .find_map(|line| line.strip_prefix("content-security-policy:"))
        .unwrap_or_else(|| panic!("a policy: {head}"));
    assert!(
        csp.contains("script-src 'self'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    assert!(page.contains(r#"<script src="/assets/live.js" defer></script>"#));
    assert_eq!(
        http_get(port, &format!("/v1/batches/{batch}/live.html"), None).0,
        401,
        "same auth as the other pages"
    );
    let (status, head, script) = http_get(port, "/assets/live.js", None);
    assert_eq!(status, 200);
    assert!(head.contains("text/javascript") && script.contains("EventSource"));
    let (status, _, list) = http_get(port, &format!("/v1/ui?token={TOKEN}"), None);
    assert_eq!(status, 200);
    assert!(
        list.contains(&format!("batches/{batch}/live.html?token")) && list.contains("(paused)"),
        "the batch list links the live page and says paused: {list}"
    );
    assert!(list.contains("SIMULATED"), "{list}");
    let (status, head, _) = http_get(port, &format!("/?token={TOKEN}"), None);
    assert!((300..400).contains(&status), "{head}");
    assert!(
        head.contains(&format!("location: /v1/ui?token={TOKEN}")),
        "{head}"
    );
    let (status, _, strip) = http_get(
        port,
        &format!("/v1/batches/{batch}/live/units/0"),
        Some(TOKEN),
    );
    assert_eq!(status, 200, "{strip}");
    let strip: Value = serde_json::from_str(&strip).expect("strip json");
    assert_eq!(strip["runs"].as_array().map(Vec::len), Some(50), "{strip}");
    // A control sent from another site is refused, whatever token it carries.
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connecting");
    let request = format!(
        "POST /v1/batches/{batch}/resume-dispatch HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://evil.example\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("sending");
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut stream, &mut answer).expect("reading");
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let (_, _, live) = http_get(port, &format!("/v1/batches/{batch}/live"), Some(TOKEN));
    let live: Value = serde_json::from_str(&live).expect("live json");
    assert_eq!(
        live["dispatch"]["paused"], true,
        "the refused control changed nothing"
    );
}

/// The batch's progress as its coordinator's status JSON says (what `cowork status` reads):
/// (running, queued, finished), queued being the admitted jobs neither running nor finished.
fn status_counts(fleet: &Fleet, batch: &BatchId) -> Result<(u64, u64, u64), String> {
    let (status, _, body) = http_get(fleet.api_port, &format!("/v1/batches/{batch}"), Some(TOKEN));
    if status != 200 {
        return Err(format!("{status}: {body}"));
    }
    counts_of(&serde_json::from_str(&body).map_err(|error| format!("{error}: {body}"))?)
}

fn counts_of(status: &Value) -> Result<(u64, u64, u64), String> {
    let count = |name: &str| {
        status["progress"][name]
            .as_u64()
            .ok_or_else(|| format!("no progress.{name} in {status}"))
    };
    let (admitted, running, finished) = (count("admitted")?, count("running")?, count("finished")?);
    Ok((
        running,
        admitted.saturating_sub(running + finished),
        finished,
    ))
}

/// The jobs of the batch running after each of `events` (started, not finished), in log
/// order.
fn running_after_each(events: &[JobEvent]) -> Vec<usize> {
    let mut running = BTreeSet::new();
    events
        .iter()
        .map(|event| {
            match event.event {
                JobEventKind::Started => {
                    running.insert(event.job_id.to_string());
                }
                JobEventKind::Finished { .. } => {
                    running.remove(&event.job_id.to_string());
                }
                JobEventKind::Failed { .. } => {}
            }
            running.len()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_cap_takes_back_the_queued_jobs_runs_one_at_a_time_and_keeps_the_undisturbed_rollup()
 {
    let fleet = fault_fleet(&[], &[]);
    let root = workspace_root();
    let batch = submit_of(&fleet, ADJUSTED_REPEAT, ADJUSTED_RUN_MS);
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    // Both workers' 4 slots busy: 8 jobs run, the other 56 are queued.
    loop {
        follower
            .until(&fleet, |event| matches!(event.event, JobEventKind::Started))
            .await;
        if running_after_each(&follower.seen).last() >= Some(&8) {
            break;
        }
    }

    let out = fleet.cowork(
        &root,
        &["adjust", batch.as_str(), "--max-running", "1", "--by", "it"],
    );
    assert_eq!(out.code(), 0, "{}", out.context());
    // Everything logged from here on happened after the record said 1.
    let adjusted_at = fleet.events(&batch).await.len();
    // The queued jobs are taken back and the running ones finish: at most 1 out.
    wait_until("the batch has at most 1 job running and 1 queued after the lowered cap")
        .within(Duration::from_secs(120))
        .every(Duration::from_millis(50))
        .context(|| fleet.logs())
        .poll(|| {
            let (running, queued, finished) = status_counts(&fleet, &batch)?;
            if running <= 1 && queued <= 1 {
                Ok(finished)
            } else {
                Err(format!("running {running}, queued {queued}"))
            }
        });
    let out = fleet.cowork(
        &root,
        &["status", batch.as_str(), "--output-format", "json"],
    );
    assert_eq!(out.code(), 0, "{}", out.context());
    let status: Value = serde_json::from_str(&out.stdout).expect("status json");
    let (running, queued, finished_under_cap) = counts_of(&status).expect("progress counts");
    assert!(running <= 1 && queued <= 1, "cowork status: {status}");
    assert_eq!(status["record"]["controls"]["dispatchEpoch"], 1, "{status}");
    // Three more jobs run under the cap of 1.
    wait_until("three more jobs finished under the cap of 1")
        .within(Duration::from_secs(120))
        .every(Duration::from_millis(50))
        .context(|| fleet.logs())
        .poll(|| {
            let (_, _, finished) = status_counts(&fleet, &batch)?;
            if finished >= finished_under_cap + 3 {
                Ok(())
            } else {
                Err(format!("{finished} finished"))
            }
        });
    let before_raise = fleet.events(&batch).await;
    let out = fleet.cowork(
        &root,
        &["adjust", batch.as_str(), "--max-running", "8", "--by", "it"],
    );
    assert_eq!(out.code(), 0, "{}", out.context());

    // From the log: once the jobs running at the adjust were down to 1, no two of the batch's
    // jobs ran at once until the cap went up.
    let running = running_after_each(&before_raise);
    let taken_back = (adjusted_at..running.len())
        .find(|at| running[*at] <= 1)
        .unwrap_or_else(|| panic!("never down to 1 running: {running:?}"));
    // Only a job a worker pulled just before the record changed may start after it: the
    // queue no longer feeds the slots the running jobs free.
    let started_while_draining = before_raise[adjusted_at..taken_back]
        .iter()
        .filter(|event| matches!(event.event, JobEventKind::Started))
        .count();
    assert!(
        started_while_draining < 8,
        "{started_while_draining} jobs started after the cap went down to 1"
    );
    let most = running[taken_back..].iter().max().copied().unwrap_or(0);
    assert_eq!(most, 1, "at most 1 running under the cap: {running:?}");
    let started_under_cap = before_raise[taken_back..]
        .iter()
        .filter(|event| matches!(event.event, JobEventKind::Started))
        .count();
    assert!(
        started_under_cap >= 2,
        "jobs ran under the cap: {started_under_cap}"
    );

    // 64 results, each counted once, the rollup byte-identical to an undisturbed run's.
    let fleet_key = finish_and_check_of(&fleet, &batch, ADJUSTED_REPEAT, ADJUSTED_RUN_MS).await;
    let runs = crate::spend::runs_per_job(&fleet.events(&batch).await);
    crate::spend::assert_each_ran_once(&runs, 4 * ADJUSTED_REPEAT);
    for counter in ["duplicates", "redelivered", "lost"] {
        assert_eq!(
            fleet_key["jobs"][counter].as_u64(),
            Some(0),
            "{counter}: {fleet_key}"
        );
    }
    let (_, _, body) = http_get(fleet.api_port, &format!("/v1/batches/{batch}"), Some(TOKEN));
    let record: Value = serde_json::from_str(&body).expect("status json");
    let controls = &record["record"]["controls"];
    assert_eq!(
        controls["dispatchEpoch"], 1,
        "raising the cap takes nothing back"
    );
    let changes: Vec<String> = controls["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|change| format!("{} {}->{}", change["control"], change["old"], change["new"]))
        .collect();
    assert_eq!(
        changes,
        [
            r#""max-running" "window"->"1""#,
            r#""max-running" "1"->"8""#
        ]
    );
}
