//! The second stage of argument handling (each setting is defined once, in its clap field): flags,
//! environment and secret files become the fabric's configs, and the configs become connected
//! ports.

use anyhow::{Context, anyhow};
use cowork_client::{ClientError, CoordinatorClient};
use cowork_fabric::nats::{NatsConfig, NatsFabric};
use cowork_fabric::s3::{S3ArtifactStore, S3Config};
use cowork_fabric::secret::Secret;
use cowork_schema::duration::parse_duration;
use cowork_schema::job::Tier;

use crate::exit::CliError;
use crate::fleet_args::{ClientArgs, NatsArgs, S3Args, read_secret};

/// The NATS config from flags and environment; every problem is listed.
pub fn nats_config(args: &NatsArgs) -> Result<NatsConfig, CliError> {
    let mut problems = Vec::new();
    let mut config = NatsConfig::new(&args.nats_url);
    config.user = args.nats_user.clone();
    match read_secret("COWORK_NATS_PASSWORD", args.nats_password_file.as_deref()) {
        Ok(password) => config.password = password.map(Secret::new),
        Err(problem) => problems.push(problem),
    }
    match read_secret("COWORK_NATS_TOKEN", args.nats_token_file.as_deref()) {
        Ok(token) => config.token = token.map(Secret::new),
        Err(problem) => problems.push(problem),
    }
    config.creds_file = args.nats_creds.clone();
    config.tls_ca_file = args.nats_tls_ca.clone();
    config.tls_required = args.nats_tls_required;
    match parse_duration(&args.ack_wait) {
        Ok(ack_wait) => config.ack_wait = ack_wait,
        Err(problem) => problems.push(format!("--ack-wait: {problem}")),
    }
    config.max_deliver = args.max_deliver;
    config.replicas = args.nats_replicas;
    for entry in &args.tier_cap {
        let parsed = entry.split_once('=').and_then(|(tier, cap)| {
            Some((Tier::parse(tier.trim())?, cap.trim().parse::<i64>().ok()?))
        });
        match parsed {
            Some((tier, cap)) if cap >= 1 => {
                config.tier_caps.insert(tier, cap);
            }
            _ => problems.push(format!(
                "--tier-cap: expected <tier>=<n> with tier one of container, hostloop, microvm, protocol, replay and n >= 1, got {entry:?}"
            )),
        }
    }
    if let Err(invalid) = config.validate() {
        problems.extend(invalid.iter().map(ToString::to_string));
    }
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(CliError::Usage(problems))
    }
}

/// The S3 config from flags and environment; every problem is listed.
pub fn s3_config(args: &S3Args) -> Result<S3Config, CliError> {
    let secret = match read_secret(
        "COWORK_S3_SECRET_ACCESS_KEY",
        args.s3_secret_access_key_file.as_deref(),
    ) {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            return Err(CliError::usage(
                "the S3 secret access key is missing: set COWORK_S3_SECRET_ACCESS_KEY or --s3-secret-access-key-file",
            ));
        }
        Err(problem) => return Err(CliError::usage(problem)),
    };
    let mut config = S3Config::new(
        args.s3_bucket.clone(),
        args.s3_access_key_id.clone(),
        Secret::new(secret),
    );
    config.endpoint = args.s3_endpoint.clone();
    config.region = args.s3_region.clone();
    config.prefix = args.s3_prefix.clone();
    config.create_bucket = args.s3_create_bucket;
    config.path_style = !args.s3_virtual_hosted;
    config.ca_file = args.s3_ca_file.clone();
    let problems = config.validate();
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(CliError::Usage(problems))
    }
}

/// Connects to NATS (creating or checking streams, consumers and buckets, each with the
/// fleet's replicas; a stream left short of them is logged).
pub async fn connect_nats(config: &NatsConfig) -> Result<NatsFabric, CliError> {
    let fabric = cowork_fabric::nats::connect(config)
        .await
        .map_err(|error| {
            CliError::Failed(anyhow!(error).context(format!(
                "connecting to NATS at {}",
                cowork_fabric::nats::redact_url(&config.url)
            )))
        })?;
    tracing::info!(
        replicas = fabric.replicas.count,
        from_cluster_size = !fabric.replicas.explicit,
        "streams and buckets of the queue ready"
    );
    Ok(fabric)
}

/// Connects to the S3 store (creating the bucket when asked).
pub async fn connect_s3(config: &S3Config) -> Result<S3ArtifactStore, CliError> {
    S3ArtifactStore::connect(config)
        .await
        .with_context(|| format!("connecting to the S3 bucket {}", config.bucket))
        .map_err(CliError::Failed)
}

/// A duration flag (`30s`, `500ms`, `2m`), or a usage error naming the flag.
pub fn duration_arg(flag: &str, text: &str) -> Result<std::time::Duration, CliError> {
    parse_duration(text).map_err(|problem| CliError::usage(format!("{flag}: {problem}")))
}

/// The `--model-limit` rules, or a usage error naming the bad one.
pub fn model_limits(texts: &[String]) -> Result<Vec<cowork_core::limits::ModelLimit>, CliError> {
    texts
        .iter()
        .filter(|text| !text.trim().is_empty())
        .map(|text| {
            cowork_core::limits::ModelLimit::parse(text)
                .map_err(|problem| CliError::usage(format!("--model-limit {problem}")))
        })
        .collect()
}

/// The admission settings of `run`, `resume` and `coordinator`, parsed: the first pause of a
/// tier after a usage limit, and the per-model limits.
pub struct Admission {
    pub usage_pause: std::time::Duration,
    pub model_limits: Vec<cowork_core::limits::ModelLimit>,
}

impl Admission {
    pub fn from_args(args: &crate::args::AdmissionArgs) -> Result<Admission, CliError> {
        Ok(Admission {
            usage_pause: duration_arg("--usage-limit-pause", &args.usage_limit_pause)?,
            model_limits: model_limits(&args.model_limit)?,
        })
    }
}

/// A client for the coordinator named by `args`.
pub fn client(args: &ClientArgs) -> Result<CoordinatorClient, CliError> {
    let token =
        read_secret("COWORK_API_TOKEN", args.token_file.as_deref()).map_err(CliError::usage)?;
    let ca_pem = match &args.coordinator_ca {
        None => None,
        Some(path) => Some(std::fs::read(path).map_err(|e| {
            CliError::usage(format!(
                "--coordinator-ca: cannot read {}: {e}",
                path.display()
            ))
        })?),
    };
    CoordinatorClient::with_ca(&args.coordinator, token, ca_pem.as_deref())
        .map_err(|e| CliError::usage(format!("--coordinator: {e}")))
}

/// Maps a client error to the CLI's: refusals are usage errors (exit 2) listing every problem.
pub fn client_error(error: ClientError, doing: &str) -> CliError {
    match error {
        ClientError::BadRequest { problems, .. } if !problems.is_empty() => {
            CliError::Usage(problems)
        }
        ClientError::Unauthorized {
            token_sent: false, ..
        } => CliError::usage(format!(
            "{doing}: the coordinator asks for an API token and none was sent (set COWORK_API_TOKEN or --token-file)"
        )),
        ClientError::Unauthorized { .. } => CliError::usage(format!(
            "{doing}: the coordinator refused the API token (check COWORK_API_TOKEN or --token-file)"
        )),
        // A usage error: the fix is another token, not a retry.
        ClientError::Forbidden { message } => CliError::usage(format!(
            "{doing}: {message} (the token in COWORK_API_TOKEN or --token-file is read-only)"
        )),
        other => CliError::Failed(anyhow!(other).context(doing.to_owned())),
    }
}

/// A batch's envelope as the coordinator stores it: its head (everything but `results[]`) and
/// the whole document in a local spool file, removed when this is dropped.
pub struct FetchedEnvelope {
    pub head: cowork_schema::envelope::Envelope,
    pub spool: tempfile::TempPath,
}

impl FetchedEnvelope {
    /// Copies the whole envelope (one line, as `cowork run` prints it) to stdout.
    pub fn print(&self) -> Result<(), CliError> {
        let mut file = std::fs::File::open(&self.spool)
            .map_err(|e| CliError::Failed(anyhow!("reading the downloaded envelope: {e}")))?;
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        std::io::copy(&mut file, &mut out)
            .and_then(|_| std::io::Write::flush(&mut out))
            .map_err(|e| CliError::Failed(anyhow!("writing the envelope: {e}")))?;
        Ok(())
    }
}

/// Downloads a decided batch's envelope into a spool file and reads its head as a stream: a
/// million-run batch's envelope is 1.5 GB, so `results`, `status` and the end of a watch never
/// hold it whole.
pub async fn fetch_envelope(
    client: &CoordinatorClient,
    batch: &cowork_schema::BatchId,
) -> Result<FetchedEnvelope, ClientError> {
    let local = |what: &str, error: &dyn std::fmt::Display| ClientError::Local {
        message: format!("{what}: {error}"),
    };
    let spool = tempfile::NamedTempFile::new()
        .map_err(|e| local("no local file for the envelope", &e))?
        .into_temp_path();
    client.download_report(batch, &spool).await?;
    let path = spool.to_path_buf();
    let head = tokio::task::spawn_blocking(move || {
        let open = || {
            std::fs::File::open(&path)
                .map(std::io::BufReader::new)
                .map_err(|e| e.to_string())
        };
        let head = cowork_schema::envelope::read_head(open()?)?;
        if !head.results_are_units() {
            return Ok(head);
        }
        // One result a unit: few, and the summary names the units from them.
        serde_json::from_reader(open()?).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| local("reading the envelope", &e))?
    .map_err(|message| ClientError::Protocol {
        url: format!("envelope of batch {batch}"),
        message: format!("the envelope is not the documented json: {message}"),
    })?;
    Ok(FetchedEnvelope { head, spool })
}
