//! Batches per state, maintained from the batch registry's change stream, for `/metrics`.
//!
//! A scrape reads these counts; it never walks the registry (with ~1,000 batches a
//! walk per scrape took seconds and a core, and `/metrics` needs no token). The watch delivers
//! the current record of every batch and then every change, from any replica, so the counts
//! follow the whole fleet. When the stream breaks the counts are rebuilt from a new watch; until
//! the first one answers they are unknown and `/metrics` says the registry is down.

use std::collections::HashMap;
use std::sync::Arc;

use cowork_fabric::backoff::Backoff;
use cowork_schema::BatchId;
use cowork_schema::registry::BatchState;
use futures::StreamExt;
use std::time::Duration;

use crate::metrics::count_states;
use crate::service::Service;

/// Pause before watching again after the stream broke or could not be opened.
const REWATCH: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

/// The state of every batch the current watch has delivered.
#[derive(Debug, Default)]
pub(crate) struct BatchStates {
    states: HashMap<BatchId, BatchState>,
}

impl BatchStates {
    /// Records a batch's current state (a new batch, or a change of an existing one).
    fn record(&mut self, batch_id: BatchId, state: BatchState) {
        self.states.insert(batch_id, state);
    }

    /// Batches per state, in the metrics' state order.
    fn counts(&self) -> Vec<(BatchState, u64)> {
        count_states(self.states.values().copied())
    }
}

/// Keeps `service.views.batch_counts` current until the service shuts down.
pub(crate) async fn watch_batch_counts(service: Arc<Service>) {
    let mut attempt = 0u32;
    loop {
        match service.ports.batches.watch().await {
            Ok(mut records) => {
                let mut seen = BatchStates::default();
                // Zero batches is a known count as soon as the watch is open.
                service.views.batch_counts.send_replace(Some(seen.counts()));
                loop {
                    let next = tokio::select! {
                        _ = service.shutdown.cancelled() => return,
                        next = records.next() => next,
                    };
                    match next {
                        Some(Ok(record)) => {
                            attempt = 0;
                            seen.record(record.batch_id, record.state);
                            service.views.batch_counts.send_replace(Some(seen.counts()));
                        }
                        Some(Err(error)) => {
                            tracing::warn!(error = %error, "batch registry watch for metrics failed; watching again");
                            break;
                        }
                        None => break,
                    }
                }
            }
            Err(error) => {
                tracing::warn!(error = %error, "batch registry watch for metrics could not start");
            }
        }
        service.views.batch_counts.send_replace(None);
        let pause = REWATCH.delay(attempt);
        attempt = attempt.saturating_add(1);
        tokio::select! {
            _ = service.shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_moves_a_batch_between_states() {
        let mut seen = BatchStates::default();
        let id = BatchId::new("20261201-000000-aaaaaa").expect("valid id");
        seen.record(id.clone(), BatchState::Planned);
        seen.record(id, BatchState::Done);
        let counts = seen.counts();
        assert!(counts.contains(&(BatchState::Planned, 0)), "{counts:?}");
        assert!(counts.contains(&(BatchState::Done, 1)), "{counts:?}");
    }
}
