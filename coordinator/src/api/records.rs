//! A batch's record for a request: its id from the path and its record from the registry,
//! answered with the queue's stalls when the read cannot be served.

use std::time::Duration;

use axum::http::StatusCode;
use cowork_schema::BatchId;
use cowork_schema::registry::BatchRecord;

use super::ApiFailure;
use crate::service::Service;

/// A batch id from the path; an id that cannot exist is simply not found.
pub(super) fn parse_id(id: &str) -> Result<BatchId, ApiFailure> {
    BatchId::new(id).map_err(|_| ApiFailure::not_found(&format!("batch {id:?}")))
}

pub(super) async fn record_of(
    service: &Service,
    batch_id: &BatchId,
) -> Result<BatchRecord, ApiFailure> {
    // While the queue stalls, a read that does not answer at once will not answer soon: the
    // caller gets the stalls after a second rather than after the client's full timeout.
    let stalls = service.views.fabric.borrow().stalls.clone();
    let read = service.ports.batches.get(batch_id);
    let found = if stalls.is_empty() {
        read.await
    } else {
        match tokio::time::timeout(STALLED_READ_TIMEOUT, read).await {
            Ok(found) => found,
            Err(_) => return Err(stalled_failure("reading the batch record", &stalls)),
        }
    };
    match found {
        Ok(Some((record, _))) => Ok(record),
        Ok(None) => Err(ApiFailure::not_found(&format!("batch {batch_id}"))),
        Err(error) => {
            let transient = error.is_transient();
            // A record that cannot be read usually means its bucket stalls: say which.
            let stalls = service.views.fabric.borrow().stalls.clone();
            let what = with_stalls("reading the batch record", &stalls);
            Err(ApiFailure::port(&what, &error, transient))
        }
    }
}

/// How long a registry read may take while the fabric view reports a stall (see `record_of`).
const STALLED_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// `what`, followed by every stall, each with its start.
fn with_stalls(what: &str, stalls: &[cowork_schema::api::FabricStall]) -> String {
    let now_ms = crate::fabric_view::now_ms();
    let mut text = what.to_owned();
    for stall in stalls {
        text.push_str("; ");
        text.push_str(&stall.describe(now_ms));
    }
    text
}

/// A 503 that names the stalls.
fn stalled_failure(what: &str, stalls: &[cowork_schema::api::FabricStall]) -> ApiFailure {
    let text = with_stalls(what, stalls);
    tracing::warn!(error = %text, "request refused while the queue stalls");
    ApiFailure::new(StatusCode::SERVICE_UNAVAILABLE, &text)
}
