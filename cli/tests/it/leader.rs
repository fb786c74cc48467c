//! Two coordinators on one NATS and store (decisions.md#coordinator-lease): the first leads,
//! the second stands by (its `/readyz` names the leader, and it forwards each request there:
//! a submit sent to it alone is the leader's); the leader is `kill -9`ed
//! mid-batch (a `cowork watch` given both follows through) and the standby takes the lease
//! once it expired, resumes the batch and decides it with the rollup of an undisturbed run,
//! nothing lost and nothing run twice; `/metrics`, `/readyz`, `cowork workers` and `cowork
//! status` say who leads, the metrics count the takeover and the batch's hook is told of it. A batch cap and a model limit
//! hold across a takeover and across a plain restart: spend within an undisturbed batch's
//! bound, never more jobs of the model at once than the limit by the workers' events, and the
//! envelope's `maxInFlight` equal to that count. A leader stopped (SIGSTOP) past its lease
//! and continued publishes nothing more and stands by; nothing runs twice. One stopped
//! between its term check and its publish (held there by a test hook) has that publish
//! refused by the queue's fence, counts the refusal and stands by.
//! Waits are bounded polls; no sleep synchronizes.

use std::time::Duration;

use cowork_testkit::{free_port, wait_until};

use crate::faults::{EventFollower, fault_fleet, finish_and_check, submit};
use crate::limits::most_at_once;
use crate::support::workspace_root;

/// Runs per cell of the batch whose leader is killed (4 cells: 300 jobs).
const KILLED_REPEAT: usize = 75;

/// A short lease, so the takeover comes within seconds of the kill.
const LEASE_TTL: &str = "3s";

fn metrics(port: u16) -> String {
    crate::report::http_get_raw(port, "/metrics", None).2
}

fn readyz(port: u16) -> (u16, String) {
    let (status, _, body) = crate::report::http_get_raw(port, "/readyz", None);
    (status, body)
}

/// Waits until `/readyz` on `port` answers `200` with a body that starts with `prefix`.
fn until_ready_says(fleet: &crate::fleet::Fleet, port: u16, prefix: &str, what: &str) {
    wait_until(what)
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(|| {
            let (status, body) = readyz(port);
            status == 200 && body.starts_with(prefix)
        });
}

/// Stops the leader (SIGSTOP) until the standby on `standby_port` has taken its lease, then
/// continues it. Stopped, not dead: it holds its connections and its state while its lease
/// runs out.
fn stop_past_the_lease(fleet: &crate::fleet::Fleet, standby_port: u16) {
    fleet.signal("coordinator", "-STOP");
    until_ready_says(
        fleet,
        standby_port,
        "ready: leading",
        "the standby takes the lease of the stopped leader",
    );
    fleet.signal("coordinator", "-CONT");
}

/// Starts a second coordinator, `standby`, and waits until the first leads and it stands by;
/// returns both API ports.
fn add_standby(fleet: &mut crate::fleet::Fleet) -> (u16, u16) {
    let leader_port = fleet.api_port;
    let standby_port = free_port();
    fleet.spawn_coordinator_as("standby", standby_port);
    wait_until("the first coordinator leads and the second stands by")
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(|| {
            readyz(leader_port).1.starts_with("ready: leading since 20")
                && readyz(standby_port).1.starts_with("standby:")
        });
    (leader_port, standby_port)
}

/// A watch opened on the new leader right after its takeover starts where the old leader
/// left off: its first progress event counts at least the `finished_before` jobs finished
/// under the old leader (a watcher never sees the count step back to 0 while the new leader
/// catches up with the events).
async fn first_progress_on_the_new_leader_goes_on(
    port: u16,
    batch: &cowork_schema::BatchId,
    finished_before: u64,
) {
    use futures::StreamExt;
    let client = cowork_client::CoordinatorClient::new(
        &format!("http://127.0.0.1:{port}"),
        Some(crate::fleet::TOKEN.to_owned()),
    )
    .expect("a client of the new leader");
    let mut events = Box::pin(
        client
            .watch(batch)
            .await
            .expect("a watch on the new leader"),
    );
    let first = tokio::time::timeout(Duration::from_secs(30), events.next())
        .await
        .expect("a first event within 30 s");
    match first {
        Some(Ok(cowork_client::WatchEvent::Progress(progress))) => assert!(
            progress.finished >= finished_before,
            "the new leader's first progress steps back: {progress:?}"
        ),
        // Already over: the end carries the whole count.
        Some(Ok(cowork_client::WatchEvent::End(_))) => {}
        other => panic!("the watch on the new leader: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_a_killed_leader_and_the_batch_ends_as_an_undisturbed_run() {
    let mut fleet = fault_fleet(&[("COWORK_LEASE_TTL", LEASE_TTL)], &[]);
    let (leader_port, standby_port) = add_standby(&mut fleet);
    let root = workspace_root();
    let (standby_status, standby_body) = readyz(standby_port);
    assert_eq!(standby_status, 200, "a standby is ready: {standby_body}");
    assert!(
        standby_body.contains("the leader is ")
            && standby_body.contains(&format!("127.0.0.1:{leader_port}")),
        "{standby_body}"
    );
    let standby_metrics = metrics(standby_port);
    assert!(
        standby_metrics.contains("cowork_coordinator_leading 0"),
        "{standby_metrics}"
    );
    assert!(metrics(leader_port).contains("cowork_coordinator_leading 1"));
    // The standby forwards each request: `cowork workers` asked of it is the leader's answer,
    // which says who leads, where and since when.
    fleet.api_port = standby_port;
    let workers = fleet.cowork(&root, &["workers"]);
    workers.expect_stderr(&format!(
        " at http://127.0.0.1:{leader_port} (this one), since 20"
    ));
    // A submit sent to the standby alone goes to the leader. Its hook is told of the takeover.
    let hook = cowork_testkit::HookServer::start(&[]).await;
    // 75 runs of each of the 4 cells: 300 jobs.
    let mut args =
        crate::faults::batch_args(&crate::faults::profile_file(1000, 1.0), KILLED_REPEAT);
    args.extend(["--notify".to_owned(), hook.url.clone()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let batch = fleet.submit_detached(&root, &args);
    fleet.api_port = leader_port;
    // A watch given both, leader first, follows the batch through the takeover.
    let leader_url = format!("http://127.0.0.1:{leader_port}");
    let standby_url = format!("http://127.0.0.1:{standby_port}");
    fleet.client_coordinators = Some(format!("{leader_url},{standby_url}"));
    let watcher = fleet
        .watch_command(&root, &batch)
        .spawn()
        .expect("starting cowork watch");
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    follower.until_finished(&fleet, 40).await;
    fleet.kill("coordinator");
    // From here the standby must take over.
    fleet.api_port = standby_port;
    until_ready_says(
        &fleet,
        standby_port,
        "ready: leading since",
        "the standby leads",
    );
    let taken_over = metrics(standby_port);
    for line in [
        "cowork_coordinator_leading 1",
        "cowork_coordinator_takeovers_total 1",
    ] {
        assert!(taken_over.contains(line), "{line}: {taken_over}");
    }
    // `cowork status` given both names the new leader, which answers itself.
    let status = fleet.cowork(&root, &["status", batch.as_str()]);
    status.expect_stdout(&format!(
        "leader   standby at http://127.0.0.1:{standby_port} (this one), since 20"
    ));
    let (_, ready) = readyz(standby_port);
    assert!(ready.starts_with("ready: leading since 20"), "{ready}");
    first_progress_on_the_new_leader_goes_on(standby_port, &batch, 40).await;
    let fleet_key = crate::faults::finish_and_check_of(&fleet, &batch, KILLED_REPEAT, 1000).await;
    // 0 run twice: every job started once, by the workers' events.
    crate::faults::check_each_ran_once(&fleet.events(&batch).await, KILLED_REPEAT * 4, &fleet_key);
    // Told once: that the standby took over, and then the verdict.
    let told = hook.wait_for(2, Duration::from_secs(60)).await;
    let kinds: Vec<String> = told
        .iter()
        .map(|received| received.json()["kind"].as_str().unwrap_or("?").to_owned())
        .collect();
    assert_eq!(kinds, ["taken_over", "decided"], "{told:?}");
    let taken_over = told[0].json();
    let reason = taken_over["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("coordinator standby took over from "),
        "{taken_over}"
    );
    let watched = watcher
        .wait_with_output()
        .expect("waiting for cowork watch");
    check_watch_ended_whole(&watched);
}

/// The watch printed the batch's envelope, with every planned job finished.
fn check_watch_ended_whole(watched: &std::process::Output) {
    let envelope: serde_json::Value = serde_json::from_slice(&watched.stdout).unwrap_or_else(|e| {
        panic!(
            "the watch given both coordinators prints the envelope: {e}\n{}",
            String::from_utf8_lossy(&watched.stderr)
        )
    });
    assert_eq!(
        envelope["fleet"]["jobs"]["finished"],
        envelope["fleet"]["jobs"]["planned"],
        "{}",
        String::from_utf8_lossy(&watched.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_past_its_lease_stands_by_when_continued_and_nothing_runs_twice() {
    let mut fleet = fault_fleet(&[("COWORK_LEASE_TTL", LEASE_TTL)], &[]);
    let (leader_port, standby_port) = add_standby(&mut fleet);
    // `submit --watch` given both, the leader first: its event stream there ends with the
    // stopped leader's term, and it goes on through the new leader.
    fleet.client_coordinators = Some(format!(
        "http://127.0.0.1:{leader_port},http://127.0.0.1:{standby_port}"
    ));
    let (watcher, batch) = submit_watching(&fleet);
    // The live page's stream on the leader, too: it must end with the term (the page then
    // reconnects and is forwarded to the new leader).
    let (page_sender, page_stream) = std::sync::mpsc::channel();
    let live_events = format!("/v1/batches/{batch}/live/events");
    std::thread::spawn(move || {
        let _ = page_sender.send(crate::report::http_get_raw(
            leader_port,
            &live_events,
            Some(crate::fleet::TOKEN),
        ));
    });
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    follower.until_finished(&fleet, 40).await;
    stop_past_the_lease(&fleet, standby_port);
    // Its term ran out on its own clock while it was stopped: it publishes nothing more,
    // learns who leads at its next claim and stands by.
    until_ready_says(
        &fleet,
        leader_port,
        "standby: the leader is standby at",
        "the continued leader stands by",
    );
    let old = metrics(leader_port);
    assert!(old.contains("cowork_coordinator_leading 0"), "{old}");
    assert!(
        old.contains("cowork_coordinator_terms_lost_total 1"),
        "{old}"
    );
    let (status, _, page_events) = page_stream
        .recv_timeout(Duration::from_secs(30))
        .expect("the live page's stream on the old leader ends with its term");
    assert_eq!(status, 200, "{page_events}");
    assert!(page_events.contains("event: snapshot"), "{page_events}");
    fleet.api_port = standby_port;
    // Every job counted once, none run twice, the rollup of an undisturbed run.
    let fleet_key = finish_and_check(&fleet, &batch, 1000).await;
    crate::faults::check_each_ran_once(
        &fleet.events(&batch).await,
        crate::faults::JOBS,
        &fleet_key,
    );
    check_watch_ended_whole(&watcher.ends_within(Duration::from_secs(60)));
}

/// A running `cowork submit --watch`, its stderr read as it comes.
struct SubmitWatch {
    child: std::process::Child,
    stderr: std::sync::mpsc::Receiver<String>,
}

/// Starts `cowork submit <the fault batch> --watch` against the fleet's client coordinators
/// and returns it with the id of the batch it submitted (from its `submitted batch …` line).
fn submit_watching(fleet: &crate::fleet::Fleet) -> (SubmitWatch, cowork_schema::BatchId) {
    use std::io::BufRead;
    let args = crate::faults::batch_args(&crate::faults::profile_file(1000, 1.0), 50);
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut command);
    let mut child = command
        .arg("submit")
        .args(&args)
        .args(["--watch", "--output-format", "json", "--quiet"])
        .args(["--coordinator", &fleet.client_coordinator()])
        .current_dir(workspace_root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting cowork submit --watch");
    let stderr = child.stderr.take().expect("piped stderr");
    let (id_sender, id) = std::sync::mpsc::channel();
    let (text_sender, text) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(rest) = line.strip_prefix("submitted batch ")
                && let Some(batch) = rest.split_whitespace().next()
            {
                let _ = id_sender.send(batch.to_owned());
            }
            all.push_str(&line);
            all.push('\n');
        }
        let _ = text_sender.send(all);
    });
    let Ok(batch) = id.recv_timeout(Duration::from_secs(60)) else {
        let _ = child.kill();
        panic!(
            "no `submitted batch` line: {}",
            text.recv().unwrap_or_default()
        );
    };
    let batch = cowork_schema::BatchId::new(&batch).expect("a batch id");
    (
        SubmitWatch {
            child,
            stderr: text,
        },
        batch,
    )
}

impl SubmitWatch {
    /// Its output once it exits, which must be within `limit` (else it is killed and the test
    /// fails with what it printed).
    fn ends_within(self, limit: Duration) -> std::process::Output {
        let SubmitWatch { mut child, stderr } = self;
        let mut stdout = child.stdout.take().expect("piped stdout");
        // Read while waiting, so a full pipe cannot stall the child.
        let reader = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stdout, &mut bytes);
            bytes
        });
        let ended = wait_until("cowork submit --watch ends")
            .within(limit)
            .every(Duration::from_millis(100))
            .try_poll(|| child.try_wait().ok().flatten());
        let Ok(status) = ended else {
            let _ = child.kill();
            panic!(
                "cowork submit --watch did not end within {limit:?}: {}",
                stderr.recv().unwrap_or_default()
            );
        };
        std::process::Output {
            status,
            stdout: reader.join().unwrap_or_default(),
            stderr: stderr.recv().unwrap_or_default().into_bytes(),
        }
    }
}

/// The value of the counter `name` in `/metrics` on `port` (0 when absent).
fn counter_of(port: u16, name: &str) -> u64 {
    metrics(port)
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_between_its_term_check_and_its_publish_is_refused_by_the_queue() {
    let hold = tempfile::tempdir().expect("temp dir");
    let hold_dir = hold.path().to_str().expect("utf-8 temp dir").to_owned();
    let mut fleet = fault_fleet(
        &[
            ("COWORK_LEASE_TTL", LEASE_TTL),
            ("COWORK_TEST_HOLD_BEFORE_PUBLISH", &hold_dir),
        ],
        &[],
    );
    let (leader_port, standby_port) = add_standby(&mut fleet);
    let root = workspace_root();
    let batch = submit(&fleet, 1000);
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    follower.until_finished(&fleet, 20).await;
    // The leader's next publish round waits after its term check, before its publish.
    std::fs::write(hold.path().join("hold"), b"").expect("hold file");
    wait_until("the leader holds before a publish")
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(50))
        .context(|| fleet.logs())
        .poll(|| hold.path().join("held").exists());
    // Paused through the leader first: the standby, once it leads, publishes none of the
    // jobs of the held round, so the queue's answer to that round cannot be a duplicate.
    let out = fleet.cowork(&root, &["pause", batch.as_str(), "--by", "it"]);
    assert_eq!(out.code(), 0, "{}", out.context());
    stop_past_the_lease(&fleet, standby_port);
    std::fs::write(hold.path().join("release"), b"").expect("release file");
    // The held round is published with the old term's fence: the server refuses it.
    wait_until("the old leader's publish is refused by the fence")
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(|| counter_of(leader_port, "cowork_coordinator_fencing_refusals_total") >= 1);
    until_ready_says(
        &fleet,
        leader_port,
        "standby: the leader is standby at",
        "the refused leader stands by",
    );
    assert!(metrics(leader_port).contains("cowork_coordinator_leading 0"));
    fleet.api_port = standby_port;
    let out = fleet.cowork(&root, &["resume-dispatch", batch.as_str(), "--by", "it"]);
    assert_eq!(out.code(), 0, "{}", out.context());
    // Every job counted once, none run twice, the rollup of an undisturbed run.
    let fleet_key = finish_and_check(&fleet, &batch, 1000).await;
    crate::faults::check_each_ran_once(
        &fleet.events(&batch).await,
        crate::faults::JOBS,
        &fleet_key,
    );
}

/// The fleet of the limit tests: two workers, a short lease and a limit of 2 sonnet jobs.
fn limited_fleet() -> crate::fleet::Fleet {
    fault_fleet(
        &[
            ("COWORK_LEASE_TTL", LEASE_TTL),
            ("COWORK_MODEL_LIMITS", "claude-sonnet=2"),
        ],
        &[],
    )
}

/// The batch cap of the limit tests, in USD.
const CAP: f64 = 2.0;

/// Submits 100 runs of about 0.04 USD under [`CAP`] (it stops the batch about half way) and
/// returns once 12 have finished.
async fn submit_capped(fleet: &crate::fleet::Fleet) -> cowork_schema::BatchId {
    let mut args = crate::faults::batch_args(&crate::faults::profile_file(1000, 1.0), 25);
    args.extend(
        [
            "--batch-budget-usd",
            &CAP.to_string(),
            "--sandbox-price",
            "container=0",
            "--model-price",
            "claude=0.04",
        ]
        .map(str::to_owned),
    );
    let mut submit_args = vec!["submit"];
    submit_args.extend(args.iter().map(String::as_str));
    let out = fleet.cowork(&workspace_root(), &submit_args);
    assert_eq!(out.code(), 0, "{}", out.context());
    let batch = cowork_schema::BatchId::new(out.stdout.trim()).expect("submit prints the batch id");
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    follower.until_finished(fleet, 12).await;
    batch
}

/// Follows the capped batch to its end and checks that the cap and the limit held: spend
/// within an undisturbed batch's bound, never more than 2 sonnet jobs at once by the
/// workers' events, and the envelope's `maxInFlight` equal to that count.
async fn check_cap_and_limit(fleet: &crate::fleet::Fleet, batch: &cowork_schema::BatchId) {
    let watched = fleet.watch(&workspace_root(), batch);
    assert_eq!(
        watched.code(),
        1,
        "budget-stopped cells fail\n{}",
        watched.context()
    );
    let envelope = watched.envelope();
    let budget = &envelope["fleet"]["batchBudget"];
    assert_eq!(budget["stopped"], true, "{budget}");
    let spent = budget["spentUsd"].as_f64().expect("spentUsd");
    // The bound of an undisturbed batch (see the limits tests): what was in flight at the
    // last admission may overshoot by half of what was left, plus one run.
    assert!(
        spent <= CAP * 1.5 + 0.06,
        "spent {spent} against a cap of {CAP}: {budget}"
    );
    let most = most_at_once(&fleet.events(batch).await, &envelope);
    let sonnet = most.get("claude-sonnet-4-5").copied().unwrap_or(0);
    assert!(sonnet <= 2, "sonnet jobs at once: {most:?}");
    let limits = &envelope["fleet"]["modelLimits"]["claude-sonnet=2"];
    eprintln!("sonnet at once, from the events: {sonnet}; the envelope: {limits}; spent {spent}");
    assert_eq!(
        limits["maxInFlight"].as_u64(),
        Some(sonnet),
        "the envelope reports what ran at once: {limits}, events {most:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_budget_and_a_model_limit_hold_across_a_takeover() {
    let mut fleet = limited_fleet();
    let (_, standby_port) = add_standby(&mut fleet);
    let batch = submit_capped(&fleet).await;
    fleet.kill("coordinator");
    fleet.api_port = standby_port;
    check_cap_and_limit(&fleet, &batch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_budget_and_a_model_limit_hold_across_a_restart() {
    let mut fleet = limited_fleet();
    let port = fleet.api_port;
    let batch = submit_capped(&fleet).await;
    fleet.kill("coordinator");
    // Another process (another id): it leads once the killed one's lease expired.
    fleet.spawn_coordinator_as("coordinator", port);
    check_cap_and_limit(&fleet, &batch).await;
}
