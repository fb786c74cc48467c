//! One batch's live page served by the process that runs the batch itself (`cowork run
//! --ui`): the coordinator's own live routes ([`crate::api`]) over the embedded run's ports,
//! so the page, its stream, the strips, the controls (pause, resume of dispatch, adjust,
//! cancel) and their auth and cross-site guard are the coordinator's, not a copy.
//!
//! The embedded run keeps supervising its batch itself (its Ctrl-C stages stay as they are);
//! this only registers the batch's live view with a [`Service`] that supervises nothing, and
//! keeps a batch record in the run's registry, which the controls change and the run's worker
//! reads before each job starts (a paused record holds new starts; `--kill-running` kills),
//! exactly as a fleet worker reads the batches bucket.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cowork_core::plan::Plan;
use cowork_fabric::RegistryError;
use cowork_schema::api::ProgressSnapshot;
use cowork_schema::registry::{BatchRecord, BatchState};
use tokio_util::sync::CancellationToken;

use crate::service::{ApiToken, CoordinatorConfig, DEFAULT_WINDOW, FleetPorts, LiveBatch, Service};
use crate::supervisor::LiveLink;

/// How long the page server waits, once the batch is decided, for open live streams to carry
/// the verdict to their pages before it closes them.
const VERDICT_DRAIN: Duration = Duration::from_secs(5);

/// The live page of one batch run in this process.
pub struct LiveUi {
    service: Arc<Service>,
    live: Arc<LiveBatch>,
    plan_batch: cowork_schema::BatchId,
    /// Ends serving: cancelled once the verdict is out (or the run gives up).
    stop_serving: CancellationToken,
}

/// A fresh page token: 32 random bytes from the TLS stack's system random source, as hex.
pub fn new_page_token() -> Result<ApiToken, String> {
    let mut bytes = [0u8; 32];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| "the system's random source failed".to_owned())?;
    Ok(ApiToken::new(&cowork_fabric::hex(&bytes)))
}

impl LiveUi {
    /// The live view of `plan`'s batch over `ports` (the run's own queue, event log, store and
    /// registry), open to requests that carry `token`. Writes the batch's record (`running`,
    /// the plan's generation) into `ports.batches`, replacing one left by an earlier run.
    pub async fn new(
        ports: FleetPorts,
        token: ApiToken,
        plan: &Plan,
        listen: SocketAddr,
    ) -> Result<LiveUi, RegistryError> {
        let config = CoordinatorConfig {
            listen,
            coordinator_id: format!("embedded-{}", std::process::id()),
            api_tokens: vec![token],
            read_tokens: Vec::new(),
            allow_unauthenticated: false,
            window: DEFAULT_WINDOW,
            max_bundle_bytes: crate::service::DEFAULT_MAX_BUNDLE_BYTES,
            unpack_limits: Default::default(),
            scratch_dir: std::env::temp_dir(),
            usage_pause: crate::supervisor::DEFAULT_USAGE_PAUSE,
            usage_pause_max: crate::supervisor::DEFAULT_USAGE_PAUSE_MAX,
            model_limits: Vec::new(),
            tls: None,
            notify: Default::default(),
            http_limits: Default::default(),
            max_concurrent_submits: crate::service::DEFAULT_MAX_CONCURRENT_SUBMITS,
            #[cfg(feature = "k8s")]
            k8s_worker_jobs: None,
            prices: Default::default(),
            token_policies: Vec::new(),
        };
        let owner = config.coordinator_id.clone();
        let mut service = Service::new(config, ports, CancellationToken::new());
        // The page's server closes with the run: the verdict names no report link, the run's
        // last lines say where its results are.
        service.links_reports = false;
        // The run's own process is the only one serving its batch.
        service
            .leadership
            .lead_without_lease(&service.shutdown.clone());
        let service = Arc::new(service);
        let now = crate::fabric_view::now_ms();
        let record = BatchRecord {
            batch_id: plan.batch_id.clone(),
            state: BatchState::Running,
            spec_sha256: String::new(),
            n_jobs: plan.n_jobs(),
            created_at_ms: now,
            updated_at_ms: now,
            ok: None,
            exit_code: None,
            eval_verdict: None,
            owner: Some(owner),
            generation: plan.generation,
            kill_running: false,
            controls: Default::default(),
            listing: Default::default(),
        };
        match service.ports.batches.get(&plan.batch_id).await? {
            None => {
                service.ports.batches.create(&record).await?;
            }
            Some((_, revision)) => {
                service.ports.batches.update(&record, revision).await?;
            }
        }
        let live = Arc::new(LiveBatch::new(
            ProgressSnapshot {
                planned: plan.n_jobs(),
                ..ProgressSnapshot::default()
            },
            plan.units.iter().map(|unit| unit.tier).collect(),
            crate::service::StallPolicy::of(&plan.flags),
        ));
        service.host_live(plan.batch_id.clone(), Arc::clone(&live));
        Ok(LiveUi {
            service,
            live,
            plan_batch: plan.batch_id.clone(),
            stop_serving: CancellationToken::new(),
        })
    }

    /// What the batch's supervision reads its controls from and writes its live view to.
    pub fn link(&self) -> LiveLink {
        self.live.link()
    }

    /// Cancelled by a cancel from the page (`POST …/cancel`): the run's supervision stops
    /// admission on it, as on the first Ctrl-C.
    pub fn cancel(&self) -> CancellationToken {
        self.live.cancel.clone()
    }

    /// Shows `workers` as the workers serving the batch (the run's own worker slots).
    pub fn show_workers(&self, workers: Vec<cowork_schema::registry::WorkerInfo>) {
        self.service.views.workers_seen.send_replace(workers);
    }

    /// Serves the page on `listener` until [`LiveUi::finish`] (or [`LiveUi::abandon`]).
    pub fn serve(&self, listener: tokio::net::TcpListener) -> tokio::task::JoinHandle<()> {
        let router = crate::api::live_ui_router(Arc::clone(&self.service));
        let stop = self.stop_serving.clone();
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
            {
                tracing::warn!(error = %error, "serving the live page failed");
            }
        })
    }

    /// The batch ended (`state` with `ok` and `exit_code` when decided): the record says so,
    /// the open pages get the verdict, and serving ends once their streams carried it (at
    /// most [`VERDICT_DRAIN`] later).
    pub async fn finish(
        &self,
        served: tokio::task::JoinHandle<()>,
        state: BatchState,
        ok: Option<bool>,
        exit_code: Option<i32>,
    ) {
        let ended = self
            .service
            .transition(&self.plan_batch, |record| {
                record.state = state;
                record.ok = ok;
                record.exit_code = exit_code;
                true
            })
            .await;
        let record = match ended {
            Ok(record) => record,
            Err(error) => {
                tracing::warn!(error = %error, "recording the end of the batch for its live page failed");
                return self.abandon(served).await;
            }
        };
        self.live
            .end
            .send_replace(Some(crate::service::end_of(&record, None)));
        // Graceful: no new connection; each open live stream ends after its verdict event.
        self.stop_serving.cancel();
        let mut served = served;
        if tokio::time::timeout(VERDICT_DRAIN, &mut served)
            .await
            .is_err()
        {
            self.service.shutdown.cancel();
            served.abort();
        }
    }

    /// Ends serving at once (an interrupted run: its page has nothing more to say).
    pub async fn abandon(&self, served: tokio::task::JoinHandle<()>) {
        self.service.shutdown.cancel();
        self.stop_serving.cancel();
        let mut served = served;
        if tokio::time::timeout(VERDICT_DRAIN, &mut served)
            .await
            .is_err()
        {
            served.abort();
        }
    }
}

impl std::fmt::Debug for LiveUi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveUi")
            .field("batch_id", &self.plan_batch)
            .finish_non_exhaustive()
    }
}
