//! The fleet end to end: a real nats-server with JetStream, a real S3 server (s3s-fs), a
//! coordinator and workers as separate `cowork` processes, and `cowork submit --watch`.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cowork_fabric::EventLog;
use cowork_fabric::nats::NatsConfig;
use cowork_schema::BatchId;
use cowork_schema::event::{ArtifactRef, JobEventKind};
use cowork_testkit::{NatsServer, S3Server, free_port};

use crate::support::{Output, Sandbox, workspace_root};

const BUCKET: &str = "cowork-it";
const TOKEN: &str = "it-token-7f3a";

/// A fleet: servers plus coordinator and worker processes, all killed on drop.
struct Fleet {
    nats: NatsServer,
    s3: S3Server,
    api_port: u16,
    dir: tempfile::TempDir,
    children: Vec<(String, Child)>,
}

impl Fleet {
    fn start() -> Fleet {
        let nats = NatsServer::start();
        let s3 = S3Server::start();
        let dir = tempfile::Builder::new()
            .prefix("cowork-fleet-")
            .tempdir()
            .expect("temp dir");
        let mut fleet = Fleet {
            nats,
            s3,
            api_port: free_port(),
            dir,
            children: Vec::new(),
        };
        fleet.spawn_coordinator();
        fleet
    }

    fn env(&self, command: &mut Command) {
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("COWORK_") {
                command.env_remove(key);
            }
        }
        command
            .env("COWORK_NATS_URL", self.nats.url())
            .env("COWORK_S3_ENDPOINT", self.s3.endpoint())
            .env("COWORK_S3_BUCKET", BUCKET)
            .env("COWORK_S3_ACCESS_KEY_ID", &self.s3.access_key)
            .env("COWORK_S3_SECRET_ACCESS_KEY", &self.s3.secret_key)
            .env("COWORK_API_TOKEN", TOKEN)
            .env("COWORK_LOG", "warn");
    }

    fn spawn(&mut self, name: &str, args: &[&str]) {
        let log =
            std::fs::File::create(self.dir.path().join(format!("{name}.log"))).expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
        self.env(&mut command);
        command
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone"))
            .stderr(log);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting cowork {name}: {e}"));
        self.children.push((name.to_owned(), child));
    }

    fn spawn_coordinator(&mut self) {
        let listen = format!("127.0.0.1:{}", self.api_port);
        self.spawn(
            "coordinator",
            &[
                "coordinator",
                "--listen",
                &listen,
                "--s3-create-bucket",
                "--scratch-dir",
                "scratch",
            ],
        );
        // Readiness probe with a deadline: returns as soon as the API accepts connections.
        let address = SocketAddr::from(([127, 0, 0, 1], self.api_port));
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the coordinator did not listen; log:\n{}",
                self.log("coordinator")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn spawn_worker(&mut self, name: &str, tiers: &str, slots: &str) {
        let cache = format!("{name}/cache");
        let work = format!("{name}/work");
        self.spawn(
            name,
            &[
                "worker",
                "--executor",
                "sim",
                "--tiers",
                tiers,
                "--slots",
                slots,
                "--worker-id",
                name,
                "--cache-dir",
                &cache,
                "--work-dir",
                &work,
            ],
        );
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    fn logs(&self) -> String {
        self.children
            .iter()
            .map(|(name, _)| format!("--- {name} ---\n{}", self.log(name)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `cowork submit … --watch --output-format json` from `cwd`.
    fn submit(&self, cwd: &Path, args: &[&str]) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
        self.env(&mut command);
        let coordinator = format!("http://127.0.0.1:{}", self.api_port);
        command.arg("submit").args(args).args([
            "--coordinator",
            &coordinator,
            "--watch",
            "--output-format",
            "json",
            "--quiet",
        ]);
        command.current_dir(cwd);
        let out = command.output().expect("running cowork submit");
        Output::new(
            format!("cowork submit {}", args.join(" ")),
            cwd.to_path_buf(),
            out,
        )
    }

    /// The bytes of an object in the bucket, read from the server's data directory.
    fn object(&self, key: &str) -> Vec<u8> {
        let path = self.s3.data_dir().join(BUCKET).join(key);
        std::fs::read(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}\n{}", path.display(), self.logs()))
    }

    /// Every `finished` event of `batch`: (job id, worker id, artifacts).
    async fn finished_events(
        &self,
        batch: &BatchId,
        n_jobs: usize,
    ) -> Vec<(String, String, Vec<ArtifactRef>)> {
        let fabric = cowork_fabric::nats::connect(&NatsConfig::new(&self.nats.url()))
            .await
            .expect("connecting to nats");
        let mut subscription = fabric
            .events
            .subscribe(batch, 1)
            .await
            .expect("subscribing");
        let last = fabric
            .events
            .last_sequence(batch)
            .await
            .expect("last sequence");
        let mut finished = Vec::new();
        // Every event of a decided batch is already stored: read up to the last sequence.
        while let Some(item) = subscription.next().await {
            let (seq, event) = item.expect("an event");
            if let JobEventKind::Finished { artifacts, .. } = event.event {
                finished.push((event.job_id.to_string(), event.worker_id.clone(), artifacts));
            }
            if seq >= last {
                break;
            }
        }
        assert!(
            finished.len() >= n_jobs,
            "{} finished events for {n_jobs} jobs",
            finished.len()
        );
        finished
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn batch_of(envelope: &serde_json::Value) -> BatchId {
    let id = envelope["fleet"]["batchId"]
        .as_str()
        .expect("the envelope's fleet key names the batch");
    BatchId::new(id).expect("a valid batch id")
}

fn demo_args() -> Vec<&'static str> {
    vec![
        "examples/demo/scenarios/csv-report.yaml",
        "--repeat",
        "5",
        "--matrix",
        "examples/demo/matrix.yaml",
        "--executor",
        "sim",
        "--sim-profile",
        "examples/demo/sim-profile.yaml",
    ]
}

/// The demo batch on the fleet with `n_workers` workers: its rollup.json bytes, after checking
/// every job's artifacts against the sha256 its `finished` event recorded.
async fn fleet_rollup(n_workers: usize) -> Vec<u8> {
    let mut fleet = Fleet::start();
    for index in 0..n_workers {
        fleet.spawn_worker(&format!("w{index}"), "container", "2");
    }
    let out = fleet.submit(&workspace_root(), &demo_args());
    let envelope = out.envelope();
    let code = out.code();
    assert_eq!(
        code,
        if envelope["ok"] == true { 0 } else { 1 },
        "{}\n{}",
        out.context(),
        fleet.logs()
    );
    assert_eq!(envelope["results"].as_array().map(Vec::len), Some(20));
    let batch = batch_of(&envelope);
    let finished = fleet.finished_events(&batch, 20).await;
    let mut jobs_with_result = std::collections::BTreeSet::new();
    for (job_id, _, artifacts) in &finished {
        for artifact in artifacts {
            let bytes = fleet.object(&artifact.key);
            assert_eq!(
                cowork_fabric::sha256_hex(&bytes),
                artifact.sha256,
                "{} of {job_id}",
                artifact.key
            );
            assert_eq!(bytes.len() as u64, artifact.size, "{}", artifact.key);
            if artifact.key.ends_with("/result.json") {
                jobs_with_result.insert(job_id.clone());
            }
        }
    }
    assert_eq!(
        jobs_with_result.len(),
        20,
        "every job's result.json is stored"
    );
    let workers_used: std::collections::BTreeSet<&str> = finished
        .iter()
        .map(|(_, worker, _)| worker.as_str())
        .collect();
    assert!(workers_used.len() <= n_workers);
    fleet.object(&format!("batches/{batch}/rollup.json"))
}

fn embedded_rollup() -> Vec<u8> {
    let sandbox = Sandbox::empty();
    let store = sandbox.store();
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(demo_args().iter().map(|a| (*a).to_owned()));
    args.extend([
        "--store".into(),
        store.display().to_string(),
        "--quiet".into(),
    ]);
    let out = Command::new(env!("CARGO_BIN_EXE_cowork"))
        .args(&args)
        .current_dir(workspace_root())
        .output()
        .expect("running cowork run");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let batches: Vec<PathBuf> = std::fs::read_dir(store.join("batches"))
        .expect("batches dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(batches.len(), 1);
    std::fs::read(batches[0].join("rollup.json")).expect("rollup.json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_batch_gives_the_same_rollup_embedded_and_on_1_and_3_workers() {
    let embedded = embedded_rollup();
    let one = fleet_rollup(1).await;
    let three = fleet_rollup(3).await;
    assert_eq!(
        String::from_utf8_lossy(&embedded),
        String::from_utf8_lossy(&one),
        "embedded vs 1 worker"
    );
    assert_eq!(
        String::from_utf8_lossy(&embedded),
        String::from_utf8_lossy(&three),
        "embedded vs 3 workers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_reach_only_workers_serving_their_tier() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("wc", "container", "2");
    fleet.spawn_worker("wm", "microvm", "2");
    fleet.spawn_worker("wr", "replay", "2");
    let sandbox = Sandbox::empty();
    crate::support::copy_dir(&crate::support::fixture("routing"), sandbox.path());
    let out = fleet.submit(
        sandbox.path(),
        &["scenarios", "--repeat", "3", "--executor", "sim"],
    );
    let envelope = out.envelope();
    let batch = batch_of(&envelope);
    for (job_id, worker, _) in fleet.finished_events(&batch, 6).await {
        // Unit f0 is in-container.yaml, f1 is in-microvm.yaml (sorted listing).
        let expected = if job_id.contains("/f0/") { "wc" } else { "wm" };
        assert_eq!(
            worker,
            expected,
            "{job_id} ran on {worker}\n{}",
            fleet.logs()
        );
    }
    let out = fleet.submit(
        &workspace_root(),
        &["--replay", "examples/demo/cassettes", "--executor", "sim"],
    );
    let envelope = out.envelope();
    assert_eq!(envelope["command"], "replay");
    assert_eq!(
        envelope["results"].as_array().map(Vec::len),
        Some(2),
        "one result per cassette"
    );
    let batch = batch_of(&envelope);
    for (job_id, worker, _) in fleet.finished_events(&batch, 2).await {
        assert_eq!(worker, "wr", "replay job {job_id} ran on {worker}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_worker_without_losing_its_running_job() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("wd", "container", "1");
    let sandbox = Sandbox::empty();
    crate::support::copy_dir(&crate::support::fixture("routing"), sandbox.path());
    // Each simulated run lasts 3 s of real time, so the drained worker is mid-job.
    sandbox.write(
        "slow.yaml",
        "rules:\n  - duration_ms: 3000\n    time_scale: 1.0\n    pass_rate: 1.0\n",
    );
    let coordinator = format!("http://127.0.0.1:{}", fleet.api_port);
    let mut submit = Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut submit);
    submit
        .args([
            "submit",
            "scenarios/in-container.yaml",
            "--repeat",
            "3",
            "--executor",
            "sim",
            "--sim-profile",
            "slow.yaml",
        ])
        .args(["--coordinator", &coordinator])
        .current_dir(sandbox.path());
    let out = submit.output().expect("running cowork submit");
    let out = Output::new("cowork submit".into(), sandbox.path().to_path_buf(), out);
    assert_eq!(out.code(), 0, "{}", out.context());
    let batch = BatchId::new(out.stdout.trim()).expect("submit prints the batch id");

    // Wait for the worker's first `started` event: the subscription wakes on it, no polling.
    let fabric = cowork_fabric::nats::connect(&NatsConfig::new(&fleet.nats.url()))
        .await
        .expect("connecting to nats");
    let mut subscription = fabric
        .events
        .subscribe(&batch, 1)
        .await
        .expect("subscribing");
    loop {
        let (_, event) = subscription
            .next()
            .await
            .expect("an event")
            .expect("a readable event");
        if matches!(event.event, JobEventKind::Started) && event.worker_id == "wd" {
            break;
        }
    }
    let (_, worker) = fleet
        .children
        .iter_mut()
        .find(|(name, _)| name == "wd")
        .expect("the worker");
    let pid = worker.id().to_string();
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("sending SIGTERM");
    assert!(status.success());
    let exit = worker.wait().expect("waiting for the drained worker");
    assert_eq!(
        exit.code(),
        Some(0),
        "a drained worker exits 0\n{}",
        fleet.log("wd")
    );
    let log = fleet.log("wd");
    let drained: usize = log
        .split("drained after ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the worker says how many jobs it finished\n{log}"));
    assert!(
        drained >= 1,
        "the running job finished before the worker exited\n{log}"
    );

    // The rest of the batch is finished by a new worker; every job is counted once.
    fleet.spawn_worker("w2", "container", "2");
    let mut watch = Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut watch);
    watch
        .args([
            "watch",
            batch.as_str(),
            "--coordinator",
            &coordinator,
            "--output-format",
            "json",
            "--quiet",
        ])
        .current_dir(sandbox.path());
    let out = Output::new(
        "cowork watch".into(),
        sandbox.path().to_path_buf(),
        watch.output().expect("running cowork watch"),
    );
    let envelope = out.envelope();
    assert_eq!(out.code(), 0, "{}\n{}", out.context(), fleet.logs());
    assert_eq!(envelope["results"].as_array().map(Vec::len), Some(3));
    let finished = fleet.finished_events(&batch, 3).await;
    assert_eq!(finished.len(), 3, "each job finished exactly once");

    // `cowork results --download` saves every stored file of the batch, byte for byte.
    let download = sandbox.path().join("download");
    let mut results = Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut results);
    let download_arg = download.display().to_string();
    results
        .args([
            "results",
            batch.as_str(),
            "--coordinator",
            &coordinator,
            "--download",
            &download_arg,
        ])
        .current_dir(sandbox.path());
    let out = Output::new(
        "cowork results".into(),
        sandbox.path().to_path_buf(),
        results.output().expect("running cowork results"),
    );
    assert_eq!(out.code(), 0, "{}", out.context());
    for (_, _, artifacts) in &finished {
        for artifact in artifacts {
            let local = artifact
                .key
                .strip_prefix(&format!("batches/{batch}/"))
                .expect("a key of this batch");
            let bytes = std::fs::read(download.join(local))
                .unwrap_or_else(|e| panic!("{local} was not downloaded: {e}"));
            assert_eq!(
                cowork_fabric::sha256_hex(&bytes),
                artifact.sha256,
                "{local}"
            );
        }
    }
    for document in ["spec.json", "rollup.json", "envelope.json"] {
        assert_eq!(
            std::fs::read(download.join(document)).ok(),
            Some(fleet.object(&format!("batches/{batch}/{document}"))),
            "{document}"
        );
    }
    let by_drained = finished
        .iter()
        .filter(|(_, worker, _)| worker == "wd")
        .count();
    assert_eq!(
        by_drained, drained,
        "every job the drained worker ran was stored and reported"
    );
}
