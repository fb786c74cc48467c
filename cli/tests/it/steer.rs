//! Steering a running fleet batch: `cowork pause`, a coordinator restart while paused,
//! `cowork resume-dispatch` and `cowork adjust`, with a real nats-server, s3s-fs, coordinator
//! and workers as separate processes. The pause is followed through the batch's own live
//! stream (`/v1/batches/{id}/live/events`), never by sleeping.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use cowork_schema::BatchId;
use cowork_schema::event::JobEventKind;
use serde_json::Value;

use crate::faults::{EventFollower, fault_fleet, finish_and_check, submit};
use crate::fleet::{Fleet, TOKEN};
use crate::report::http_get;
use crate::support::workspace_root;

/// Run length of the steered batch's jobs, in ms.
const RUN_MS: u64 = 300;

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

fn started_events(events: &[cowork_schema::event::JobEvent]) -> usize {
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
