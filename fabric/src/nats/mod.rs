//! The distributed implementations of the ports on NATS JetStream (decisions.md#wire-protocol).
//!
//! Modules, in reading order:
//! - [`config`]: `NatsConfig` (server, credentials, stream and bucket names, tuning) and the
//!   redacting `Secret`.
//! - [`setup`]: `ensure_streams`, which creates or checks the streams, the tier consumers and
//!   the buckets at start-up, each with the fleet's replica count (`Replicas`).
//! - [`health`]: `NatsHealth`, the `FabricHealth` port: which stream or bucket has no leader.
//! - [`queue`]: `NatsJobQueue` on the `COWORK_JOBS` work queue: publishing (pipelined for many
//!   jobs) and single pulls.
//! - `puller`: the worker's standing pull on all of its tiers at once.
//! - [`lost`]: lost jobs from JetStream's max-deliveries and terminated advisories.
//! - [`events`]: `NatsEventLog` on the `COWORK_EVENTS` stream.
//! - [`registry`]: `NatsBatchRegistry` and `NatsWorkerRegistry` on the two KV buckets.
//! - [`bench`]: the raw baselines of the fleet benchmark.
//!
//! [`connect`] does it all: it connects (retrying until the server is up), runs
//! `ensure_streams` and binds the four port implementations, returned as a [`NatsFabric`].

pub mod bench;
pub mod config;
mod consumers;
pub mod events;
pub mod fence;
pub mod health;
pub mod lease;
pub mod lost;
mod puller;
pub mod queue;
pub mod registry;
pub mod setup;

use std::path::PathBuf;
use std::time::Duration;

use async_nats::{ConnectErrorKind, ConnectOptions};
use cowork_schema::BatchId;
use cowork_schema::job::Tier;

pub use config::{InvalidConfig, NatsConfig, Secret};
pub use events::NatsEventLog;
pub use health::NatsHealth;
pub use lease::{DEFAULT_LEASE_BUCKET, NatsLease};
pub use queue::NatsJobQueue;
pub use registry::{NatsBatchRegistry, NatsWorkerRegistry, check_worker_id};
pub use setup::{Replicas, SetupReport, ensure_streams};

/// Subjects of the jobs stream: `cowork.jobs.<tier>.<batch>`.
pub const JOBS_SUBJECTS: &str = "cowork.jobs.>";
/// Subjects of the events stream: `cowork.events.<batch>`.
pub const EVENTS_SUBJECTS: &str = "cowork.events.>";

/// The subject a job of `tier` and `batch` is published on.
pub fn jobs_subject(tier: Tier, batch: &BatchId) -> String {
    format!("cowork.jobs.{}.{batch}", tier.as_str())
}

/// The filter of the tier's consumer: every batch's jobs of that tier.
pub fn tier_filter(tier: Tier) -> String {
    format!("cowork.jobs.{}.>", tier.as_str())
}

/// The name of the tier's durable consumer, `cowork-<tier>`.
pub fn consumer_name(tier: Tier) -> String {
    format!("cowork-{}", tier.as_str())
}

/// The subject the events of `batch` are published on.
pub fn events_subject(batch: &BatchId) -> String {
    format!("cowork.events.{batch}")
}

/// An existing stream, consumer or bucket that differs from what cowork needs in a field its
/// semantics rely on; the message names the object, the field, both values and the fix.
#[derive(Debug, thiserror::Error)]
#[error("{kind} {name} has {field} {found} but cowork needs {wanted}; {fix}")]
pub struct Mismatch {
    /// `stream`, `consumer` or `bucket`.
    pub kind: &'static str,
    pub name: String,
    pub field: &'static str,
    pub found: String,
    pub wanted: String,
    /// What the operator can do about it.
    pub fix: String,
}

/// Errors of connecting and of setting up the streams.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// The config cannot work; every problem is listed.
    #[error("invalid nats config: {}", list_problems(problems))]
    InvalidConfig { problems: Vec<InvalidConfig> },
    /// The credentials file could not be read.
    #[error("reading nats credentials file {}", path.display())]
    Credentials {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The server could not be reached (after retrying for `connect_timeout`) or refused us.
    #[error("connecting to nats at {url}")]
    Connect {
        /// The configured URL with any user info replaced by `***`.
        url: String,
        #[source]
        source: async_nats::ConnectError,
    },
    /// An existing stream, consumer or bucket differs from what cowork needs in a field its
    /// semantics rely on.
    #[error(transparent)]
    Mismatch(Box<Mismatch>),
    /// A JetStream API call failed.
    #[error("{action} {name}")]
    JetStream {
        action: &'static str,
        name: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl NatsError {
    /// `true` when retrying may succeed: the server was unreachable or a call failed on the
    /// way; a bad config, bad credentials or a mismatching stream need a person.
    pub fn is_transient(&self) -> bool {
        match self {
            NatsError::Connect { source, .. } => {
                is_retryable(source.kind()) && !is_tls_handshake_failure(source)
            }
            NatsError::JetStream { .. } => true,
            NatsError::InvalidConfig { .. }
            | NatsError::Credentials { .. }
            | NatsError::Mismatch(_) => false,
        }
    }
}

fn list_problems(problems: &[InvalidConfig]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Connect failures that may pass when the server comes up.
fn is_retryable(kind: ConnectErrorKind) -> bool {
    matches!(
        kind,
        ConnectErrorKind::Io | ConnectErrorKind::TimedOut | ConnectErrorKind::Dns
    )
}

/// A TLS handshake failure (an untrusted certificate, a plain-text server under
/// `tls_required`): no retry can fix it. async-nats reports some as `ConnectErrorKind::Tls` and
/// others as an I/O error whose source is the `rustls::Error`; both are recognized by type.
fn is_tls_handshake_failure(error: &async_nats::ConnectError) -> bool {
    error.kind() == ConnectErrorKind::Tls || crate::is_tls_failure(error)
}

/// `url` with the user info of every server (`user:pass@`) replaced by `***@`.
pub fn redact_url(url: &str) -> String {
    url.split(',')
        .map(|one| {
            let one = one.trim();
            let (scheme, rest) = match one.split_once("://") {
                Some((scheme, rest)) => (Some(scheme), rest),
                None => (None, one),
            };
            let rest = match rest.rsplit_once('@') {
                Some((_, host)) => format!("***@{host}"),
                None => rest.to_owned(),
            };
            match scheme {
                Some(scheme) => format!("{scheme}://{rest}"),
                None => rest,
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// How often the client pings its server (see `connect_options`).
const PING_INTERVAL: Duration = Duration::from_secs(10);

/// The user and password a `nats://user:password@host` URL carries, percent-decoded; `None`
/// without them. With several URLs, the first that carries any.
pub fn url_credentials(urls: &str) -> Option<(String, String)> {
    urls.split(',').find_map(|one| {
        let rest = one
            .trim()
            .split_once("://")
            .map_or(one.trim(), |(_, rest)| rest);
        let authority = rest.split(['/', '?']).next().unwrap_or(rest);
        let (userinfo, _) = authority.rsplit_once('@')?;
        let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
        Some((percent_decode(user), percent_decode(password)))
    })
}

/// `urls` with the `user:password@` part of each removed.
///
/// The client library keeps each server URL as given and prints it whole, password
/// included, in its own debug lines ("attempting connection", "connection attempt failed"),
/// and it never sends URL credentials to the server. So the credentials are taken out of the
/// URL and given as options ([`url_credentials`]): they authenticate, and no log line of the
/// library can hold them.
pub fn strip_url_credentials(urls: &[String]) -> Vec<String> {
    urls.iter()
        .map(|one| {
            let (scheme, rest) = match one.split_once("://") {
                Some((scheme, rest)) => (Some(scheme), rest),
                None => (None, one.as_str()),
            };
            let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
            let rest = match rest[..authority_end].rsplit_once('@') {
                Some((_, host)) => format!("{host}{}", &rest[authority_end..]),
                None => rest.to_owned(),
            };
            match scheme {
                Some(scheme) => format!("{scheme}://{rest}"),
                None => rest,
            }
        })
        .collect()
}

/// `text` with each `%XX` escape replaced by its byte (invalid escapes kept as they are).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = (bytes[at] == b'%')
            .then(|| text.get(at + 1..at + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                at += 3;
            }
            None => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The client options of `config`; built anew for every connect attempt.
async fn connect_options(config: &NatsConfig) -> Result<ConnectOptions, NatsError> {
    let mut options = ConnectOptions::new()
        .name(&config.client_name)
        // Unlimited reconnects: a worker or coordinator outlives a restart of the server.
        .max_reconnects(None)
        // A ping every 10 s (the client's default is 60 s): a connection to a node that went
        // away without closing it (a partition, a lost host) is found dead after two missed
        // pongs, about 20 s, and the client moves to another node of the cluster well inside
        // the default ack wait (60 s), so the jobs it holds are not delivered again.
        .ping_interval(PING_INTERVAL)
        .require_tls(config.tls_required);
    if let Some(ca_file) = &config.tls_ca_file {
        options = options.add_root_certificates(ca_file.clone());
    }
    if let (Some(user), Some(password)) = (&config.user, &config.password) {
        options = options.user_and_password(user.clone(), password.expose().to_owned());
    } else if let Some((user, password)) = url_credentials(&config.url)
        && config.token.is_none()
        && config.creds_file.is_none()
    {
        options = options.user_and_password(user, password);
    }
    if let Some(token) = &config.token {
        options = options.token(token.expose().to_owned());
    }
    if let Some(creds_file) = &config.creds_file {
        options = options
            .credentials_file(creds_file)
            .await
            .map_err(|source| NatsError::Credentials {
                path: creds_file.clone(),
                source,
            })?;
    }
    Ok(options)
}

/// Connects to the server of `config`, retrying unreachable-server failures for
/// `connect_timeout` so that a process started before the server waits for it. Once
/// connected the client reconnects by itself, without limit.
pub async fn connect_client(config: &NatsConfig) -> Result<async_nats::Client, NatsError> {
    config
        .validate()
        .map_err(|problems| NatsError::InvalidConfig { problems })?;
    let urls = strip_url_credentials(&config.server_urls());
    let deadline = tokio::time::Instant::now() + config.connect_timeout;
    // Backoff between attempts: from 100 ms, doubling, at most 2 s, so a server that comes up
    // is found within about 2 s.
    let backoff = crate::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let delay = backoff.delay(attempt);
        let options = connect_options(config).await?;
        match options.connect(urls.as_slice()).await {
            Ok(client) => return Ok(client),
            Err(error)
                if is_retryable(error.kind())
                    && !is_tls_handshake_failure(&error)
                    && tokio::time::Instant::now() + delay < deadline =>
            {
                tracing::warn!(url = %redact_url(&config.url), error = %error, "nats server not reachable yet, retrying");
                tokio::time::sleep(delay).await;
            }
            Err(source) => {
                return Err(NatsError::Connect {
                    url: redact_url(&config.url),
                    source,
                });
            }
        }
    }
}

/// A connection with the four ports bound to it. Every field is cheap to clone and shares the
/// one connection.
#[derive(Clone)]
pub struct NatsFabric {
    /// The connection; it reconnects by itself.
    pub client: async_nats::Client,
    /// The JetStream context on `client`, for status views and tests.
    pub jetstream: async_nats::jetstream::Context,
    /// The `JobQueue` on the jobs stream and its tier consumers.
    pub queue: NatsJobQueue,
    /// The `EventLog` on the events stream.
    pub events: NatsEventLog,
    /// The `BatchRegistry` on the batches bucket.
    pub batches: NatsBatchRegistry,
    /// The `WorkerRegistry` on the workers bucket.
    pub workers: NatsWorkerRegistry,
    /// The `FabricHealth` checks of the streams and buckets above.
    pub health: NatsHealth,
    /// The replicas asked of every stream and bucket.
    pub replicas: Replicas,
    /// What the set-up could not make as asked (streams left with fewer replicas).
    pub setup: SetupReport,
}

/// Connects, finds the replica count ([`Replicas::resolve`]), runs [`ensure_streams`] and
/// binds the ports.
///
/// Every process (coordinator and workers) may call this: the set-up is idempotent. Processes
/// should share one config, since each one tunes the consumers to its own `ack_wait`,
/// `max_deliver` and tier caps. Without a configured replica count no process ever scales a
/// stream down, so a worker started while a node is away leaves the streams as they are.
pub async fn connect(config: &NatsConfig) -> Result<NatsFabric, NatsError> {
    let client = connect_client(config).await?;
    let jetstream = async_nats::jetstream::new(client.clone());
    let replicas = Replicas::resolve(config, &client.server_info());
    tracing::debug!(
        replicas = replicas.count,
        explicit = replicas.explicit,
        "replicas of the fleet's streams"
    );
    let setup = ensure_streams(&jetstream, config, replicas).await?;
    Ok(NatsFabric {
        health: NatsHealth::new(&jetstream, config, replicas.count),
        replicas,
        setup,
        queue: NatsJobQueue::open(&jetstream, config).await?,
        events: NatsEventLog::open(&jetstream, config).await?,
        batches: NatsBatchRegistry::open(&jetstream, config).await?,
        workers: NatsWorkerRegistry::open(&jetstream, config).await?,
        client,
        jetstream,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_credentials_move_out_of_the_url() {
        let urls = "nats://fleet:p%40ss@n1:4222, nats://n2:4222";
        assert_eq!(
            url_credentials(urls),
            Some(("fleet".to_owned(), "p@ss".to_owned()))
        );
        assert_eq!(url_credentials("nats://n1:4222"), None);
        let config = NatsConfig::new(urls);
        assert_eq!(
            strip_url_credentials(&config.server_urls()),
            ["nats://n1:4222", "nats://n2:4222"]
        );
        assert_eq!(
            strip_url_credentials(&["u:pw@n1:4222".to_owned()]),
            ["n1:4222"]
        );
    }

    #[test]
    fn subjects_and_names_follow_the_brief() {
        let batch = BatchId::new("b-1").expect("valid literal");
        assert_eq!(
            jobs_subject(Tier::Microvm, &batch),
            "cowork.jobs.microvm.b-1"
        );
        assert_eq!(tier_filter(Tier::Replay), "cowork.jobs.replay.>");
        assert_eq!(consumer_name(Tier::Container), "cowork-container");
        assert_eq!(events_subject(&batch), "cowork.events.b-1");
    }

    #[test]
    fn urls_lose_their_user_info() {
        for (url, shown) in [
            ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
            ("nats://fleet:hunter2@nats:4222", "nats://***@nats:4222"),
            ("tok@nats:4222", "***@nats:4222"),
            (
                "nats://a:1@x:4222, tls://y:4222",
                "nats://***@x:4222,tls://y:4222",
            ),
        ] {
            assert_eq!(redact_url(url), shown);
        }
    }

    #[test]
    fn invalid_configs_and_mismatches_are_not_transient() {
        let error = NatsError::InvalidConfig {
            problems: vec![InvalidConfig {
                field: "url",
                reason: "no server url given".to_owned(),
            }],
        };
        assert_eq!(
            error.to_string(),
            "invalid nats config: url: no server url given"
        );
        assert!(!error.is_transient());
    }
}
