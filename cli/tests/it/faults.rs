//! Fault tests: a real nats-server with JetStream on disk, a real S3 server, a
//! coordinator and two workers as separate OS processes run a 200-job `sim` batch (jobs of about
//! 1 s of real time) while the test breaks something. Each test then checks the same three end
//! conditions:
//!
//! 1. the batch counts every planned job exactly once (200 results, 200 finished, each job id
//!    once in the fold);
//! 2. every job's `result.json` is in the bucket with the sha256 its `finished` event recorded
//!    (so no job was acknowledged before its artifacts were stored);
//! 3. `rollup.json` is byte-identical to the rollup of an undisturbed embedded run of the same
//!    batch with the same seed.
//!
//! The faults are timed by the batch's own events (a subscription wakes the test when a worker
//! starts or finishes jobs), never by sleeping — except the S3 outage, whose 30 s length is the
//! fault itself.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use cowork_fabric::nats::NatsConfig;
use cowork_fabric::{EventLog, EventSubscription};
use cowork_schema::BatchId;
use cowork_schema::event::{JobEvent, JobEventKind, JobOutcome};
use serde_json::Value;

use crate::fleet::Fleet;
use crate::support::{Output, workspace_root};

/// Planned jobs of the fault batch: 4 matrix cells × 50 runs.
pub(crate) const JOBS: usize = 200;
const SEED: &str = "4242";
/// Ack deadline of the fault fleets: short, so killed workers' jobs come back quickly.
const ACK_WAIT: &str = "3s";

/// A simulated run of about `duration_ms` real milliseconds (±50%), 85% passing.
fn profile(duration_ms: u64, time_scale: f64) -> String {
    format!(
        "rules:\n  - pass_rate: 0.85\n    cost_usd: 0.04\n    duration_ms: {duration_ms}\n    time_scale: {time_scale}\n"
    )
}

/// A profile file under a temp dir that lives as long as the test process.
pub fn profile_file(duration_ms: u64, time_scale: f64) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        tempfile::Builder::new()
            .prefix("cowork-faults-")
            .tempdir()
            .expect("temp dir")
    });
    let path = dir
        .path()
        .join(format!("profile-{duration_ms}-{time_scale}.yaml"));
    std::fs::write(&path, profile(duration_ms, time_scale)).expect("writing the profile");
    path
}

/// Runs per matrix cell of the fault batch: 4 cells × 50 = [`JOBS`].
const REPEAT: usize = 50;

/// The batch arguments (without the profile): the demo matrix's 4 cells × `repeat` runs.
pub(crate) fn batch_args(profile: &Path, repeat: usize) -> Vec<String> {
    let repeat = repeat.to_string();
    [
        "examples/demo/scenarios/csv-report.yaml",
        "--matrix",
        "examples/demo/matrix.yaml",
        "--repeat",
        &repeat,
        "--executor",
        "sim",
        "--seed",
        SEED,
        "--sim-profile",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([profile.display().to_string()])
    .collect()
}

/// The rollup of the undisturbed fault batch (see [`reference_rollup_of`]).
pub(crate) fn reference_rollup(duration_ms: u64) -> Vec<u8> {
    reference_rollup_of(REPEAT, duration_ms)
}

/// The rollup of the undisturbed batch of `repeat` runs per cell, run embedded by `cowork run`
/// without sleeping (the time scale changes when runs end, never what they produce). Computed
/// once per repeat and profile duration.
pub(crate) fn reference_rollup_of(repeat: usize, duration_ms: u64) -> Vec<u8> {
    /// Rollup bytes by (repeat, run length).
    type Cache = Mutex<HashMap<(usize, u64), Vec<u8>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut cache = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(bytes) = cache.get(&(repeat, duration_ms)) {
        return bytes.clone();
    }
    let store = tempfile::tempdir().expect("temp dir");
    let mut args = vec!["run".to_owned()];
    args.extend(batch_args(&profile_file(duration_ms, 0.0), repeat));
    args.extend([
        "--store".to_owned(),
        store.path().display().to_string(),
        "--quiet".to_owned(),
        "--slots".to_owned(),
        "8".to_owned(),
    ]);
    let out = Command::new(env!("CARGO_BIN_EXE_cowork"))
        .args(&args)
        .current_dir(workspace_root())
        .output()
        .expect("running cowork run");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "reference run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let batches: Vec<PathBuf> = std::fs::read_dir(store.path().join("batches"))
        .expect("batches dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(batches.len(), 1);
    let bytes = std::fs::read(batches[0].join("rollup.json")).expect("rollup.json");
    cache.insert((repeat, duration_ms), bytes.clone());
    bytes
}

/// Follows a batch's events as they are stored, from the first one.
pub struct EventFollower {
    subscription: Box<dyn EventSubscription>,
    /// Job ids with a `finished` event so far.
    pub finished: BTreeSet<String>,
    pub seen: Vec<JobEvent>,
}

impl EventFollower {
    pub async fn new(nats_url: &str, batch: &BatchId) -> EventFollower {
        let fabric = cowork_fabric::nats::connect(&NatsConfig::new(nats_url))
            .await
            .expect("connecting to nats");
        let subscription = fabric
            .events
            .subscribe(batch, 1)
            .await
            .expect("subscribing to the batch's events");
        EventFollower {
            subscription,
            finished: BTreeSet::new(),
            seen: Vec::new(),
        }
    }

    /// Waits for the next event that satisfies `wanted`, and returns it.
    pub async fn until(&mut self, fleet: &Fleet, wanted: impl Fn(&JobEvent) -> bool) -> JobEvent {
        loop {
            let next = tokio::time::timeout(Duration::from_secs(180), self.subscription.next())
                .await
                .unwrap_or_else(|_| panic!("no awaited event within 180 s\n{}", fleet.logs()));
            let (_, event) = next
                .expect("the event stream ended")
                .expect("a readable event");
            if matches!(event.event, JobEventKind::Finished { .. }) {
                self.finished.insert(event.job_id.to_string());
            }
            self.seen.push(event.clone());
            if wanted(&event) {
                return event;
            }
        }
    }

    /// Waits until at least `n` jobs finished.
    pub async fn until_finished(&mut self, fleet: &Fleet, n: usize) {
        while self.finished.len() < n {
            self.until(fleet, |event| {
                matches!(event.event, JobEventKind::Finished { .. })
            })
            .await;
        }
    }
}

/// A fleet for the fault tests: short ack deadline, two `sim` workers with 4 slots each.
pub(crate) fn fault_fleet(extra_env: &[(&str, &str)], worker_flags: &[&str]) -> Fleet {
    let mut env = vec![("COWORK_ACK_WAIT", ACK_WAIT)];
    env.extend_from_slice(extra_env);
    let mut fleet = Fleet::start_with_env(&env);
    for name in ["w0", "w1"] {
        fleet.spawn_worker_with(name, "container", "4", worker_flags);
    }
    fleet
}

/// Submits the fault batch (without waiting).
pub(crate) fn submit(fleet: &Fleet, duration_ms: u64) -> BatchId {
    submit_of(fleet, REPEAT, duration_ms)
}

/// Submits the batch of `repeat` runs per cell (without waiting).
pub(crate) fn submit_of(fleet: &Fleet, repeat: usize, duration_ms: u64) -> BatchId {
    let args = batch_args(&profile_file(duration_ms, 1.0), repeat);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fleet.submit_detached(&workspace_root(), &args)
}

/// Follows the fault batch to its end and checks the three end conditions (see
/// [`finish_and_check_of`]).
pub(crate) async fn finish_and_check(fleet: &Fleet, batch: &BatchId, duration_ms: u64) -> Value {
    finish_and_check_of(fleet, batch, REPEAT, duration_ms).await
}

/// Follows the batch of `repeat` runs per cell to its end through the coordinator, and checks
/// the three end conditions. Returns the envelope's `fleet` key.
pub(crate) async fn finish_and_check_of(
    fleet: &Fleet,
    batch: &BatchId,
    repeat: usize,
    duration_ms: u64,
) -> Value {
    let n_jobs = 4 * repeat;
    let out: Output = fleet.watch(&workspace_root(), batch);
    let envelope = out.envelope();
    assert!(
        matches!(out.code(), 0 | 1),
        "{}\n{}",
        out.context(),
        fleet.logs()
    );
    let fleet_key = envelope["fleet"].clone();

    // 1. Every planned job is counted exactly once.
    assert_eq!(
        envelope["results"].as_array().map(Vec::len),
        Some(n_jobs),
        "one result per planned job\n{fleet_key}"
    );
    assert_eq!(fleet_key["jobs"]["finished"], n_jobs, "{fleet_key}");
    assert_eq!(fleet_key["jobs"]["planned"], n_jobs, "{fleet_key}");

    // 2. Every job's result.json is stored with the sha256 of every `finished` event of it.
    let events = fleet.events(batch).await;
    let mut with_result: BTreeMap<String, usize> = BTreeMap::new();
    for event in &events {
        let JobEventKind::Finished {
            artifacts, outcome, ..
        } = &event.event
        else {
            continue;
        };
        assert!(
            matches!(outcome, JobOutcome::Completed { .. }),
            "{} ended {:?}\n{}",
            event.job_id,
            outcome,
            fleet.logs()
        );
        for artifact in artifacts {
            let bytes = fleet.object(&artifact.key);
            assert_eq!(
                cowork_fabric::sha256_hex(&bytes),
                artifact.sha256,
                "{} of {} (attempt {}, worker {})",
                artifact.key,
                event.job_id,
                event.attempt,
                event.worker_id
            );
            if artifact.key.ends_with("/result.json") {
                *with_result.entry(event.job_id.to_string()).or_default() += 1;
            }
        }
    }
    assert_eq!(
        with_result.len(),
        n_jobs,
        "every job's result.json is stored and recorded"
    );
    // A duplicate delivery may still finish after the batch was decided, so the envelope can
    // report fewer duplicates than the log ends up holding, never more.
    let duplicates: usize = with_result.values().map(|n| n - 1).sum();
    assert!(
        jobs_counter(&fleet_key, "duplicates") as usize <= duplicates,
        "the envelope's duplicates are duplicates of the log ({duplicates})\n{fleet_key}"
    );

    // 3. The rollup equals the undisturbed run's, byte for byte.
    let rollup = fleet.object(&format!("batches/{batch}/rollup.json"));
    assert_eq!(
        String::from_utf8_lossy(&rollup),
        String::from_utf8_lossy(&reference_rollup_of(repeat, duration_ms)),
        "rollup of the disturbed batch vs the undisturbed one"
    );
    fleet_key
}

/// The end conditions of a batch that must cost nothing (the cluster tests): nothing lost, no
/// duplicate, every one of `n_jobs` jobs started exactly once and finished. A job may be
/// *reported* again: after a leader election JetStream can lose an ack and deliver a finished
/// job once more; that delivery finds the job's record and reports the stored run without
/// running it, marked with the attempt that stored it, and the fold counts it as a re-ack.
/// Every such report must name the first report's run exactly. Returns the re-reports seen.
pub(crate) fn check_each_ran_once(events: &[JobEvent], n_jobs: usize, fleet_key: &Value) -> u64 {
    assert_eq!(jobs_counter(fleet_key, "lost"), 0, "{fleet_key}");
    assert_eq!(
        jobs_counter(fleet_key, "duplicates"),
        0,
        "no job was reported by a second run or with another result: {fleet_key}"
    );
    let mut started: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    let mut first_report: BTreeMap<&str, &JobEvent> = BTreeMap::new();
    let mut reported_again = 0u64;
    for event in events {
        match &event.event {
            JobEventKind::Started => started
                .entry(event.job_id.as_str())
                .or_default()
                .push(event.attempt),
            JobEventKind::Finished {
                outcome,
                artifacts,
                from_record_of_attempt,
                ..
            } => {
                let Some(first) = first_report.get(event.job_id.as_str()) else {
                    first_report.insert(event.job_id.as_str(), event);
                    continue;
                };
                let JobEventKind::Finished {
                    outcome: first_outcome,
                    artifacts: first_artifacts,
                    from_record_of_attempt: first_from,
                    ..
                } = &first.event
                else {
                    unreachable!("only finished events are kept");
                };
                let stored_attempt = first_from.unwrap_or(first.attempt);
                assert_eq!(
                    *from_record_of_attempt,
                    Some(stored_attempt),
                    "a later report of {} (attempt {} on {}) is not the stored run of attempt {stored_attempt} reported again",
                    event.job_id,
                    event.attempt,
                    event.worker_id
                );
                assert_eq!(
                    (first_outcome, first_artifacts),
                    (outcome, artifacts),
                    "a later report of {} names another run",
                    event.job_id
                );
                reported_again += 1;
            }
            JobEventKind::Failed { .. } => {}
        }
    }
    let twice: Vec<_> = started
        .iter()
        .filter(|(_, starts)| starts.len() > 1)
        .collect();
    assert!(
        twice.is_empty(),
        "jobs started more than once (job, attempts): {twice:?}"
    );
    assert_eq!(started.len(), n_jobs, "every job started");
    assert_eq!(first_report.len(), n_jobs, "every job finished");
    // A re-report that arrives after the batch was decided is in the log but not in the fold.
    let reacked = jobs_counter(fleet_key, "reacked");
    assert!(
        reacked <= reported_again,
        "the fold's re-acks are re-reports of the log ({reported_again}): {fleet_key}"
    );
    if reported_again > 0 {
        eprintln!("{reported_again} job(s) reported again from their stored runs (re-acked)");
    }
    reported_again
}

fn jobs_counter(fleet_key: &Value, name: &str) -> u64 {
    fleet_key["jobs"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("fleet.jobs.{name} in {fleet_key}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_five_times_mid_job_loses_nothing() {
    let mut fleet = fault_fleet(&[], &[]);
    let batch = submit(&fleet, 1000);
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    for kill in 0..5 {
        // A `started` event of w0 means w0 is mid-job (the run lasts about a second).
        let started = follower
            .until(&fleet, |event| {
                event.worker_id == "w0" && matches!(event.event, JobEventKind::Started)
            })
            .await;
        fleet.kill("w0");
        eprintln!("kill {kill}: w0 was running {}", started.job_id);
        fleet.spawn_worker("w0", "container", "4");
    }
    let fleet_key = finish_and_check(&fleet, &batch, 1000).await;
    assert!(
        jobs_counter(&fleet_key, "redelivered") >= 1,
        "jobs of the killed worker were delivered again and show as attempts: {fleet_key}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_mid_batch_resumes_it() {
    let mut fleet = fault_fleet(&[], &[]);
    let batch = submit(&fleet, 1000);
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    follower.until_finished(&fleet, 40).await;
    fleet.kill("coordinator");
    // Workers carry on with the jobs already admitted while no coordinator runs: the fair
    // share keeps them to the 8 live slots, 7 or more of them out when the 40th finished.
    follower.until_finished(&fleet, 44).await;
    fleet.spawn_coordinator();
    finish_and_check(&fleet, &batch, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_outlives_a_coordinator_restart_mid_batch() {
    let mut fleet = fault_fleet(&[], &[]);
    let batch = submit(&fleet, 1000);
    // The watch runs as a user would start it, from before the coordinator goes away until
    // the batch ends.
    let coordinator = fleet.coordinator_url();
    let mut command = fleet.watch_command(&workspace_root(), &batch);
    let watch = command.spawn().expect("starting cowork watch");
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    follower.until_finished(&fleet, 40).await;
    fleet.kill("coordinator");
    follower.until_finished(&fleet, 44).await;
    fleet.spawn_coordinator();
    let output = tokio::task::spawn_blocking(move || watch.wait_with_output())
        .await
        .expect("the watch's waiter")
        .expect("waiting for cowork watch");
    let out = Output::new(
        format!("cowork watch {batch} --output-format json --quiet --coordinator {coordinator}"),
        workspace_root(),
        output,
    );
    assert!(
        matches!(out.code(), 0 | 1),
        "{}\n{}",
        out.context(),
        fleet.logs()
    );
    out.expect_stderr("waiting");
    assert_eq!(
        out.envelope()["ok"],
        fleet.watch(&workspace_root(), &batch).envelope()["ok"]
    );
    finish_and_check(&fleet, &batch, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_restart_mid_batch_loses_nothing() {
    let mut fleet = fault_fleet(&[], &[]);
    let batch = submit(&fleet, 1000);
    {
        let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
        follower.until_finished(&fleet, 50).await;
    }
    fleet.nats.restart();
    finish_and_check(&fleet, &batch, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_30_second_s3_outage_mid_batch_loses_nothing() {
    let mut fleet = fault_fleet(&[], &[]);
    let batch = submit(&fleet, 1000);
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    follower.until_finished(&fleet, 50).await;
    fleet.s3.kill();
    let finished_at_outage = follower.finished.len();
    // The outage itself lasts 30 s; this sleep is the fault, not a synchronization.
    tokio::time::sleep(Duration::from_secs(30)).await;
    fleet.s3.restart();
    let fleet_key = finish_and_check(&fleet, &batch, 1000).await;
    assert!(
        finished_at_outage < JOBS,
        "the outage happened mid-batch: {fleet_key}"
    );
    // Ten times the ack deadline, and no run was paid for twice: the workers renewed the
    // jobs they held while their uploads waited for the store.
    let runs = crate::spend::runs_per_job(&fleet.events(&batch).await);
    crate::spend::assert_each_ran_once(&runs, JOBS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_longer_than_ack_wait_are_delivered_twice_and_counted_once() {
    // The consumer's ack deadline is 1 s, runs last 1–3 s, and workers renew every 20 s: the
    // queue hands running jobs to another slot, and both deliveries finish.
    let fleet = fault_fleet(
        &[("COWORK_ACK_WAIT", "1s")],
        &["--in-progress-every", "20s"],
    );
    let batch = submit(&fleet, 2000);
    let fleet_key = finish_and_check(&fleet, &batch, 2000).await;
    assert!(
        jobs_counter(&fleet_key, "duplicates") >= 1,
        "some jobs finished twice and were counted once: {fleet_key}"
    );
}

/// A network namespace joined to the host by a veth pair: the host side is `10.213.<n>.1`, the
/// namespace side `10.213.<n>.2`. Cutting the link takes the namespace off the network; the
/// processes inside keep running. Removed on drop.
struct NetNs {
    name: String,
    host_if: String,
    host_ip: String,
}

impl NetNs {
    fn ip(args: &[&str]) {
        let out = Command::new("ip")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running `ip {}` (iproute2, as root): {e}", args.join(" ")));
        assert!(
            out.status.success(),
            "`ip {}` failed (the network-cut test needs root and iproute2): {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn create() -> NetNs {
        let n = std::process::id() % 250 + 1;
        let name = format!("cwft{}", std::process::id());
        let host_if = format!("cwh{}", std::process::id() % 100_000);
        let ns_if = format!("cwn{}", std::process::id() % 100_000);
        let host_ip = format!("10.213.{n}.1");
        let ns_ip = format!("10.213.{n}.2");
        NetNs::ip(&["netns", "add", &name]);
        let netns = NetNs {
            name,
            host_if,
            host_ip,
        };
        NetNs::ip(&[
            "link",
            "add",
            &netns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &ns_if,
        ]);
        NetNs::ip(&["link", "set", &ns_if, "netns", &netns.name]);
        NetNs::ip(&[
            "addr",
            "add",
            &format!("{}/24", netns.host_ip),
            "dev",
            &netns.host_if,
        ]);
        NetNs::ip(&["link", "set", &netns.host_if, "up"]);
        let exec = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &netns.name, "ip"];
            all.extend_from_slice(args);
            NetNs::ip(&all);
        };
        exec(&["addr", "add", &format!("{ns_ip}/24"), "dev", &ns_if]);
        exec(&["link", "set", &ns_if, "up"]);
        exec(&["link", "set", "lo", "up"]);
        netns
    }

    fn set_link(&self, up: bool) {
        NetNs::ip(&["link", "set", &self.host_if, if up { "up" } else { "down" }]);
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the namespace removes its end of the veth pair, and with it the host end.
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .output();
        let _ = Command::new("ip")
            .args(["link", "delete", &self.host_if])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_nats_longer_than_ack_wait_is_deduplicated() {
    use cowork_testkit::{NatsOptions, NatsServer, S3Options, S3Server};
    let netns = NetNs::create();
    // Servers listen on every interface, so the worker in the namespace reaches them through
    // the veth pair; everything else uses loopback.
    let nats = NatsServer::start_with(NatsOptions {
        bind_host: "0.0.0.0".into(),
        ..NatsOptions::default()
    });
    let s3 = S3Server::start_with(S3Options {
        bind_host: "0.0.0.0".into(),
        ..S3Options::default()
    });
    let nats_in_ns = format!("nats://{}:{}", netns.host_ip, nats.port);
    let s3_in_ns = format!("http://{}:{}", netns.host_ip, s3.port);
    let mut fleet = Fleet::with_servers(nats, s3, &[("COWORK_ACK_WAIT", ACK_WAIT)]);
    fleet.spawn_worker("w1", "container", "4");
    let worker_args = Fleet::worker_args("wcut", "container", "4");
    let worker_args: Vec<&str> = worker_args.iter().map(String::as_str).collect();
    fleet.spawn_program_with_env(
        "wcut",
        "ip",
        &["netns", "exec", &netns.name, env!("CARGO_BIN_EXE_cowork")],
        &worker_args,
        &[
            ("COWORK_NATS_URL", nats_in_ns),
            ("COWORK_S3_ENDPOINT", s3_in_ns),
        ],
    );
    let batch = submit(&fleet, 1000);
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    // Cut the worker off while it runs a job.
    let cut_job = follower
        .until(&fleet, |event| {
            event.worker_id == "wcut" && matches!(event.event, JobEventKind::Started)
        })
        .await
        .job_id;
    netns.set_link(false);
    // After ack_wait the queue hands the cut-off worker's jobs to the other worker.
    let redelivered = follower
        .until(&fleet, |event| {
            event.job_id == cut_job
                && event.worker_id != "wcut"
                && matches!(event.event, JobEventKind::Started)
        })
        .await;
    assert!(redelivered.attempt >= 2, "{redelivered:?}");
    netns.set_link(true);
    // Each job counts once, whichever of the two attempts of the cut-off job is folded: the
    // cut-off worker's late report (its uploads resume with the link) races the other
    // worker's, and when it wins the batch may be decided before the other arrives, so the
    // fold's `redelivered` counter says which came first, not whether the job ran again (the
    // second `started` above says that).
    let fleet_key = finish_and_check(&fleet, &batch, 1000).await;
    eprintln!(
        "network cut: duplicates reported {}, redelivered {}",
        jobs_counter(&fleet_key, "duplicates"),
        jobs_counter(&fleet_key, "redelivered")
    );
}
