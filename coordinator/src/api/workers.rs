//! `/v1/workers`: the workers with a live heartbeat, from the worker registry, each marked
//! refused when it speaks another protocol version than this coordinator; and `/v1/fabric`:
//! the queue's streams and buckets as last checked (stalls, replica shortfalls).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use cowork_core::fleet::refusal;
use cowork_schema::api::{FabricStatus, WorkerStatus};
use cowork_schema::job::PROTOCOL_VERSION;

use super::ApiFailure;
use crate::service::Service;

/// `GET /v1/workers`: every live worker, sorted by id.
#[tracing::instrument(skip_all)]
pub(crate) async fn list(
    State(service): State<Arc<Service>>,
) -> Result<Json<Vec<WorkerStatus>>, ApiFailure> {
    let workers = service.ports.workers.list().await.map_err(|error| {
        let transient = error.is_transient();
        ApiFailure::port("listing workers", &error, transient)
    })?;
    Ok(Json(
        workers
            .into_iter()
            .map(|info| WorkerStatus {
                refused: refusal(&info, PROTOCOL_VERSION),
                info,
            })
            .collect(),
    ))
}

/// `GET /v1/fabric`: the fabric view and who leads (answered from memory, so it works while
/// the queue stalls).
#[tracing::instrument(skip_all)]
pub(crate) async fn fabric(State(service): State<Arc<Service>>) -> Json<FabricStatus> {
    let mut status = service.views.fabric.borrow().clone();
    let my_url = service
        .ports
        .lease
        .as_ref()
        .map_or("", |port| port.advertise_url.as_str());
    status.leader = service
        .leadership
        .leader_status(&service.config.coordinator_id, my_url);
    Json(status)
}

/// `GET /v1/shares`: how each tier's live slots are divided between the batches this
/// coordinator supervises (answered from memory).
#[tracing::instrument(skip_all)]
pub(crate) async fn shares(
    State(service): State<Arc<Service>>,
) -> Json<cowork_schema::share::FleetShares> {
    Json(service.fair_share.share().fleet())
}
