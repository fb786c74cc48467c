//! Notifications against a real HTTP receiver on loopback: the signature verifies, a hook that
//! fails once gets the same event again (same id) and takes it once, a refusal is final and
//! shown as the batch's last error, and a hook that is down never holds up the sender.

use std::time::Duration;

use cowork_coordinator::notify::{Notifier, NotifyConfig, ReportLink};
use cowork_core::notify::{NotifyEvent, hmac_sha256};
use cowork_fabric::backoff::Backoff;
use cowork_fabric::secret::Secret;
use cowork_schema::BatchId;
use cowork_testkit::HookServer;

const SECRET: &str = "whsec-it-3b1f9c";
/// Only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(30);

fn batch() -> BatchId {
    BatchId::new("20260102-030405-abcd").expect("a valid batch id")
}

/// A notifier of `url` with a tiny backoff, so a retry costs milliseconds.
fn notifier(url: &str) -> Notifier {
    Notifier::new(NotifyConfig {
        urls: vec![url.to_owned()],
        secret: Some(Secret::new(SECRET)),
        report: ReportLink::Coordinator("https://cowork.example".to_owned()),
        backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(5)),
        give_up_after: Duration::from_secs(60),
    })
}

fn cancelled() -> NotifyEvent {
    NotifyEvent::Cancelled {
        batch_id: batch(),
        cost_usd: 1.5,
    }
}

/// `v1` of a `t=…,v1=…` header, recomputed from the body with the secret.
fn check_signature(signature: Option<&str>, body: &[u8]) {
    let signature = signature.expect("a Cowork-Signature header");
    let (t, v1) = signature
        .split_once(",v1=")
        .and_then(|(t, v1)| Some((t.strip_prefix("t=")?, v1)))
        .unwrap_or_else(|| panic!("not t=…,v1=…: {signature}"));
    let timestamp: u64 = t.parse().expect("t is Unix seconds");
    let mut signed = format!("{timestamp}.").into_bytes();
    signed.extend_from_slice(body);
    let expected: String = hmac_sha256(SECRET.as_bytes(), &signed)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert_eq!(v1, expected, "the signature verifies with the secret");
    let wrong: String = hmac_sha256(b"another secret", &signed)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert_ne!(v1, wrong);
}

#[tokio::test]
async fn a_signed_event_verifies_and_carries_its_id() {
    let hook = HookServer::start(&[]).await;
    let notifier = notifier(&hook.url);
    notifier.send(cancelled());
    let received = hook.wait_for(1, PATIENCE).await;
    let request = &received[0];
    check_signature(request.signature.as_deref(), &request.body);
    let body = request.json();
    assert_eq!(body["kind"], "cancelled");
    assert_eq!(body["batchId"], batch().as_str());
    assert_eq!(request.event_id.as_deref(), body["id"].as_str());
    assert_eq!(
        body["report"],
        "https://cowork.example/v1/batches/20260102-030405-abcd/report"
    );
    assert!(
        body["text"]
            .as_str()
            .is_some_and(|text| text.starts_with("cowork: batch 20260102-030405-abcd cancelled")),
        "{body}"
    );
}

#[tokio::test]
async fn a_hook_that_fails_once_gets_the_same_event_again_and_takes_it_once() {
    let hook = HookServer::start(&[500]).await;
    let notifier = notifier(&hook.url);
    let mut delivered = notifier.delivered();
    notifier.send(cancelled());
    delivered
        .wait_for(|count| *count == 1)
        .await
        .expect("the notifier lives");
    assert!(notifier.drain(PATIENCE).await, "no delivery left running");
    let received = hook.received();
    let statuses: Vec<u16> = received.iter().map(|request| request.status).collect();
    assert_eq!(
        statuses,
        [500, 200],
        "one retry after the 500, then nothing"
    );
    assert_eq!(received[0].event_id, received[1].event_id, "the same id");
    assert_eq!(received[0].body, received[1].body, "the same body");
    let accepted: Vec<_> = received.iter().filter(|r| r.status == 200).collect();
    assert_eq!(accepted.len(), 1, "delivered once per event id");
    assert_eq!(
        notifier.last_error(&batch()),
        None,
        "a delivery clears the error"
    );
}

#[tokio::test]
async fn a_refusal_is_final_and_is_the_batchs_last_error() {
    let hook = HookServer::start(&[404]).await;
    let notifier = notifier(&hook.url);
    notifier.send(cancelled());
    assert!(notifier.drain(PATIENCE).await, "a 404 is not retried");
    assert_eq!(hook.received().len(), 1);
    let error = notifier.last_error(&batch()).expect("the refusal is kept");
    assert!(error.contains("answered 404"), "{error}");
    assert!(
        !error.contains("/hook"),
        "only the hook's origin is shown: {error}"
    );
}

#[tokio::test]
async fn a_429_and_a_408_are_retried() {
    let hook = HookServer::start(&[429, 408]).await;
    let notifier = notifier(&hook.url);
    notifier.send(cancelled());
    assert!(notifier.drain(PATIENCE).await);
    let statuses: Vec<u16> = hook.received().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [429, 408, 200]);
}

#[tokio::test]
async fn a_hook_that_is_down_never_holds_up_the_sender_and_is_given_up() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let notifier = Notifier::new(NotifyConfig {
        urls: vec![format!("http://127.0.0.1:{port}/hook")],
        backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(5)),
        give_up_after: Duration::from_millis(50),
        ..NotifyConfig::default()
    });
    // `send` returns before any attempt is made; the attempts run in the background.
    notifier.send(cancelled());
    assert!(notifier.drain(PATIENCE).await, "given up within its bound");
    let error = notifier.last_error(&batch()).expect("the failure is kept");
    assert!(
        error.contains("not reached") && error.contains("given up"),
        "{error}"
    );
}

#[tokio::test]
async fn a_stall_is_told_with_its_reason_and_told_again_under_the_same_id() {
    let hook = HookServer::start(&[]).await;
    let notifier = notifier(&hook.url);
    let stalled = || NotifyEvent::Stalled {
        batch_id: batch(),
        reason: "no job finished for 30m; 4 jobs wait on tier microvm".to_owned(),
    };
    // The stall watchdog's call; a watchdog that says it twice is deduplicated by the id.
    notifier.send(stalled());
    notifier.send(stalled());
    let received = hook.wait_for(2, PATIENCE).await;
    let [first, second] = [received[0].json(), received[1].json()];
    assert_eq!(first["kind"], "stalled");
    assert_eq!(
        first["reason"],
        "no job finished for 30m; 4 jobs wait on tier microvm"
    );
    assert_eq!(first["id"], second["id"]);
    assert!(
        first["text"]
            .as_str()
            .is_some_and(|text| text.contains("stalled — no job finished for 30m")),
        "{first}"
    );
}
