//! The `JobQueue` port: jobs per tier with at-least-once delivery.
//!
//! Semantics follow JetStream's work queue (decisions.md#wire-protocol) so that the embedded and
//! the NATS implementations are interchangeable: a published job is delivered to one puller; it
//! stays owned by that puller until it is acked, naked (redelivered after a delay) or its ack
//! deadline passes; `in_progress` extends the deadline. Publishing the same job id twice is
//! deduplicated.
//!
//! Workers pull through a [`JobPuller`] (one per worker and tier set), which hands out as many
//! jobs as the worker has free slots; admission publishes many jobs at once with
//! [`JobQueue::publish_many`]; the coordinator follows [`JobQueue::lost_jobs`] for jobs the queue
//! gave up on.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use cowork_schema::BatchId;
use cowork_schema::job::{JobSpec, Tier};
use futures::Stream;

/// Errors of the job queue.
#[derive(Clone, Debug, thiserror::Error)]
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
    /// The publish was refused: it carried the fencing token of a coordinator term that a
    /// later leader has fenced off (decisions.md#coordinator-lease). The publisher no longer
    /// leads; it must stop writing, not retry.
    #[error("publish refused, a later leader fenced this term: {message}")]
    Fenced { message: String },
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

/// What the queue stored for one published job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    /// The queue's sequence number of the job's message (JetStream: the stream sequence of the
    /// publish acknowledgement). A duplicate publish reports the sequence of the message stored
    /// the first time. [`LostJob`] names jobs by this number, so a caller that keeps
    /// sequence → job for its outstanding jobs can tell which job was lost even when the
    /// message is gone.
    pub seq: u64,
    /// `true` when the job was already queued and this publish was dropped as a duplicate.
    pub duplicate: bool,
}

/// Why the queue gave up on a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// Every allowed delivery ended without an ack (crashed workers, naks, expired ack
    /// deadlines); the queue will not offer the job again.
    MaxDeliveries { deliveries: u64 },
    /// A worker terminated the delivery (a message it could not decode or must never run);
    /// `reason` is the worker's text when the server reports one.
    Terminated { reason: Option<String> },
}

/// A job the queue will never deliver again and that was never acked: without this report its
/// batch would wait for it forever.
#[derive(Clone, Debug, PartialEq)]
pub struct LostJob {
    pub tier: Tier,
    /// The queue sequence of the job's message, as [`Published::seq`] returned it.
    pub stream_seq: u64,
    pub reason: LostReason,
    /// The job, when its message could still be read and decoded (after max deliveries it
    /// usually can; a terminated message is usually gone).
    pub job: Option<JobSpec>,
}

/// Lost jobs as the queue learns about them; `None` once the queue is closed.
pub type LostJobs = Pin<Box<dyn Stream<Item = LostJob> + Send>>;

/// A standing pull of one worker on its tiers.
///
/// Hands out jobs of any of its tiers as they become ready, at most as many per call as the
/// caller has free slots. An implementation may hold a few jobs beyond that (at most one per
/// tier), renewing them until the next call takes them; closing (or dropping) the puller hands
/// such jobs back to the queue.
#[async_trait]
pub trait JobPuller: Send {
    /// Waits until at least one job is ready and returns between 1 and `max` of them;
    /// `Ok(None)` when the queue has been closed. `max` 0 returns an empty list at once.
    ///
    /// Dropping the future before it returns loses no job: a job that arrives for an
    /// abandoned call is kept for the next one.
    async fn pull_many(&mut self, max: usize) -> Result<Option<Vec<Delivery>>, QueueError>;

    /// Stops pulling and returns once every job the puller held has been handed back to the
    /// queue, so a stopping worker leaves nothing waiting for `ack_wait`. The last call on a
    /// puller (an implementation may refuse `pull_many` afterwards with `Closed`); the default
    /// holds nothing and does nothing.
    async fn close(&mut self) {}
}

/// The job queue port (decisions.md#wire-protocol).
#[async_trait]
pub trait JobQueue: Send + Sync {
    /// Begins coordinator term `term` (its lease revision) on the queue: from when this
    /// returns, a publish of a job whose `leader_term` is lower and not 0 is refused with
    /// [`QueueError::Fenced`], in this process and in every other one. A leader fences before
    /// it reads what earlier leaders published, so whatever they stored before is seen and
    /// whatever they try after is refused. The default cannot fence and does nothing.
    async fn fence(&self, term: u64) -> Result<(), QueueError> {
        let _ = term;
        Ok(())
    }

    /// Publishes a job on its tier. Publishing a job id again is a no-op (deduplication) that
    /// reports the first message's sequence.
    async fn publish(&self, job: &JobSpec) -> Result<Published, QueueError>;

    /// Publishes `jobs` and returns one result per job, in order. An implementation may keep
    /// several publishes in flight at once (bounded); this default publishes one at a time.
    ///
    /// After a transient failure or a closed queue, the jobs not yet sent are not sent: each
    /// gets an error of the same kind, so the caller can publish them again (a job that did
    /// reach the queue is deduplicated). A job that cannot be encoded or is too large fails
    /// alone.
    async fn publish_many(&self, jobs: &[JobSpec]) -> Vec<Result<Published, QueueError>> {
        let mut results = Vec::with_capacity(jobs.len());
        let mut stopped: Option<QueueError> = None;
        for job in jobs {
            if let Some(first) = &stopped {
                results.push(Err(not_sent_after(first, job)));
                continue;
            }
            let result = self.publish(job).await;
            if let Err(error) = &result
                && stops_publishing(error)
            {
                stopped = Some(error.clone());
            }
            results.push(result);
        }
        results
    }

    /// Waits for the next job of any of `tiers`; `Ok(None)` when the queue has been closed.
    /// Workers use [`JobQueue::puller`]; this is for tools and tests that want one job.
    async fn pull(&self, tiers: &[Tier]) -> Result<Option<Delivery>, QueueError>;

    /// A standing pull on `tiers` for one worker. The default pulls one job per call.
    fn puller(&self, tiers: &[Tier]) -> Box<dyn JobPuller + '_> {
        Box::new(OneAtATime {
            queue: self,
            tiers: tiers.to_vec(),
        })
    }

    /// Jobs the queue gave up on (see [`LostJob`]), from now on. Subscribe before publishing
    /// the jobs you want to hear about. The default never yields: a queue without delivery
    /// limits and without termination never loses a job this way.
    async fn lost_jobs(&self) -> Result<LostJobs, QueueError> {
        Ok(Box::pin(futures::stream::pending()))
    }

    /// Jobs waiting to be delivered, per tier (for metrics). Empty when the queue cannot say.
    async fn pending(&self) -> Result<Vec<(Tier, u64)>, QueueError> {
        Ok(Vec::new())
    }

    /// The queue sequence up to which `tier`'s jobs have all been delivered to a worker at
    /// least once (JetStream: the tier consumer's delivered stream sequence); `None` when the
    /// queue cannot say. The coordinator folds a job's events only once the job's first
    /// publication is at or below it: an event for a job no worker was handed is forged.
    async fn delivered_through(&self, tier: Tier) -> Result<Option<u64>, QueueError> {
        let _ = tier;
        Ok(None)
    }
    /// Takes back the jobs of `batch` on `tier` that are still queued (a cancelled batch's),
    /// so they are never delivered; returns how many. A job a worker already holds is not
    /// affected. The default withdraws nothing (a queue that cannot do it lets them run).
    async fn withdraw(&self, batch: &BatchId, tier: Tier) -> Result<u64, QueueError> {
        let _ = (batch, tier);
        Ok(0)
    }
}

/// `true` when a failed publish means the rest of a `publish_many` would fail too.
pub(crate) fn stops_publishing(error: &QueueError) -> bool {
    matches!(
        error,
        QueueError::Transient { .. } | QueueError::Closed | QueueError::Fenced { .. }
    )
}

/// The error of a job `publish_many` did not send because an earlier publish failed with
/// `first`.
pub(crate) fn not_sent_after(first: &QueueError, job: &JobSpec) -> QueueError {
    match first {
        QueueError::Closed => QueueError::Closed,
        QueueError::Fenced { message } => QueueError::Fenced {
            message: format!("job {} was not published: {message}", job.job_id),
        },
        other => QueueError::Transient {
            message: format!(
                "job {} was not published because an earlier publish failed: {other}",
                job.job_id
            ),
        },
    }
}

/// The default puller: one `pull` per call.
struct OneAtATime<'a, Q: JobQueue + ?Sized> {
    queue: &'a Q,
    tiers: Vec<Tier>,
}

#[async_trait]
impl<Q: JobQueue + ?Sized> JobPuller for OneAtATime<'_, Q> {
    async fn pull_many(&mut self, max: usize) -> Result<Option<Vec<Delivery>>, QueueError> {
        if max == 0 {
            return Ok(Some(Vec::new()));
        }
        Ok(self
            .queue
            .pull(&self.tiers)
            .await?
            .map(|delivery| vec![delivery]))
    }
}
