//! A TCP proxy that makes a real server slow, for fault tests: put it between a client and a
//! server and set a delay while the test runs.
//!
//! Two ways of being slow:
//! - [`Slowness::Responses`]: every byte the server sends reaches the client `delay` after it
//!   was sent — a latency line, e.g. an S3 server whose every answer takes seconds.
//! - [`Slowness::NatsPublishes`]: the client's NATS publishes (`PUB`/`HPUB`) on subjects that
//!   start with a prefix reach the server `delay` late, while everything else (other publishes,
//!   acks, pulls, pings) passes at once — e.g. a slow event stream while the job queue stays
//!   healthy. The proxy reads the client's side of the NATS text protocol to find them.
//!
//! A [`Slowness::Responses`] proxy in front of an HTTP server can also refuse: with
//! [`DelayProxy::set_refusing`] every request gets `403 AccessDenied` (an S3 error that no
//! retry cures, as with revoked credentials), and open connections are closed.
//!
//! The proxy runs on its own small runtime, so it works under sync and async tests alike, and
//! stops when dropped. Changing the delay affects bytes read from then on.

use std::collections::BinaryHeap;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What the proxy slows down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slowness {
    /// Everything the server sends back.
    Responses,
    /// The client's NATS publishes on subjects starting with this prefix.
    NatsPublishes { subject_prefix: String },
}

/// A delaying proxy on a loopback port in front of `upstream`.
pub struct DelayProxy {
    /// The port clients connect to (on 127.0.0.1).
    pub port: u16,
    delay_ms: Arc<AtomicU64>,
    refusing: Arc<AtomicBool>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl DelayProxy {
    /// Starts a proxy to `upstream` that slows `slowness` down, with no delay yet.
    pub fn start(upstream: SocketAddr, slowness: Slowness) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the delay proxy");
        let port = listener.local_addr().expect("a bound listener").port();
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let delay_ms = Arc::new(AtomicU64::new(0));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("testkit-delay-proxy")
            .enable_all()
            .build()
            .expect("building the delay proxy runtime");
        let delay = Arc::clone(&delay_ms);
        let refusing = Arc::new(AtomicBool::new(false));
        let refuse = Arc::clone(&refusing);
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener)
                .expect("registering the delay proxy listener");
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let delay = Arc::clone(&delay);
                let slowness = slowness.clone();
                let refuse = Arc::clone(&refuse);
                if refuse.load(Ordering::SeqCst) {
                    tokio::spawn(refuse_requests(client));
                    continue;
                }
                tokio::spawn(async move {
                    // A server that is down just closes this connection, as it would directly.
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    match slowness {
                        Slowness::Responses => {
                            tokio::join!(
                                pipe(client_read, server_write, Some(&refuse)),
                                delay_line(server_read, client_write, delay),
                            );
                        }
                        Slowness::NatsPublishes { subject_prefix } => {
                            tokio::join!(
                                nats_client_side(client_read, server_write, delay, &subject_prefix),
                                pipe(server_read, client_write, None),
                            );
                        }
                    }
                });
            }
        });
        DelayProxy {
            port,
            delay_ms,
            refusing,
            runtime: Some(runtime),
        }
    }

    /// With `true`, an HTTP server behind the proxy refuses everything: open connections are
    /// closed at their next request, and every request on a new one gets `403 AccessDenied`.
    pub fn set_refusing(&self, refusing: bool) {
        self.refusing.store(refusing, Ordering::SeqCst);
    }

    /// Sets the delay for what is read from now on.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(
            u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        // `shutdown_background` does not block, so a proxy dropped inside an async test is fine.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn current(delay: &AtomicU64) -> Duration {
    Duration::from_millis(delay.load(Ordering::SeqCst))
}

/// Copies `from` to `to` until either side closes, or, with `stop`, until it is set.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, stop: Option<&AtomicBool>) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(_) if stop.is_some_and(|stop| stop.load(Ordering::SeqCst)) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown().await;
}

/// The answer to every request while refusing: S3's error for credentials without access.
const ACCESS_DENIED: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";

/// Reads one HTTP request (head and `Content-Length` body) and answers `403 AccessDenied`,
/// then closes the connection.
async fn refuse_requests(mut client: TcpStream) {
    let mut received: Vec<u8> = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let head_end = loop {
        if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match client.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
        }
    };
    let head = String::from_utf8_lossy(&received[..head_end]).to_ascii_lowercase();
    let body_length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    // A client that waits for `100 Continue` sends no body: answer at once.
    if !head.contains("expect: 100-continue") {
        while received.len() < head_end + body_length {
            match client.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    }
    let response = format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{ACCESS_DENIED}",
        ACCESS_DENIED.len()
    );
    let _ = client.write_all(response.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// Bytes due at a time, written in due order (then in reading order).
struct Due {
    at: Instant,
    seq: u64,
    bytes: Vec<u8>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    // Reversed: `BinaryHeap` is a max-heap and the earliest must come out first.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Writes what arrives on `items` to `to`, each piece at its due time.
async fn writer(mut items: mpsc::UnboundedReceiver<Due>, mut to: OwnedWriteHalf) {
    let mut heap: BinaryHeap<Due> = BinaryHeap::new();
    let mut open = true;
    loop {
        let next_due = heap.peek().map(|due| due.at);
        tokio::select! {
            item = items.recv(), if open => match item {
                Some(item) => heap.push(item),
                None => open = false,
            },
            () = tokio::time::sleep_until(next_due.unwrap_or_else(Instant::now)), if next_due.is_some() => {
                while heap.peek().is_some_and(|due| due.at <= Instant::now()) {
                    let Some(due) = heap.pop() else { break };
                    if to.write_all(&due.bytes).await.is_err() {
                        return;
                    }
                }
            }
            else => break,
        }
    }
    let _ = to.shutdown().await;
}

/// Forwards `from` to `to`, every chunk `delay` (read when the chunk arrived) late.
async fn delay_line(mut from: OwnedReadHalf, to: OwnedWriteHalf, delay: Arc<AtomicU64>) {
    let (items, receiver) = mpsc::unbounded_channel();
    let writing = tokio::spawn(writer(receiver, to));
    let mut buffer = vec![0u8; 64 * 1024];
    let mut seq = 0;
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                seq += 1;
                let due = Due {
                    at: Instant::now() + current(&delay),
                    seq,
                    bytes: buffer[..n].to_vec(),
                };
                if items.send(due).is_err() {
                    break;
                }
            }
        }
    }
    drop(items);
    let _ = writing.await;
}

/// The length of the NATS command at the start of `buffer` (its line, plus its payload for
/// `PUB`/`HPUB`) and whether it is a publish on a subject starting with `prefix`; `None` while
/// the command is incomplete.
fn nats_command(buffer: &[u8], prefix: &str) -> Option<(usize, bool)> {
    let line_end = buffer.windows(2).position(|pair| pair == b"\r\n")?;
    let line = String::from_utf8_lossy(&buffer[..line_end]);
    let mut words = line.split_ascii_whitespace();
    let op = words.next().unwrap_or_default().to_ascii_uppercase();
    let args: Vec<&str> = words.collect();
    let payload = match op.as_str() {
        // PUB <subject> [reply-to] <#bytes>; HPUB <subject> [reply-to] <#header> <#total>.
        "PUB" | "HPUB" => args.last().and_then(|n| n.parse::<usize>().ok()),
        _ => None,
    };
    let Some(payload) = payload else {
        return Some((line_end + 2, false));
    };
    let total = line_end + 2 + payload + 2;
    if buffer.len() < total {
        return None;
    }
    let slowed = args
        .first()
        .is_some_and(|subject| subject.starts_with(prefix));
    Some((total, slowed))
}

/// Forwards the client's NATS commands to the server, holding publishes on `prefix` subjects
/// back by the delay.
async fn nats_client_side(
    mut from: OwnedReadHalf,
    to: OwnedWriteHalf,
    delay: Arc<AtomicU64>,
    prefix: &str,
) {
    let (items, receiver) = mpsc::unbounded_channel();
    let writing = tokio::spawn(writer(receiver, to));
    let mut pending: Vec<u8> = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut seq = 0;
    'read: loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => pending.extend_from_slice(&buffer[..n]),
        }
        while let Some((length, slowed)) = nats_command(&pending, prefix) {
            let bytes: Vec<u8> = pending.drain(..length).collect();
            seq += 1;
            let wait = if slowed {
                current(&delay)
            } else {
                Duration::ZERO
            };
            let due = Due {
                at: Instant::now() + wait,
                seq,
                bytes,
            };
            if items.send(due).is_err() {
                break 'read;
            }
        }
    }
    drop(items);
    let _ = writing.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nats_commands_are_split_and_publishes_found() {
        let check = |text: &str, expect: Option<(usize, bool)>| {
            assert_eq!(
                nats_command(text.as_bytes(), "cowork.events."),
                expect,
                "{text:?}"
            );
        };
        check("PING\r\n", Some((6, false)));
        check("PIN", None);
        check("PUB cowork.events.b1 5\r\nhello\r\n", Some((31, true)));
        check("PUB cowork.events.b1 _INBOX.x 5\r\nhel", None);
        check("PUB $JS.ACK.x 4\r\n+WPI\r\nPING\r\n", Some((23, false)));
        check(
            "HPUB cowork.events.b1 _INBOX.1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
            Some((54, true)),
        );
        check("SUB _INBOX.> 1\r\n", Some((16, false)));
    }
}
