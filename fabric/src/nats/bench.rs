//! The raw JetStream baseline of the fleet benchmark (`cowork bench jetstream`): what the broker
//! alone does on this machine, so the fleet's own rate can be read as a ratio of it; and
//! `batch_timeline`, which tells where a fleet run's time went, over `each_batch_event`, which
//! reads a batch's events back with the times they were stored.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;

use super::NatsError;

/// Rates measured by [`raw_jetstream`].
#[derive(Clone, Debug)]
pub struct RawRates {
    pub messages: u64,
    /// Publish with a `Nats-Msg-Id` and awaited acks (1,000 in flight), messages per second.
    pub publish_per_s: f64,
    /// Pull (batches of 500) and ack of every message, messages per second.
    pub pull_ack_per_s: f64,
    /// Messages per second over the whole cycle (publish, then pull and ack).
    pub cycle_per_s: f64,
}

fn js_error(action: &'static str, error: impl std::fmt::Display) -> NatsError {
    NatsError::JetStream {
        action,
        name: "bench".to_owned(),
        source: error.to_string().into(),
    }
}

/// Publishes `messages` small messages with `Nats-Msg-Id` on a fresh work-queue stream, then
/// pulls and acks them all, and deletes the stream.
pub async fn raw_jetstream(url: &str, messages: u64) -> Result<RawRates, NatsError> {
    let client = async_nats::connect(url)
        .await
        .map_err(|e| js_error("connect", e))?;
    let js = jetstream::new(client);
    let name = format!("COWORK_BENCH_{}", std::process::id());
    let _ = js.delete_stream(&name).await;
    let stream = js
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![format!("bench.{}.>", std::process::id())],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| js_error("create stream", e))?;
    let subject = format!("bench.{}.jobs", std::process::id());
    let body: Vec<u8> = br#"{"job":"bench/c0/r0","tier":"container"}"#.to_vec();

    let started = Instant::now();
    let mut pending = std::collections::VecDeque::new();
    for index in 0..messages {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("bench/{index}").as_str());
        let ack = js
            .publish_with_headers(subject.clone(), headers, body.clone().into())
            .await
            .map_err(|e| js_error("publish", e))?;
        pending.push_back(ack);
        // 1,000 acks in flight: far below the 5,000 unacknowledged publishes at which async-nats stalls.
        if pending.len() >= 1000
            && let Some(ack) = pending.pop_front()
        {
            ack.await.map_err(|e| js_error("publish ack", e))?;
        }
    }
    for ack in pending {
        ack.await.map_err(|e| js_error("publish ack", e))?;
    }
    let published = started.elapsed();

    let consumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("bench".to_owned()),
            ack_policy: consumer::AckPolicy::Explicit,
            max_ack_pending: 10_000,
            ..Default::default()
        })
        .await
        .map_err(|e| js_error("create consumer", e))?;
    let pull_started = Instant::now();
    let mut received = 0u64;
    while received < messages {
        let mut batch = consumer
            .fetch()
            .max_messages(500)
            .expires(Duration::from_secs(2))
            .messages()
            .await
            .map_err(|e| js_error("fetch", e))?;
        while let Some(message) = batch.next().await {
            let message = message.map_err(|e| js_error("message", e))?;
            message.ack().await.map_err(|e| js_error("ack", e))?;
            received += 1;
        }
    }
    let pulled = pull_started.elapsed();
    let total = started.elapsed();
    let _ = js.delete_stream(&name).await;
    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    Ok(RawRates {
        messages,
        publish_per_s: rate(messages, published),
        pull_ack_per_s: rate(messages, pulled),
        cycle_per_s: rate(messages, total),
    })
}

/// When a batch's job events were stored, by the server's clock, read back from the events
/// stream after the batch: where the time of a fleet run went.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchTimeline {
    pub n_events: u64,
    /// Unix time in milliseconds of the batch's first event (a job started).
    pub first_event_ms: Option<i128>,
    /// Unix time in milliseconds of the last `finished` event.
    pub last_finished_ms: Option<i128>,
}

/// Reads every event of `batch` from the events stream of `config` (on a connection of its own)
/// and returns when the first one and the last `finished` one were stored.
pub async fn batch_timeline(
    config: &super::NatsConfig,
    batch: &cowork_schema::BatchId,
) -> Result<BatchTimeline, NatsError> {
    use cowork_schema::event::JobEventKind;

    let mut timeline = BatchTimeline::default();
    each_batch_event(config, batch, |stored_ms, event| {
        timeline.n_events += 1;
        timeline.first_event_ms.get_or_insert(stored_ms);
        if matches!(
            event.map(|event| &event.event),
            Some(JobEventKind::Finished { .. })
        ) {
            timeline.last_finished_ms = Some(stored_ms);
        }
    })
    .await?;
    Ok(timeline)
}

/// Reads every event of `batch` stored so far from the events stream of `config` (on a
/// connection of its own), in order, and hands each to `visit` with the Unix time in
/// milliseconds the server stored it at; `None` for a message that is no job event.
pub async fn each_batch_event(
    config: &super::NatsConfig,
    batch: &cowork_schema::BatchId,
    mut visit: impl FnMut(i128, Option<&cowork_schema::event::JobEvent>),
) -> Result<(), NatsError> {
    use async_nats::jetstream::consumer::push::OrderedConfig;
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    use cowork_schema::event::JobEvent;

    let jetstream = jetstream::new(super::connect_client(config).await?);
    let stream = jetstream
        .get_stream_no_info(&config.events_stream)
        .await
        .map_err(|e| js_error("open events stream", e))?;
    let subject = super::events_subject(batch);
    let last_seq = match stream.get_last_raw_message_by_subject(&subject).await {
        Ok(message) => message.sequence,
        Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(()),
        Err(error) => return Err(js_error("read the last event", error)),
    };
    let consumer = stream
        .create_consumer(OrderedConfig {
            deliver_subject: jetstream.client().new_inbox(),
            filter_subject: subject,
            ..OrderedConfig::default()
        })
        .await
        .map_err(|e| js_error("create consumer", e))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| js_error("read events", e))?;
    while let Some(message) = messages.next().await {
        let message = message.map_err(|e| js_error("read an event", e))?;
        let info = message.info().map_err(|e| js_error("event info", e))?;
        let stored_ms = info.published.unix_timestamp_nanos() / 1_000_000;
        let seq = info.stream_sequence;
        let event = serde_json::from_slice::<JobEvent>(&message.payload).ok();
        visit(stored_ms, event.as_ref());
        if seq >= last_seq {
            break;
        }
    }
    Ok(())
}
