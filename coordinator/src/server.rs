//! Starting the coordinator: [`run`] checks the config, builds the `Service`, starts its
//! background views and serves the HTTP API (decisions.md#operations) until shutdown.
//!
//! The service itself (config, access, batch lifecycle, controls) lives in `crate::service`;
//! its config types are re-exported here, where the binaries that start a coordinator find them.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::service::Service;
pub use crate::service::{
    ApiToken, CoordinatorConfig, DEFAULT_MAX_BUNDLE_BYTES, DEFAULT_MAX_CONCURRENT_SUBMITS,
    DEFAULT_WINDOW, FleetPorts, LeasePort, TokenPolicy,
};

/// How long shutdown waits for supervision tasks to return. They return as soon as they see
/// the token (they only await ports), so this bounds a stuck port call, not normal work.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the service could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(
        "no api token is configured: set at least one, or allow unauthenticated access explicitly"
    )]
    NoApiTokens,
    #[error("coordinator api tls")]
    Tls(#[from] crate::tls::TlsError),
    #[error("serving the http api on {addr}")]
    Serve {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

/// Serves the coordinator API on `listener` and supervises batches until `shutdown` is
/// cancelled. On shutdown the API stops accepting requests, open event streams end, and every
/// supervised batch is left as it is for the next coordinator to resume.
#[tracing::instrument(skip_all, fields(coordinator_id = %config.coordinator_id))]
pub async fn run(
    config: CoordinatorConfig,
    ports: FleetPorts,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    if config.api_tokens.is_empty()
        && config.read_tokens.is_empty()
        && !config.allow_unauthenticated
    {
        return Err(ServerError::NoApiTokens);
    }
    // Read before anything starts, so a bad certificate stops start-up with the file named.
    let tls = config
        .tls
        .as_ref()
        .map(crate::tls::server_config)
        .transpose()?;
    let addr = listener
        .local_addr()
        .map_or_else(|_| config.listen.to_string(), |addr| addr.to_string());
    let service = Arc::new(Service::new(config, ports, shutdown.clone()));
    let router = crate::api::router(Arc::clone(&service));
    match service.ports.lease.clone() {
        // Several coordinators: the one holding the lease resumes the batches and admits.
        // The API opens once the first claim came back (or timed out), so a coordinator that
        // can lead at once never answers its first requests as a standby.
        Some(lease) => {
            let (first_claim, claimed) = tokio::sync::oneshot::channel();
            let claimer = Arc::clone(&service);
            service.tracker.spawn(async move {
                crate::service::claim_lease(claimer, lease, first_claim).await;
            });
            // An error means the claimer ended (shutdown) before its first answer.
            let _ = claimed.await;
        }
        None => crate::service::lead_alone(&service),
    }
    let fleet_view = Arc::clone(&service);
    service
        .tracker
        .spawn(async move { crate::fleet_view::watch_fleet(fleet_view).await });
    let batch_counts = Arc::clone(&service);
    service
        .tracker
        .spawn(async move { crate::batch_counts::watch_batch_counts(batch_counts).await });
    let fabric_view = Arc::clone(&service);
    service
        .tracker
        .spawn(async move { crate::fabric_view::watch_fabric(fabric_view).await });
    tracing::info!(%addr, tls = tls.is_some(), "coordinator api listening");
    let limits = service.config.http_limits;
    let served = crate::http_serve::serve(listener, router, tls, limits, shutdown.clone()).await;
    // Whatever ended serving, the supervisors must stop too before `run` returns.
    shutdown.cancel();
    service.tracker.close();
    if tokio::time::timeout(DRAIN_TIMEOUT, service.tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout_s = DRAIN_TIMEOUT.as_secs(),
            "supervision tasks still running at the end of the drain timeout"
        );
    }
    served.map_err(|source| ServerError::Serve { addr, source })
}
