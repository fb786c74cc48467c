//! Notifications, the IO half: a [`Notifier`] POSTs each event's signed JSON body to every
//! hook of its batch, in background tasks, retrying a hook that is down.
//!
//! `send` never waits: each delivery is a task. A delivery is retried with backoff on a
//! connection error, a timeout, a 5xx, 408 and 429, for up to [`NotifyConfig::give_up_after`]
//! (10 minutes by default); any other 4xx is final. Every attempt carries the same body and
//! `Cowork-Event-Id`, signed again with its own timestamp. A failing hook never fails a
//! batch: its last error is kept per batch for `cowork status`, and logged with the hook's
//! origin only (a hook URL can itself be a credential, as Slack's are).
//!
//! The body, the id and the signature are the pure core's (`cowork_core::notify`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cowork_core::notify::{Decided, NotifyEvent, Verdict, body, signature_header};
use cowork_core::trend::{BatchCounts, counts_from_stats};
use cowork_fabric::backoff::Backoff;
use cowork_fabric::secret::Secret;
use cowork_schema::BatchId;
use cowork_schema::history::BatchStats;
use tokio_util::task::TaskTracker;

/// The header that carries the signature: `t=<unix seconds>,v1=<hex>`.
pub const SIGNATURE_HEADER: &str = "Cowork-Signature";
/// The header that carries the event id (the body's `id`).
pub const EVENT_ID_HEADER: &str = "Cowork-Event-Id";
/// How long one event is retried at most (`cowork_schema::retries::notify`).
pub const DEFAULT_GIVE_UP_AFTER: Duration = cowork_schema::retries::notify::DELIVERY_GIVE_UP;
/// Pauses between attempts: 1 s doubling to 60 s, jittered.
pub const DEFAULT_BACKOFF: Backoff = Backoff::of(cowork_schema::retries::notify::DELIVERY);
/// One attempt's bound: connect, send and read the answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a notification points people to read the batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ReportLink {
    /// `cowork report <batch>`: no address people can open is known.
    #[default]
    Command,
    /// `cowork report <batch> --store <dir>`: a batch run on this machine.
    LocalStore(String),
    /// `<base>/v1/batches/<batch>/report`: the coordinator's address as people open it.
    Coordinator(String),
}

impl ReportLink {
    fn of(&self, batch_id: &BatchId) -> String {
        match self {
            ReportLink::Command => format!("cowork report {batch_id}"),
            ReportLink::LocalStore(dir) => format!("cowork report {batch_id} --store {dir}"),
            ReportLink::Coordinator(base) => {
                format!(
                    "{}/v1/batches/{batch_id}/report",
                    base.trim_end_matches('/')
                )
            }
        }
    }
}

/// What a [`Notifier`] is told.
#[derive(Clone, Debug)]
pub struct NotifyConfig {
    /// Hooks told of every batch (a coordinator's `--notify`); a batch adds its own.
    pub urls: Vec<String>,
    /// The shared secret the bodies are signed with (`--notify-secret-file`,
    /// `COWORK_NOTIFY_SECRET`); `None` sends them unsigned.
    pub secret: Option<Secret>,
    /// Where the notifications point people.
    pub report: ReportLink,
    /// Pauses between the attempts of one delivery.
    pub backoff: Backoff,
    /// How long one delivery is retried before it is given up.
    pub give_up_after: Duration,
}

impl Default for NotifyConfig {
    /// No hooks, no secret, 1 s doubling to 60 s for up to 10 minutes.
    fn default() -> NotifyConfig {
        NotifyConfig {
            urls: Vec::new(),
            secret: None,
            report: ReportLink::default(),
            backoff: DEFAULT_BACKOFF,
            give_up_after: DEFAULT_GIVE_UP_AFTER,
        }
    }
}

/// Why a URL cannot be a hook.
pub fn check_hook_url(url: &str) -> Result<(), String> {
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.has_host() => Ok(()),
        Ok(parsed) => Err(format!(
            "--notify: a hook is an http:// or https:// URL with a host, not a {}: URL",
            parsed.scheme()
        )),
        Err(error) => Err(format!("--notify: not a URL ({error})")),
    }
}

/// The hook's scheme, host and port: what logs and `cowork status` show of it (its path and
/// query may hold a token).
pub fn origin(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(parsed) => parsed.origin().ascii_serialization(),
        Err(_) => "(an invalid URL)".to_owned(),
    }
}

/// Sends each batch's notifications to its hooks in background tasks. Cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
}

struct Inner {
    config: NotifyConfig,
    client: reqwest::Client,
    /// Each batch's own hooks (its `--notify`).
    batch_urls: Mutex<HashMap<BatchId, Vec<String>>>,
    /// Each batch's last failed delivery per hook, until a delivery to that hook succeeds.
    last_errors: Mutex<HashMap<BatchId, HashMap<String, String>>>,
    deliveries: TaskTracker,
    /// Counts accepted deliveries (a 2xx), for whoever waits on them (tests).
    delivered: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("urls", &self.inner.config.urls.len())
            .finish_non_exhaustive()
    }
}

impl Default for Notifier {
    fn default() -> Notifier {
        Notifier::new(NotifyConfig::default())
    }
}

impl Notifier {
    pub fn new(config: NotifyConfig) -> Notifier {
        // Redirects are not followed: a signed body goes only where it was configured to.
        let client = reqwest::Client::builder()
            .timeout(ATTEMPT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Notifier {
            inner: Arc::new(Inner {
                config,
                client,
                batch_urls: Mutex::default(),
                last_errors: Mutex::default(),
                deliveries: TaskTracker::new(),
                delivered: tokio::sync::watch::Sender::new(0),
            }),
        }
    }

    /// Adds `urls` as the hooks of `batch_id` (beside the configured ones).
    pub fn watch_batch(&self, batch_id: &BatchId, urls: &[String]) {
        if urls.is_empty() {
            return;
        }
        lock(&self.inner.batch_urls).insert(batch_id.clone(), urls.to_vec());
    }

    /// Sends `event` to every hook of its batch, in the background: returns at once, never
    /// fails. The event's id and body are made here, once; every retry sends the same.
    pub fn send(&self, event: NotifyEvent) {
        let batch_id = event.batch_id().clone();
        let mut urls = self.inner.config.urls.clone();
        if let Some(own) = lock(&self.inner.batch_urls).get(&batch_id) {
            for url in own {
                if !urls.contains(url) {
                    urls.push(url.clone());
                }
            }
        }
        if urls.is_empty() {
            return;
        }
        let report = self.inner.config.report.of(&batch_id);
        let body = body(&event, unix_now(), Some(&report));
        let bytes = match cowork_schema::json_number::to_vec(&body) {
            Ok(bytes) => Arc::new(bytes),
            Err(error) => {
                tracing::error!(batch_id = %batch_id, error = %error, "notification body not made");
                return;
            }
        };
        tracing::info!(batch_id = %batch_id, kind = event.kind().as_str(), event_id = %body.id, hooks = urls.len(), "notifying");
        for url in urls {
            let delivery = Delivery {
                notifier: self.clone(),
                batch_id: batch_id.clone(),
                event_id: body.id.clone(),
                url,
                bytes: Arc::clone(&bytes),
            };
            self.inner.deliveries.spawn(delivery.run());
        }
    }

    /// The last failed delivery of a notification of `batch_id` to each hook that failed,
    /// until a later one to that hook succeeds; `; `-separated.
    pub fn last_error(&self, batch_id: &BatchId) -> Option<String> {
        let errors = lock(&self.inner.last_errors);
        let per_hook = errors
            .get(batch_id)
            .filter(|per_hook| !per_hook.is_empty())?;
        let mut hooks: Vec<_> = per_hook.iter().collect();
        hooks.sort();
        Some(
            hooks
                .into_iter()
                .map(|(_, error)| error.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        )
    }

    /// Waits until every delivery started so far has ended (delivered or given up), for at
    /// most `grace`; `false` when some were still retrying.
    pub async fn drain(&self, grace: Duration) -> bool {
        self.inner.deliveries.close();
        let drained = tokio::time::timeout(grace, self.inner.deliveries.wait())
            .await
            .is_ok();
        self.inner.deliveries.reopen();
        drained
    }

    /// Accepted deliveries so far, as a channel to wait on.
    pub fn delivered(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.delivered.subscribe()
    }
}

/// One event on its way to one hook.
struct Delivery {
    notifier: Notifier,
    batch_id: BatchId,
    event_id: String,
    url: String,
    bytes: Arc<Vec<u8>>,
}

/// How one attempt ended.
enum Attempt {
    Delivered,
    Retry(String),
    Refused(String),
}

impl Delivery {
    async fn run(self) {
        let inner = &self.notifier.inner;
        let started = tokio::time::Instant::now();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let error = match self.attempt().await {
                Attempt::Delivered => {
                    if let Some(per_hook) = lock(&inner.last_errors).get_mut(&self.batch_id) {
                        per_hook.remove(&self.url);
                    }
                    inner.delivered.send_modify(|count| *count += 1);
                    tracing::info!(batch_id = %self.batch_id, event_id = %self.event_id, hook = %origin(&self.url), attempt, "notification delivered");
                    return;
                }
                Attempt::Refused(error) => {
                    self.record(format!("{error}; not retried"));
                    return;
                }
                Attempt::Retry(error) => error,
            };
            let pause = inner.config.backoff.delay(attempt);
            if started.elapsed() + pause > inner.config.give_up_after {
                self.record(format!("{error}; given up after {attempt} attempts"));
                return;
            }
            tracing::debug!(hook = %origin(&self.url), error = %error, "notification not delivered, retrying");
            inner.last_errors_insert(&self.batch_id, &self.url, &error);
            tokio::time::sleep(pause).await;
        }
    }

    async fn attempt(&self) -> Attempt {
        let inner = &self.notifier.inner;
        let request = signed_request(
            &inner.client,
            &self.url,
            &self.event_id,
            &self.bytes,
            inner.config.secret.as_ref(),
        );
        let hook = origin(&self.url);
        match request.send().await {
            Ok(answer) if answer.status().is_success() => Attempt::Delivered,
            Ok(answer) => {
                let status = answer.status();
                let error = format!(
                    "hook {hook} answered {} to event {}",
                    status.as_u16(),
                    self.event_id
                );
                let retried = status.is_server_error()
                    || status == reqwest::StatusCode::REQUEST_TIMEOUT
                    || status == reqwest::StatusCode::TOO_MANY_REQUESTS;
                if retried {
                    Attempt::Retry(error)
                } else {
                    Attempt::Refused(error)
                }
            }
            // The error's text may quote the URL; only its kind is kept.
            Err(error) => Attempt::Retry(format!(
                "hook {hook} not reached ({}) with event {}",
                error_kind(&error),
                self.event_id
            )),
        }
    }

    /// Keeps `error` as the batch's last and logs it.
    fn record(&self, error: String) {
        tracing::warn!(batch_id = %self.batch_id, error = %error, "notification not delivered");
        self.notifier
            .inner
            .last_errors_insert(&self.batch_id, &self.url, &error);
    }
}

impl Inner {
    fn last_errors_insert(&self, batch_id: &BatchId, url: &str, error: &str) {
        lock(&self.last_errors)
            .entry(batch_id.clone())
            .or_default()
            .insert(url.to_owned(), error.to_owned());
    }
}

/// The POST of one attempt: the body, its event id and, with a secret, its signature made now.
fn signed_request(
    client: &reqwest::Client,
    url: &str,
    event_id: &str,
    bytes: &[u8],
    secret: Option<&Secret>,
) -> reqwest::RequestBuilder {
    let request = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(EVENT_ID_HEADER, event_id)
        .body(bytes.to_vec());
    match secret {
        Some(secret) => {
            let signature = signature_header(secret.expose().as_bytes(), unix_now(), bytes);
            request.header(SIGNATURE_HEADER, signature)
        }
        None => request,
    }
}

/// Sends `event` to `url` once, signed with `secret`, and returns the status the hook
/// answered (`cowork notify-test`); the error says why no answer came, without the URL.
pub async fn post_once(
    url: &str,
    secret: Option<&Secret>,
    event: &NotifyEvent,
) -> Result<u16, String> {
    let client = reqwest::Client::builder()
        .timeout(ATTEMPT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|error| format!("making the HTTP client: {}", error_kind(&error)))?;
    let body = body(event, unix_now(), None);
    let bytes = cowork_schema::json_number::to_vec(&body)
        .map_err(|error| format!("making the event's body: {error}"))?;
    match signed_request(&client, url, &body.id, &bytes, secret)
        .send()
        .await
    {
        Ok(answer) => Ok(answer.status().as_u16()),
        Err(error) => Err(format!(
            "hook {} not reached: {}",
            origin(url),
            error_kind(&error)
        )),
    }
}

/// What kind of failure a request met, in words without the URL.
fn error_kind(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "connection refused or failed"
    } else if error.is_redirect() {
        "redirected"
    } else {
        "request failed"
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each map is replaced entry by entry; a panic elsewhere cannot leave it half updated.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// The unit counts of the most recent batch in `history` (newest first) that holds one of
/// `now`'s units: what "newly failing" compares with.
pub fn earlier_counts(history: &[BatchStats], now: &BatchCounts) -> Option<BatchCounts> {
    history
        .iter()
        .filter(|stats| stats.batch_id != now.batch_id)
        .find(|stats| {
            stats
                .units
                .iter()
                .any(|unit| now.units.iter().any(|own| own.label == unit.label))
        })
        .map(|stats| counts_from_stats(stats, now.min_pass_rate))
}

/// The notification of a decided batch: its failing units from its stats (judged at the
/// reduction's bar), the newly failing ones against the most recent earlier batch of
/// `history` (newest first) that shares a unit, and the units its quarantine covered.
pub fn decided_event(
    stats: &BatchStats,
    reduction: &cowork_core::reduce::BatchReduction,
    history: &[BatchStats],
    verdict: Verdict,
) -> NotifyEvent {
    let now = counts_from_stats(stats, reduction.judging.min_pass_rate);
    let then = earlier_counts(history, &now);
    let quarantined = reduction
        .quarantine
        .as_ref()
        .map(|record| record.quarantined.clone())
        .unwrap_or_default();
    NotifyEvent::Decided(Box::new(Decided::from_counts(
        &now,
        then.as_ref(),
        verdict,
        quarantined,
    )))
}
