//! `NatsEventLog`: the `EventLog` port on the `COWORK_EVENTS` stream.
//!
//! Each event is a message on `cowork.events.<batch>`; its stream sequence is its sequence
//! number. The `Nats-Msg-Id` is `<job id>/<attempt>/<event type>`, so a worker that retries a
//! publish whose acknowledgement it lost does not store the event twice. A subscription is an
//! ordered push consumer filtered on the batch's subject: the server replays the stored events
//! from the requested sequence and then streams new ones, and the client recreates the
//! consumer from the last sequence it saw when the connection or the server comes back.

use async_nats::jetstream::Context;
use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::consumer::push::{Ordered, OrderedConfig, OrderedErrorKind};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use async_trait::async_trait;
use cowork_schema::BatchId;
use cowork_schema::event::{JobEvent, JobEventKind};
use futures::StreamExt;

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

/// The `Nats-Msg-Id` of an event: one id per job, resume generation, attempt and kind of event.
pub fn event_message_id(event: &JobEvent) -> String {
    let kind = match &event.event {
        JobEventKind::Started => "started",
        JobEventKind::Finished { .. } => "finished",
        JobEventKind::Failed { .. } => "failed",
    };
    if event.generation == 0 {
        format!("{}/{}/{kind}", event.job_id, event.attempt)
    } else {
        format!(
            "{}/g{}/{}/{kind}",
            event.job_id, event.generation, event.attempt
        )
    }
}

#[async_trait]
impl EventLog for NatsEventLog {
    async fn publish(&self, event: &JobEvent) -> Result<u64, EventError> {
        let body = serde_json::to_vec(event).map_err(|error| EventError::Malformed {
            seq: 0,
            message: format!("encoding an event of job {}: {error}", event.job_id),
        })?;
        let message = PublishMessage::build()
            .payload(body.into())
            .message_id(event_message_id(event));
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
        let config = OrderedConfig {
            deliver_subject: self.jetstream.client().new_inbox(),
            filter_subject: events_subject(batch),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: from_seq.max(1),
            },
            ..OrderedConfig::default()
        };
        let consumer =
            self.stream
                .create_consumer(config)
                .await
                .map_err(|error| EventError::Transient {
                    message: format!("subscribing to the events of batch {batch}: {error}"),
                })?;
        let messages = consumer
            .messages()
            .await
            .map_err(|error| EventError::Transient {
                message: format!("subscribing to the events of batch {batch}: {error}"),
            })?;
        Ok(Box::new(NatsSubscription {
            batch: batch.clone(),
            messages,
            last_seq: 0,
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

/// A live subscription to one batch's events.
struct NatsSubscription {
    batch: BatchId,
    messages: Ordered,
    /// The stream sequence of the last event yielded: an ordered consumer that recovers (after
    /// a reconnect, a leader change) may hand the same message out again, and a caller must
    /// never see an event twice.
    last_seq: u64,
}

#[async_trait]
impl EventSubscription for NatsSubscription {
    async fn next(&mut self) -> Option<Result<(u64, JobEvent), EventError>> {
        loop {
            let message = match self.messages.next().await? {
                Ok(message) => message,
                Err(error) => match error.kind() {
                    // The ordered consumer recovers from these by itself (it recreates the
                    // server-side consumer from the last sequence it delivered), so they are
                    // not the caller's business.
                    OrderedErrorKind::MissingHeartbeat | OrderedErrorKind::Recreate => {
                        tracing::warn!(batch_id = %self.batch, error = %error, "event subscription is recovering");
                        continue;
                    }
                    _ => {
                        return Some(Err(EventError::Transient {
                            message: format!("reading the events of batch {}: {error}", self.batch),
                        }));
                    }
                },
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
