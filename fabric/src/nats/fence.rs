//! Fencing the jobs stream for a coordinator term (decisions.md#coordinator-lease).
//!
//! A leader beginning term `t` (its lease revision) writes a marker holding `t` on each of
//! [`LANES`] lane subjects `cowork.jobs.fence.<lane>` and keeps the markers' stream
//! sequences. Every job of that term is published with `Nats-Expected-Last-Subject-Sequence`
//! and `Nats-Expected-Last-Subject-Sequence-Subject` naming one lane and its marker: the
//! server stores the job only while that marker is still the lane's last message, so once a
//! later leader has written its markers, the server refuses the old term's publishes (wrong
//! last sequence). The check and the write are one step on the server, which a clock checked
//! by the publisher cannot be: a process paused between the two is still refused.
//!
//! Lanes, not one subject: a clustered stream refuses a publish with such a check while
//! another publish checking the same subject is in flight (error 10164). So each publish
//! holds a lane of its own until its acknowledgement, and up to [`LANES`] are in flight.
//!
//! A marker is itself written with a check, expecting the lane's last message it read, and a
//! lane whose last marker holds a higher term than ours means a later leader fenced first:
//! an old leader that resumes in the middle of fencing can never overwrite a newer marker.

use std::sync::{Arc, Mutex, PoisonError};

use async_nats::jetstream::Context;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream as JsStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::queue::QueueError;

/// Lane subjects per term: at most this many fenced publishes are in flight at once.
pub const LANES: usize = 128;

/// The header naming the subject an expected-last-subject-sequence check is made on
/// (NATS 2.11+).
pub(crate) const EXPECTED_SUBJECT_HEADER: &str = "Nats-Expected-Last-Subject-Sequence-Subject";

/// The subject of lane `lane`.
pub fn lane_subject(lane: usize) -> String {
    format!("cowork.jobs.fence.{lane}")
}

/// Every lane subject (for the purge of superseded markers).
const LANES_FILTER: &str = "cowork.jobs.fence.>";

/// The fence of one term: its lanes' marker sequences and which lanes are free.
#[derive(Debug)]
pub(crate) struct TermFence {
    pub(crate) term: u64,
    markers: Vec<u64>,
    free: Mutex<Vec<usize>>,
    permits: Arc<Semaphore>,
}

/// A lane held by one publish until its acknowledgement; dropping it frees the lane.
#[derive(Debug)]
pub(crate) struct Lane {
    fence: Arc<TermFence>,
    index: usize,
    // Released after `drop` has put the index back, so a waiter always finds a free index.
    _permit: OwnedSemaphorePermit,
}

impl Lane {
    /// The lane's subject and the sequence its last message must still have.
    pub(crate) fn check(&self) -> (String, u64) {
        (lane_subject(self.index), self.fence.markers[self.index])
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.fence
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self.index);
    }
}

impl TermFence {
    fn new(term: u64, markers: Vec<u64>) -> TermFence {
        let lanes = markers.len();
        TermFence {
            term,
            markers,
            free: Mutex::new((0..lanes).rev().collect()),
            permits: Arc::new(Semaphore::new(lanes)),
        }
    }

    fn lane_with(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Lane {
        let index = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            // A permit is only handed out while an index is free (see `Lane`'s field order).
            .unwrap_or_default();
        Lane {
            fence: Arc::clone(self),
            index,
            _permit: permit,
        }
    }

    /// A free lane now, if there is one.
    pub(crate) fn try_lane(self: &Arc<Self>) -> Option<Lane> {
        let permit = Arc::clone(&self.permits).try_acquire_owned().ok()?;
        Some(self.lane_with(permit))
    }

    /// The next lane that is freed.
    pub(crate) async fn lane(self: &Arc<Self>) -> Lane {
        match Arc::clone(&self.permits).acquire_owned().await {
            Ok(permit) => self.lane_with(permit),
            // The semaphore is never closed.
            Err(_) => unreachable!("the lane semaphore is never closed"),
        }
    }
}

/// `true` when the server can check a sequence on another subject than the message's
/// (`Nats-Expected-Last-Subject-Sequence-Subject`, NATS 2.11 and later).
pub(crate) fn server_can_fence(version: &str) -> bool {
    let mut parts = version
        .trim_start_matches('v')
        .split(['.', '-'])
        .map(|part| part.parse::<u64>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (2, 11),
        _ => false,
    }
}

/// Writes term `term`'s marker on every lane and returns its fence; `Fenced` when a lane
/// already holds a later term's marker.
pub(crate) async fn write_markers(
    jetstream: &Context,
    stream: &JsStream<()>,
    term: u64,
) -> Result<TermFence, QueueError> {
    let lanes: Vec<usize> = (0..LANES).collect();
    let markers = futures::future::try_join_all(
        lanes
            .iter()
            .map(|lane| write_marker(jetstream, stream, term, *lane)),
    )
    .await?;
    // Markers of earlier terms are superseded: the lowest of ours bounds them all below.
    if let Some(lowest) = markers.iter().min() {
        let purged = stream.purge().filter(LANES_FILTER).sequence(*lowest).await;
        if let Err(error) = purged {
            // Only tidiness: an old marker left behind changes no check.
            tracing::debug!(error = %error, "purging superseded fence markers failed");
        }
    }
    Ok(TermFence::new(term, markers))
}

/// Writes `term`'s marker on `lane`, expecting the lane's last message as read; retries when
/// another marker came in between.
async fn write_marker(
    jetstream: &Context,
    stream: &JsStream<()>,
    term: u64,
    lane: usize,
) -> Result<u64, QueueError> {
    let subject = lane_subject(lane);
    for _ in 0..8 {
        let last = match stream.get_last_raw_message_by_subject(&subject).await {
            Ok(message) => {
                let holder = std::str::from_utf8(&message.payload)
                    .ok()
                    .and_then(|text| text.parse::<u64>().ok())
                    .unwrap_or(0);
                if holder > term {
                    return Err(QueueError::Fenced {
                        message: format!(
                            "lane {subject} is fenced at term {holder}, later than term {term}"
                        ),
                    });
                }
                message.sequence
            }
            Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => 0,
            Err(error) => {
                return Err(QueueError::Transient {
                    message: format!("reading fence lane {subject}: {error}"),
                });
            }
        };
        let marker = PublishMessage::build()
            .payload(term.to_string().into())
            .expected_last_subject_sequence(last);
        let acked = match jetstream.send_publish(subject.clone(), marker).await {
            Ok(pending) => pending.await,
            Err(error) => Err(error),
        };
        match acked {
            Ok(ack) => return Ok(ack.sequence),
            // Another marker was written between our read and our write: read again.
            Err(error) if error.kind() == PublishErrorKind::WrongLastSequence => continue,
            Err(error) => {
                return Err(QueueError::Transient {
                    message: format!("writing fence marker on {subject}: {error}"),
                });
            }
        }
    }
    Err(QueueError::Transient {
        message: format!("fence lane {subject} kept changing while term {term} was written"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_on_2_11_and_later() {
        assert!(server_can_fence("2.11.0"));
        assert!(server_can_fence("2.15.1"));
        assert!(server_can_fence("v3.0.0-beta"));
        assert!(!server_can_fence("2.10.25"));
        assert!(!server_can_fence("2.9.10"));
        assert!(!server_can_fence("garbage"));
    }

    #[tokio::test]
    async fn a_lane_is_held_until_dropped() {
        let fence = Arc::new(TermFence::new(7, vec![10, 11]));
        let first = fence.try_lane().expect("a free lane");
        let second = fence.try_lane().expect("a second free lane");
        assert_ne!(first.check(), second.check());
        assert!(fence.try_lane().is_none(), "both lanes are held");
        let freed = first.check();
        drop(first);
        let again = fence.lane().await;
        assert_eq!(again.check(), freed);
    }
}
