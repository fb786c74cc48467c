//! What the coordinator service is told: its settings ([`CoordinatorConfig`], with the bearer
//! tokens it accepts) and the fleet's ports it runs on ([`FleetPorts`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cowork_fabric::bundle::UnpackLimits;
use cowork_fabric::{ArtifactStore, BatchRegistry, EventLog, JobQueue, WorkerRegistry};
use cowork_schema::share::Priority;
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
    /// What each full token may submit (`--token-policy`): the highest priority class and the
    /// slots its batches share. A token without a policy may submit any class, unbounded. Not
    /// read from a config file.
    #[serde(skip)]
    pub token_policies: Vec<TokenPolicy>,
}

impl CoordinatorConfig {
    /// The running-slot quota of each token policy that sets `max-slots`, by policy name: what
    /// `cowork_core::share::FairShare::set_quotas` takes. A batch's policy name is
    /// `record.listing.token_name`.
    pub fn token_quotas(&self) -> BTreeMap<String, u64> {
        self.token_policies
            .iter()
            .filter_map(|policy| Some((policy.name.clone(), policy.max_slots?)))
            .collect()
    }

    /// What is wrong with the token policies against the configured tokens (see
    /// [`TokenPolicy::problems`]).
    pub fn token_policy_problems(&self) -> Vec<String> {
        TokenPolicy::problems(&self.token_policies, &self.api_tokens, &self.read_tokens)
    }
}

/// What one full API token may submit (`--token-policy
/// NAME=sha256:<hex>,max-priority=CLASS,max-slots=N`). The token is named by its sha256, so the
/// secret is configured once, with the tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenPolicy {
    /// The policy's name: what batches submitted with the token record as their
    /// `tokenName`, and the key of its quota.
    pub name: String,
    /// The sha256 of the token it binds.
    pub token_sha256: [u8; 32],
    /// The highest class the token may submit; `None`: any.
    pub max_priority: Option<Priority>,
    /// Jobs of the token's batches together running or queued at once at most; `None`: no
    /// bound beyond the fleet's.
    pub max_slots: Option<u64>,
}

/// Longest policy name: it is shown in lists and status lines.
const MAX_POLICY_NAME: usize = 64;

impl TokenPolicy {
    /// Reads one `--token-policy` entry; the refusal names the flag, the entry and its fix.
    pub fn parse(entry: &str) -> Result<TokenPolicy, String> {
        let refuse = |why: String| format!("--token-policy {entry:?}: {why}");
        let mut fields = entry.split(',').map(str::trim);
        let head = fields.next().unwrap_or_default();
        let Some((name, digest)) = head.split_once('=') else {
            return Err(refuse(
                "needs NAME=sha256:<64 hex digits of the token>[,max-priority=CLASS][,max-slots=N]"
                    .to_owned(),
            ));
        };
        let name = name.trim();
        if name.is_empty()
            || name.len() > MAX_POLICY_NAME
            || !name
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
        {
            return Err(refuse(format!(
                "the name {name:?} must be 1 to {MAX_POLICY_NAME} letters, digits, `.`, `_` or `-`"
            )));
        }
        let token_sha256 = parse_digest(digest.trim()).ok_or_else(|| {
            refuse(format!(
                "{:?} is not sha256:<64 hex digits>; `printf %s \"$TOKEN\" | sha256sum` prints them",
                digest.trim()
            ))
        })?;
        let mut policy = TokenPolicy {
            name: name.to_owned(),
            token_sha256,
            max_priority: None,
            max_slots: None,
        };
        for field in fields {
            policy.set(field).map_err(refuse)?;
        }
        Ok(policy)
    }

    /// Sets one `key=value` field of an entry.
    fn set(&mut self, field: &str) -> Result<(), String> {
        let (key, value) = field.split_once('=').unwrap_or((field, ""));
        let value = value.trim();
        match key.trim() {
            "max-priority" if self.max_priority.is_none() => {
                self.max_priority = Some(Priority::parse(value).ok_or_else(|| {
                    format!("max-priority must be urgent, normal or batch, got {value:?}")
                })?);
            }
            "max-slots" if self.max_slots.is_none() => {
                self.max_slots = Some(
                    value
                        .parse::<u64>()
                        .ok()
                        .filter(|slots| *slots >= 1)
                        .ok_or_else(|| {
                            format!("max-slots must be a whole number of at least 1, got {value:?}")
                        })?,
                );
            }
            "max-priority" | "max-slots" => return Err(format!("{} is given twice", key.trim())),
            other => {
                return Err(format!(
                    "unknown field {other:?}; a policy takes max-priority=CLASS and max-slots=N"
                ));
            }
        }
        Ok(())
    }

    /// What is wrong with `policies` against the configured tokens: a policy must bind one
    /// full token (by its digest), and no name or token may have two policies.
    pub fn problems(policies: &[TokenPolicy], full: &[ApiToken], read: &[ApiToken]) -> Vec<String> {
        let full: Vec<[u8; 32]> = full
            .iter()
            .map(|token| sha256(token.expose().as_bytes()))
            .collect();
        let read: Vec<[u8; 32]> = read
            .iter()
            .map(|token| sha256(token.expose().as_bytes()))
            .collect();
        let mut problems = Vec::new();
        for (index, policy) in policies.iter().enumerate() {
            let earlier = &policies[..index];
            if earlier.iter().any(|other| other.name == policy.name) {
                problems.push(format!(
                    "--token-policy {}: the name is given twice; give each policy its own name",
                    policy.name
                ));
            }
            if earlier
                .iter()
                .any(|other| other.token_sha256 == policy.token_sha256)
            {
                problems.push(format!(
                    "--token-policy {}: its token already has a policy; one policy per token",
                    policy.name
                ));
            }
            if full.contains(&policy.token_sha256) {
                continue;
            }
            let why = if read.contains(&policy.token_sha256) {
                "is a read-only token, which submits nothing"
            } else {
                "matches no token in COWORK_API_TOKEN or --api-token-file"
            };
            problems.push(format!(
                "--token-policy {}: sha256:{} {why}; give the digest of a full API token \
                 (printf %s \"$TOKEN\" | sha256sum)",
                policy.name,
                cowork_fabric::hex(&policy.token_sha256)
            ));
        }
        problems
    }

    /// Refuses a batch of class `priority` above the token's `max-priority`, saying what to
    /// submit instead.
    pub fn check_priority(&self, priority: Priority) -> Result<(), String> {
        match self.max_priority {
            // `Ord` puts the higher class first.
            Some(max) if priority < max => Err(format!(
                "priority {priority} is above what this token may use ({max}); submit with \
                 --priority {max} or ask the fleet's operator"
            )),
            _ => Ok(()),
        }
    }
}

/// The 32 bytes of `sha256:<64 hex digits>` (either case).
fn parse_digest(text: &str) -> Option<[u8; 32]> {
    let hex = text.strip_prefix("sha256:")?;
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    let mut digits = hex.chars().map(|c| c.to_digit(16));
    for byte in &mut digest {
        let (high, low) = (digits.next()??, digits.next()??);
        *byte = u8::try_from(high * 16 + low).ok()?;
    }
    Some(digest)
}

/// The sha256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).into()
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
    /// The lease that says which of several coordinators leads (decisions.md#coordinator-lease);
    /// `None`: this coordinator is the only one and leads from the start.
    pub lease: Option<LeasePort>,
}

/// A coordinator's part in the lease: the port and the URL standbys send clients to.
#[derive(Clone)]
pub struct LeasePort {
    pub lease: Arc<dyn cowork_fabric::CoordinatorLease>,
    /// This coordinator's API as clients reach it (`--advertise-url`).
    pub advertise_url: String,
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
            lease: None,
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

    fn policy_config(policies: &[&str]) -> CoordinatorConfig {
        let mut config: CoordinatorConfig = serde_json::from_str(
            r#"{"listen":"127.0.0.1:0","coordinator_id":"c1","api_tokens":["full-1","full-2"],"read_tokens":["reader"],"scratch_dir":"/tmp/x"}"#,
        )
        .expect("a minimal config parses");
        config.token_policies = policies
            .iter()
            .map(|entry| TokenPolicy::parse(entry).expect("a valid policy"))
            .collect();
        config
    }

    fn digest_of(token: &str) -> String {
        format!("sha256:{}", cowork_fabric::sha256_hex(token.as_bytes()))
    }

    #[test]
    fn a_token_policy_reads_its_name_digest_class_and_slots() {
        let entry = format!(
            "ci={},max-priority=normal, max-slots=16",
            digest_of("full-1")
        );
        let policy = TokenPolicy::parse(&entry).expect("valid");
        assert_eq!(policy.name, "ci");
        assert_eq!(policy.token_sha256, sha256(b"full-1"));
        assert_eq!(policy.max_priority, Some(Priority::Normal));
        assert_eq!(policy.max_slots, Some(16));
        let upper = digest_of("full-1")
            .to_uppercase()
            .replace("SHA256", "sha256");
        let bare = TokenPolicy::parse(&format!("ci={upper}")).expect("valid");
        assert_eq!((bare.max_priority, bare.max_slots), (None, None));
        assert_eq!(bare.token_sha256, policy.token_sha256);

        let digest = digest_of("full-1");
        for (entry, expect) in [
            ("ci".to_owned(), "needs NAME=sha256:"),
            (format!("={digest}"), "the name \"\""),
            (format!("c i={digest}"), "letters, digits"),
            ("ci=deadbeef".to_owned(), "is not sha256:<64 hex digits>"),
            (format!("ci={}", &digest[..70]), "is not sha256:"),
            (format!("ci={}+1", &digest[..69]), "is not sha256:"),
            (
                format!("ci={digest},max-priority=high"),
                "urgent, normal or batch",
            ),
            (format!("ci={digest},max-slots=0"), "at least 1"),
            (format!("ci={digest},max-slots=-3"), "at least 1"),
            (
                format!("ci={digest},max-slots=1,max-slots=2"),
                "given twice",
            ),
            (format!("ci={digest},slots=2"), "unknown field \"slots\""),
        ] {
            let error = TokenPolicy::parse(&entry).expect_err(&entry);
            assert!(error.starts_with("--token-policy "), "{error}");
            assert!(error.contains(expect), "{entry}: {error}");
        }
    }

    #[test]
    fn a_token_policy_caps_the_class_its_token_submits() {
        let policy =
            TokenPolicy::parse(&format!("ci={},max-priority=normal", digest_of("t"))).expect("ok");
        assert_eq!(policy.check_priority(Priority::Normal), Ok(()));
        assert_eq!(policy.check_priority(Priority::Batch), Ok(()));
        assert_eq!(
            policy.check_priority(Priority::Urgent),
            Err(
                "priority urgent is above what this token may use (normal); submit with \
                 --priority normal or ask the fleet's operator"
                    .to_owned()
            )
        );
        let open = TokenPolicy::parse(&format!("any={}", digest_of("t"))).expect("ok");
        assert_eq!(open.check_priority(Priority::Urgent), Ok(()));
    }

    #[test]
    fn token_policies_bind_configured_full_tokens_and_give_their_quotas() {
        let (one, two) = (digest_of("full-1"), digest_of("full-2"));
        let config = policy_config(&[
            &format!("ci={one},max-slots=16"),
            &format!("nightly={two},max-priority=batch"),
        ]);
        assert_eq!(config.token_policy_problems(), Vec::<String>::new());
        assert_eq!(
            config.token_quotas(),
            BTreeMap::from([("ci".to_owned(), 16)])
        );
        let config = policy_config(&[
            &format!("ci={one}"),
            &format!("ci={two}"),
            &format!("again={one}"),
            &format!("reader={}", digest_of("reader")),
            &format!("stranger={}", digest_of("nobody")),
        ]);
        let problems = config.token_policy_problems();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].contains("--token-policy ci: the name is given twice"));
        assert!(problems[1].contains("--token-policy again: its token already has a policy"));
        assert!(problems[2].contains("--token-policy reader") && problems[2].contains("read-only"));
        assert!(
            problems[3].contains("--token-policy stranger")
                && problems[3].contains("matches no token")
        );
    }

    #[test]
    fn unknown_config_keys_are_refused() {
        let parsed: Result<CoordinatorConfig, _> = serde_json::from_str(
            r#"{"listen":"127.0.0.1:0","coordinator_id":"c1","scratch_dir":"/tmp/x","windwo":3}"#,
        );
        assert!(parsed.is_err());
    }
}
