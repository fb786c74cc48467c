//! Connection flags of the distributed mode: NATS JetStream, S3 and the coordinator's API.
//! Secrets come from the environment or from files, never from a flag value (flags show up in
//! `ps` and shell history).

use std::path::PathBuf;

use clap::Args;

/// Where the queue and the event log live.
#[derive(Clone, Debug, Args)]
pub struct NatsArgs {
    /// NATS server URL(s), comma-separated for a cluster.
    #[arg(long, env = "COWORK_NATS_URL", value_name = "URL")]
    pub nats_url: String,
    /// NATS user name (password from COWORK_NATS_PASSWORD or --nats-password-file).
    #[arg(long, env = "COWORK_NATS_USER", value_name = "USER")]
    pub nats_user: Option<String>,
    /// File holding the NATS password.
    #[arg(long, env = "COWORK_NATS_PASSWORD_FILE", value_name = "FILE")]
    pub nats_password_file: Option<PathBuf>,
    /// File holding a NATS token (or set COWORK_NATS_TOKEN).
    #[arg(long, env = "COWORK_NATS_TOKEN_FILE", value_name = "FILE")]
    pub nats_token_file: Option<PathBuf>,
    /// NATS credentials file (JWT + NKey seed).
    #[arg(long, env = "COWORK_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// PEM file of the CA that signs the NATS server's certificate.
    #[arg(long, env = "COWORK_NATS_TLS_CA", value_name = "FILE")]
    pub nats_tls_ca: Option<PathBuf>,
    /// Refuse to talk to NATS without TLS.
    #[arg(long, env = "COWORK_NATS_TLS_REQUIRED")]
    pub nats_tls_required: bool,
    /// Replicas of every stream and bucket the fleet creates (1 to 5); an existing one is moved
    /// to this count in place. Default: the cluster's size capped at 3 (1 on a single server),
    /// found from the server at start, and then streams are only ever scaled up.
    #[arg(long, env = "COWORK_NATS_REPLICAS", value_name = "N")]
    pub nats_replicas: Option<usize>,
    /// Ack deadline of a delivered job (workers renew it every third), e.g. 60s.
    #[arg(
        long,
        env = "COWORK_ACK_WAIT",
        value_name = "DURATION",
        default_value = "60s"
    )]
    pub ack_wait: String,
    /// Deliveries of one job before an infrastructure failure is final.
    #[arg(
        long,
        env = "COWORK_MAX_DELIVER",
        value_name = "N",
        default_value_t = 5
    )]
    pub max_deliver: i64,
    /// Fleet-wide in-flight cap of a tier (its consumer's max_ack_pending), e.g.
    /// `container=200,microvm=8`; unlisted tiers get 1000.
    #[arg(
        long,
        env = "COWORK_TIER_CAPS",
        value_name = "TIER=N,…",
        value_delimiter = ','
    )]
    pub tier_cap: Vec<String>,
}

/// Where artifacts live.
#[derive(Clone, Debug, Args)]
pub struct S3Args {
    /// S3 endpoint URL (MinIO: http://minio:9000); omit for AWS S3.
    #[arg(long, env = "COWORK_S3_ENDPOINT", value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// Bucket holding bundles, results and rollups.
    #[arg(long, env = "COWORK_S3_BUCKET", value_name = "BUCKET")]
    pub s3_bucket: String,
    /// Signing region.
    #[arg(
        long,
        env = "COWORK_S3_REGION",
        value_name = "REGION",
        default_value = "us-east-1"
    )]
    pub s3_region: String,
    /// Key prefix inside the bucket.
    #[arg(long, env = "COWORK_S3_PREFIX", value_name = "PREFIX")]
    pub s3_prefix: Option<String>,
    /// Access key id (the secret comes from COWORK_S3_SECRET_ACCESS_KEY or
    /// --s3-secret-access-key-file).
    #[arg(long, env = "COWORK_S3_ACCESS_KEY_ID", value_name = "ID")]
    pub s3_access_key_id: String,
    /// File holding the secret access key.
    #[arg(long, env = "COWORK_S3_SECRET_ACCESS_KEY_FILE", value_name = "FILE")]
    pub s3_secret_access_key_file: Option<PathBuf>,
    /// Create the bucket if it does not exist.
    #[arg(long, env = "COWORK_S3_CREATE_BUCKET")]
    pub s3_create_bucket: bool,
    /// Virtual-hosted addressing (AWS S3) instead of path-style (MinIO).
    #[arg(long, env = "COWORK_S3_VIRTUAL_HOSTED")]
    pub s3_virtual_hosted: bool,
    /// PEM file of the CA that signs an https endpoint's certificate.
    #[arg(long, env = "COWORK_S3_CA_FILE", value_name = "FILE")]
    pub s3_ca_file: Option<PathBuf>,
}

/// How a client reaches the coordinator.
#[derive(Clone, Debug, Args)]
pub struct ClientArgs {
    /// Coordinator base URL (`http://HOST:8700`, `https://…`; a bare `HOST:PORT` is read as
    /// http), or several coordinators of one fleet separated by commas: the first is asked
    /// first, an unreachable one is passed over and a standby's answer names the leader.
    #[arg(
        long,
        env = "COWORK_COORDINATOR",
        value_name = "URL",
        default_value = "http://127.0.0.1:8700"
    )]
    pub coordinator: String,
    /// File holding the API bearer token (or set COWORK_API_TOKEN).
    #[arg(long, env = "COWORK_API_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// PEM file of the CA that signs an https coordinator's certificate (default: the system's
    /// roots).
    #[arg(long, env = "COWORK_COORDINATOR_CA", value_name = "FILE")]
    pub coordinator_ca: Option<PathBuf>,
}

/// Reads a secret from `$env_var` or from `file`; `None` when neither is set.
pub fn read_secret(
    env_var: &str,
    file: Option<&std::path::Path>,
) -> Result<Option<String>, String> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read secret file: {e}", path.display()))?;
        let value = text.trim().to_owned();
        if value.is_empty() {
            return Err(format!("{}: secret file is empty", path.display()));
        }
        return Ok(Some(value));
    }
    match std::env::var(env_var) {
        Ok(value) if !value.trim().is_empty() => Ok(Some(value.trim().to_owned())),
        _ => Ok(None),
    }
}
