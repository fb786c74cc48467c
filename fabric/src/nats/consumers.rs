//! The jobs stream and its bound tier consumers, and how a pulled message becomes a
//! [`Delivery`]: shared by the job queue, its puller and the lost-job follower, so each of them
//! imports this module and none imports another.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::message::Acker as JsAcker;
use async_nats::jetstream::stream::Stream as JsStream;
use async_nats::jetstream::{AckKind, Context};
use async_trait::async_trait;
use cowork_schema::JobId;
use cowork_schema::job::{JobSpec, Tier};

use crate::nats::config::NatsConfig;
use crate::nats::{NatsError, consumer_name};
use crate::queue::{Acker, Delivery, QueueError};

/// Server-side expiry of no-wait requests (the sweep of `pull_once`, the puller's fetches); it
/// only matters when a tier is at its in-flight cap (see `fetch_one`).
pub(crate) const SWEEP_EXPIRY: Duration = Duration::from_millis(100);

/// The jobs stream and the durable consumer of every tier on it. Cheap to clone; clones share
/// the connection.
#[derive(Clone)]
pub(crate) struct JobConsumers {
    pub(crate) jetstream: Context,
    /// The jobs stream: read by sequence to name the jobs of lost-job advisories, and purged
    /// by subject to withdraw a cancelled batch's queued jobs.
    pub(crate) stream: JsStream<()>,
    pub(crate) stream_name: String,
    pub(crate) consumers: Arc<BTreeMap<Tier, PullConsumer>>,
    pub(crate) pull_expiry: Duration,
    /// How often the puller renews jobs it holds beyond the free slots: a third of the tier
    /// consumers' `ack_wait`, as the worker renews running jobs.
    pub(crate) renew_every: Duration,
}

impl JobConsumers {
    /// Binds to the tier consumers that `ensure_streams` created.
    pub(crate) async fn open(
        jetstream: &Context,
        config: &NatsConfig,
    ) -> Result<JobConsumers, NatsError> {
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
        Ok(JobConsumers {
            jetstream: jetstream.clone(),
            stream,
            stream_name: config.jobs_stream.clone(),
            consumers: Arc::new(consumers),
            pull_expiry: config.pull_expiry,
            renew_every: (config.ack_wait / 3).max(Duration::from_millis(100)),
        })
    }

    /// The bound consumer of `tier`.
    pub(crate) fn consumer(&self, tier: Tier) -> Result<&PullConsumer, QueueError> {
        self.consumers
            .get(&tier)
            .ok_or_else(|| QueueError::Malformed {
                message: format!("no consumer is bound for tier {}", tier.as_str()),
            })
    }
}

/// The delivery of a pulled message of `tier`, or `None` when it cannot become one.
///
/// A body that is not a job can never run: it is terminated, so it is not delivered again (the
/// coordinator hears of it through the terminated advisory). A message without delivery info
/// cannot be settled either; it is left to the server, which delivers it again after
/// `ack_wait`.
pub(crate) async fn into_delivery(
    tier: Tier,
    message: async_nats::jetstream::Message,
) -> Option<Delivery> {
    let attempt = match message.info() {
        Ok(info) => u32::try_from(info.delivered).unwrap_or(u32::MAX),
        Err(error) => {
            tracing::error!(tier = tier.as_str(), error = %error, "skipping a job message without delivery info");
            return None;
        }
    };
    let (message, acker) = message.split();
    let job: JobSpec = match serde_json::from_slice(&message.payload) {
        Ok(job) => job,
        Err(error) => {
            tracing::error!(
                subject = %message.subject,
                tier = tier.as_str(),
                error = %error,
                "terminating a job message that is not a job spec"
            );
            if let Err(error) = acker.ack_with(AckKind::Term).await {
                tracing::warn!(error = %error, "terminating a malformed job message failed");
            }
            return None;
        }
    };
    // A job must come on its own tier's subject and its batch's: a worker serves only the
    // tiers it has the sandbox for, and the subject is what NATS permissions and the
    // coordinator's withdrawals go by (a job that says otherwise is not one it published).
    let subject = crate::nats::jobs_subject(job.tier, &job.batch_id);
    if job.tier != tier || message.subject.as_str() != subject {
        tracing::warn!(
            subject = %message.subject,
            tier = tier.as_str(),
            job_id = %job.job_id,
            job_tier = job.tier.as_str(),
            "terminating a job message whose tier or batch is not its subject's: not run"
        );
        if let Err(error) = acker.ack_with(AckKind::Term).await {
            tracing::warn!(error = %error, "terminating a misrouted job message failed");
        }
        return None;
    }
    let job_id = job.job_id.clone();
    Some(Delivery {
        job,
        attempt,
        acker: Box::new(NatsAcker {
            acker,
            job_id,
            settled: AtomicBool::new(false),
        }),
    })
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
