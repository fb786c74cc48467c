//! Bounded resources on a real fleet : what a client can make the coordinator hold —
//! connections that never send a request, and the store reads of many batch starts.

use std::time::Duration;

use cowork_testkit::wait_until;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::fleet::Fleet;

/// Idle connections the flood opens (the figure: 21k exhausted a coordinator), fewer
/// where the descriptor limit cannot be raised that far.
const IDLE_CONNECTIONS: usize = 20_000;
/// Descriptors the test process keeps for everything but the flood.
const OTHER_DESCRIPTORS: usize = 500;
/// A bound on the whole wait for the server to close them, so old code fails instead of
/// hanging; the server closes them after its idle timeout (2 s here).
const CLOSE_GUARD: Duration = Duration::from_secs(120);

/// Raises this process's descriptor limit as far as allowed (children inherit it) and returns
/// the connections the flood may open: [`IDLE_CONNECTIONS`], or fewer under a hard limit this
/// process may not raise (a sandbox without `CAP_SYS_RESOURCE`).
fn flood_size() -> usize {
    let wanted = IDLE_CONNECTIONS + OTHER_DESCRIPTORS;
    let pid = std::process::id().to_string();
    let raised = std::process::Command::new("prlimit")
        .args(["--pid", &pid, &format!("--nofile={wanted}:{wanted}")])
        .stderr(std::process::Stdio::null())
        .status()
        .expect("running prlimit (util-linux)")
        .success();
    if raised {
        return IDLE_CONNECTIONS;
    }
    let hard = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &pid,
            "--nofile",
            "--output",
            "HARD",
            "--noheadings",
        ])
        .output()
        .expect("running prlimit (util-linux)");
    let hard: usize = String::from_utf8_lossy(&hard.stdout)
        .trim()
        .parse()
        .expect("prlimit prints the hard limit");
    let soft = format!("--nofile={hard}:{hard}");
    assert!(
        std::process::Command::new("prlimit")
            .args(["--pid", &pid, &soft])
            .status()
            .expect("running prlimit")
            .success(),
        "raising the soft descriptor limit to the hard one ({hard})"
    );
    hard.saturating_sub(OTHER_DESCRIPTORS).min(IDLE_CONNECTIONS)
}

/// One `GET /healthz` on a new connection: the response's status line.
async fn healthz_status(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connecting for /healthz");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: fleet\r\nconnection: close\r\n\r\n")
        .await
        .expect("sending /healthz");
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .expect("reading /healthz");
    String::from_utf8_lossy(&response)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// 20,000 TCP connections that never send a byte (no token needed) neither exhaust the
/// coordinator nor keep `/healthz` out, and the server closes every one of them (each read ends
/// at EOF).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_healthz_still_answers() {
    let flood = flood_size();
    eprintln!("bench: a flood of {flood} idle connections");
    let fleet = Fleet::start_with_env(&[("COWORK_HTTP_IDLE_TIMEOUT", "2s")]);
    let port = fleet.api_port;
    let mut idle = Vec::with_capacity(flood);
    for n in 0..flood {
        match TcpStream::connect(("127.0.0.1", port)).await {
            Ok(stream) => idle.push(stream),
            Err(error) => panic!("connection {n} of the flood: {error}"),
        }
    }
    let flood_done = std::time::Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(30), healthz_status(port))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "/healthz did not answer with {flood} idle connections open; log:\n{}",
                fleet.log("coordinator")
            )
        });
    // Measured, not asserted (docs/benchmarks.md).
    eprintln!(
        "bench: /healthz under the flood answered in {:?}",
        flood_done.elapsed()
    );
    assert_eq!(status, "HTTP/1.1 200 OK", "/healthz under the flood");

    let closed = futures::future::join_all(idle.into_iter().map(|mut stream| async move {
        let mut byte = [0u8; 1];
        // EOF (or a reset) is the server closing it; a byte would be a response to nothing.
        !matches!(stream.read(&mut byte).await, Ok(n) if n > 0)
    }));
    let closed = tokio::time::timeout(CLOSE_GUARD, closed)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "idle connections still open {} s after the flood: the server never closes them",
                CLOSE_GUARD.as_secs()
            )
        });
    eprintln!(
        "bench: every idle connection closed {:?} after the flood",
        flood_done.elapsed()
    );
    assert!(
        closed.iter().all(|closed| *closed),
        "an idle connection got bytes instead of being closed"
    );
    assert_eq!(
        healthz_status(port).await,
        "HTTP/1.1 200 OK",
        "/healthz after"
    );
}

/// `GET <url>` with the fleet's token: the body text.
async fn get_text(url: &str) -> String {
    let response = reqwest::Client::new()
        .get(url)
        .bearer_auth(crate::fleet::TOKEN)
        .send()
        .await
        .unwrap_or_else(|error| panic!("GET {url}: {error}"));
    assert!(
        response.status().is_success(),
        "GET {url}: {}",
        response.status()
    );
    response.text().await.expect("a text body")
}

/// The value of the sample `series` (a whole line's name and labels) in a `/metrics` text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Messages the NATS server has received and sent in all, from its monitoring endpoint.
async fn nats_messages(monitor_port: u16) -> u64 {
    let varz: serde_json::Value = reqwest::get(format!("http://127.0.0.1:{monitor_port}/varz"))
        .await
        .expect("nats /varz")
        .json()
        .await
        .expect("nats /varz is json");
    let count = |key: &str| varz[key].as_u64().unwrap_or_else(|| panic!("/varz {key}"));
    count("in_msgs") + count("out_msgs")
}

/// Batch records in the registry for the `/metrics` tests.
const REGISTRY_BATCHES: usize = 1_000;
/// Scrapes whose NATS traffic is counted.
const SCRAPES: u64 = 10;

/// with 1,000 batches in the registry, a `/metrics` scrape does not walk the registry:
/// ten scrapes cost the NATS server fewer messages than there are batches (one walk alone is
/// a message per record), and the counts are still right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_scrapes_do_not_walk_the_batch_registry() {
    use cowork_fabric::BatchRegistry;
    use cowork_schema::registry::{BatchRecord, BatchState};
    let monitor_port = cowork_testkit::free_port();
    let nats = cowork_testkit::NatsServer::start_with(cowork_testkit::NatsOptions {
        extra_args: vec!["-m".to_owned(), monitor_port.to_string()],
        ..Default::default()
    });
    let fleet = Fleet::with_servers(nats, cowork_testkit::S3Server::start(), &[]);
    let fabric =
        cowork_fabric::nats::connect(&cowork_fabric::nats::NatsConfig::new(&fleet.nats_url))
            .await
            .expect("connecting to nats");
    for n in 0..REGISTRY_BATCHES {
        let record = BatchRecord {
            batch_id: cowork_schema::BatchId::new(&format!("20261201-000000-{n:06x}"))
                .expect("valid id"),
            state: BatchState::Done,
            spec_sha256: "0".repeat(64),
            n_jobs: 1,
            created_at_ms: 1,
            updated_at_ms: 1,
            ok: Some(true),
            exit_code: Some(0),
            eval_verdict: None,
            owner: None,
            generation: 0,
            kill_running: false,
            controls: Default::default(),
            listing: Default::default(),
        };
        fabric
            .batches
            .create(&record)
            .await
            .expect("creating a record");
    }
    let metrics_url = format!("{}/metrics", fleet.coordinator_url());
    let done_series = "cowork_batches{state=\"done\"}";
    // Readiness with a deadline: the coordinator's view follows the registry's changes.
    wait_until(format!(
        "/metrics counts the {REGISTRY_BATCHES} done batches"
    ))
    .within(Duration::from_secs(30))
    .every(Duration::from_millis(100))
    .poll_async(async || {
        let text = get_text(&metrics_url).await;
        if sample(&text, done_series) == Some(REGISTRY_BATCHES as f64) {
            Ok(())
        } else {
            Err(format!("\n{text}"))
        }
    })
    .await;

    let before = nats_messages(monitor_port).await;
    let mut took = Vec::new();
    for _ in 0..SCRAPES {
        let started = std::time::Instant::now();
        let text = get_text(&metrics_url).await;
        took.push(started.elapsed());
        assert_eq!(
            sample(&text, done_series),
            Some(REGISTRY_BATCHES as f64),
            "{text}"
        );
        assert_eq!(sample(&text, "cowork_registry_up"), Some(1.0), "{text}");
    }
    let spent = nats_messages(monitor_port).await - before;
    took.sort();
    // Measured, not asserted (docs/benchmarks.md).
    eprintln!(
        "bench: {SCRAPES} scrapes with {REGISTRY_BATCHES} batches: p50 {:?}, max {:?}, {spent} NATS messages",
        took[took.len() / 2],
        took[took.len() - 1]
    );
    assert!(
        spent < REGISTRY_BATCHES as u64,
        "{SCRAPES} scrapes cost {spent} NATS messages with {REGISTRY_BATCHES} batches: a scrape walks the registry"
    );
}

/// Batches submitted by the history test.
const SUBMITS: usize = 200;

/// many batch starts share one read of the history (the recent batches' stats) instead
/// of each listing `batches/` and reading up to 200 `stats.json`: 200 submits of a batch are all
/// decided, and the coordinator walked the store for history once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_batch_starts_read_the_history_once() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container", "4");
    let root = crate::support::workspace_root();
    let args = [
        "examples/demo/scenarios/csv-report.yaml",
        "--executor",
        "sim",
    ];
    let batches: Vec<_> = (0..SUBMITS)
        .map(|_| fleet.submit_detached(&root, &args))
        .collect();
    for batch in &batches {
        let out = fleet.watch(&root, batch);
        assert!(
            out.code() == 0 || out.code() == 1,
            "batch {batch} was not decided: {}\n{}",
            out.context(),
            fleet.logs()
        );
        assert_eq!(
            out.envelope()["fleet"]["batchId"],
            batch.as_str(),
            "{}",
            out.context()
        );
    }
    let text = get_text(&format!("{}/metrics", fleet.coordinator_url())).await;
    let reads = sample(&text, "cowork_history_reads_total")
        .unwrap_or_else(|| panic!("/metrics has no cowork_history_reads_total:\n{text}"));
    assert_eq!(
        reads, 1.0,
        "{SUBMITS} batch starts walked the store for history {reads} times"
    );
}

/// The status line and the `retry-after` header of a raw HTTP/1.1 response.
fn status_and_retry_after(response: &str) -> (String, Option<String>) {
    let mut lines = response.lines();
    let status = lines.next().unwrap_or_default().to_owned();
    let retry_after = lines.take_while(|line| !line.is_empty()).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("retry-after")
            .then(|| value.trim().to_owned())
    });
    (status, retry_after)
}

/// A submit whose body is an empty multipart: the response's status line and `retry-after`.
async fn empty_submit(port: u16) -> (String, Option<String>) {
    let body = "--b0und--\r\n";
    let request = format!(
        "POST /v1/batches HTTP/1.1\r\nhost: fleet\r\nauthorization: Bearer {}\r\ncontent-type: multipart/form-data; boundary=b0und\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        crate::fleet::TOKEN,
        body.len()
    );
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connecting");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("sending a submit");
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .expect("reading the answer");
    status_and_retry_after(&String::from_utf8_lossy(&response))
}

/// Submits beyond `--max-concurrent-submits` are refused with 503 and `Retry-After`
/// before their bodies are read, `cowork submit` says why, and a slot freed serves the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submits_beyond_the_cap_are_refused_with_retry_after() {
    let mut fleet = Fleet::start_with_env(&[("COWORK_MAX_CONCURRENT_SUBMITS", "1")]);
    fleet.spawn_worker("w1", "container", "2");
    let port = fleet.api_port;
    // A submit that holds its slot: its head and the start of a large body, then nothing. A
    // probe below may hold the one slot at the moment the held submit's handler starts, which
    // then refuses the held one (it gets an answer): it is sent again.
    let head = format!(
        "POST /v1/batches HTTP/1.1\r\nhost: fleet\r\nauthorization: Bearer {}\r\ncontent-type: multipart/form-data; boundary=b0und\r\ncontent-length: 100000000\r\n\r\n--b0und\r\ncontent-disposition: form-data; name=\"spec\"\r\n\r\n{{",
        crate::fleet::TOKEN
    );
    let start_held = || async {
        let mut held = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connecting");
        held.write_all(head.as_bytes())
            .await
            .expect("starting the held submit");
        held
    };
    let mut held = start_held().await;
    // Readiness with a deadline: the held submit takes its slot once its handler runs.
    let retry_after = wait_until("a submit beyond a cap of 1 is refused")
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(50))
        .poll_async(async || {
            let (status, retry_after) = empty_submit(port).await;
            if status.starts_with("HTTP/1.1 503") {
                return Ok(retry_after);
            }
            // Answered (refused while a probe held the slot) or closed: send it again.
            let mut answer = [0u8; 64];
            let still_waiting = matches!(held.try_read(&mut answer),
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock);
            if !still_waiting {
                held = start_held().await;
            }
            Err(status)
        })
        .await;
    assert_eq!(
        retry_after.as_deref(),
        Some("5"),
        "Retry-After of a refused submit"
    );

    let root = crate::support::workspace_root();
    let args = [
        "submit",
        "examples/demo/scenarios/csv-report.yaml",
        "--executor",
        "sim",
    ];
    let refused = fleet.cowork(&root, &args);
    assert_ne!(refused.code(), 0, "{}", refused.context());
    refused.expect_stderr("--max-concurrent-submits");

    drop(held);
    wait_until("the freed slot serves a submit")
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(50))
        .poll_async(async || {
            let out = fleet.cowork(&root, &args);
            if out.code() == 0 {
                Ok(())
            } else {
                Err(out.context())
            }
        })
        .await;
}

/// Bytes of each large submit's bundle part (under the default 256 MiB bundle limit).
const LARGE_BUNDLE_BYTES: usize = 100 * 1024 * 1024;

/// The coordinator's peak resident memory (`VmHWM`), in MiB.
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|error| panic!("reading /proc/{pid}/status: {error}"));
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status:\n{status}"));
    kib / 1024
}

/// One submit of `LARGE_BUNDLE_BYTES` of bundle, sent in 1 MiB writes so the test holds only
/// one chunk; returns the response's status line.
async fn large_submit(port: u16) -> String {
    let head_of_parts = "--b0und\r\ncontent-disposition: form-data; name=\"spec\"\r\n\r\n{}\r\n--b0und\r\ncontent-disposition: form-data; name=\"bundle\"; filename=\"b.tar.zst\"\r\ncontent-type: application/octet-stream\r\n\r\n";
    let tail = "\r\n--b0und--\r\n";
    let length = head_of_parts.len() + LARGE_BUNDLE_BYTES + tail.len();
    let request = format!(
        "POST /v1/batches HTTP/1.1\r\nhost: fleet\r\nauthorization: Bearer {}\r\ncontent-type: multipart/form-data; boundary=b0und\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n{head_of_parts}",
        crate::fleet::TOKEN,
    );
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connecting");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("sending the head");
    let chunk = vec![b'z'; 1024 * 1024];
    for _ in 0..LARGE_BUNDLE_BYTES / chunk.len() {
        stream.write_all(&chunk).await.expect("sending the bundle");
    }
    stream
        .write_all(tail.as_bytes())
        .await
        .expect("sending the tail");
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .expect("reading the answer");
    String::from_utf8_lossy(&response)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Four concurrent 100 MiB submits are streamed to the scratch dir, not held: the
/// coordinator's peak memory stays far below the 400 MiB of bodies (it held every body whole,
/// and a copy of it, before), and the uploads leave nothing in the scratch dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_submits_are_streamed_to_disk_not_held() {
    let fleet = Fleet::start();
    let pid = fleet
        .children
        .iter()
        .find(|(name, _)| name == "coordinator")
        .map(|(_, child)| child.id())
        .expect("the coordinator runs");
    let before = peak_rss_mib(pid);
    let answers = futures::future::join_all((0..4).map(|_| large_submit(fleet.api_port))).await;
    for answer in &answers {
        // Refused after the whole body was read: the bundle's digest is not the spec's.
        assert!(answer.starts_with("HTTP/1.1 400"), "{answers:?}");
    }
    let peak = peak_rss_mib(pid);
    assert!(
        peak < before + 150,
        "peak RSS {peak} MiB (from {before} MiB) for 4 × {} MiB of bodies",
        LARGE_BUNDLE_BYTES / (1024 * 1024)
    );
    let scratch = fleet.dir.path().join("scratch");
    let left: Vec<_> = std::fs::read_dir(&scratch)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "the scratch dir holds {left:?}");
}

/// A worker's bundle cache keeps within `--cache-max-mib`: three batches with
/// bundles of about 1 MiB unpacked each, one after another, leave only the latest bundle in
/// a 1 MiB cache (every accepted bundle stayed there before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_bundle_cache_evicts_past_its_bound() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker_with("w1", "container", "1", &["--cache-max-mib", "1"]);
    let sandbox = crate::support::Sandbox::with_project();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..3 {
        // 600 KB of hex digits of its own per round: a bundle of its own each time.
        let data: String = (0..75_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                format!("{:08x}", state as u32)
            })
            .collect();
        sandbox.write("data/sales.csv", &data);
        let out = fleet.submit(
            sandbox.path(),
            &[crate::hostile::SCENARIO, "--executor", "sim"],
        );
        assert!(
            matches!(out.code(), 0 | 1),
            "round {round}: {}\n{}",
            out.context(),
            fleet.logs()
        );
    }
    let cache = fleet.dir.path().join("w1").join("cache");
    let bundles: Vec<String> = std::fs::read_dir(&cache)
        .expect("the worker's cache dir")
        .flatten()
        .filter(|entry| entry.path().is_dir())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.'))
        .collect();
    assert_eq!(
        bundles.len(),
        1,
        "only the latest bundle is kept in a 1 MiB cache: {bundles:?}\n{}",
        fleet.log("w1")
    );
}
