//! The fleet on a three-node NATS cluster in containers, as on separate hosts: three
//! JetStream nodes, the S3 server, the coordinator and two workers, each in its own container
//! of the `FROM scratch` image `multihost` builds, on networks this test creates. The streams
//! get R3 from the cluster (no replica setting anywhere). During a 120-job batch of 1-s `sim`
//! jobs:
//!
//! - (c) a partition cuts node n3 and the worker beside it (w1, which talks to n3 alone) off
//!   from the other two nodes for 20 s, less than the ack wait (60 s), then heals;
//! - (d) the coordinator, which reaches each node over a network of its own, is cut off from
//!   the node that is the cluster's meta leader for the rest of the batch.
//!
//! Each batch must end judged exactly as `cowork run` judges it (the rollup byte for byte),
//! with 0 lost, 0 duplicates and no job started twice. (d) must also report every job exactly
//! once. In (c) a job may be reported a second time from its stored run: when the consumer's
//! leader changes during the partition, JetStream can lose the job's ack and deliver it again;
//! that delivery finds the job's record and reports it without running it, marked as such, and
//! the fold counts a re-ack (`fleet.jobs.reacked`), not a duplicate. The nodes run with `--no_advertise`
//! (as the NATS Helm chart does): a client keeps to the URLs it was given instead of learning
//! addresses that another network cannot reach.
//!
//! Without a Docker engine the tests say so and pass, unless `CI=true`, where they fail.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cowork_fabric::ArtifactStore;
use cowork_fabric::s3::{S3ArtifactStore, S3Config};
use cowork_fabric::secret::Secret;
use cowork_schema::BatchId;
use cowork_schema::event::JobEventKind;
use cowork_testkit::wait_until;
use serde_json::Value;

use crate::faults::{batch_args, check_each_ran_once, profile_file, reference_rollup_of};
use crate::multihost::{
    ACCESS_KEY, API_PORT, API_TOKEN, BUCKET, DockerLab, Follower, NATS_PORT, S3_PORT, SECRET_KEY,
    all_events, cowork_client, require_docker,
};

/// Runs per matrix cell: 4 cells × 30 = 120 jobs.
const REPEAT: usize = 30;
const JOBS: usize = 4 * REPEAT;
const RUN_MS: u64 = 1000;
/// Monitoring port of every node (`/healthz`, `/jsz`).
const MONITOR_PORT: u16 = 8222;
const ROUTE_PORT: u16 = 6222;
/// How long the partition of (c) lasts: the fault itself, below the ack wait.
const PARTITION: Duration = Duration::from_secs(20);
const NODES: [&str; 3] = ["n1", "n2", "n3"];

/// Whether a job may be reported more than once (never run more than once, never counted as
/// a duplicate).
#[derive(Clone, Copy, Debug)]
enum Rereports {
    /// Every job has exactly one `finished` event.
    Never,
    /// A job may have later `finished` events that report its one stored run again: a
    /// consumer leader that changes during a partition can lose the job's ack and deliver it
    /// again, and that delivery finds the stored record and reports it without running it,
    /// marked, so the fold counts a re-ack (`fleet.jobs.reacked`).
    ReAcks,
}

/// `true` when a Docker engine answers. Without one the test is skipped with a message, except
/// under `CI=true`, where a missing engine fails it (CI runs where the engine exists).
fn docker_available(test: &str) -> bool {
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        require_docker();
        return true;
    }
    let answers = std::process::Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !answers {
        eprintln!(
            "SKIPPED {test}: no Docker engine answers `docker version` (with CI=true this fails)"
        );
    }
    answers
}

/// `--env` pairs of every fleet container, with `nats_url` as its NATS URL.
fn fleet_env(nats_url: &str) -> Vec<String> {
    [
        format!("COWORK_NATS_URL={nats_url}"),
        format!("COWORK_S3_ENDPOINT=http://s3:{S3_PORT}"),
        format!("COWORK_S3_BUCKET={BUCKET}"),
        format!("COWORK_S3_ACCESS_KEY_ID={ACCESS_KEY}"),
        format!("COWORK_S3_SECRET_ACCESS_KEY={SECRET_KEY}"),
        format!("COWORK_API_TOKEN={API_TOKEN}"),
        "COWORK_LOG=warn".to_owned(),
    ]
    .into_iter()
    .flat_map(|pair| ["--env".to_owned(), pair])
    .collect()
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

const ALL_NODES_URL: &str = "nats://n1:4222,nats://n2:4222,nats://n3:4222";

/// The lab of one test: networks made, image built, the S3 server and three nodes serving.
struct ClusterLab {
    lab: DockerLab,
    /// The network of the nodes, the S3 server and the workers.
    main: String,
}

impl ClusterLab {
    fn start() -> ClusterLab {
        let mut lab = DockerLab::new();
        // Far above every outage of these tests: a job held through one is not delivered
        // again, so no job runs twice.
        lab.ack_wait = "60s".to_owned();
        lab.build_image();
        let main = lab.create_network();
        let s3_port = S3_PORT.to_string();
        lab.run(
            "s3",
            &[],
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
        let routes = NODES
            .iter()
            .map(|node| format!("nats://{node}:{ROUTE_PORT}"))
            .collect::<Vec<_>>()
            .join(",");
        for node in NODES {
            let nats_port = NATS_PORT.to_string();
            let cluster = format!("nats://0.0.0.0:{ROUTE_PORT}");
            let monitor = MONITOR_PORT.to_string();
            lab.run(
                node,
                &[],
                &[
                    "/nats-server",
                    "-a",
                    "0.0.0.0",
                    "-p",
                    &nats_port,
                    "-js",
                    "-sd",
                    "/tmp/jetstream",
                    "-n",
                    node,
                    "--cluster_name",
                    "cowork",
                    "--cluster",
                    &cluster,
                    "--routes",
                    &routes,
                    "--no_advertise",
                    "-m",
                    &monitor,
                ],
            );
        }
        let cluster = ClusterLab { lab, main };
        let s3_address = cluster.address("s3", &cluster.main, S3_PORT);
        cluster
            .lab
            .wait_serving("s3", s3_address, b"GET / HTTP/1.0\r\n\r\n", b"HTTP/1.");
        cluster.wait_healthy();
        cluster
    }

    /// The address of `port` of `role` on `network`, as the host reaches it. The host routes to
    /// the containers of a bridge network directly; a published port would not do, since
    /// Docker may move a container's port mapping when its networks change.
    fn address(&self, role: &str, network: &str, port: u16) -> SocketAddr {
        let name = self.lab.container_name(role);
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
        let ip = crate::multihost::docker(&["inspect", "--format", &format, &name], &|| {
            self.lab.logs()
        });
        let ip: std::net::IpAddr = ip.trim().parse().unwrap_or_else(|e| {
            panic!(
                "{role} on {network}: address {ip:?}: {e}\n{}",
                self.lab.logs()
            )
        });
        SocketAddr::new(ip, port)
    }

    /// Waits until every node answers `/healthz` with 200 (a meta leader, streams current).
    fn wait_healthy(&self) {
        for node in NODES {
            let address = self.address(node, &self.main, MONITOR_PORT);
            self.lab.wait_serving(
                node,
                address,
                b"GET /healthz HTTP/1.0\r\n\r\n",
                b"HTTP/1.0 200",
            );
        }
    }

    /// The nodes' client ports as the host reaches them, as one NATS URL.
    fn host_nats_url(&self) -> String {
        self.host_nats_url_of(&NODES)
    }

    /// [`ClusterLab::host_nats_url`] of some nodes only.
    fn host_nats_url_of(&self, nodes: &[&str]) -> String {
        nodes
            .iter()
            .map(|node| format!("nats://{}", self.address(node, &self.main, NATS_PORT)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts the coordinator (first on `network`) and waits until it is ready; returns its
    /// API's base URL on the host.
    fn start_coordinator(&mut self, network: &str, nats_url: &str) -> String {
        self.run_coordinator(network, nats_url);
        let address = self.address("coordinator", network, API_PORT);
        self.wait_ready(address);
        format!("http://{address}")
    }

    /// Starts the coordinator's container on `network`, without waiting for it.
    fn run_coordinator(&mut self, network: &str, nats_url: &str) {
        let args = fleet_env(nats_url);
        let listen = format!("0.0.0.0:{API_PORT}");
        self.lab.run_on(
            network,
            "coordinator",
            &as_strs(&args),
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
    }

    fn wait_ready(&self, address: SocketAddr) {
        self.lab.wait_serving(
            "coordinator",
            address,
            b"GET /readyz HTTP/1.1\r\nHost: coordinator\r\nConnection: close\r\n\r\n",
            b"HTTP/1.1 200",
        );
    }

    fn start_worker(&mut self, name: &str, nats_url: &str) {
        let env = fleet_env(nats_url);
        let main = self.main.clone();
        self.lab.run_on(
            &main,
            name,
            &as_strs(&env),
            &[
                "/cowork",
                "worker",
                "--executor",
                "sim",
                "--tiers",
                "container",
                "--slots",
                "4",
                "--worker-id",
                name,
                "--cache-dir",
                "/tmp/cache",
                "--work-dir",
                "/tmp/work",
            ],
        );
    }

    /// Submits the 120-job batch from the host; returns its id.
    fn submit(&self, coordinator_url: &str) -> BatchId {
        // The batch `reference_rollup_of` judges: same seed, matrix and profile.
        let mut args = vec!["submit".to_owned()];
        args.extend(batch_args(&profile_file(RUN_MS, 1.0), REPEAT));
        let submitted = cowork_client(coordinator_url, &as_strs(&args));
        assert_eq!(
            submitted.code(),
            0,
            "{}\n{}",
            submitted.context(),
            self.lab.logs()
        );
        BatchId::new(submitted.stdout.trim()).expect("submit prints the batch id")
    }

    /// The node that is the cluster's meta leader now, from a node's `/jsz`.
    fn meta_leader(&self) -> String {
        use std::io::{Read, Write};
        wait_until("a node names a meta leader")
            .within(Duration::from_secs(30))
            .every(Duration::from_millis(200))
            .context(|| self.lab.logs())
            .poll(|| {
                NODES.iter().find_map(|node| {
                    let address = self.address(node, &self.main, MONITOR_PORT);
                    let mut stream =
                        std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1))
                            .ok()?;
                    // A short deadline bounds one probe; the wait owns the overall bound.
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                    let _ = stream.write_all(b"GET /jsz HTTP/1.0\r\n\r\n");
                    let mut reply = String::new();
                    let _ = stream.read_to_string(&mut reply);
                    let body = reply.split("\r\n\r\n").nth(1).unwrap_or_default();
                    let jsz = serde_json::from_str::<Value>(body).ok()?;
                    let leader = jsz["meta_cluster"]["leader"].as_str()?;
                    NODES.contains(&leader).then(|| leader.to_owned())
                })
            })
    }

    /// Follows the batch to its end from the host and checks it: every job counted, started
    /// exactly once and finished, nothing lost, no duplicate (re-reports as `rereports`
    /// allows), every result stored with its recorded sha256, and the rollup equal to `cowork
    /// run`'s.
    async fn finish_and_check(&self, coordinator_url: &str, batch: &BatchId, rereports: Rereports) {
        let watched = cowork_client(
            coordinator_url,
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
            self.lab.logs()
        );
        let envelope = watched.envelope();
        let fleet_key = &envelope["fleet"];
        assert_eq!(
            envelope["results"].as_array().map(Vec::len),
            Some(JOBS),
            "{fleet_key}"
        );
        let mut s3_config = S3Config::new(BUCKET, ACCESS_KEY, Secret::new(SECRET_KEY));
        s3_config.endpoint = Some(format!(
            "http://{}",
            self.address("s3", &self.main, S3_PORT)
        ));
        let store = S3ArtifactStore::connect(&s3_config)
            .await
            .expect("connecting to the containerized s3 server from the host");
        let events = all_events(&self.host_nats_url(), batch).await;
        for event in &events {
            let JobEventKind::Finished { artifacts, .. } = &event.event else {
                continue;
            };
            for artifact in artifacts {
                let bytes = store.get(&artifact.key).await.unwrap_or_else(|e| {
                    panic!("reading {}: {e}\n{}", artifact.key, self.lab.logs())
                });
                assert_eq!(
                    cowork_fabric::sha256_hex(&bytes),
                    artifact.sha256,
                    "{}",
                    artifact.key
                );
            }
        }
        let reported_again = check_each_ran_once(&events, JOBS, fleet_key);
        match rereports {
            Rereports::Never => assert_eq!(
                reported_again, 0,
                "no job is reported twice when no stream changes leader\n{fleet_key}"
            ),
            Rereports::ReAcks => {}
        }
        for (counter, expected) in [("planned", JOBS), ("finished", JOBS)] {
            assert_eq!(
                fleet_key["jobs"][counter], expected,
                "fleet.jobs.{counter}: {fleet_key}"
            );
        }
        let rollup = store
            .get(&format!("batches/{batch}/rollup.json"))
            .await
            .unwrap_or_else(|e| panic!("reading the rollup: {e}\n{}", self.lab.logs()));
        assert_eq!(
            String::from_utf8_lossy(&rollup),
            String::from_utf8_lossy(&reference_rollup_of(REPEAT, RUN_MS)),
            "rollup of the disturbed cluster batch vs `cowork run`'s"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20_second_partition_of_one_node_and_its_worker_costs_nothing() {
    if !docker_available("a_20_second_partition_of_one_node_and_its_worker_costs_nothing") {
        return;
    }
    let mut cluster = ClusterLab::start();
    // The island: n3 and the worker beside it, which talks to n3 alone. The S3 server is a
    // regional service both sides reach.
    let island = cluster.lab.create_named_network("island");
    cluster.lab.connect(&island, "n3", &["n3-local"]);
    cluster.lab.connect(&island, "s3", &["s3"]);
    let main = cluster.main.clone();
    let coordinator_url = cluster.start_coordinator(&main, ALL_NODES_URL);
    cluster.start_worker("w0", "nats://n1:4222,nats://n2:4222");
    cluster.start_worker("w1", "nats://n3-local:4222");
    cluster.lab.connect(&island, "w1", &["w1"]);
    let batch = cluster.submit(&coordinator_url);

    // The test watches from the majority side: a client on n3 would see nothing until its
    // pings found the connection dead.
    let mut follower = Follower::new(&cluster.host_nats_url_of(&["n1", "n2"]), &batch).await;
    follower
        .until(&cluster.lab, |state, _| state.finished_by.len() >= 30)
        .await;
    follower
        .until(&cluster.lab, |_, event| {
            event.worker_id == "w1" && matches!(event.event, JobEventKind::Started)
        })
        .await;
    let cut_at = Instant::now();
    cluster.lab.disconnect(&main, "n3");
    cluster.lab.disconnect(&main, "w1");
    eprintln!("partitioned n3 and w1 from n1 and n2");
    // The partition's length is the fault itself, not a synchronization. The majority side
    // goes on once it has elected leaders for what n3 led (election timeouts are 4 to 9 s, and
    // the workers' retries back off meanwhile), so it is not asserted to progress inside the
    // 20 s.
    tokio::time::sleep(PARTITION).await;
    cluster.lab.connect(&main, "n3", &["n3"]);
    cluster.lab.connect(&main, "w1", &["w1"]);
    eprintln!("healed after {:?}", cut_at.elapsed());
    cluster
        .finish_and_check(&coordinator_url, &batch, Rereports::ReAcks)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinator_cut_off_from_the_meta_leader_costs_nothing() {
    if !docker_available("the_coordinator_cut_off_from_the_meta_leader_costs_nothing") {
        return;
    }
    let mut cluster = ClusterLab::start();
    // The coordinator reaches the S3 server over one network and each node over its own, so
    // one link can be cut.
    let store = cluster.lab.create_named_network("store");
    cluster.lab.connect(&store, "s3", &["s3"]);
    let mut links = BTreeMap::new();
    for node in NODES {
        let link = cluster.lab.create_named_network(&format!("link-{node}"));
        cluster.lab.connect(&link, node, &[node]);
        links.insert(node, link);
    }
    let coordinator_url = {
        cluster.run_coordinator(&store, ALL_NODES_URL);
        for link in links.values() {
            cluster.lab.connect(link, "coordinator", &[]);
        }
        let address = cluster.address("coordinator", &store, API_PORT);
        cluster.wait_ready(address);
        format!("http://{address}")
    };
    cluster.start_worker("w0", ALL_NODES_URL);
    cluster.start_worker("w1", ALL_NODES_URL);
    let batch = cluster.submit(&coordinator_url);

    let mut follower = Follower::new(&cluster.host_nats_url(), &batch).await;
    follower
        .until(&cluster.lab, |state, _| state.finished_by.len() >= 30)
        .await;
    let leader = cluster.meta_leader();
    cluster
        .lab
        .disconnect(&links[leader.as_str()], "coordinator");
    eprintln!("cut the coordinator off from {leader}, the meta leader, for good");
    cluster
        .finish_and_check(&coordinator_url, &batch, Rereports::Never)
        .await;
}
