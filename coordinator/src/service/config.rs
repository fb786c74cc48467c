//! What the coordinator service is told: its settings ([`CoordinatorConfig`], with the bearer
//! tokens it accepts) and the fleet's ports it runs on ([`FleetPorts`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cowork_fabric::bundle::UnpackLimits;
use cowork_fabric::{ArtifactStore, BatchRegistry, EventLog, JobQueue, WorkerRegistry};
use serde::Deserialize;

use crate::supervisor::CoordinatorPorts;

/// Default largest submitted bundle: 256 MiB. A bundle holds scenarios, sessions and skill
/// trees; this is far above that and small enough to hold in memory while it is checked.
pub const DEFAULT_MAX_BUNDLE_BYTES: u64 = 256 << 20;
/// Default admission window per batch.
pub const DEFAULT_WINDOW: usize = 64;

/// A bearer token the API accepts. `Debug` and `Display` print a redaction, so a config that
/// holds tokens can be logged.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct ApiToken(String);

impl ApiToken {
    /// Wraps a token.
    pub fn new(value: &str) -> ApiToken {
        ApiToken(value.to_owned())
    }

    /// The token itself; only the authorization check reads it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(***)")
    }
}

impl std::fmt::Display for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Settings of the coordinator service.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoordinatorConfig {
    /// Address the API listens on. The caller binds it and hands [`crate::server::run`] the listener.
    pub listen: SocketAddr,
    /// Id of this replica, written as `owner` into the batch records it supervises.
    pub coordinator_id: String,
    /// Bearer tokens accepted on every `/v1/*` route. Required unless
    /// `allow_unauthenticated` is set.
    #[serde(default)]
    pub api_tokens: Vec<ApiToken>,
    /// Read-only bearer tokens: accepted on every `GET` the CLI and the pages use, refused
    /// with `403` on every request that changes a batch (submit, cancel, resume, pause,
    /// adjust). Default none.
    #[serde(default)]
    pub read_tokens: Vec<ApiToken>,
    /// Serve `/v1/*` without authentication when no token is configured (local use only).
    /// Default: false, and then [`crate::server::run`] refuses to start without a token.
    #[serde(default)]
    pub allow_unauthenticated: bool,
    /// Jobs of one batch outstanding (published, not finished) at most. Default 64.
    #[serde(default = "default_window")]
    pub window: usize,
    /// Submits read and validated at once at most; more get `503` with `Retry-After`
    /// (`--max-concurrent-submits`). Default 4. Not read from a config file.
    #[serde(skip, default = "default_max_concurrent_submits")]
    pub max_concurrent_submits: usize,
    /// Largest accepted bundle, in bytes. Default 256 MiB; a larger upload gets 413.
    #[serde(default = "default_max_bundle_bytes")]
    pub max_bundle_bytes: u64,
    /// Caps applied when a submitted bundle is unpacked for validation (`cowork coordinator`
    /// sets 512 MiB, 50,000 entries, 512 MiB per file by default: `--max-unpacked-mib`,
    /// `--max-bundle-entries`). Not read from a config file.
    #[serde(skip)]
    pub unpack_limits: UnpackLimits,
    /// Directory where bundles are unpacked while they are validated; each batch uses and then
    /// removes its own subdirectory.
    pub scratch_dir: PathBuf,
    /// First dispatch pause of a tier after a `usage_limit` result
    /// (harness-behaviour.md#choice-c9); doubles up to `usage_pause_max`. Not read from a config
    /// file.
    #[serde(skip, default = "default_usage_pause")]
    pub usage_pause: Duration,
    #[serde(skip, default = "default_usage_pause_max")]
    pub usage_pause_max: Duration,
    /// Per-model admission limits shared by every batch (`--model-limit`). Not read from a
    /// config file.
    #[serde(skip)]
    pub model_limits: Vec<cowork_core::limits::ModelLimit>,
    /// Bounds on the API's connections (`--http-*`). Not read from a config file.
    #[serde(skip)]
    pub http_limits: crate::http_serve::HttpLimits,
    /// Serve the API over HTTPS with this certificate and key (`--tls-cert`, `--tls-key`).
    #[serde(skip)]
    pub tls: Option<crate::tls::TlsFiles>,
    /// A Kubernetes Job of workers for each large batch (`--k8s-worker-jobs`); `None` (the
    /// default) = off. Not read from a config file.
    /// Webhooks told of every batch, their secret, and where they point people (`--notify`,
    /// `--notify-secret-file`, `--public-url`). Not read from a config file.
    #[serde(skip)]
    pub notify: crate::notify::NotifyConfig,
    #[cfg(feature = "k8s")]
    #[serde(skip)]
    pub k8s_worker_jobs: Option<crate::k8s::K8sWorkerJobs>,
    /// Sandbox price per minute by tier and model price per run (`--sandbox-price`,
    /// `--model-price`): every batch is charged at them unless it sets its own, and a batch
    /// budget is refused over a tier or model nothing prices (decisions.md#whole-cost). Not
    /// read from a config file.
    #[serde(skip)]
    pub prices: cowork_schema::pricing::Pricing,
}

/// Default cap on submits validated at once: each holds its body and unpacks a bundle.
pub const DEFAULT_MAX_CONCURRENT_SUBMITS: usize = 4;

fn default_max_concurrent_submits() -> usize {
    DEFAULT_MAX_CONCURRENT_SUBMITS
}

fn default_usage_pause() -> Duration {
    crate::supervisor::DEFAULT_USAGE_PAUSE
}

fn default_usage_pause_max() -> Duration {
    crate::supervisor::DEFAULT_USAGE_PAUSE_MAX
}

fn default_window() -> usize {
    DEFAULT_WINDOW
}

fn default_max_bundle_bytes() -> u64 {
    DEFAULT_MAX_BUNDLE_BYTES
}

/// The ports the coordinator service uses.
#[derive(Clone)]
pub struct FleetPorts {
    pub queue: Arc<dyn JobQueue>,
    pub events: Arc<dyn EventLog>,
    pub store: Arc<dyn ArtifactStore>,
    pub batches: Arc<dyn BatchRegistry>,
    pub workers: Arc<dyn WorkerRegistry>,
    /// Checks of the queue's streams and buckets, shown while one stalls; `None` for ports
    /// that cannot stall that way (the embedded ones).
    pub health: Option<Arc<dyn cowork_fabric::FabricHealth>>,
}

impl FleetPorts {
    /// The ports of a coordinator on NATS JetStream and an S3 bucket.
    pub fn on_nats(
        fabric: &cowork_fabric::nats::NatsFabric,
        store: Arc<dyn ArtifactStore>,
    ) -> FleetPorts {
        FleetPorts {
            queue: Arc::new(fabric.queue.clone()),
            events: Arc::new(fabric.events.clone()),
            store,
            batches: Arc::new(fabric.batches.clone()),
            workers: Arc::new(fabric.workers.clone()),
            health: Some(Arc::new(fabric.health.clone())),
        }
    }

    /// The subset the batch supervisor uses.
    pub fn coordinator_ports(&self) -> CoordinatorPorts {
        CoordinatorPorts {
            queue: Arc::clone(&self.queue),
            events: Arc::clone(&self.events),
            store: Arc::clone(&self.store),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_never_print() {
        let token = ApiToken::new("s3cr3t");
        assert_eq!(format!("{token}"), "***");
        assert_eq!(format!("{token:?}"), "ApiToken(***)");
        let config: CoordinatorConfig = serde_json::from_str(
            r#"{"listen":"127.0.0.1:0","coordinator_id":"c1","api_tokens":["s3cr3t"],"scratch_dir":"/tmp/x"}"#,
        )
        .expect("a minimal config parses");
        assert!(!format!("{config:?}").contains("s3cr3t"));
        assert_eq!(config.window, DEFAULT_WINDOW);
        assert_eq!(config.max_bundle_bytes, DEFAULT_MAX_BUNDLE_BYTES);
        assert!(!config.allow_unauthenticated);
    }

    #[test]
    fn unknown_config_keys_are_refused() {
        let parsed: Result<CoordinatorConfig, _> = serde_json::from_str(
            r#"{"listen":"127.0.0.1:0","coordinator_id":"c1","scratch_dir":"/tmp/x","windwo":3}"#,
        );
        assert!(parsed.is_err());
    }
}
