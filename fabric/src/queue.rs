//! The `JobQueue` port: jobs per tier with at-least-once delivery.
//!
//! Semantics follow JetStream's work queue (brief §4) so that the embedded and the NATS
//! implementations are interchangeable: a published job is delivered to one puller; it stays
//! owned by that puller until it is acked, naked (redelivered after a delay) or its ack deadline
//! passes; `in_progress` extends the deadline. Publishing the same job id twice is deduplicated.

use std::time::Duration;

use async_trait::async_trait;
use cowork_schema::BatchId;
use cowork_schema::job::{JobSpec, Tier};

/// Errors of the job queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The queue was closed; no more jobs will be delivered.
    #[error("job queue is closed")]
    Closed,
    /// A temporary failure (broker unreachable, timeout); the caller may retry.
    #[error("job queue is unavailable: {message}")]
    Transient { message: String },
    /// The message could not be decoded.
    #[error("malformed job message: {message}")]
    Malformed { message: String },
}

impl QueueError {
    /// `true` when retrying the same call may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, QueueError::Transient { .. })
    }
}

/// The settlement side of one delivery.
#[async_trait]
pub trait Acker: Send + Sync {
    /// The job is done; it will not be delivered again.
    async fn ack(&self) -> Result<(), QueueError>;
    /// The job failed before anything was spent; deliver it again after `delay`.
    async fn nak(&self, delay: Duration) -> Result<(), QueueError>;
    /// The job is still running; extend its ack deadline.
    async fn in_progress(&self) -> Result<(), QueueError>;
}

/// One delivery of a job to a worker.
pub struct Delivery {
    pub job: JobSpec,
    /// 1-based delivery attempt of this job.
    pub attempt: u32,
    pub acker: Box<dyn Acker>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("job_id", &self.job.job_id)
            .field("attempt", &self.attempt)
            .finish()
    }
}

/// The job queue port (brief §4).
#[async_trait]
pub trait JobQueue: Send + Sync {
    /// Publishes a job on its tier. Publishing a job id again is a no-op (deduplication).
    async fn publish(&self, job: &JobSpec) -> Result<(), QueueError>;
    /// Waits for the next job of any of `tiers`; `Ok(None)` when the queue has been closed.
    async fn pull(&self, tiers: &[Tier]) -> Result<Option<Delivery>, QueueError>;
    /// Jobs waiting to be delivered, per tier (for metrics). Empty when the queue cannot say.
    async fn pending(&self) -> Result<Vec<(Tier, u64)>, QueueError> {
        Ok(Vec::new())
    }
    /// Takes back the jobs of `batch` on `tier` that are still queued (a cancelled batch's),
    /// so they are never delivered; returns how many. A job a worker already holds is not
    /// affected. The default withdraws nothing (a queue that cannot do it lets them run).
    async fn withdraw(&self, batch: &BatchId, tier: Tier) -> Result<u64, QueueError> {
        let _ = (batch, tier);
        Ok(0)
    }
}
