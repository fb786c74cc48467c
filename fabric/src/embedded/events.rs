//! `MemEventLog`: an in-process, replayable event log.
//!
//! By default it keeps every event of every batch, so any subscriber can replay a batch from
//! sequence 1. A log made with [`MemEventLog::pruned_after_read`] keeps an event only until
//! every live subscriber of its batch has read it: `cowork run` has one reader (the batch's
//! supervisor), so the log then holds the events in flight rather than the whole batch's
//! history, and a million-job batch costs no memory per job here.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cowork_schema::BatchId;
use cowork_schema::event::JobEvent;
use tokio::sync::Notify;

use crate::events::{EventError, EventLog, EventSubscription};

/// What the log keeps of a batch's events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Retention {
    /// Every event, for replay from any sequence.
    #[default]
    All,
    /// An event until every live subscriber of its batch has read it. Events published while
    /// the batch has no subscriber are kept for the first one.
    UntilRead,
}

/// The events of one batch.
#[derive(Default)]
struct BatchLog {
    /// Kept events with their global sequence numbers, in publish order.
    events: VecDeque<(u64, JobEvent)>,
    /// Sequence of the batch's newest event, kept or not; 0 before the first.
    last_seq: u64,
    /// Sequence of the newest event dropped by pruning; 0 when none was.
    dropped_through: u64,
    /// The next sequence each live subscription will read, by subscription id.
    cursors: HashMap<u64, u64>,
    /// The sequence the batch's announced events will reach ([`MemEventLog::expect_events`]);
    /// 0 when none were announced.
    expected_through: u64,
}

impl BatchLog {
    /// Drops the events every live subscriber has read. With no subscriber, nothing is dropped.
    fn prune(&mut self) {
        let Some(oldest_unread) = self.cursors.values().min().copied() else {
            return;
        };
        while let Some((seq, _)) = self.events.front() {
            if *seq >= oldest_unread {
                break;
            }
            self.dropped_through = *seq;
            self.events.pop_front();
        }
    }
}

#[derive(Default)]
struct State {
    batches: HashMap<BatchId, BatchLog>,
    last_seq: u64,
    last_subscription: u64,
    retention: Retention,
    closed: bool,
    /// Publishers waiting in [`MemEventLog::publish_with_room`]: a read that prunes the batch
    /// down to `wake_at` events wakes them.
    waiting_for_room: usize,
    /// Half the room a waiting publisher asked for: it is woken once a batch's log is down to
    /// this, so that it publishes a run of events per wake-up rather than one.
    wake_at: usize,
}

/// An in-process event log; sequence numbers start at 1 and are global, like a stream's.
#[derive(Clone, Default)]
pub struct MemEventLog {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
}

impl MemEventLog {
    /// A log that keeps every event (any subscriber may replay from sequence 1).
    pub fn new() -> MemEventLog {
        MemEventLog::default()
    }

    /// A log that drops each event once every live subscriber of its batch has read it. A
    /// subscription that starts below a dropped event fails with [`EventError::Pruned`].
    pub fn pruned_after_read() -> MemEventLog {
        let log = MemEventLog::default();
        log.lock().retention = Retention::UntilRead;
        log
    }

    /// Announces `count` events of `batch` still to come from one publisher (a resume replaying
    /// the stored records while its supervisor reads them): [`EventLog::last_sequence`] counts
    /// them from now on, so a reader that catches up to it waits for every one of them. The
    /// publisher must be the only one writing to the log until they are in.
    pub fn expect_events(&self, batch: &BatchId, count: u64) {
        let mut state = self.lock();
        let through = state.last_seq + count;
        state
            .batches
            .entry(batch.clone())
            .or_default()
            .expected_through = through;
    }

    /// [`EventLog::publish`], once `event`'s batch holds fewer than `room` events: with
    /// [`MemEventLog::pruned_after_read`], a publisher of a million events goes at its
    /// reader's pace and the log holds at most `room` of them.
    pub async fn publish_with_room(
        &self,
        event: &JobEvent,
        room: usize,
    ) -> Result<u64, EventError> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let has_room = {
                let mut state = self.lock();
                if state.closed {
                    return Err(EventError::Closed);
                }
                let held = state
                    .batches
                    .get(&event.batch_id)
                    .map_or(0, |batch| batch.events.len());
                if held >= room {
                    state.waiting_for_room += 1;
                    state.wake_at = room / 2;
                }
                held < room
            };
            if has_room {
                return self.publish(event).await;
            }
            // A publisher dropped here leaves the count up, which costs only wake-ups.
            notified.await;
            self.lock().waiting_for_room -= 1;
        }
    }

    /// Closes the log: subscribers drain what is stored and then get `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
    }

    /// Events held in memory now, over all batches.
    pub fn n_kept(&self) -> usize {
        self.lock()
            .batches
            .values()
            .map(|batch| batch.events.len())
            .sum()
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
        let batch = state.batches.entry(event.batch_id.clone()).or_default();
        batch.last_seq = seq;
        batch.events.push_back((seq, event.clone()));
        drop(state);
        self.notify.notify_waiters();
        Ok(seq)
    }

    async fn subscribe(
        &self,
        batch: &BatchId,
        from_seq: u64,
    ) -> Result<Box<dyn EventSubscription>, EventError> {
        let next_seq = from_seq.max(1);
        let mut state = self.lock();
        state.last_subscription += 1;
        let id = state.last_subscription;
        let retention = state.retention;
        let log = state.batches.entry(batch.clone()).or_default();
        if next_seq <= log.dropped_through {
            return Err(EventError::Pruned {
                seq: log.dropped_through + 1,
            });
        }
        if retention == Retention::UntilRead {
            log.cursors.insert(id, next_seq);
        }
        drop(state);
        Ok(Box::new(MemSubscription {
            log: self.clone(),
            batch: batch.clone(),
            id,
            next_seq,
        }))
    }

    async fn last_sequence(&self, batch: &BatchId) -> Result<u64, EventError> {
        let state = self.lock();
        Ok(state
            .batches
            .get(batch)
            .map_or(0, |log| log.last_seq.max(log.expected_through)))
    }
}

struct MemSubscription {
    log: MemEventLog,
    batch: BatchId,
    /// Key of this subscription's cursor in its batch's log (pruning logs only).
    id: u64,
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
                let mut state = self.log.lock();
                let closed = state.closed;
                let retention = state.retention;
                let wake_at = (state.waiting_for_room > 0).then_some(state.wake_at);
                if let Some(log) = state.batches.get_mut(&self.batch) {
                    let position = log.events.partition_point(|(seq, _)| *seq < self.next_seq);
                    if let Some((seq, event)) = log.events.get(position) {
                        let item = (*seq, event.clone());
                        self.next_seq = item.0 + 1;
                        if retention == Retention::UntilRead {
                            log.cursors.insert(self.id, self.next_seq);
                            log.prune();
                            if wake_at.is_some_and(|wake_at| log.events.len() <= wake_at) {
                                self.log.notify.notify_waiters();
                            }
                        }
                        return Some(Ok(item));
                    }
                }
                if closed {
                    return None;
                }
            }
            notified.await;
        }
    }
}

impl Drop for MemSubscription {
    fn drop(&mut self) {
        let mut state = self.log.lock();
        if let Some(log) = state.batches.get_mut(&self.batch)
            && log.cursors.remove(&self.id).is_some()
        {
            log.prune();
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

    #[tokio::test]
    async fn a_pruning_log_keeps_only_what_a_live_subscriber_has_not_read() {
        let log = MemEventLog::pruned_after_read();
        let batch = BatchId::new("b1").expect("valid literal");
        // Published before anyone subscribed: kept for the first subscriber (resume history).
        log.publish(&started("b1", 0)).await.expect("open");
        log.publish(&started("b1", 1)).await.expect("open");
        log.publish(&started("b2", 0)).await.expect("open");
        assert_eq!(log.n_kept(), 3);
        let mut first = log.subscribe(&batch, 1).await.expect("subscribe");
        let mut second = log.subscribe(&batch, 1).await.expect("subscribe");
        assert_eq!(first.next().await.expect("one").expect("event").0, 1);
        assert_eq!(first.next().await.expect("one").expect("event").0, 2);
        assert_eq!(
            log.n_kept(),
            3,
            "the second subscriber has read nothing yet"
        );
        assert_eq!(second.next().await.expect("one").expect("event").0, 1);
        assert_eq!(log.n_kept(), 2, "event 1 was read by both");
        drop(second);
        assert_eq!(
            log.n_kept(),
            1,
            "only b2's event is left once the slower reader is gone"
        );
        assert_eq!(log.last_sequence(&batch).await.expect("open"), 2);
        // A replay from below what was dropped cannot be served.
        match log.subscribe(&batch, 1).await {
            Err(EventError::Pruned { seq }) => assert_eq!(seq, 3),
            Err(other) => panic!("expected a pruned error, got {other}"),
            Ok(_) => panic!("expected a pruned error, got a subscription"),
        }
        log.publish(&started("b1", 2)).await.expect("open");
        assert_eq!(first.next().await.expect("one").expect("event").0, 4);
        assert_eq!(log.n_kept(), 1);
        log.close();
        assert!(first.next().await.is_none());
    }

    #[tokio::test]
    async fn a_replay_announced_ahead_goes_at_its_readers_pace() {
        let log = MemEventLog::pruned_after_read();
        let batch = BatchId::new("b1").expect("valid literal");
        log.expect_events(&batch, 50);
        assert_eq!(
            log.last_sequence(&batch).await.expect("open"),
            50,
            "a reader catching up waits for all the announced events"
        );
        let publisher = {
            let log = log.clone();
            tokio::spawn(async move {
                for repeat in 0..50 {
                    log.publish_with_room(&started("b1", repeat), 3)
                        .await
                        .expect("open");
                    assert!(log.n_kept() <= 3, "{} held", log.n_kept());
                }
            })
        };
        let mut reader = log.subscribe(&batch, 1).await.expect("subscribe");
        for expected in 1..=50 {
            let (seq, _) = reader.next().await.expect("one").expect("event");
            assert_eq!(seq, expected);
            assert!(log.n_kept() <= 3, "{} held", log.n_kept());
        }
        publisher.await.expect("the publisher");
        assert_eq!(log.last_sequence(&batch).await.expect("open"), 50);
        // A closed log refuses a waiting publisher instead of holding it forever.
        for repeat in 0..3 {
            log.publish_with_room(&started("b2", repeat), 3)
                .await
                .expect("open");
        }
        let waiting = {
            let log = log.clone();
            tokio::spawn(async move { log.publish_with_room(&started("b2", 9), 3).await })
        };
        tokio::task::yield_now().await;
        log.close();
        assert!(matches!(
            waiting.await.expect("the publisher"),
            Err(EventError::Closed)
        ));
    }

    #[tokio::test]
    async fn the_default_log_keeps_everything_after_reading() {
        let log = MemEventLog::new();
        let batch = BatchId::new("b1").expect("valid literal");
        log.publish(&started("b1", 0)).await.expect("open");
        let mut sub = log.subscribe(&batch, 1).await.expect("subscribe");
        assert_eq!(sub.next().await.expect("one").expect("event").0, 1);
        drop(sub);
        assert_eq!(log.n_kept(), 1);
        let mut again = log.subscribe(&batch, 1).await.expect("subscribe");
        assert_eq!(again.next().await.expect("one").expect("event").0, 1);
    }
}
