//! `NatsConfig`: where the NATS server is, how to authenticate, and the names and tuning of the
//! JetStream streams, consumers and buckets of decisions.md#wire-protocol.
//!
//! The field names reuse JetStream's vocabulary (stream, `ack_wait`, `max_deliver`,
//! `max_ack_pending`) so an operator can map them one to one onto `nats stream info` and
//! `nats consumer info`. Durations are written as text (`60s`, `500ms`, `1h`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use cowork_schema::job::Tier;
use serde::Deserialize;

/// Passwords and tokens use the fabric's one redacting string type (`Debug` and `Display`
/// print `***`), shared with the S3 config.
pub use crate::secret::Secret;

/// Default in-flight cap of every tier (`max_ack_pending` of its consumer).
pub const DEFAULT_TIER_CAP: i64 = 1000;

/// Connection, authentication and JetStream settings of the distributed fabric.
///
/// There is no `Default`: the server URL is required. [`NatsConfig::new`] fills every other
/// field with its documented default.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsConfig {
    /// Server URL, e.g. `nats://nats.example:4222`; several servers of one cluster are
    /// separated by commas. Required. Credentials in the URL work but are better given below.
    pub url: String,
    /// Client name shown by the server's monitoring (`connz`). Default `cowork`.
    #[serde(default = "default_client_name")]
    pub client_name: String,
    /// User name for user/password authentication; needs `password`. Default none.
    #[serde(default)]
    pub user: Option<String>,
    /// Password for `user`. Default none.
    #[serde(default)]
    pub password: Option<Secret>,
    /// Token authentication. Default none.
    #[serde(default)]
    pub token: Option<Secret>,
    /// A `.creds` file (JWT and NKey seed) for decentralized authentication. Default none.
    #[serde(default)]
    pub creds_file: Option<PathBuf>,
    /// PEM file with the CA certificates that sign the server's certificate. Default none (the
    /// system's roots).
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// Refuse to talk to the server without TLS. Default `false` (TLS if the server asks).
    #[serde(default)]
    pub tls_required: bool,
    /// How long the first connection is retried before start-up fails, so a worker started
    /// before the server waits for it. Default `30s`.
    #[serde(
        default = "default_connect_timeout",
        with = "cowork_schema::duration::text"
    )]
    pub connect_timeout: Duration,
    /// Stream of jobs (WorkQueue retention, subjects `cowork.jobs.>`). Default `COWORK_JOBS`.
    #[serde(default = "default_jobs_stream")]
    pub jobs_stream: String,
    /// Stream of job events (Limits retention, subjects `cowork.events.>`). Default
    /// `COWORK_EVENTS`.
    #[serde(default = "default_events_stream")]
    pub events_stream: String,
    /// KV bucket of batch records. Default `COWORK_BATCHES`.
    #[serde(default = "default_batches_bucket")]
    pub batches_bucket: String,
    /// KV bucket of worker heartbeats. Default `COWORK_WORKERS`.
    #[serde(default = "default_workers_bucket")]
    pub workers_bucket: String,
    /// How long a delivered job may go without an ack or in-progress ack before JetStream
    /// delivers it again (`ack_wait` of every tier consumer). Workers renew every third of it.
    /// Default `60s`.
    #[serde(default = "default_ack_wait", with = "cowork_schema::duration::text")]
    pub ack_wait: Duration,
    /// Deliveries of one job before JetStream stops offering it (`max_deliver`). Default 5.
    #[serde(default = "default_max_deliver")]
    pub max_deliver: i64,
    /// Window in which a repeated `Nats-Msg-Id` on the jobs stream is dropped. It must cover a
    /// coordinator restart, so that re-publishing the jobs it had admitted is a no-op.
    /// Default `1h`.
    #[serde(
        default = "default_duplicate_window",
        with = "cowork_schema::duration::text"
    )]
    pub duplicate_window: Duration,
    /// Fleet-wide in-flight cap per tier (`max_ack_pending` of the tier's consumer); a tier
    /// not listed gets 1000.
    #[serde(default = "default_tier_caps")]
    pub tier_caps: BTreeMap<Tier, i64>,
    /// Age after which a worker's heartbeat expires (`max_age` of the workers bucket); workers
    /// must beat more often than this. Default `30s`.
    #[serde(default = "default_worker_ttl", with = "cowork_schema::duration::text")]
    pub worker_ttl: Duration,
    /// Replicas of every stream and bucket, 1 to 5. Default none: the cluster's size capped at
    /// 3, found from the server at connect (1 on a single server), and an existing stream is
    /// then only ever scaled up. A number given here is applied exactly, also downwards.
    #[serde(default)]
    pub replicas: Option<usize>,
    /// How long one pull request waits on the server before the puller checks its other tiers
    /// (and its shutdown). Default `2s`.
    #[serde(
        default = "default_pull_expiry",
        with = "cowork_schema::duration::text"
    )]
    pub pull_expiry: Duration,
}

fn default_client_name() -> String {
    "cowork".to_owned()
}
fn default_connect_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_jobs_stream() -> String {
    "COWORK_JOBS".to_owned()
}
fn default_events_stream() -> String {
    "COWORK_EVENTS".to_owned()
}
fn default_batches_bucket() -> String {
    "COWORK_BATCHES".to_owned()
}
fn default_workers_bucket() -> String {
    "COWORK_WORKERS".to_owned()
}
fn default_ack_wait() -> Duration {
    cowork_schema::retries::broker::ACK_WAIT
}
fn default_max_deliver() -> i64 {
    cowork_schema::retries::broker::MAX_DELIVER
}
fn default_duplicate_window() -> Duration {
    Duration::from_secs(3600)
}
fn default_tier_caps() -> BTreeMap<Tier, i64> {
    Tier::ALL
        .into_iter()
        .map(|tier| (tier, DEFAULT_TIER_CAP))
        .collect()
}
fn default_worker_ttl() -> Duration {
    Duration::from_secs(30)
}
fn default_pull_expiry() -> Duration {
    Duration::from_secs(2)
}

/// A config value that cannot work.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidConfig {
    pub field: &'static str,
    pub reason: String,
}

impl NatsConfig {
    /// A config for the server at `url` with every other field at its default.
    pub fn new(url: &str) -> NatsConfig {
        NatsConfig {
            url: url.to_owned(),
            client_name: default_client_name(),
            user: None,
            password: None,
            token: None,
            creds_file: None,
            tls_ca_file: None,
            tls_required: false,
            connect_timeout: default_connect_timeout(),
            jobs_stream: default_jobs_stream(),
            events_stream: default_events_stream(),
            batches_bucket: default_batches_bucket(),
            workers_bucket: default_workers_bucket(),
            ack_wait: default_ack_wait(),
            max_deliver: default_max_deliver(),
            duplicate_window: default_duplicate_window(),
            tier_caps: default_tier_caps(),
            worker_ttl: default_worker_ttl(),
            replicas: None,
            pull_expiry: default_pull_expiry(),
        }
    }

    /// The in-flight cap of `tier` (`max_ack_pending` of its consumer).
    pub fn tier_cap(&self, tier: Tier) -> i64 {
        self.tier_caps
            .get(&tier)
            .copied()
            .unwrap_or(DEFAULT_TIER_CAP)
    }

    /// The server URLs, split on commas.
    pub fn server_urls(&self) -> Vec<String> {
        self.url
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// Checks every field; returns all problems found, each naming its field.
    pub fn validate(&self) -> Result<(), Vec<InvalidConfig>> {
        let mut problems = Vec::new();
        let mut bad = |field: &'static str, reason: String| {
            problems.push(InvalidConfig { field, reason });
        };
        if self.server_urls().is_empty() {
            bad("url", "no server url given".to_owned());
        }
        if self.user.is_some() != self.password.is_some() {
            bad(
                "user",
                "user and password must be given together".to_owned(),
            );
        }
        let n_methods = usize::from(self.user.is_some())
            + usize::from(self.token.is_some())
            + usize::from(self.creds_file.is_some());
        if n_methods > 1 {
            bad(
                "token",
                "give only one of user/password, token and creds_file".to_owned(),
            );
        }
        for (field, name) in [
            ("jobs_stream", &self.jobs_stream),
            ("events_stream", &self.events_stream),
            ("batches_bucket", &self.batches_bucket),
            ("workers_bucket", &self.workers_bucket),
        ] {
            if let Err(reason) = check_name(name) {
                bad(field, reason);
            }
        }
        if self.jobs_stream == self.events_stream {
            bad("events_stream", "must differ from jobs_stream".to_owned());
        }
        if self.ack_wait.is_zero() {
            bad("ack_wait", "must be more than zero".to_owned());
        }
        if self.max_deliver < 1 && self.max_deliver != -1 {
            bad(
                "max_deliver",
                format!(
                    "must be at least 1 (or -1 for unlimited), not {}",
                    self.max_deliver
                ),
            );
        }
        for (tier, cap) in &self.tier_caps {
            if *cap < 1 && *cap != -1 {
                bad(
                    "tier_caps",
                    format!(
                        "cap of tier {} must be at least 1 (or -1 for unlimited), not {cap}",
                        tier.as_str()
                    ),
                );
            }
        }
        if self.worker_ttl < Duration::from_secs(1) {
            bad("worker_ttl", "must be at least 1s".to_owned());
        }
        if let Some(replicas) = self.replicas
            && !(1..=5).contains(&replicas)
        {
            bad("replicas", format!("must be 1 to 5, not {replicas}"));
        }
        if self.pull_expiry < Duration::from_millis(10) {
            bad("pull_expiry", "must be at least 10ms".to_owned());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

/// Stream and bucket names become subject tokens (`$JS.API.STREAM.INFO.<name>`, `$KV.<name>.`),
/// so they hold only letters, digits, `-` and `_`.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!("{name:?} may hold only A-Z, a-z, 0-9, '-' and '_'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_config_takes_the_documented_defaults() {
        let config: NatsConfig =
            serde_json::from_str(r#"{"url": "nats://127.0.0.1:4222"}"#).expect("valid config");
        assert_eq!(config, NatsConfig::new("nats://127.0.0.1:4222"));
        assert_eq!(config.ack_wait, Duration::from_secs(60));
        assert_eq!(config.duplicate_window, Duration::from_secs(3600));
        assert_eq!(config.tier_cap(Tier::Microvm), 1000);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn fields_parse_and_unknown_fields_are_refused() {
        let config: NatsConfig = serde_json::from_str(
            r#"{"url": "nats://a:4222, nats://b:4222", "ack_wait": "90s",
                "tier_caps": {"microvm": 4}, "password": "hunter2", "user": "u"}"#,
        )
        .expect("valid config");
        assert_eq!(config.ack_wait, Duration::from_secs(90));
        assert_eq!(config.tier_cap(Tier::Microvm), 4);
        assert_eq!(config.tier_cap(Tier::Container), DEFAULT_TIER_CAP);
        assert_eq!(config.server_urls(), vec!["nats://a:4222", "nats://b:4222"]);
        let error = serde_json::from_str::<NatsConfig>(r#"{"url": "x", "ackwait": "1s"}"#)
            .expect_err("unknown field");
        assert!(error.to_string().contains("ackwait"), "{error}");
        let error = serde_json::from_str::<NatsConfig>(r#"{"url": "x", "ack_wait": "1y"}"#)
            .expect_err("bad unit");
        assert!(error.to_string().contains("unknown unit"), "{error}");
    }

    #[test]
    fn secrets_never_print() {
        let mut config = NatsConfig::new("nats://127.0.0.1:4222");
        config.user = Some("fleet".to_owned());
        config.password = Some(Secret::new("hunter2"));
        config.token = Some(Secret::new("s3cret-token"));
        let shown = format!("{config:?} {}", Secret::new("hunter2"));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("s3cret-token"), "{shown}");
        assert!(shown.contains("***"), "{shown}");
    }

    fn check_invalid(edit: impl FnOnce(&mut NatsConfig), fields: &[&str]) {
        let mut config = NatsConfig::new("nats://127.0.0.1:4222");
        edit(&mut config);
        let problems = config.validate().expect_err("invalid config");
        let found: Vec<&str> = problems.iter().map(|problem| problem.field).collect();
        assert_eq!(found, fields, "{problems:?}");
    }

    #[test]
    fn validation_names_every_bad_field() {
        check_invalid(|c| c.url = " , ".to_owned(), &["url"]);
        check_invalid(|c| c.user = Some("u".to_owned()), &["user"]);
        check_invalid(
            |c| {
                c.token = Some(Secret::new("t"));
                c.creds_file = Some(PathBuf::from("x.creds"));
            },
            &["token"],
        );
        check_invalid(
            |c| {
                c.jobs_stream = "COWORK.JOBS".to_owned();
                c.workers_bucket = String::new();
            },
            &["jobs_stream", "workers_bucket"],
        );
        check_invalid(
            |c| c.events_stream = c.jobs_stream.clone(),
            &["events_stream"],
        );
        check_invalid(
            |c| {
                c.ack_wait = Duration::ZERO;
                c.max_deliver = 0;
            },
            &["ack_wait", "max_deliver"],
        );
        check_invalid(
            |c| {
                c.tier_caps.insert(Tier::Replay, 0);
            },
            &["tier_caps"],
        );
        check_invalid(|c| c.replicas = Some(0), &["replicas"]);
        check_invalid(|c| c.replicas = Some(6), &["replicas"]);
        check_invalid(
            |c| c.worker_ttl = Duration::from_millis(10),
            &["worker_ttl"],
        );
        check_invalid(|c| c.pull_expiry = Duration::ZERO, &["pull_expiry"]);
    }
}
