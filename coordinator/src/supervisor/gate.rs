//! The event gate: which events of a batch's log the supervisor folds (operations/security.md
//! "Trust model").
//!
//! Anyone who may publish on `cowork.events.<batch>` could otherwise decide a batch: a forged
//! `finished` event for a job no worker ever ran was folded with its verdict, cost and harness
//! version, and its artifact list could name another batch's `result.json`, which the envelope
//! then embedded. So, besides NATS permissions:
//!
//! - every event's job must be this batch's, and a `finished` event may name only keys inside
//!   the job's own directory (`JobKey::contains`) — checked for every event, the log's
//!   history included;
//! - a live event (one that arrives while this supervision runs) is folded only for a job the
//!   batch already knows to be out (a folded event started or finished it: re-acks and
//!   duplicates still count as such), or for a job this supervision published whose first
//!   publication the queue has delivered to a worker (`JobQueue::delivered_through`), or for
//!   a lost-job event this supervision wrote itself.
//!
//! Events already in the log when supervision starts (catch-up) are folded without the
//! delivery check: their jobs' messages are acked and gone, so the queue can no longer say.
//! And a supervision that started on a log with events (a coordinator restart, a resume)
//! cannot tell a job an earlier supervision published from one nobody did, so there a live
//! event of a job it did not publish itself is folded unchecked too. A restart therefore
//! trusts what its predecessor admitted and what was published while none watched; the NATS
//! roles (only workers and the coordinator may publish events) are the defence there.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use cowork_core::admission::{Admission, LOST_JOB_WORKER};
use cowork_fabric::JobQueue;
use cowork_schema::BatchId;
use cowork_schema::event::{JobEvent, JobEventKind};
use cowork_schema::ids::JobId;
use cowork_schema::job::Tier;
use cowork_schema::layout::JobKey;

/// How long a live event waits for the queue to say whether its job was delivered, when the
/// queue fails to answer: past it the event is folded (with a warning), because refusing a
/// real result loses it for good while the queue's outage lasts.
const DELIVERY_CHECK_BOUND: Duration = Duration::from_secs(30);

/// What the gate knows of this supervision's jobs.
pub(super) struct EventGate {
    /// `true` when this supervision published every job of the batch that was ever
    /// published (it started on an empty log): an event of any other job is forged.
    sole_publisher: bool,
    /// Tier and first queue sequence of each job this supervision published, until its event
    /// is folded as finished. The first: any copy's delivery (a re-publication gets a later
    /// sequence) makes the job's events real.
    first_publication: HashMap<JobId, (Tier, u64)>,
    /// Per tier, the queue's delivery cursor as last read (it only grows).
    delivered: HashMap<Tier, u64>,
    /// Jobs whose lost-job event this supervision wrote.
    written_lost: HashSet<JobId>,
}

impl EventGate {
    /// The gate of a supervision that started on a log holding `n_logged` events.
    pub(super) fn new(n_logged: u64) -> EventGate {
        EventGate {
            sole_publisher: n_logged == 0,
            first_publication: HashMap::new(),
            delivered: HashMap::new(),
            written_lost: HashSet::new(),
        }
    }

    /// Notes a job this supervision published at queue sequence `seq`.
    pub(super) fn published(&mut self, job_id: &JobId, tier: Tier, seq: u64) {
        self.first_publication
            .entry(job_id.clone())
            .or_insert((tier, seq));
    }

    /// Notes a lost-job event this supervision is about to write.
    pub(super) fn writes_lost(&mut self, job_id: &JobId) {
        self.written_lost.insert(job_id.clone());
    }

    /// Forgets a job whose `finished` event was folded (later ones are re-acks or duplicates,
    /// which admission recognises).
    pub(super) fn finished(&mut self, job_id: &JobId) {
        self.first_publication.remove(job_id);
        self.written_lost.remove(job_id);
    }

    /// Why a live `event` must not be folded; `None` when it may.
    pub(super) async fn refuses_live(
        &mut self,
        queue: &dyn JobQueue,
        admission: &Admission,
        batch_id: &BatchId,
        event: &JobEvent,
    ) -> Option<String> {
        if let Some(reason) = refuses_anywhere(batch_id, event) {
            return Some(reason);
        }
        if admission.has_events_of(&event.job_id) {
            return None;
        }
        if event.worker_id == LOST_JOB_WORKER {
            return (self.sole_publisher && !self.written_lost.contains(&event.job_id)).then(|| {
                format!("a lost-job event (worker id {LOST_JOB_WORKER:?}) this coordinator did not write")
            });
        }
        let Some(&(tier, seq)) = self.first_publication.get(&event.job_id) else {
            return self
                .sole_publisher
                .then(|| "an event of a job this coordinator did not admit".to_owned());
        };
        if self
            .delivered
            .get(&tier)
            .is_some_and(|through| *through >= seq)
        {
            return None;
        }
        match delivered_through(queue, tier).await {
            None => None,
            Some(through) => {
                self.delivered.insert(tier, through);
                (through < seq).then(|| {
                    format!(
                        "an event of a job no worker was handed yet (queue sequence {seq}, tier {} delivered through {through})",
                        tier.as_str()
                    )
                })
            }
        }
    }
}

/// Why `event` must not be folded wherever it comes from (the log's history included): a job
/// of another batch, or a `finished` event naming keys outside its job's own directory.
pub(super) fn refuses_anywhere(batch_id: &BatchId, event: &JobEvent) -> Option<String> {
    if event.batch_id != *batch_id || event.job_id.batch_part() != batch_id.as_str() {
        return Some(format!(
            "an event of job {} on this batch's subject",
            event.job_id
        ));
    }
    let JobEventKind::Finished { artifacts, .. } = &event.event else {
        return None;
    };
    artifacts
        .iter()
        .find(|artifact| !JobKey::new(&event.job_id).contains(&artifact.key))
        .map(|artifact| {
            format!(
                "a finished event naming {:?}, which is not one of the job's own keys ({}/…)",
                artifact.key,
                JobKey::new(&event.job_id).dir()
            )
        })
}

/// The queue's delivery cursor of `tier`; `None` when it cannot say, or failed to for
/// [`DELIVERY_CHECK_BOUND`] (then the event is folded: see the bound).
async fn delivered_through(queue: &dyn JobQueue, tier: Tier) -> Option<u64> {
    let backoff = cowork_fabric::backoff::Backoff::default();
    let started = tokio::time::Instant::now();
    let mut failures = 0u32;
    loop {
        match queue.delivered_through(tier).await {
            Ok(through) => return through,
            Err(error) if started.elapsed() < DELIVERY_CHECK_BOUND => {
                failures += 1;
                tracing::debug!(error = %error, "reading the queue's delivery cursor failed; retrying");
                tokio::time::sleep(backoff.delay(failures)).await;
            }
            Err(error) => {
                tracing::warn!(error = %error, tier = tier.as_str(), "the queue cannot say whether a job was delivered; folding its event unchecked");
                return None;
            }
        }
    }
}
