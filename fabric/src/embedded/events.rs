//! `MemEventLog`: an in-process, replayable event log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cowork_schema::BatchId;
use cowork_schema::event::JobEvent;
use tokio::sync::Notify;

use crate::events::{EventError, EventLog, EventSubscription};

#[derive(Default)]
struct State {
    /// Events per batch with their global sequence numbers, in publish order.
    batches: HashMap<BatchId, Vec<(u64, JobEvent)>>,
    last_seq: u64,
    closed: bool,
}

/// An in-process event log; sequence numbers start at 1 and are global, like a stream's.
#[derive(Clone, Default)]
pub struct MemEventLog {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
}

impl MemEventLog {
    pub fn new() -> MemEventLog {
        MemEventLog::default()
    }

    /// Closes the log: subscribers drain what is stored and then get `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // See MemJobQueue::lock: the state stays consistent between statements.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl EventLog for MemEventLog {
    async fn publish(&self, event: &JobEvent) -> Result<u64, EventError> {
        let mut state = self.lock();
        if state.closed {
            return Err(EventError::Closed);
        }
        state.last_seq += 1;
        let seq = state.last_seq;
        state
            .batches
            .entry(event.batch_id.clone())
            .or_default()
            .push((seq, event.clone()));
        drop(state);
        self.notify.notify_waiters();
        Ok(seq)
    }

    async fn subscribe(
        &self,
        batch: &BatchId,
        from_seq: u64,
    ) -> Result<Box<dyn EventSubscription>, EventError> {
        Ok(Box::new(MemSubscription {
            log: self.clone(),
            batch: batch.clone(),
            next_seq: from_seq.max(1),
        }))
    }

    async fn last_sequence(&self, batch: &BatchId) -> Result<u64, EventError> {
        let state = self.lock();
        Ok(state
            .batches
            .get(batch)
            .and_then(|events| events.last())
            .map_or(0, |(seq, _)| *seq))
    }
}

struct MemSubscription {
    log: MemEventLog,
    batch: BatchId,
    next_seq: u64,
}

#[async_trait]
impl EventSubscription for MemSubscription {
    async fn next(&mut self) -> Option<Result<(u64, JobEvent), EventError>> {
        loop {
            let notified = self.log.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.log.lock();
                if let Some(events) = state.batches.get(&self.batch) {
                    let position = events.partition_point(|(seq, _)| *seq < self.next_seq);
                    if let Some((seq, event)) = events.get(position) {
                        self.next_seq = seq + 1;
                        return Some(Ok((*seq, event.clone())));
                    }
                }
                if state.closed {
                    return None;
                }
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_schema::JobId;
    use cowork_schema::event::JobEventKind;
    use cowork_schema::ids::UnitRef;

    fn started(batch: &str, repeat: u32) -> JobEvent {
        let batch = BatchId::new(batch).expect("valid literal");
        JobEvent {
            protocol: cowork_schema::job::PROTOCOL_VERSION,
            job_id: JobId::new(&batch, UnitRef::File(0), Some(repeat)),
            batch_id: batch,
            attempt: 1,
            generation: 0,
            worker_id: "w1".into(),
            event: JobEventKind::Started,
        }
    }

    #[tokio::test]
    async fn subscribers_replay_from_a_sequence_and_see_only_their_batch() {
        let log = MemEventLog::new();
        assert_eq!(log.publish(&started("b1", 0)).await.expect("open"), 1);
        assert_eq!(log.publish(&started("b2", 0)).await.expect("open"), 2);
        assert_eq!(log.publish(&started("b1", 1)).await.expect("open"), 3);
        log.close();
        let batch = BatchId::new("b1").expect("valid literal");
        assert_eq!(log.last_sequence(&batch).await.expect("open"), 3);
        let other = BatchId::new("b2").expect("valid literal");
        assert_eq!(log.last_sequence(&other).await.expect("open"), 2);
        let none = BatchId::new("b3").expect("valid literal");
        assert_eq!(log.last_sequence(&none).await.expect("open"), 0);
        let mut sub = log.subscribe(&batch, 1).await.expect("subscribe");
        let mut seen = Vec::new();
        while let Some(item) = sub.next().await {
            seen.push(item.expect("event").0);
        }
        assert_eq!(seen, vec![1, 3]);
        let mut sub = log.subscribe(&batch, 2).await.expect("subscribe");
        assert_eq!(sub.next().await.expect("one").expect("event").0, 3);
        assert!(sub.next().await.is_none());
    }
}
