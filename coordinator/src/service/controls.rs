//! What people ask of a batch after it was submitted: cancel it, resume it once final, and
//! change its controls (pause, dispatch again, budget and limits).

use std::sync::Arc;

use cowork_fabric::RegistryError;
use cowork_schema::BatchId;
use cowork_schema::batch::StoredBatch;
use cowork_schema::layout::BatchKey;
use cowork_schema::registry::{BatchControls, BatchRecord, BatchState, ControlChange};

use super::Service;
use super::records::now_ms;

impl Service {
    /// Cancels a batch: the record goes to `stopping` and, when this process supervises the
    /// batch, admission stops. Returns the updated record; `Ok(None)` if there is no such batch.
    pub(crate) async fn cancel(
        &self,
        batch_id: &BatchId,
        kill_running: bool,
    ) -> Result<Option<BatchRecord>, CancelError> {
        let Some((record, _)) = self
            .ports
            .batches
            .get(batch_id)
            .await
            .map_err(CancelError::Registry)?
        else {
            return Ok(None);
        };
        if record.state.is_final() {
            return Err(CancelError::Final(record.state));
        }
        let record = self
            .transition(batch_id, |record| {
                if record.state.is_final() {
                    return false;
                }
                record.state = BatchState::Stopping;
                // Workers follow the registry and kill the batch's running jobs.
                record.kill_running |= kill_running;
                true
            })
            .await
            .map_err(CancelError::Registry)?;
        if record.state.is_final() {
            return Err(CancelError::Final(record.state));
        }
        if let Some(live) = self.live(batch_id) {
            live.cancel.cancel();
        }
        tracing::info!(batch_id = %batch_id, kill_running, "batch cancel requested");
        Ok(Some(record))
    }

    /// Cancels a stalled batch for `--on-stall cancel`: records the reason among the batch's
    /// control changes (by `stall watchdog`), then cancels it as [`Service::cancel`] does,
    /// letting running jobs finish.
    pub(crate) async fn cancel_stalled(
        &self,
        batch_id: &BatchId,
        reason: &str,
    ) -> Result<Option<BatchRecord>, CancelError> {
        let at_ms = now_ms();
        self.transition(batch_id, |record| {
            if record.state.is_final() {
                return false;
            }
            record.controls.changes.push(ControlChange {
                at_ms,
                by: "stall watchdog".to_owned(),
                control: "on-stall".to_owned(),
                old: record.state.as_str().to_owned(),
                new: format!("cancelled: {reason}"),
            });
            true
        })
        .await
        .map_err(CancelError::Registry)?;
        self.cancel(batch_id, false).await
    }

    /// Changes a running batch's controls (`cowork pause`, `resume-dispatch`, `adjust`): the
    /// change is checked against the record, stored in it by compare-and-set with who asked and
    /// when, and passed to the batch's supervisor when it runs here. Returns the updated record;
    /// `Ok(None)` if there is no such batch. Nothing changes when the change is refused.
    pub(crate) async fn control(
        &self,
        batch_id: &BatchId,
        change: &ControlAsk,
        by: &str,
    ) -> Result<Option<BatchRecord>, ControlError> {
        let Some((record, _)) = self
            .ports
            .batches
            .get(batch_id)
            .await
            .map_err(ControlError::Registry)?
        else {
            return Ok(None);
        };
        let at_ms = now_ms();
        let submitted = self.submitted_budget_usd(batch_id).await;
        // Checked once before the write, so a refusal names the record as it was read; the
        // compare-and-set below checks again against whatever it finds.
        cowork_core::controls::apply(&mut record.clone(), change, by, at_ms, submitted)
            .map_err(ControlError::Refused)?;
        let refused = std::sync::Mutex::new(None);
        let window = self.config.window;
        let record = self
            .transition(batch_id, |record| {
                let takes_back = lowers_the_cap(&record.controls, change, window);
                match cowork_core::controls::apply(record, change, by, at_ms, submitted) {
                    Ok(()) => {
                        if takes_back {
                            // In the same write as the cap: workers skip every publication
                            // of the older epoch from now on, and admission takes the queued
                            // jobs back and admits again within the new cap.
                            record.controls.dispatch_epoch += 1;
                        }
                        true
                    }
                    Err(refusal) => {
                        *refused
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(refusal);
                        false
                    }
                }
            })
            .await
            .map_err(ControlError::Registry)?;
        if let Some(refusal) = refused
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            return Err(ControlError::Refused(refusal));
        }
        if let Some(live) = self.live(batch_id) {
            live.controls.send_replace(record.controls.clone());
        }
        tracing::info!(batch_id = %batch_id, change = ?change, by, "batch controls changed");
        Ok(Some(record))
    }

    /// The batch budget a batch was submitted with, from its stored spec (`None` when it had
    /// none, or the spec cannot be read: the change record then says `none`).
    async fn submitted_budget_usd(&self, batch_id: &BatchId) -> Option<f64> {
        let key = BatchKey::new(batch_id).spec();
        let bytes = self.ports.store.get(key.as_str()).await.ok()?;
        let stored: StoredBatch = serde_json::from_slice(&bytes).ok()?;
        stored.spec.flags.batch_budget_usd
    }

    /// Resumes a final batch (`cowork resume`): its generation goes up by one, and supervision
    /// starts again from the event log. Jobs with a result stay as they are; jobs that ended in
    /// an infrastructure failure or were killed, and jobs never run, are admitted again.
    /// Returns the updated record; `Ok(None)` if there is no such batch.
    pub(crate) async fn resume(
        self: &Arc<Self>,
        batch_id: &BatchId,
    ) -> Result<Option<BatchRecord>, ResumeError> {
        let Some((record, _)) = self
            .ports
            .batches
            .get(batch_id)
            .await
            .map_err(ResumeError::Registry)?
        else {
            return Ok(None);
        };
        if !record.state.is_final() {
            return Err(ResumeError::NotFinal(record.state));
        }
        // Planned again before the record changes: a batch that cannot be planned any more
        // stays final and untouched.
        let (plan, mode) = self.load(batch_id).await.map_err(ResumeError::Load)?;
        let generation = record.generation + 1;
        let record = self
            .transition(batch_id, |record| {
                if !record.state.is_final() || record.generation >= generation {
                    // Another resume (or a second replica) won the race.
                    return false;
                }
                record.state = BatchState::Planned;
                record.generation = generation;
                record.kill_running = false;
                record.ok = None;
                record.exit_code = None;
                record.eval_verdict = None;
                record.owner = Some(self.config.coordinator_id.clone());
                true
            })
            .await
            .map_err(ResumeError::Registry)?;
        if record.generation != generation || record.state != BatchState::Planned {
            return Err(ResumeError::NotFinal(record.state));
        }
        // A fresh live entry: the old one holds the previous end and cancel token.
        self.lock_live().remove(batch_id);
        tracing::info!(batch_id = %batch_id, generation, "batch resumed");
        self.start(plan, mode.envelope_command());
        Ok(Some(record))
    }
}

/// `true` when `change` lowers the cap on the batch's jobs outstanding below the one in force
/// (the record's, or this coordinator's `window`) while dispatch runs: the jobs queued beyond
/// the new cap must be taken back, which the next dispatch epoch says. Decided from the
/// record alone, not from the jobs outstanding now: the record is all the compare-and-set
/// sees, and a take-back with few jobs queued costs only their publication again. A paused
/// batch has nothing queued (its resume raises the epoch anyway).
fn lowers_the_cap(before: &BatchControls, change: &ControlAsk, window: usize) -> bool {
    let ControlAsk::Adjust {
        max_running: Some(max),
        ..
    } = change
    else {
        return false;
    };
    let in_force = before.max_running.map_or(window, |old| old as usize).max(1);
    !before.paused && (*max as usize) < in_force
}

/// Why a resume was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResumeError {
    #[error("the batch is {}; only a done or cancelled batch can be resumed (a running one resumes by itself when its coordinator restarts)", .0.as_str())]
    NotFinal(BatchState),
    #[error("the batch cannot be planned again: {0}")]
    Load(String),
    #[error("batch registry")]
    Registry(#[source] RegistryError),
}

/// A change of a running batch's controls, as asked.
use cowork_core::controls::ControlAsk;

/// Why a change of the controls was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ControlError {
    #[error("{0}")]
    Refused(cowork_core::controls::ControlRefusal),
    #[error("batch registry")]
    Registry(#[source] RegistryError),
}

/// Why a cancel was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CancelError {
    #[error("the batch is already {}", .0.as_str())]
    Final(BatchState),
    #[error("batch registry")]
    Registry(#[source] RegistryError),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adjust(max_running: Option<u32>) -> ControlAsk {
        ControlAsk::Adjust {
            batch_budget_usd: Some(1.0),
            max_running,
        }
    }

    #[test]
    fn only_a_lower_cap_while_dispatch_runs_takes_queued_jobs_back() {
        let capped = |max_running, paused| BatchControls {
            max_running,
            paused,
            ..BatchControls::default()
        };
        for (before, change, takes_back) in [
            (capped(None, false), adjust(Some(1)), true),
            (capped(None, false), adjust(Some(16)), false),
            (capped(None, false), adjust(Some(64)), false),
            (capped(Some(8), false), adjust(Some(4)), true),
            (capped(Some(8), false), adjust(Some(8)), false),
            (capped(Some(1), false), adjust(Some(8)), false),
            (capped(Some(8), false), adjust(None), false),
            (capped(Some(8), true), adjust(Some(1)), false),
            (capped(Some(8), false), ControlAsk::Pause, false),
        ] {
            assert_eq!(
                lowers_the_cap(&before, &change, 16),
                takes_back,
                "{before:?} {change:?}"
            );
        }
    }
}
