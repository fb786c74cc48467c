//! A fleet under test: a real nats-server with JetStream on disk, a real S3 server (s3s-fs), and
//! `cowork coordinator` / `cowork worker` as separate OS processes, all killed on drop. Shared by
//! the distributed, fault, hostile-input and secrets tests.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cowork_fabric::EventLog;
use cowork_fabric::nats::NatsConfig;
use cowork_schema::BatchId;
use cowork_schema::event::{ArtifactRef, JobEvent, JobEventKind};
use cowork_testkit::{ClusterProbe, NatsCluster, NatsServer, S3Server, free_port, wait_until};

use crate::support::Output;

pub const BUCKET: &str = "cowork-it";
pub const TOKEN: &str = "it-token-7f3a";

/// A fleet: servers plus coordinator and worker processes, all killed on drop.
pub struct Fleet {
    /// The NATS server, or the first node of a cluster (`n1`).
    pub nats: NatsServer,
    /// The other nodes of a cluster (`n2`, `n3`, …); empty for a single server.
    pub other_nats: Vec<NatsServer>,
    /// What every process is given as its NATS URL (every node of a cluster).
    pub nats_url: String,
    /// Readiness of a cluster's nodes.
    pub nats_probe: Option<ClusterProbe>,
    pub s3: S3Server,
    pub api_port: u16,
    pub dir: tempfile::TempDir,
    pub children: Vec<(String, Child)>,
    /// Extra environment for every process this fleet starts (e.g. `COWORK_ACK_WAIT`).
    pub extra_env: Vec<(String, String)>,
    /// The `--coordinator` of client commands when it is not [`Fleet::coordinator_url`]
    /// (several coordinators, comma-separated).
    pub client_coordinators: Option<String>,
}

impl Fleet {
    /// Servers and a coordinator with the default settings.
    pub fn start() -> Fleet {
        Fleet::start_with_env(&[])
    }

    /// Servers and a coordinator; `env` is added to every process the fleet starts.
    pub fn start_with_env(env: &[(&str, &str)]) -> Fleet {
        let nats = NatsServer::start();
        let s3 = S3Server::start();
        Fleet::with_servers(nats, s3, env)
    }

    /// Servers and a coordinator on a JetStream cluster of `n_nodes` loopback nodes, every
    /// process given every node's URL.
    pub fn on_cluster(n_nodes: usize, env: &[(&str, &str)]) -> Fleet {
        let (mut nodes, probe) = NatsCluster::start(n_nodes).into_parts();
        let url = nodes
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",");
        let first = nodes.remove(0);
        let mut fleet = Fleet::without_coordinator(first, S3Server::start(), env);
        fleet.other_nats = nodes;
        fleet.nats_url = url;
        fleet.nats_probe = Some(probe);
        fleet.spawn_coordinator();
        fleet
    }

    /// Node `idx` of the cluster (0 is `n1`, the fleet's `nats`).
    pub fn nats_node(&mut self, idx: usize) -> &mut NatsServer {
        if idx == 0 {
            &mut self.nats
        } else {
            &mut self.other_nats[idx - 1]
        }
    }

    /// Waits until the cluster nodes `nodes` report healthy (a meta leader, streams current).
    pub fn wait_nats_healthy(&self, nodes: &[usize]) {
        self.nats_probe
            .as_ref()
            .expect("a fleet on a cluster")
            .wait_healthy(nodes);
    }

    /// A fleet on servers the caller started (e.g. bound where a network namespace reaches).
    pub fn with_servers(nats: NatsServer, s3: S3Server, env: &[(&str, &str)]) -> Fleet {
        let mut fleet = Fleet::without_coordinator(nats, s3, env);
        fleet.spawn_coordinator();
        fleet
    }

    fn without_coordinator(nats: NatsServer, s3: S3Server, env: &[(&str, &str)]) -> Fleet {
        let dir = tempfile::Builder::new()
            .prefix("cowork-fleet-")
            .tempdir()
            .expect("temp dir");
        Fleet {
            nats_url: nats.url(),
            nats,
            other_nats: Vec::new(),
            nats_probe: None,
            s3,
            api_port: free_port(),
            dir,
            children: Vec::new(),
            extra_env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            client_coordinators: None,
        }
    }

    /// The coordinator's base URL.
    pub fn coordinator_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.api_port)
    }

    /// What client commands are given as `--coordinator`.
    pub fn client_coordinator(&self) -> String {
        self.client_coordinators
            .clone()
            .unwrap_or_else(|| self.coordinator_url())
    }

    /// Sets the fleet's environment on `command`: no inherited `COWORK_*`, the servers'
    /// endpoints and credentials, the API token, and the extra env.
    pub fn env(&self, command: &mut Command) {
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("COWORK_") {
                command.env_remove(key);
            }
        }
        command
            .env("COWORK_NATS_URL", &self.nats_url)
            .env("COWORK_S3_ENDPOINT", self.s3.endpoint())
            .env("COWORK_S3_BUCKET", BUCKET)
            .env("COWORK_S3_ACCESS_KEY_ID", &self.s3.access_key)
            .env("COWORK_S3_SECRET_ACCESS_KEY", &self.s3.secret_key)
            .env("COWORK_API_TOKEN", TOKEN)
            .env("COWORK_LOG", "warn");
        for (key, value) in &self.extra_env {
            command.env(key, value);
        }
    }

    /// Starts `cowork <args>` as the fleet process `name`, logging to `<dir>/<name>.log`
    /// (appended, so a restarted process keeps its earlier log).
    pub fn spawn(&mut self, name: &str, args: &[&str]) {
        self.spawn_program(name, env!("CARGO_BIN_EXE_cowork"), &[], args);
    }

    /// Starts `program <prefix…> <args…>` as the fleet process `name` (e.g. `ip netns exec ns
    /// cowork worker …`).
    pub fn spawn_program(&mut self, name: &str, program: &str, prefix: &[&str], args: &[&str]) {
        self.spawn_program_with_env(name, program, prefix, args, &[]);
    }

    /// [`Fleet::spawn_program`] with environment overrides (e.g. another NATS URL).
    pub fn spawn_program_with_env(
        &mut self,
        name: &str,
        program: &str,
        prefix: &[&str],
        args: &[&str],
        env: &[(&str, String)],
    ) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.log")))
            .expect("log file");
        let mut command = Command::new(program);
        self.env(&mut command);
        for (key, value) in env {
            command.env(key, value);
        }
        command
            .args(prefix)
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone"))
            .stderr(log);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {program} for {name}: {e}"));
        self.children.push((name.to_owned(), child));
    }

    /// Starts the coordinator and returns once its API accepts connections.
    pub fn spawn_coordinator(&mut self) {
        self.spawn_coordinator_as("coordinator", self.api_port);
    }

    /// Starts a coordinator named `name` (its log and its process) listening on `port`, and
    /// returns once its API accepts connections: another replica beside the first.
    pub fn spawn_coordinator_as(&mut self, name: &str, port: u16) {
        let listen = format!("127.0.0.1:{port}");
        let mut args = vec![
            "coordinator".to_owned(),
            "--listen".to_owned(),
            listen,
            "--s3-create-bucket".to_owned(),
            "--scratch-dir".to_owned(),
        ];
        // The first coordinator keeps its default id (host and pid: a restart is another
        // replica) and the scratch dir the tests look into.
        if name == "coordinator" {
            args.push("scratch".to_owned());
        } else {
            args.extend([
                format!("{name}-scratch"),
                "--coordinator-id".to_owned(),
                name.to_owned(),
            ]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.spawn(name, &args);
        // Readiness probe with a deadline: returns as soon as the API accepts connections.
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        wait_until("the coordinator listens")
            .within(Duration::from_secs(30))
            .every(Duration::from_millis(20))
            .context(|| format!("log:\n{}", self.log(name)))
            .poll(|| TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok());
    }

    /// The arguments of a `sim` worker named `name`.
    pub fn worker_args(name: &str, tiers: &str, slots: &str) -> Vec<String> {
        [
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
            &format!("{name}/cache"),
            "--work-dir",
            &format!("{name}/work"),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    }

    /// Starts a `sim` worker serving `tiers` with `slots` slots.
    pub fn spawn_worker(&mut self, name: &str, tiers: &str, slots: &str) {
        self.spawn_worker_with(name, tiers, slots, &[]);
    }

    /// Starts a `sim` worker with extra flags.
    pub fn spawn_worker_with(&mut self, name: &str, tiers: &str, slots: &str, extra: &[&str]) {
        let mut args = Fleet::worker_args(name, tiers, slots);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.spawn(name, &args);
    }

    /// SIGKILLs the process `name` and reaps it.
    pub fn kill(&mut self, name: &str) {
        let position = self
            .children
            .iter()
            .rposition(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no fleet process named {name}"));
        let (_, mut child) = self.children.remove(position);
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Sends `signal` (e.g. `-STOP`, `-CONT`) to the fleet process `name`, which goes on
    /// being the fleet's.
    pub fn signal(&self, name: &str, signal: &str) {
        let (_, child) = self
            .children
            .iter()
            .find(|(known, _)| known == name)
            .unwrap_or_else(|| panic!("no fleet process named {name}"));
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("sending a signal");
        assert!(status.success(), "kill {signal} to {name}");
    }

    /// Sends SIGTERM to the fleet process `name` (a node drain, a stopped coordinator) and
    /// waits for it to exit, which must be with 0.
    pub fn terminate(&mut self, name: &str) {
        let (_, child) = self
            .children
            .iter_mut()
            .find(|(known, _)| known == name)
            .unwrap_or_else(|| panic!("no fleet process named {name}"));
        let pid = child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("sending SIGTERM");
        assert!(status.success(), "SIGTERM to {name}");
        let exit = child
            .wait()
            .expect("waiting for a terminated fleet process");
        assert_eq!(
            exit.code(),
            Some(0),
            "{name} exits 0 on SIGTERM\n{}",
            self.log(name)
        );
    }

    /// The log of process `name`.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Every process's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut names: Vec<&str> = self.children.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
            .iter()
            .map(|name| format!("--- {name} ---\n{}", self.log(name)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `cowork <args…> --coordinator <url>` with the fleet's environment, from `cwd`.
    pub fn cowork(&self, cwd: &Path, args: &[&str]) -> Output {
        self.cowork_with_env(cwd, args, &[])
    }

    /// [`Fleet::cowork`] with `env` on top of the fleet's environment (e.g. another
    /// `COWORK_API_TOKEN`).
    pub fn cowork_with_env(&self, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
        self.env(&mut command);
        for (key, value) in env {
            command.env(key, value);
        }
        let coordinator = self.client_coordinator();
        command
            .args(args)
            .args(["--coordinator", &coordinator])
            .current_dir(cwd);
        let out = command.output().expect("running cowork");
        Output::new(
            format!("cowork {} --coordinator {coordinator}", args.join(" ")),
            cwd.to_path_buf(),
            out,
        )
    }

    /// `cowork submit … --watch --output-format json` from `cwd`.
    pub fn submit(&self, cwd: &Path, args: &[&str]) -> Output {
        let mut all = vec!["submit"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--watch", "--output-format", "json", "--quiet"]);
        self.cowork(cwd, &all)
    }

    /// [`Fleet::submit`], again until it exits `code`: the first submits can find no live
    /// worker yet (a worker registers a moment after it starts).
    pub fn submit_until_code(&self, cwd: &Path, args: &[&str], code: i32) -> Output {
        wait_until(format!(
            "a submit exiting {code}: a live worker takes the batch"
        ))
        .within(Duration::from_secs(60))
        .every(Duration::from_millis(100))
        .context(|| self.logs())
        .poll(|| {
            let out = self.submit(cwd, args);
            if out.code() == code {
                Ok(out)
            } else {
                Err(out.context())
            }
        })
    }

    /// The body of `GET target` from the coordinator with the API token; panics unless `200`.
    pub fn api_get(&self, target: &str) -> String {
        let (status, _, body) = crate::report::http_get(self.api_port, target, Some(TOKEN));
        assert_eq!(status, 200, "GET {target}: {body}\n{}", self.logs());
        body
    }

    /// `cowork submit …` without waiting: the batch id it printed.
    pub fn submit_detached(&self, cwd: &Path, args: &[&str]) -> BatchId {
        let mut all = vec!["submit"];
        all.extend_from_slice(args);
        let out = self.cowork(cwd, &all);
        assert_eq!(out.code(), 0, "{}\n{}", out.context(), self.logs());
        BatchId::new(out.stdout.trim()).expect("submit prints the batch id")
    }

    /// The command of `cowork watch <batch> --output-format json --quiet` from `cwd`, with
    /// its output piped, for a test that starts it and does something else while it runs.
    pub fn watch_command(&self, cwd: &Path, batch: &BatchId) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
        self.env(&mut command);
        command
            .args([
                "watch",
                batch.as_str(),
                "--output-format",
                "json",
                "--quiet",
            ])
            .args(["--coordinator", &self.client_coordinator()])
            .current_dir(cwd)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command
    }

    /// `cowork watch <batch> --output-format json --quiet` from `cwd`.
    pub fn watch(&self, cwd: &Path, batch: &BatchId) -> Output {
        self.cowork(
            cwd,
            &[
                "watch",
                batch.as_str(),
                "--output-format",
                "json",
                "--quiet",
            ],
        )
    }

    /// The bytes of an object in the bucket, read from the server's data directory.
    pub fn object(&self, key: &str) -> Vec<u8> {
        let path = self.s3.data_dir().join(BUCKET).join(key);
        std::fs::read(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}\n{}", path.display(), self.logs()))
    }

    /// The digest of the one bundle in the bucket (a test that submitted one batch).
    pub fn only_bundle_sha256(&self) -> String {
        self.object_keys()
            .iter()
            .find_map(|key| {
                key.strip_prefix("bundles/")
                    .and_then(|name| name.strip_suffix(".tar.zst"))
                    .map(str::to_owned)
            })
            .expect("the batch's bundle is stored")
    }

    /// Every key in the bucket (relative paths of the server's data directory).
    pub fn object_keys(&self) -> Vec<String> {
        let root = self.s3.data_dir().join(BUCKET);
        let mut keys = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if let Ok(rel) = path.strip_prefix(&root) {
                    keys.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        keys.sort();
        keys
    }

    /// Every event of `batch` stored so far, in order.
    pub async fn events(&self, batch: &BatchId) -> Vec<JobEvent> {
        self.events_with_seq(batch)
            .await
            .into_iter()
            .map(|(_, event)| event)
            .collect()
    }

    /// Every event of `batch` so far with its sequence in the events stream, which orders
    /// the events of all batches.
    pub async fn events_with_seq(&self, batch: &BatchId) -> Vec<(u64, JobEvent)> {
        let fabric = cowork_fabric::nats::connect(&NatsConfig::new(&self.nats_url))
            .await
            .expect("connecting to nats");
        let last = fabric
            .events
            .last_sequence(batch)
            .await
            .expect("last sequence");
        let mut events = Vec::new();
        if last == 0 {
            return events;
        }
        let mut subscription = fabric
            .events
            .subscribe(batch, 1)
            .await
            .expect("subscribing");
        while let Some(item) = subscription.next().await {
            let (seq, event) = item.expect("an event");
            events.push((seq, event));
            if seq >= last {
                break;
            }
        }
        events
    }

    /// Every `finished` event of `batch`: (job id, worker id, artifacts).
    pub async fn finished_events(
        &self,
        batch: &BatchId,
        n_jobs: usize,
    ) -> Vec<(String, String, Vec<ArtifactRef>)> {
        let finished: Vec<(String, String, Vec<ArtifactRef>)> = self
            .events(batch)
            .await
            .into_iter()
            .filter_map(|event| match event.event {
                JobEventKind::Finished { artifacts, .. } => {
                    Some((event.job_id.to_string(), event.worker_id.clone(), artifacts))
                }
                _ => None,
            })
            .collect();
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

/// The batch id an envelope's `fleet` key names.
/// The row of `batch` in the batch list page (`/v1/ui`).
pub fn list_page_row<'a>(page: &'a str, batch: &str) -> &'a str {
    page.split(&format!("<tr data-batch=\"{batch}\""))
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap_or_else(|| panic!("no row for {batch} in {page}"))
}

pub fn batch_of(envelope: &serde_json::Value) -> BatchId {
    let id = envelope["fleet"]["batchId"]
        .as_str()
        .expect("the envelope's fleet key names the batch");
    BatchId::new(id).expect("a valid batch id")
}
