//! Lost jobs from JetStream's consumer advisories.
//!
//! JetStream gives up on a message in two ways and says so only in an advisory, a plain NATS
//! message nobody has to read: `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>`
//! when every allowed delivery ended without an ack, and
//! `$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.<stream>.<consumer>` when a worker terminated a
//! delivery. Without reading them a batch waits forever for such a job. `follow` subscribes to
//! both for the jobs stream and turns each advisory of a tier consumer into a [`LostJob`].
//!
//! An advisory names the message by its stream sequence. After max deliveries the message
//! usually still sits in the work queue (never offered again by its consumer) and is read back
//! and decoded; a terminated message is usually gone, so callers map the sequence to a job
//! with what `publish` returned. Advisories are not stored: one sent while nobody listens (a
//! coordinator restarting) is missed, which the coordinator's job deadlines cover.

use cowork_schema::job::{JobSpec, Tier};
use futures::StreamExt;
use serde::Deserialize;

use crate::nats::consumer_name;
use crate::nats::consumers::JobConsumers;
use crate::queue::{LostJob, LostJobs, LostReason, QueueError};

/// The subject of the max-deliveries advisories of every consumer of `stream`.
pub fn max_deliveries_subject(stream: &str) -> String {
    format!("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.*")
}

/// The subject of the terminated-message advisories of every consumer of `stream`.
pub fn terminated_subject(stream: &str) -> String {
    format!("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.*")
}

/// The fields of both advisories that we read; the server sends more.
#[derive(Debug, Deserialize)]
struct Advisory {
    consumer: String,
    stream_seq: u64,
    #[serde(default)]
    deliveries: u64,
    /// The worker's reason for a termination (servers from 2.11 on, when one was given).
    #[serde(default)]
    reason: Option<String>,
}

/// Subscribes to the advisories of the jobs stream of `queue`. The subscriptions are known to
/// the server when this returns, so no advisory of a job published afterwards is missed.
pub(crate) async fn follow(queue: &JobConsumers) -> Result<LostJobs, QueueError> {
    let client = queue.jetstream.client();
    let subscribe_error = |error: &dyn std::fmt::Display| QueueError::Transient {
        message: format!(
            "subscribing to the advisories of stream {}: {error}",
            queue.stream_name
        ),
    };
    let max_deliveries = client
        .subscribe(max_deliveries_subject(&queue.stream_name))
        .await
        .map_err(|error| subscribe_error(&error))?;
    let terminated = client
        .subscribe(terminated_subject(&queue.stream_name))
        .await
        .map_err(|error| subscribe_error(&error))?;
    client
        .flush()
        .await
        .map_err(|error| subscribe_error(&error))?;
    let stream = queue.stream.clone();
    let advisories = futures::stream::select(max_deliveries, terminated);
    Ok(Box::pin(advisories.filter_map(move |message| {
        let stream = stream.clone();
        async move {
            let terminated = message.subject.contains(".MSG_TERMINATED.");
            let advisory = parse_advisory(&message.payload)?;
            let (tier, stream_seq, reason) = lost_reason(advisory, terminated)?;
            // Read back while the message is still there; a missing or foreign body leaves the
            // mapping to the caller.
            let job = match stream.get_raw_message(stream_seq).await {
                Ok(stored) => serde_json::from_slice::<JobSpec>(&stored.payload).ok(),
                Err(_) => None,
            };
            tracing::warn!(tier = tier.as_str(), stream_seq, reason = ?reason, job_id = ?job.as_ref().map(|job| job.job_id.to_string()), "the job queue gave up on a job");
            Some(LostJob {
                tier,
                stream_seq,
                reason,
                job,
            })
        }
    })))
}

fn parse_advisory(payload: &[u8]) -> Option<Advisory> {
    match serde_json::from_slice::<Advisory>(payload) {
        Ok(advisory) => Some(advisory),
        Err(error) => {
            tracing::warn!(error = %error, "skipping an unreadable consumer advisory");
            None
        }
    }
}

/// The reason nats-server gives in a terminated advisory for a message its consumer still
/// counted as delivered and unacknowledged when the stream no longer had it.
///
/// In a work-queue stream a message is deleted by its own ack, so this is what a consumer
/// leader says when it learns of an ack after the deletion it caused: seen in a rolling restart
/// of a three-node cluster, where a restarted node took over the consumer with pending state
/// from before the acks and sent this for a run of jobs that had finished and been acked.
/// Nothing gave up on such a job. A pending job really deleted (a purge of a cancelled batch,
/// an operator's delete) is covered otherwise: its batch is over, or the coordinator's job
/// deadline publishes it again.
const DELETED_WHILE_PENDING: &str = "Unacknowledged message was deleted";

/// The tier, sequence and reason of an advisory; `None` for a consumer that is not a tier's,
/// and for a message deleted while pending ([`DELETED_WHILE_PENDING`]), which is no lost job.
fn lost_reason(advisory: Advisory, terminated: bool) -> Option<(Tier, u64, LostReason)> {
    let tier = Tier::ALL
        .into_iter()
        .find(|tier| consumer_name(*tier) == advisory.consumer)?;
    if terminated && advisory.reason.as_deref() == Some(DELETED_WHILE_PENDING) {
        tracing::debug!(
            tier = tier.as_str(),
            stream_seq = advisory.stream_seq,
            "a job message was deleted while its consumer counted it pending (its ack came through after a leader change): not a lost job"
        );
        return None;
    }
    let reason = if terminated {
        LostReason::Terminated {
            reason: advisory.reason.filter(|reason| !reason.is_empty()),
        }
    } else {
        LostReason::MaxDeliveries {
            deliveries: advisory.deliveries,
        }
    };
    Some((tier, advisory.stream_seq, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(payload: &str, terminated: bool, expected: Option<(Tier, u64, LostReason)>) {
        let advisory = parse_advisory(payload.as_bytes()).expect("a readable advisory");
        assert_eq!(lost_reason(advisory, terminated), expected);
    }

    #[test]
    fn advisories_of_tier_consumers_become_lost_jobs() {
        // Shapes as nats-server 2.15 sends them (fields we do not read left in).
        check(
            r#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","id":"x","timestamp":"2026-01-01T00:00:00Z","stream":"COWORK_JOBS","consumer":"cowork-replay","stream_seq":7,"deliveries":5,"domain":""}"#,
            false,
            Some((Tier::Replay, 7, LostReason::MaxDeliveries { deliveries: 5 })),
        );
        check(
            r#"{"type":"io.nats.jetstream.advisory.v1.terminated","stream":"COWORK_JOBS","consumer":"cowork-container","consumer_seq":3,"stream_seq":12,"deliveries":1,"reason":""}"#,
            true,
            Some((Tier::Container, 12, LostReason::Terminated { reason: None })),
        );
        check(
            r#"{"stream":"COWORK_JOBS","consumer":"cowork-microvm","stream_seq":2,"deliveries":1,"reason":"not a job"}"#,
            true,
            Some((
                Tier::Microvm,
                2,
                LostReason::Terminated {
                    reason: Some("not a job".to_owned()),
                },
            )),
        );
        // A consumer leader that learns of an ack after the deletion it caused (a node
        // restarted in a cluster) says the message was deleted unacknowledged: not lost.
        check(
            r#"{"type":"io.nats.jetstream.advisory.v1.terminated","stream":"COWORK_JOBS","consumer":"cowork-container","consumer_seq":41,"stream_seq":41,"deliveries":1,"reason":"Unacknowledged message was deleted"}"#,
            true,
            None,
        );
        // An operator's own consumer on the stream is not ours to report.
        check(
            r#"{"stream":"COWORK_JOBS","consumer":"debug","stream_seq":2,"deliveries":9}"#,
            false,
            None,
        );
    }

    #[test]
    fn an_unreadable_advisory_is_skipped() {
        assert!(parse_advisory(b"not json").is_none());
        assert!(parse_advisory(br#"{"consumer":"cowork-replay"}"#).is_none());
    }

    #[test]
    fn subjects_cover_every_consumer_of_the_stream() {
        assert_eq!(
            max_deliveries_subject("COWORK_JOBS"),
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.COWORK_JOBS.*"
        );
        assert_eq!(
            terminated_subject("COWORK_JOBS"),
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.COWORK_JOBS.*"
        );
    }
}
