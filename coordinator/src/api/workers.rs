//! `/v1/workers`: the workers with a live heartbeat, from the worker registry.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use cowork_schema::registry::WorkerInfo;

use super::ApiFailure;
use crate::server::Service;

/// `GET /v1/workers`: every live worker, sorted by id.
#[tracing::instrument(skip_all)]
pub(crate) async fn list(
    State(service): State<Arc<Service>>,
) -> Result<Json<Vec<WorkerInfo>>, ApiFailure> {
    service
        .ports
        .workers
        .list()
        .await
        .map(Json)
        .map_err(|error| {
            let transient = error.is_transient();
            ApiFailure::port("listing workers", &error, transient)
        })
}
