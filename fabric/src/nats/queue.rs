//! `NatsJobQueue`: the `JobQueue` port on the `COWORK_JOBS` work-queue stream.
//!
//! A job is published on `cowork.jobs.<tier>.<batch>` with `Nats-Msg-Id` = its job id (plus its
//! resume generation, `JobSpec::message_id`), so a
//! repeated publish inside the stream's duplicate window is dropped by the server. Each tier
//! has one durable pull consumer (`cowork-<tier>`) shared by every worker of that tier; its
//! `max_ack_pending` is the fleet-wide in-flight cap of the tier. A pull fetches one message at
//! a time, so a worker never holds a job it has no free slot for.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::Acker as JsAcker;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{AckKind, Context};
use async_trait::async_trait;
use cowork_schema::job::{JobSpec, Tier};
use cowork_schema::{BatchId, JobId};
use futures::StreamExt;

use crate::nats::config::NatsConfig;
use crate::nats::{NatsError, consumer_name, jobs_subject};
use crate::queue::{Acker, Delivery, JobQueue, QueueError};

/// Server-side expiry of the no-wait requests of a multi-tier sweep; it only matters when a
/// tier is at its in-flight cap (see `fetch_one`).
const SWEEP_EXPIRY: Duration = Duration::from_millis(100);

/// The job queue on a NATS JetStream server. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct NatsJobQueue {
    jetstream: Context,
    /// The jobs stream, for withdrawing a cancelled batch's queued jobs.
    stream: async_nats::jetstream::stream::Stream<()>,
    consumers: Arc<BTreeMap<Tier, PullConsumer>>,
    /// Which tier gets the next long poll, so that every tier of a multi-tier worker is
    /// waited on in turn.
    next_tier: Arc<AtomicUsize>,
    pull_expiry: Duration,
}

impl NatsJobQueue {
    /// Binds to the tier consumers that `ensure_streams` created.
    pub async fn open(jetstream: &Context, config: &NatsConfig) -> Result<NatsJobQueue, NatsError> {
        let stream = jetstream
            .get_stream_no_info(&config.jobs_stream)
            .await
            .map_err(|source| NatsError::JetStream {
                action: "opening stream",
                name: config.jobs_stream.clone(),
                source: Box::new(source),
            })?;
        let mut consumers = BTreeMap::new();
        for tier in Tier::ALL {
            let name = consumer_name(tier);
            let consumer: PullConsumer =
                stream
                    .get_consumer(&name)
                    .await
                    .map_err(|source| NatsError::JetStream {
                        action: "opening consumer",
                        name: format!("{}/{name}", config.jobs_stream),
                        source,
                    })?;
            consumers.insert(tier, consumer);
        }
        Ok(NatsJobQueue {
            jetstream: jetstream.clone(),
            stream,
            consumers: Arc::new(consumers),
            next_tier: Arc::new(AtomicUsize::new(0)),
            pull_expiry: config.pull_expiry,
        })
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
        let consumer = self
            .consumers
            .get(&tier)
            .ok_or_else(|| QueueError::Malformed {
                message: format!("no consumer is bound for tier {}", tier.as_str()),
            })?;
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
        let attempt = match message.info() {
            Ok(info) => u32::try_from(info.delivered).unwrap_or(u32::MAX),
            Err(error) => {
                // Every JetStream delivery carries its info in the reply subject; a message
                // without it cannot be settled either, so it is skipped (the server delivers
                // it again after ack_wait) rather than failing the worker.
                tracing::error!(tier = tier.as_str(), error = %error, "skipping a job message without delivery info");
                return Ok(None);
            }
        };
        let (message, acker) = message.split();
        let job: JobSpec = match serde_json::from_slice(&message.payload) {
            Ok(job) => job,
            Err(error) => {
                // A body that is not a job can never run: terminate it so it is not delivered
                // again, and carry on as if nothing had been pulled.
                tracing::error!(
                    subject = %message.subject,
                    tier = tier.as_str(),
                    error = %error,
                    "terminating a job message that is not a job spec"
                );
                if let Err(error) = acker.ack_with(AckKind::Term).await {
                    tracing::warn!(error = %error, "terminating a malformed job message failed");
                }
                return Ok(None);
            }
        };
        let job_id = job.job_id.clone();
        Ok(Some(Delivery {
            job,
            attempt,
            acker: Box::new(NatsAcker {
                acker,
                job_id,
                settled: AtomicBool::new(false),
            }),
        }))
    }
}

#[async_trait]
impl JobQueue for NatsJobQueue {
    async fn pending(&self) -> Result<Vec<(Tier, u64)>, QueueError> {
        let mut pending = Vec::with_capacity(self.consumers.len());
        for (tier, consumer) in self.consumers.iter() {
            // A clone is a handle; `info` asks the server for the consumer's current state.
            let mut consumer = consumer.clone();
            let info = consumer
                .info()
                .await
                .map_err(|error| QueueError::Transient {
                    message: format!("reading consumer info of tier {}: {error}", tier.as_str()),
                })?;
            pending.push((*tier, info.num_pending));
        }
        Ok(pending)
    }

    async fn publish(&self, job: &JobSpec) -> Result<(), QueueError> {
        let body = serde_json::to_vec(job).map_err(|error| QueueError::Malformed {
            message: format!("encoding job {}: {error}", job.job_id),
        })?;
        let subject = jobs_subject(job.tier, &job.batch_id);
        let message = PublishMessage::build()
            .payload(body.into())
            .message_id(job.message_id());
        let ack = self
            .jetstream
            .send_publish(subject, message)
            .await
            .map_err(|error| publish_error(&job.job_id, &error))?
            .await
            .map_err(|error| publish_error(&job.job_id, &error))?;
        if ack.duplicate {
            tracing::debug!(job_id = %job.job_id, "job was already published");
        }
        Ok(())
    }

    async fn withdraw(&self, batch: &BatchId, tier: Tier) -> Result<u64, QueueError> {
        // A purge with the batch's subject removes its messages of that tier from the work
        // queue: the ones no worker took never are, and a worker that holds one runs it and
        // finds its ack refused, which changes nothing (its `finished` event is published
        // before the ack).
        let purged = self
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
            if let Some(delivery) = self.pull_once(tiers, self.pull_expiry).await? {
                return Ok(Some(delivery));
            }
        }
    }
}

fn publish_error(
    job_id: &JobId,
    error: &async_nats::jetstream::context::PublishError,
) -> QueueError {
    match error.kind() {
        PublishErrorKind::MaxPayloadExceeded => QueueError::Malformed {
            message: format!("job {job_id} is larger than the server's max_payload: {error}"),
        },
        // Timeouts, no responders (stream not reachable), a broken connection, too many acks
        // in flight and server-side failures can all pass; the caller retries with backoff.
        _ => QueueError::Transient {
            message: format!("publishing job {job_id}: {error}"),
        },
    }
}

/// Settles one JetStream delivery. Dropping it unsettled leaves the message to the server,
/// which delivers it again after `ack_wait`.
struct NatsAcker {
    acker: JsAcker,
    job_id: JobId,
    /// Set once an ack or nak was confirmed; later settlements are no-ops, as in the embedded
    /// queue.
    settled: AtomicBool,
}

impl NatsAcker {
    async fn settle(&self, kind: AckKind, what: &str) -> Result<(), QueueError> {
        // Relaxed is enough: one delivery is settled by one task.
        if self.settled.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.acker
            .double_ack_with(kind)
            .await
            .map_err(|error| QueueError::Transient {
                message: format!("{what} of job {}: {error}", self.job_id),
            })?;
        self.settled.store(true, Ordering::Relaxed);
        Ok(())
    }
}

#[async_trait]
impl Acker for NatsAcker {
    async fn ack(&self) -> Result<(), QueueError> {
        self.settle(AckKind::Ack, "ack").await
    }

    async fn nak(&self, delay: Duration) -> Result<(), QueueError> {
        let delay = if delay.is_zero() { None } else { Some(delay) };
        self.settle(AckKind::Nak(delay), "nak").await
    }

    async fn in_progress(&self) -> Result<(), QueueError> {
        if self.settled.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.acker
            .double_ack_with(AckKind::Progress)
            .await
            .map_err(|error| QueueError::Transient {
                message: format!("in-progress ack of job {}: {error}", self.job_id),
            })
    }
}
