//! The `EventLog` port: the per-batch stream of job events (decisions.md#wire-protocol,
//! `COWORK_EVENTS`).
//!
//! Events are durable once `publish` returns, and a subscriber can replay a batch's events
//! from any sequence number: the coordinator's state is a fold over this stream, so a restarted
//! coordinator replays it and carries on.

use async_trait::async_trait;
use cowork_schema::BatchId;
use cowork_schema::event::JobEvent;

/// Errors of the event log.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The log was closed.
    #[error("event log is closed")]
    Closed,
    /// A temporary failure; the caller may retry.
    #[error("event log is unavailable: {message}")]
    Transient { message: String },
    /// A stored event could not be decoded (a foreign or corrupt message on the batch's
    /// subject). A subscription that yields it goes on with the next event: callers count and
    /// skip it rather than end the batch.
    #[error("malformed event at sequence {seq}: {message}")]
    Malformed { seq: u64, message: String },
    /// The log no longer keeps the events a subscription asked for: the oldest it can
    /// replay is at `seq` (a log that drops events once they are read).
    #[error("events before sequence {seq} are no longer kept")]
    Pruned { seq: u64 },
}

impl EventError {
    /// `true` when retrying the same call may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, EventError::Transient { .. })
    }
}

/// A live subscription to one batch's events.
#[async_trait]
pub trait EventSubscription: Send {
    /// The next event and its sequence number; `None` when the log is closed.
    ///
    /// `Err(EventError::Malformed { seq, .. })` reports one undecodable event; the next call
    /// returns the event after it. The embedded log stores typed events and never yields it.
    async fn next(&mut self) -> Option<Result<(u64, JobEvent), EventError>>;
}

/// The event log port.
#[async_trait]
pub trait EventLog: Send + Sync {
    /// Appends an event and returns its sequence number once it is durable.
    async fn publish(&self, event: &JobEvent) -> Result<u64, EventError>;
    /// Subscribes to the events of `batch`, starting at sequence `from_seq` (1 = the first).
    async fn subscribe(
        &self,
        batch: &BatchId,
        from_seq: u64,
    ) -> Result<Box<dyn EventSubscription>, EventError>;
    /// The sequence number of the newest event of `batch`, 0 if it has none. A restarted
    /// coordinator reads it to know how far it must replay before it admits anything.
    async fn last_sequence(&self, batch: &BatchId) -> Result<u64, EventError>;
}
