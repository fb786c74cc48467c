//! Changes of a batch's record by compare-and-set, so two replicas never overwrite each other's
//! change unseen.

use cowork_fabric::RegistryError;
use cowork_schema::BatchId;
use cowork_schema::registry::BatchRecord;

use super::{PORT_RETRY, Service};

/// Compare-and-set attempts on one record before giving up; each failure means another writer
/// changed the record in between, which two replicas and one cancel make rare.
const CAS_ATTEMPTS: u32 = 8;

impl Service {
    /// [`Service::transition`], retried after a transient registry failure until it is written or
    /// the service shuts down: a registry briefly unavailable (a NATS node restarting, a stream
    /// electing its leader) must neither leave a submitted batch unstarted nor a decided one
    /// running in its record. `what` names the change in the log.
    pub(super) async fn transition_until_written(
        &self,
        batch_id: &BatchId,
        what: &str,
        change: impl Fn(&mut BatchRecord) -> bool,
    ) -> Result<BatchRecord, RegistryError> {
        let mut failures = 0u32;
        loop {
            match self.transition(batch_id, &change).await {
                Err(error) if error.is_transient() => {
                    failures += 1;
                    let pause = PORT_RETRY.delay(failures);
                    tracing::warn!(error = %error, pause_s = pause.as_secs_f64(), "{what} failed, retrying");
                    // Nothing is held across the pause; the record says what it said.
                    tokio::select! {
                        _ = self.shutdown.cancelled() => return Err(error),
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
                other => return other,
            }
        }
    }

    /// Applies `change` to a batch's record by compare-and-set, re-reading on conflict. `change`
    /// returns `false` to leave the record as it is. Returns the record as stored afterwards.
    pub(crate) async fn transition(
        &self,
        batch_id: &BatchId,
        change: impl Fn(&mut BatchRecord) -> bool,
    ) -> Result<BatchRecord, RegistryError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let Some((mut record, revision)) = self.ports.batches.get(batch_id).await? else {
                return Err(RegistryError::Failed {
                    message: format!("batch {batch_id} has no record"),
                });
            };
            if !change(&mut record) {
                return Ok(record);
            }
            record.updated_at_ms = now_ms();
            match self.ports.batches.update(&record, revision).await {
                Ok(_) => return Ok(record),
                Err(RegistryError::Conflict { .. }) if attempt < CAS_ATTEMPTS => continue,
                Err(error) => return Err(error),
            }
        }
    }
}

/// Milliseconds since the Unix epoch.
pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}
