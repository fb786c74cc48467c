//! `NatsJobQueue`: the `JobQueue` port on the `COWORK_JOBS` work-queue stream.
//!
//! A job is published on `cowork.jobs.<tier>.<batch>` with `Nats-Msg-Id` = its job id (plus its
//! resume generation, `JobSpec::message_id`), so a
//! repeated publish inside the stream's duplicate window is dropped by the server. Each tier
//! has one durable pull consumer (`cowork-<tier>`) shared by every worker of that tier; its
//! `max_ack_pending` is the fleet-wide in-flight cap of the tier.
//!
//! Workers pull through the `NatsPuller` of `nats/puller.rs` (`JobQueue::puller`), which keeps a
//! pull open on every tier at once and fetches as many jobs as there are free slots; `pull`
//! fetches one message at a time for tools and tests. `publish_many` keeps up to
//! [`PUBLISH_WINDOW`] publishes in flight. `lost_jobs` follows JetStream's advisories
//! ([`crate::nats::lost`]). A job carrying a coordinator term is published with that term's
//! fence check ([`crate::nats::fence`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream::Context;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::context::{PublishAckFuture, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_trait::async_trait;
use cowork_schema::job::{JobSpec, Tier};
use cowork_schema::{BatchId, JobId};
use futures::StreamExt;

use crate::nats::config::NatsConfig;
use crate::nats::consumers::{JobConsumers, SWEEP_EXPIRY, into_delivery};
use crate::nats::fence::{EXPECTED_SUBJECT_HEADER, Lane, TermFence};
use crate::nats::puller::NatsPuller;
use crate::nats::{NatsError, consumer_name, jobs_subject};
use crate::queue::{
    Delivery, JobPuller, JobQueue, LostJobs, Published, QueueError, not_sent_after,
    stops_publishing,
};

/// Publishes `publish_many` keeps in flight by default. async-nats blocks a publish once 5,000
/// acknowledgements are outstanding on one connection, and a caller that holds them unawaited
/// then hangs; 512 stays far below that (the connection is shared with event publishes) while
/// already reaching the broker's pipelined rate on loopback.
pub const PUBLISH_WINDOW: usize = 512;

/// The job queue on a NATS JetStream server. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct NatsJobQueue {
    /// The jobs stream and its tier consumers, shared with the puller and the lost-job
    /// follower.
    bound: JobConsumers,
    /// Which tier gets the next long poll, so that every tier of a multi-tier worker is
    /// waited on in turn.
    next_tier: Arc<AtomicUsize>,
    publish_window: usize,
    /// The fence of the latest term this process began (`JobQueue::fence`), shared by clones.
    fence: Arc<tokio::sync::watch::Sender<Option<Arc<TermFence>>>>,
    /// The server checks a sequence on another subject (NATS 2.11+); an older one cannot be
    /// fenced, and jobs are published without checks there.
    can_fence: bool,
}

/// How long a publish of a term's job waits for that term's fence to be written.
const FENCE_WAIT: Duration = Duration::from_secs(10);

impl NatsJobQueue {
    /// Binds to the tier consumers that `ensure_streams` created.
    pub async fn open(jetstream: &Context, config: &NatsConfig) -> Result<NatsJobQueue, NatsError> {
        let version = jetstream.client().server_info().version;
        let can_fence = crate::nats::fence::server_can_fence(&version);
        if !can_fence {
            tracing::warn!(
                server_version = %version,
                "this NATS server is older than 2.11: publishes of a coordinator term are not fenced"
            );
        }
        Ok(NatsJobQueue {
            bound: JobConsumers::open(jetstream, config).await?,
            next_tier: Arc::new(AtomicUsize::new(0)),
            publish_window: PUBLISH_WINDOW,
            fence: Arc::new(tokio::sync::watch::Sender::new(None)),
            can_fence,
        })
    }

    /// This queue with at most `window` publishes of `publish_many` in flight (at least 1).
    pub fn with_publish_window(mut self, window: usize) -> NatsJobQueue {
        self.publish_window = window.max(1);
        self
    }

    /// The fence a publish of `job` must check: `None` for a job of no term (or a server that
    /// cannot fence); `Fenced` when this process has already begun a later term. Waits up
    /// to [`FENCE_WAIT`] for the job's own term to be fenced.
    async fn fence_of(&self, job: &JobSpec) -> Result<Option<Arc<TermFence>>, QueueError> {
        if job.leader_term == 0 || !self.can_fence {
            return Ok(None);
        }
        let mut fences = self.fence.subscribe();
        let waited = tokio::time::timeout(
            FENCE_WAIT,
            fences.wait_for(|fence| fence.as_ref().is_some_and(|f| f.term >= job.leader_term)),
        )
        .await;
        let fence = match waited {
            Ok(Ok(fence)) => fence.clone(),
            _ => {
                return Err(QueueError::Transient {
                    message: format!(
                        "job {}: term {} has not fenced the queue yet",
                        job.job_id, job.leader_term
                    ),
                });
            }
        };
        match fence {
            Some(fence) if fence.term == job.leader_term => Ok(Some(fence)),
            Some(fence) => Err(QueueError::Fenced {
                message: format!(
                    "job {} carries term {}, this process began term {} since",
                    job.job_id, job.leader_term, fence.term
                ),
            }),
            None => Ok(None),
        }
    }

    /// Sends the publish of `job` (checking `lane`'s marker when it has one); the returned
    /// future resolves with the server's acknowledgement.
    async fn send_job(
        &self,
        job: &JobSpec,
        lane: Option<&Lane>,
    ) -> Result<PublishAckFuture, QueueError> {
        let body =
            cowork_schema::json_number::to_vec(job).map_err(|error| QueueError::Malformed {
                message: format!("encoding job {}: {error}", job.job_id),
            })?;
        let subject = jobs_subject(job.tier, &job.batch_id);
        let mut message = PublishMessage::build()
            .payload(body.into())
            .message_id(job.message_id());
        if let Some(lane) = lane {
            let (lane_subject, marker) = lane.check();
            message = message
                .expected_last_subject_sequence(marker)
                .header(EXPECTED_SUBJECT_HEADER, lane_subject.as_str());
        }
        self.bound
            .jetstream
            .send_publish(subject, message)
            .await
            .map_err(|error| publish_error(&job.job_id, &error))
    }

    /// One round over `tiers`: takes a job that is ready on any of them, else waits up to
    /// `expiry` on one of them (a different one each round). `Ok(None)` when nothing came.
    ///
    /// Dropping this future while it waits loses no job: a message the server sends after the
    /// drop goes to an inbox nobody listens on any more, stays unacknowledged, and is
    /// delivered again after `ack_wait` (with its attempt counted up).
    pub async fn pull_once(
        &self,
        tiers: &[Tier],
        expiry: Duration,
    ) -> Result<Option<Delivery>, QueueError> {
        if tiers.is_empty() {
            return Err(QueueError::Malformed {
                message: "pull needs at least one tier".to_owned(),
            });
        }
        // Relaxed is enough: the counter only spreads long polls over the tiers.
        let start = self.next_tier.fetch_add(1, Ordering::Relaxed) % tiers.len();
        let rotated = tiers[start..].iter().chain(&tiers[..start]);
        // First a sweep that does not wait, so a job ready on any tier is taken at once.
        if tiers.len() > 1 {
            for tier in rotated.clone() {
                if let Some(delivery) = self.fetch_one(*tier, None).await? {
                    return Ok(Some(delivery));
                }
            }
        }
        self.fetch_one(tiers[start], Some(expiry)).await
    }

    /// Fetches at most one message of `tier`: without waiting when `wait` is `None`, else with
    /// a pull request that the server holds for `wait`.
    async fn fetch_one(
        &self,
        tier: Tier,
        wait: Option<Duration>,
    ) -> Result<Option<Delivery>, QueueError> {
        let consumer = self.bound.consumer(tier)?;
        let batch = match wait {
            // The server holds even a no-wait request while the tier is at its
            // max_ack_pending, answering only when the request expires; without an expiry it
            // would never answer. A short one keeps the sweep fast in that case.
            None => {
                consumer
                    .fetch()
                    .max_messages(1)
                    .expires(SWEEP_EXPIRY)
                    .messages()
                    .await
            }
            Some(expiry) => {
                consumer
                    .batch()
                    .max_messages(1)
                    .expires(expiry)
                    .messages()
                    .await
            }
        };
        let mut batch = batch.map_err(|error| QueueError::Transient {
            message: format!("pulling from consumer {}: {error}", consumer_name(tier)),
        })?;
        let message = match batch.next().await {
            None => return Ok(None),
            Some(Ok(message)) => message,
            Some(Err(error)) => {
                // The server answered the pull with a status other than "no messages" or
                // "expired" (a deleted consumer, a leader change, too many waiting pulls). In
                // a sweep that only means "nothing from this tier now"; for the waiting pull
                // it is reported, so the caller backs off instead of asking again at once.
                if wait.is_none() {
                    tracing::debug!(tier = tier.as_str(), error = %error, "pull returned no job");
                    return Ok(None);
                }
                return Err(QueueError::Transient {
                    message: format!("pulling from consumer {}: {error}", consumer_name(tier)),
                });
            }
        };
        Ok(into_delivery(tier, message).await)
    }
}

/// The tier consumer's current state, as the server has it now.
async fn consumer_info(
    tier: Tier,
    consumer: &PullConsumer,
) -> Result<async_nats::jetstream::consumer::Info, QueueError> {
    // A clone is a handle; `info` asks the server.
    let mut consumer = consumer.clone();
    consumer
        .info()
        .await
        .cloned()
        .map_err(|error| QueueError::Transient {
            message: format!("reading consumer info of tier {}: {error}", tier.as_str()),
        })
}

#[async_trait]
impl JobQueue for NatsJobQueue {
    async fn pending(&self) -> Result<Vec<(Tier, u64)>, QueueError> {
        let mut pending = Vec::with_capacity(self.bound.consumers.len());
        for (tier, consumer) in self.bound.consumers.iter() {
            pending.push((*tier, consumer_info(*tier, consumer).await?.num_pending));
        }
        Ok(pending)
    }

    async fn delivered_through(&self, tier: Tier) -> Result<Option<u64>, QueueError> {
        let Some(consumer) = self.bound.consumers.get(&tier) else {
            return Ok(None);
        };
        let info = consumer_info(tier, consumer).await?;
        Ok(Some(info.delivered.stream_sequence))
    }

    async fn fence(&self, term: u64) -> Result<(), QueueError> {
        if !self.can_fence {
            return Ok(());
        }
        let fence =
            crate::nats::fence::write_markers(&self.bound.jetstream, &self.bound.stream, term)
                .await?;
        self.fence.send_if_modified(|current| {
            // A slower fence of an earlier term never replaces a later one.
            if current.as_ref().is_some_and(|held| held.term > term) {
                return false;
            }
            *current = Some(Arc::new(fence));
            true
        });
        Ok(())
    }

    async fn publish(&self, job: &JobSpec) -> Result<Published, QueueError> {
        let lane = match self.fence_of(job).await? {
            Some(fence) => Some(fence.lane().await),
            None => None,
        };
        let pending = self.send_job(job, lane.as_ref()).await?;
        await_published(job, pending).await
    }

    /// Pipelined: up to the publish window of publishes are in flight, their acknowledgements
    /// awaited in order. A fenced publish also holds a lane until its acknowledgement; when
    /// none is free, the oldest publish of this call is awaited first (a call never waits
    /// for a lane while holding unawaited ones, so two calls cannot block each other).
    async fn publish_many(&self, jobs: &[JobSpec]) -> Vec<Result<Published, QueueError>> {
        let mut results: Vec<Option<Result<Published, QueueError>>> = vec![None; jobs.len()];
        let mut in_flight: VecDeque<(usize, PublishAckFuture, Option<Lane>)> = VecDeque::new();
        let mut stopped: Option<QueueError> = None;
        let mut settle = |done_idx: usize,
                          result: Result<Published, QueueError>,
                          stopped: &mut Option<QueueError>| {
            if let Err(error) = &result
                && stops_publishing(error)
                && stopped.is_none()
            {
                *stopped = Some(error.clone());
            }
            results[done_idx] = Some(result);
        };
        for (job_idx, job) in jobs.iter().enumerate() {
            if in_flight.len() >= self.publish_window
                && let Some((done_idx, pending, _lane)) = in_flight.pop_front()
            {
                let result = await_published(&jobs[done_idx], pending).await;
                settle(done_idx, result, &mut stopped);
            }
            let fence = if stopped.is_none() {
                match self.fence_of(job).await {
                    Ok(fence) => fence,
                    Err(error) => {
                        settle(job_idx, Err(error), &mut stopped);
                        continue;
                    }
                }
            } else {
                None
            };
            let mut lane = None;
            if let Some(fence) = &fence {
                lane = fence.try_lane();
                while lane.is_none()
                    && let Some((done_idx, pending, held)) = in_flight.pop_front()
                {
                    let result = await_published(&jobs[done_idx], pending).await;
                    drop(held);
                    settle(done_idx, result, &mut stopped);
                    lane = fence.try_lane();
                }
                if lane.is_none() {
                    lane = Some(fence.lane().await);
                }
            }
            if let Some(first) = &stopped {
                let error = not_sent_after(first, job);
                settle(job_idx, Err(error), &mut stopped);
                continue;
            }
            match self.send_job(job, lane.as_ref()).await {
                Ok(pending) => in_flight.push_back((job_idx, pending, lane)),
                Err(error) => settle(job_idx, Err(error), &mut stopped),
            }
        }
        // Every publish that was sent is awaited, also after a failure: its job may well be
        // stored, and the caller must know.
        for (done_idx, pending, lane) in in_flight {
            let result = await_published(&jobs[done_idx], pending).await;
            drop(lane);
            settle(done_idx, result, &mut stopped);
        }
        results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| {
                    Err(QueueError::Transient {
                        message: "publish was never attempted".to_owned(),
                    })
                })
            })
            .collect()
    }

    fn puller(&self, tiers: &[Tier]) -> Box<dyn JobPuller + '_> {
        Box::new(NatsPuller::start(self.bound.clone(), tiers))
    }

    async fn lost_jobs(&self) -> Result<LostJobs, QueueError> {
        crate::nats::lost::follow(&self.bound).await
    }

    async fn withdraw(&self, batch: &BatchId, tier: Tier) -> Result<u64, QueueError> {
        // A purge with the batch's subject removes its messages of that tier from the work
        // queue: the ones no worker took never are, and a worker that holds one runs it and
        // finds its ack refused, which changes nothing (its `finished` event is published
        // before the ack).
        let purged = self
            .bound
            .stream
            .purge()
            .filter(jobs_subject(tier, batch))
            .await
            .map_err(|error| QueueError::Transient {
                message: format!(
                    "withdrawing the {} jobs of batch {batch}: {error}",
                    tier.as_str()
                ),
            })?;
        Ok(purged.purged)
    }

    async fn pull(&self, tiers: &[Tier]) -> Result<Option<Delivery>, QueueError> {
        // The NATS queue never closes, so this only returns with a job or an error; callers
        // stop waiting by dropping the future (see `pull_once` for why that is safe).
        loop {
            if let Some(delivery) = self.pull_once(tiers, self.bound.pull_expiry).await? {
                return Ok(Some(delivery));
            }
        }
    }
}

/// Awaits the acknowledgement of the publish of `job`.
async fn await_published(
    job: &JobSpec,
    pending: PublishAckFuture,
) -> Result<Published, QueueError> {
    let ack = pending
        .await
        .map_err(|error| publish_error(&job.job_id, &error))?;
    if ack.duplicate {
        tracing::debug!(job_id = %job.job_id, seq = ack.sequence, "job was already published");
    }
    Ok(Published {
        seq: ack.sequence,
        duplicate: ack.duplicate,
    })
}

fn publish_error(
    job_id: &JobId,
    error: &async_nats::jetstream::context::PublishError,
) -> QueueError {
    match error.kind() {
        PublishErrorKind::MaxPayloadExceeded => QueueError::Malformed {
            message: format!("job {job_id} is larger than the server's max_payload: {error}"),
        },
        // Only a fenced publish carries a sequence check: its lane has a later term's marker.
        PublishErrorKind::WrongLastSequence => QueueError::Fenced {
            message: format!(
                "job {job_id}: a later leader's fence marker is on its lane ({error})"
            ),
        },
        // Timeouts, no responders (stream not reachable), a broken connection, too many acks
        // in flight and server-side failures can all pass; the caller retries with backoff.
        _ => QueueError::Transient {
            message: format!("publishing job {job_id}: {error}"),
        },
    }
}
