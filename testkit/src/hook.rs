//! [`HookServer`]: a webhook receiver on `127.0.0.1:0` for notification tests. It records
//! every POST (its event id, signature and body) and answers each with the next status of a
//! script, then `200`. Tests wait on the count of requests received, never on a sleep.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use tokio::sync::watch;

/// One request the hook received, and what it answered.
#[derive(Clone, Debug)]
pub struct Received {
    /// `Cowork-Event-Id`.
    pub event_id: Option<String>,
    /// `Cowork-Signature`.
    pub signature: Option<String>,
    pub body: Vec<u8>,
    /// The status it answered.
    pub status: u16,
}

impl Received {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "the hook received a body that is not JSON ({error}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

#[derive(Default)]
struct Shared {
    script: Vec<u16>,
    received: Vec<Received>,
}

/// A running receiver; dropping it stops the server.
pub struct HookServer {
    /// `http://127.0.0.1:<port>/hook`.
    pub url: String,
    shared: Arc<Mutex<Shared>>,
    count: watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl HookServer {
    /// A receiver answering `script` in order (e.g. `[500]`: a 500, then 200s).
    pub async fn start(script: &[u16]) -> HookServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a loopback port for the hook");
        let port = listener.local_addr().expect("a bound address").port();
        let shared = Arc::new(Mutex::new(Shared {
            script: script.to_vec(),
            received: Vec::new(),
        }));
        let (count_tx, count) = watch::channel(0usize);
        let state = (Arc::clone(&shared), Arc::new(count_tx));
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(state);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        HookServer {
            url: format!("http://127.0.0.1:{port}/hook"),
            shared,
            count,
            task,
        }
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.shared).received.clone()
    }

    /// Waits until `n` requests were received and returns them all. `within` only turns a
    /// hang into a failure.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let mut count = self.count.clone();
        let reached = tokio::time::timeout(within, count.wait_for(|seen| *seen >= n)).await;
        match reached {
            Ok(Ok(_)) => self.received(),
            _ => panic!(
                "the hook received {} requests, not {n}: {:?}",
                self.received().len(),
                self.received()
            ),
        }
    }
}

impl Drop for HookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type HookState = (Arc<Mutex<Shared>>, Arc<watch::Sender<usize>>);

async fn receive(
    State((shared, count)): State<HookState>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let status = {
        let mut shared = lock(&shared);
        let status = if shared.script.is_empty() {
            200
        } else {
            shared.script.remove(0)
        };
        shared.received.push(Received {
            event_id: header("cowork-event-id"),
            signature: header("cowork-signature"),
            body: body.to_vec(),
            status,
        });
        status
    };
    count.send_modify(|seen| *seen += 1);
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
