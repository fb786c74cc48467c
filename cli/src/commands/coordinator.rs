//! `cowork coordinator`: the service — connects to NATS and S3, resumes unfinished batches,
//! serves the API until SIGTERM or Ctrl-C.

use std::sync::Arc;

use anyhow::anyhow;
use cowork_coordinator::http_serve::HttpLimits;
use cowork_coordinator::server::{ApiToken, CoordinatorConfig, FleetPorts, TokenPolicy};
use cowork_fabric::bundle::UnpackLimits;
use tokio_util::sync::CancellationToken;

use crate::args::{CoordinatorArgs, K8sWorkerJobArgs};
use crate::connect::{connect_nats, connect_s3, duration_arg, nats_config, s3_config};
use crate::exit::CliError;
use crate::fleet_args::read_secret;

/// The tokens of `env_var` or `file`, one per line.
fn read_tokens(env_var: &str, file: Option<&std::path::Path>) -> Result<Vec<ApiToken>, CliError> {
    let text = read_secret(env_var, file).map_err(CliError::usage)?;
    Ok(text
        .map(|text| {
            text.lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .map(ApiToken::new)
                .collect()
        })
        .unwrap_or_default())
}

/// `cowork coordinator`.
pub async fn run(args: CoordinatorArgs) -> Result<i32, CliError> {
    let nats = nats_config(&args.nats)?;
    let s3 = s3_config(&args.s3)?;
    let api_tokens = read_tokens("COWORK_API_TOKEN", args.api_token_file.as_deref())?;
    let read_tokens = read_tokens("COWORK_API_READ_TOKEN", args.api_read_token_file.as_deref())?;
    if api_tokens.is_empty() && !args.allow_unauthenticated {
        return Err(CliError::usage(
            "the API needs a bearer token: set COWORK_API_TOKEN or --api-token-file (or pass --allow-unauthenticated for local use)",
        ));
    }
    let token_policies = token_policies(&args.token_policy)?;
    let policy_problems = TokenPolicy::problems(&token_policies, &api_tokens, &read_tokens);
    if !policy_problems.is_empty() {
        return Err(CliError::Usage(policy_problems));
    }
    let coordinator_id = args.coordinator_id.clone().unwrap_or_else(|| {
        format!(
            "{}-{}",
            cowork_worker::heartbeat::hostname(),
            std::process::id()
        )
    });
    // A coordinator that could not unpack a submitted bundle would refuse every submit: it is
    // refused before it connects or listens.
    crate::writable_dirs::check_writable(&crate::writable_dirs::coordinator_dirs(
        &args.scratch_dir,
    ))?;
    let fabric = connect_nats(&nats).await?;
    let store = connect_s3(&s3).await?;
    #[cfg(feature = "k8s")]
    let k8s_worker_jobs = k8s_worker_jobs(&args.k8s).await?;
    #[cfg(not(feature = "k8s"))]
    refuse_k8s_worker_jobs(&args.k8s)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| CliError::Failed(anyhow!("binding {}: {e}", args.listen)))?;
    let admission = crate::connect::Admission::from_args(&args.admission)?;
    let prices = cowork_core::plan::flags::parse_prices(
        &args.prices.sandbox_price,
        &args.prices.model_price,
    )
    .map_err(|errors| CliError::Usage(errors.iter().map(ToString::to_string).collect()))?;
    let notify = coordinator_notify(&args)?;
    let config = CoordinatorConfig {
        listen: args.listen,
        coordinator_id: coordinator_id.clone(),
        api_tokens,
        read_tokens,
        token_policies,
        allow_unauthenticated: args.allow_unauthenticated,
        window: args.window.max(1),
        max_bundle_bytes: args.max_bundle_mib.saturating_mul(1024 * 1024),
        max_concurrent_submits: usize::try_from(args.max_concurrent_submits).unwrap_or(usize::MAX),
        unpack_limits: coordinator_unpack_limits(&args),
        scratch_dir: args.scratch_dir.clone(),
        usage_pause: admission.usage_pause,
        usage_pause_max: cowork_coordinator::supervisor::DEFAULT_USAGE_PAUSE_MAX,
        model_limits: admission.model_limits,
        prices,
        http_limits: HttpLimits {
            header_read_timeout: duration_arg("--http-header-timeout", &args.http_header_timeout)?,
            idle_timeout: duration_arg("--http-idle-timeout", &args.http_idle_timeout)?,
            max_connections: usize::try_from(args.http_max_connections).unwrap_or(usize::MAX),
        },
        notify,
        #[cfg(feature = "k8s")]
        k8s_worker_jobs,
        tls: match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(cowork_coordinator::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None) => None,
            _ => {
                return Err(CliError::usage(
                    "--tls-cert and --tls-key: give both (HTTPS) or neither (plain HTTP)",
                ));
            }
        },
    };
    let mut ports = FleetPorts::on_nats(&fabric, Arc::new(store));
    ports.lease = Some(open_lease(&args, &fabric, &listener, config.tls.is_some()).await?);
    let shutdown = cancelled_on_interrupt()?;
    let local = listener
        .local_addr()
        .map_or_else(|_| args.listen.to_string(), |a| a.to_string());
    eprintln!("coordinator {coordinator_id}: listening on http://{local}");
    cowork_coordinator::server::run(config, ports, listener, shutdown)
        .await
        .map_err(|error| CliError::Failed(anyhow!(error).context("running the coordinator")))?;
    eprintln!("coordinator {coordinator_id}: stopped; unfinished batches resume at the next start");
    Ok(0)
}

/// The `--token-policy` entries, each read on its own (every bad entry is listed); whether
/// they bind configured tokens is checked once the config holds the tokens.
fn token_policies(entries: &[String]) -> Result<Vec<TokenPolicy>, CliError> {
    let mut policies = Vec::new();
    let mut problems = Vec::new();
    for entry in entries.iter().filter(|entry| !entry.trim().is_empty()) {
        match TokenPolicy::parse(entry) {
            Ok(policy) => policies.push(policy),
            Err(problem) => problems.push(problem),
        }
    }
    if problems.is_empty() {
        Ok(policies)
    } else {
        Err(CliError::Usage(problems))
    }
}

/// The caps on unpacking a submitted bundle: `--max-unpacked-mib` and `--max-bundle-entries`,
/// each file at most the worker's per-file cap and never more than the whole.
fn coordinator_unpack_limits(args: &CoordinatorArgs) -> UnpackLimits {
    let max_total_bytes = args.max_unpacked_mib.saturating_mul(1024 * 1024);
    UnpackLimits {
        max_total_bytes,
        max_entries: args.max_bundle_entries,
        max_file_bytes: UnpackLimits::default().max_file_bytes.min(max_total_bytes),
    }
}

/// A build without the `k8s` feature has no Kubernetes client: `--k8s-worker-jobs` is refused.
#[cfg(not(feature = "k8s"))]
fn refuse_k8s_worker_jobs(args: &K8sWorkerJobArgs) -> Result<(), CliError> {
    if args.k8s_worker_jobs {
        return Err(CliError::usage(
            "--k8s-worker-jobs: this cowork was built without Kubernetes support; build it with \
             the default features (cargo install --path cli) or use the release binary",
        ));
    }
    Ok(())
}

/// The Kubernetes Job feature from `--k8s-*`: `None` unless `--k8s-worker-jobs` is given.
#[cfg(feature = "k8s")]
async fn k8s_worker_jobs(
    args: &K8sWorkerJobArgs,
) -> Result<Option<cowork_coordinator::k8s::K8sWorkerJobs>, CliError> {
    use cowork_coordinator::k8s::{K8sWorkerJobs, KubeWorkerJobs, WorkerJobSettings};
    if !args.k8s_worker_jobs {
        return Ok(None);
    }
    let Some(image) = args.k8s_worker_image.clone() else {
        return Err(CliError::usage(
            "--k8s-worker-jobs needs --k8s-worker-image (the worker image of the Jobs)",
        ));
    };
    let idle_exit = crate::connect::duration_arg("--k8s-idle-exit", &args.k8s_idle_exit)?;
    let longest_job = crate::connect::duration_arg("--k8s-longest-job", &args.k8s_longest_job)?;
    let ttl_after_finished = crate::connect::duration_arg("--k8s-job-ttl", &args.k8s_job_ttl)?;
    let (jobs, namespace) =
        KubeWorkerJobs::connect(args.k8s_namespace.as_deref(), &args.k8s_job_prefix)
            .await
            .map_err(|error| CliError::Failed(anyhow!(error)))?;
    let settings = WorkerJobSettings {
        namespace,
        image,
        image_pull_policy: args.k8s_image_pull_policy.clone(),
        name_prefix: args.k8s_job_prefix.clone(),
        min_jobs: args.k8s_min_jobs,
        jobs_per_worker: args.k8s_jobs_per_worker,
        max_parallelism: args.k8s_max_parallelism,
        config_map: args.k8s_worker_config_map.clone(),
        env_secrets: args
            .k8s_worker_secrets
            .iter()
            .filter(|name| !name.trim().is_empty())
            .cloned()
            .collect(),
        tiers: args.k8s_worker_tiers.clone(),
        slots: args.k8s_worker_slots,
        idle_exit,
        longest_job,
        ttl_after_finished,
        backoff_limit: args.k8s_backoff_limit,
        service_account: args.k8s_service_account.clone(),
        docker_socket: args.k8s_docker_socket.clone(),
        data_dir: args.k8s_data_dir.clone(),
    };
    Ok(Some(K8sWorkerJobs {
        settings,
        jobs: Arc::new(jobs),
    }))
}

/// The coordinator's notifications: its own hooks (`--notify`, told of every batch), the
/// secret that signs every batch's events, and where they link (`--public-url`). A secret
/// with no hook of its own still signs the hooks batches bring (`submit --notify`).
fn coordinator_notify(
    args: &CoordinatorArgs,
) -> Result<cowork_coordinator::notify::NotifyConfig, CliError> {
    use cowork_coordinator::notify::{NotifyConfig, ReportLink};
    let report = match &args.public_url {
        Some(url) => {
            cowork_coordinator::notify::check_hook_url(url).map_err(|_| {
                CliError::usage(format!(
                    "--public-url {url}: an http:// or https:// URL with a host"
                ))
            })?;
            ReportLink::Coordinator(url.clone())
        }
        None => ReportLink::Command,
    };
    let urls = &args.notify.notify;
    crate::notify::check_urls(urls)?;
    let secret = crate::notify::read_secret(args.notify.notify_secret_file.as_deref())?;
    Ok(NotifyConfig {
        urls: urls.clone(),
        secret,
        report,
        ..NotifyConfig::default()
    })
}

/// The coordinator lease on the fleet's NATS, and the URL standbys send clients to while this
/// coordinator leads (decisions.md#coordinator-lease).
async fn open_lease(
    args: &CoordinatorArgs,
    fabric: &cowork_fabric::nats::NatsFabric,
    listener: &tokio::net::TcpListener,
    tls: bool,
) -> Result<cowork_coordinator::server::LeasePort, CliError> {
    let lease_ttl = duration_arg("--lease-ttl", &args.lease_ttl)?;
    if lease_ttl < std::time::Duration::from_secs(2) {
        return Err(CliError::usage(format!(
            "--lease-ttl {}: at least 2s (a leader renews three times per term)",
            args.lease_ttl
        )));
    }
    let lease = cowork_fabric::nats::NatsLease::open(
        &fabric.jetstream,
        cowork_fabric::nats::DEFAULT_LEASE_BUCKET,
        lease_ttl,
        fabric.replicas.count,
    )
    .await
    .map_err(|error| CliError::Failed(anyhow!(error).context("opening the coordinator lease")))?;
    let scheme = if tls { "https" } else { "http" };
    let bound = listener
        .local_addr()
        .map_or_else(|_| args.listen.to_string(), |a| a.to_string());
    Ok(cowork_coordinator::server::LeasePort {
        lease: Arc::new(lease),
        advertise_url: args
            .advertise_url
            .clone()
            .unwrap_or_else(|| format!("{scheme}://{bound}")),
    })
}

/// A token cancelled by the first SIGTERM or Ctrl-C: the coordinator then stops serving and
/// leaves its batches for the next leader.
fn cancelled_on_interrupt() -> Result<CancellationToken, CliError> {
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    let mut interrupts = crate::interrupts::Interrupts::install()
        .map_err(|error| CliError::Failed(anyhow!(error).context("watching SIGTERM and Ctrl-C")))?;
    // Detached on purpose: it lives as long as the process.
    tokio::spawn(async move {
        interrupts.next().await;
        signal.cancel();
    });
    Ok(shutdown)
}
