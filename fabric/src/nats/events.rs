//! `NatsEventLog`: the `EventLog` port on the `COWORK_EVENTS` stream.
//!
//! Each event is a message on `cowork.events.<batch>`; its stream sequence is its sequence
//! number. The `Nats-Msg-Id` is `<job id>/<attempt>/<event type>/<digest of the event>`, so a
//! worker that retries a publish whose acknowledgement it lost does not store the event twice,
//! and an event with other content under the same job, attempt and type is never dropped as
//! its duplicate (a forged event published first must not make the real one vanish). A subscription is an
//! ordered push consumer filtered on the batch's subject: the server replays the stored events
//! from the requested sequence and then streams new ones. The subscription itself, not the
//! client library, owns recovery: when the consumer is lost (its node killed, its stream's
//! leader moved, the connection back) or falls silent, it creates a new one from the event
//! after the last it yielded, with bounded backoff and a limit on each attempt, forever.

use std::time::{Duration, Instant};

use async_nats::jetstream::Context;
use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::consumer::push::{Ordered, OrderedConfig};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use async_trait::async_trait;
use cowork_schema::BatchId;
use cowork_schema::event::{JobEvent, JobEventKind};
use futures::StreamExt;

use crate::backoff::Backoff;
use crate::events::{EventError, EventLog, EventSubscription};
use crate::nats::config::NatsConfig;
use crate::nats::{NatsError, events_subject};

/// The event log on a NATS JetStream server. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct NatsEventLog {
    jetstream: Context,
    stream: Stream<()>,
}

impl NatsEventLog {
    /// Binds to the events stream that `ensure_streams` created.
    pub async fn open(jetstream: &Context, config: &NatsConfig) -> Result<NatsEventLog, NatsError> {
        let stream = jetstream
            .get_stream_no_info(&config.events_stream)
            .await
            .map_err(|source| NatsError::JetStream {
                action: "opening stream",
                name: config.events_stream.clone(),
                source: Box::new(source),
            })?;
        Ok(NatsEventLog {
            jetstream: jetstream.clone(),
            stream,
        })
    }
}

/// The `Nats-Msg-Id` of an event whose encoded form is `body`: one id per job, resume
/// generation, attempt, kind of event and content (the first 16 bytes of the body's sha256).
pub fn event_message_id(event: &JobEvent, body: &[u8]) -> String {
    let digest = &crate::sha256_hex(body)[..32];
    let kind = match &event.event {
        JobEventKind::Started => "started",
        JobEventKind::Finished { .. } => "finished",
        JobEventKind::Failed { .. } => "failed",
    };
    if event.generation == 0 {
        format!("{}/{}/{kind}/{digest}", event.job_id, event.attempt)
    } else {
        format!(
            "{}/g{}/{}/{kind}/{digest}",
            event.job_id, event.generation, event.attempt
        )
    }
}

#[async_trait]
impl EventLog for NatsEventLog {
    async fn publish(&self, event: &JobEvent) -> Result<u64, EventError> {
        let body =
            cowork_schema::json_number::to_vec(event).map_err(|error| EventError::Malformed {
                seq: 0,
                message: format!("encoding an event of job {}: {error}", event.job_id),
            })?;
        let message_id = event_message_id(event, &body);
        let message = PublishMessage::build()
            .payload(body.into())
            .message_id(message_id);
        let publish_error = |error: async_nats::jetstream::context::PublishError| {
            let message = format!("publishing an event of job {}: {error}", event.job_id);
            match error.kind() {
                PublishErrorKind::MaxPayloadExceeded => EventError::Malformed { seq: 0, message },
                _ => EventError::Transient { message },
            }
        };
        let ack = self
            .jetstream
            .send_publish(events_subject(&event.batch_id), message)
            .await
            .map_err(publish_error)?
            .await
            .map_err(publish_error)?;
        // A duplicate's ack carries the sequence of the event stored the first time.
        Ok(ack.sequence)
    }

    async fn subscribe(
        &self,
        batch: &BatchId,
        from_seq: u64,
    ) -> Result<Box<dyn EventSubscription>, EventError> {
        let first_seq = from_seq.max(1);
        let messages = open_ordered(&self.stream, &self.jetstream, batch, first_seq)
            .await
            .map_err(|message| EventError::Transient { message })?;
        Ok(Box::new(NatsSubscription {
            stream: self.stream.clone(),
            jetstream: self.jetstream.clone(),
            batch: batch.clone(),
            messages: Some(messages),
            last_seq: first_seq - 1,
            outage: None,
            failed_attempts: 0,
        }))
    }

    async fn last_sequence(&self, batch: &BatchId) -> Result<u64, EventError> {
        match self
            .stream
            .get_last_raw_message_by_subject(&events_subject(batch))
            .await
        {
            Ok(message) => Ok(message.sequence),
            Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(0),
            Err(error) => Err(EventError::Transient {
                message: format!("reading the last event of batch {batch}: {error}"),
            }),
        }
    }
}

/// How long one attempt to create the consumer may take before it counts as failed: a
/// request to a cluster that is electing a leader may get no answer at all, and recovery must
/// never wait on a dead future.
const CREATE_ATTEMPT_LIMIT: Duration = Duration::from_secs(10);
/// How long a subscription may yield nothing before its consumer is created afresh. The
/// server sends an idle heartbeat every 5 s and the client library consumes them, so silence
/// this long means either a quiet batch (a fresh consumer costs one request) or a consumer the
/// library is failing to recreate by itself (its own retry loop has no end and no limit per
/// attempt, and reports nothing while it waits).
const QUIET_LIMIT: Duration = Duration::from_secs(30);
/// The pause between two attempts to create the consumer: from 250 ms doubling to 5 s, short
/// enough that an election (a few seconds) costs little more than itself.
const RECREATE_BACKOFF: Backoff = Backoff::of(cowork_schema::retries::event_log::RESUBSCRIBE);

/// Creates an ordered push consumer on the batch's subject from `first_seq` and opens its
/// message stream, within [`CREATE_ATTEMPT_LIMIT`].
async fn open_ordered(
    stream: &Stream<()>,
    jetstream: &Context,
    batch: &BatchId,
    first_seq: u64,
) -> Result<Ordered, String> {
    let attempt = async {
        // No name: the server names each consumer, so an attempt whose answer was lost
        // leaves an orphan (removed after its inactivity threshold) and never a name clash
        // with the next attempt.
        let config = OrderedConfig {
            deliver_subject: jetstream.client().new_inbox(),
            filter_subject: events_subject(batch),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: first_seq,
            },
            ..OrderedConfig::default()
        };
        let consumer = stream
            .create_consumer(config)
            .await
            .map_err(|error| format!("subscribing to the events of batch {batch}: {error}"))?;
        consumer
            .messages()
            .await
            .map_err(|error| format!("subscribing to the events of batch {batch}: {error}"))
    };
    match tokio::time::timeout(CREATE_ATTEMPT_LIMIT, attempt).await {
        Ok(opened) => opened,
        Err(_) => Err(format!(
            "subscribing to the events of batch {batch}: no answer within {CREATE_ATTEMPT_LIMIT:?}"
        )),
    }
}

/// A live subscription to one batch's events. It recovers by itself, forever: when its
/// consumer is lost (a killed node, a leader change, a reconnect) or stays silent for
/// [`QUIET_LIMIT`], it creates a new one from the event after the last it yielded.
struct NatsSubscription {
    stream: Stream<()>,
    jetstream: Context,
    batch: BatchId,
    /// The consumer's messages; `None` while a new consumer is being created.
    messages: Option<Ordered>,
    /// The stream sequence of the last event yielded (or the one before the first asked
    /// for): a recovered consumer may hand the same message out again, or (the client
    /// library's own recovery, before anything was delivered) replay from the start, and a
    /// caller must never see an event twice nor one before what it asked for.
    last_seq: u64,
    /// When the current outage began and what ended the consumer, so an outage is logged
    /// once when it begins and once when it ends, not once per attempt.
    outage: Option<(Instant, String)>,
    /// Attempts to create a consumer that failed in the current outage.
    failed_attempts: u32,
}

impl NatsSubscription {
    /// Drops the consumer and marks the start of an outage (logged once).
    fn lose(&mut self, reason: String) {
        self.messages = None;
        if self.outage.is_none() {
            tracing::warn!(batch_id = %self.batch, error = %reason, last_seq = self.last_seq, "event subscription lost; recreating its consumer");
            self.outage = Some((Instant::now(), reason));
        }
    }

    /// Creates consumers until one opens, pausing with bounded backoff between attempts.
    async fn recover(&mut self) -> Ordered {
        loop {
            if self.failed_attempts > 0 {
                tokio::time::sleep(RECREATE_BACKOFF.delay(self.failed_attempts)).await;
            }
            match open_ordered(
                &self.stream,
                &self.jetstream,
                &self.batch,
                self.last_seq + 1,
            )
            .await
            {
                Ok(messages) => {
                    self.failed_attempts = 0;
                    return messages;
                }
                Err(error) => {
                    self.failed_attempts = self.failed_attempts.saturating_add(1);
                    tracing::debug!(batch_id = %self.batch, attempt = self.failed_attempts, error = %error, "recreating the event consumer failed");
                }
            }
        }
    }

    /// Logs the end of an outage, once an event arrives again.
    fn recovered(&mut self) {
        if let Some((since, reason)) = self.outage.take() {
            tracing::info!(batch_id = %self.batch, outage_ms = since.elapsed().as_millis() as u64, cause = %reason, "event subscription recovered");
        }
    }
}

#[async_trait]
impl EventSubscription for NatsSubscription {
    async fn next(&mut self) -> Option<Result<(u64, JobEvent), EventError>> {
        loop {
            if self.messages.is_none() {
                let recovered = self.recover().await;
                self.messages = Some(recovered);
            }
            let Some(messages) = self.messages.as_mut() else {
                continue;
            };
            let message = match tokio::time::timeout(QUIET_LIMIT, messages.next()).await {
                Ok(Some(Ok(message))) => message,
                Ok(Some(Err(error))) => {
                    // Whatever ended the consumer (a missed heartbeat, a failed recreation, a
                    // deleted consumer), a new one from the last event yielded carries on.
                    self.lose(error.to_string());
                    continue;
                }
                Ok(None) => {
                    self.lose("the consumer's messages ended".to_owned());
                    continue;
                }
                Err(_) => {
                    // Quiet, not necessarily lost: a fresh consumer only, no outage logged.
                    tracing::debug!(batch_id = %self.batch, last_seq = self.last_seq, "event subscription quiet; recreating its consumer");
                    self.messages = None;
                    continue;
                }
            };
            let seq = match message.info() {
                Ok(info) => info.stream_sequence,
                Err(error) => {
                    return Some(Err(EventError::Malformed {
                        seq: 0,
                        message: format!("event message without stream info: {error}"),
                    }));
                }
            };
            if seq <= self.last_seq {
                tracing::debug!(batch_id = %self.batch, seq, last_seq = self.last_seq, "skipping an event delivered again");
                continue;
            }
            self.recovered();
            self.last_seq = seq;
            return Some(
                serde_json::from_slice::<JobEvent>(&message.payload)
                    .map(|event| (seq, event))
                    .map_err(|error| EventError::Malformed {
                        seq,
                        message: error.to_string(),
                    }),
            );
        }
    }
}
