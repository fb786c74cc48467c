//! `MemJobQueue`: an in-process work queue per tier.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cowork_schema::BatchId;
use cowork_schema::job::{JobSpec, Tier};
use tokio::sync::Notify;

use crate::queue::{Acker, Delivery, JobPuller, JobQueue, Published, QueueError};

#[derive(Default)]
struct State {
    ready: HashMap<Tier, VecDeque<JobSpec>>,
    /// Message ids published and not yet acked, with the sequence their publish got: a second
    /// publish of one of them is dropped, like a JetStream publish with a repeated
    /// `Nats-Msg-Id` inside the duplicate window.
    unsettled: HashMap<String, u64>,
    /// Deliveries so far of each job not yet acked.
    attempts: HashMap<String, u32>,
    /// The sequence of the last publish that queued a job.
    last_seq: u64,
    /// The highest coordinator term fenced so far (`JobQueue::fence`).
    fenced_term: u64,
    closed: bool,
}

impl State {
    /// Queues `job` unless the queue is closed or the job is queued and unsettled already
    /// (a duplicate, answered with the first publish's sequence).
    fn enqueue(&mut self, job: &JobSpec) -> Result<Published, QueueError> {
        if self.closed {
            return Err(QueueError::Closed);
        }
        if let Some(seq) = self.unsettled.get(&job.message_id()) {
            return Ok(Published {
                seq: *seq,
                duplicate: true,
            });
        }
        // As on NATS, a duplicate is answered first: a fenced publish of a job the later
        // leader already queued changes nothing either way.
        if job.leader_term != 0 && job.leader_term < self.fenced_term {
            return Err(QueueError::Fenced {
                message: format!(
                    "job {} carries term {}, the queue is fenced at term {}",
                    job.job_id, job.leader_term, self.fenced_term
                ),
            });
        }
        self.last_seq += 1;
        let seq = self.last_seq;
        self.unsettled.insert(job.message_id(), seq);
        self.ready
            .entry(job.tier)
            .or_default()
            .push_back(job.clone());
        Ok(Published {
            seq,
            duplicate: false,
        })
    }
}

/// An in-process job queue with JetStream-like delivery semantics.
#[derive(Clone, Default)]
pub struct MemJobQueue {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
}

impl MemJobQueue {
    pub fn new() -> MemJobQueue {
        MemJobQueue::default()
    }

    /// Closes the queue: pullers waiting now or later get `Ok(None)` once no job is ready.
    pub fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
    }

    /// Number of jobs waiting to be pulled, over all tiers.
    pub fn n_ready(&self) -> usize {
        self.lock().ready.values().map(VecDeque::len).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock means a panic while holding it; the state is plain data that stays
        // consistent between statements, so carrying on is safe.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes up to `max` ready jobs of `tiers`, one tier after the other in turn from
    /// `first_tier`, so that no tier starves another.
    fn take_ready(&self, tiers: &[Tier], first_tier: usize, max: usize) -> Vec<Delivery> {
        let mut state = self.lock();
        let mut taken = Vec::new();
        let mut progress = true;
        while taken.len() < max && progress {
            progress = false;
            for offset in 0..tiers.len() {
                if taken.len() == max {
                    break;
                }
                let tier = tiers[(first_tier + offset) % tiers.len()];
                let Some(job) = state.ready.get_mut(&tier).and_then(VecDeque::pop_front) else {
                    continue;
                };
                progress = true;
                let attempt = state.attempts.entry(job.message_id()).or_insert(0);
                *attempt += 1;
                let attempt = *attempt;
                let acker = MemAcker {
                    queue: self.clone(),
                    job: Mutex::new(Some(job.clone())),
                };
                taken.push(Delivery {
                    job,
                    attempt,
                    acker: Box::new(acker),
                });
            }
        }
        taken
    }

    fn is_closed(&self) -> bool {
        self.lock().closed
    }

    fn requeue(&self, job: JobSpec) {
        let mut state = self.lock();
        state.ready.entry(job.tier).or_default().push_front(job);
        drop(state);
        self.notify.notify_waiters();
    }
}

#[async_trait]
impl JobQueue for MemJobQueue {
    async fn fence(&self, term: u64) -> Result<(), QueueError> {
        let mut state = self.lock();
        state.fenced_term = state.fenced_term.max(term);
        Ok(())
    }

    async fn publish(&self, job: &JobSpec) -> Result<Published, QueueError> {
        let published = self.lock().enqueue(job);
        self.notify.notify_waiters();
        published
    }

    /// Queues every job under one lock and wakes pullers once: a puller woken by the first
    /// job of a batch then sees the whole decision at once, so the replay packs it cuts are
    /// sized by the whole queue (not by the few jobs queued before it woke).
    async fn publish_many(&self, jobs: &[JobSpec]) -> Vec<Result<Published, QueueError>> {
        let results = {
            let mut state = self.lock();
            jobs.iter().map(|job| state.enqueue(job)).collect()
        };
        self.notify.notify_waiters();
        results
    }

    fn puller(&self, tiers: &[Tier]) -> Box<dyn JobPuller + '_> {
        Box::new(MemPuller {
            queue: self.clone(),
            tiers: tiers.to_vec(),
            first_tier: 0,
        })
    }

    async fn pending(&self) -> Result<Vec<(Tier, u64)>, QueueError> {
        let state = self.lock();
        Ok(Tier::ALL
            .iter()
            .map(|tier| (*tier, state.ready.get(tier).map_or(0, |q| q.len() as u64)))
            .collect())
    }

    async fn withdraw(&self, batch: &BatchId, tier: Tier) -> Result<u64, QueueError> {
        let mut state = self.lock();
        let Some(ready) = state.ready.remove(&tier) else {
            return Ok(0);
        };
        let (withdrawn, kept): (VecDeque<JobSpec>, VecDeque<JobSpec>) =
            ready.into_iter().partition(|job| job.batch_id == *batch);
        state.ready.insert(tier, kept);
        for job in &withdrawn {
            state.unsettled.remove(&job.message_id());
        }
        Ok(withdrawn.len() as u64)
    }

    async fn pull(&self, tiers: &[Tier]) -> Result<Option<Delivery>, QueueError> {
        let mut puller = MemPuller {
            queue: self.clone(),
            tiers: tiers.to_vec(),
            first_tier: 0,
        };
        Ok(puller
            .pull_many(1)
            .await?
            .and_then(|mut deliveries| deliveries.pop()))
    }
}

/// The embedded queue's puller: takes ready jobs straight from the queue, never more than
/// asked for, so it holds nothing between calls.
struct MemPuller {
    queue: MemJobQueue,
    tiers: Vec<Tier>,
    /// The tier the next call looks at first, so that every tier gets its turn.
    first_tier: usize,
}

#[async_trait]
impl JobPuller for MemPuller {
    async fn pull_many(&mut self, max: usize) -> Result<Option<Vec<Delivery>>, QueueError> {
        if self.tiers.is_empty() {
            return Err(QueueError::Malformed {
                message: "pull needs at least one tier".to_owned(),
            });
        }
        if max == 0 {
            return Ok(Some(Vec::new()));
        }
        loop {
            // Register interest before looking, so a publish between the look and the wait
            // still wakes us.
            let notified = self.queue.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let taken = self.queue.take_ready(&self.tiers, self.first_tier, max);
            if !taken.is_empty() {
                self.first_tier = (self.first_tier + 1) % self.tiers.len();
                return Ok(Some(taken));
            }
            if self.queue.is_closed() {
                return Ok(None);
            }
            notified.await;
        }
    }
}

/// Settles one delivery. Dropping it unsettled puts the job back, which is how a crashed job
/// task inside the process looks to the queue (JetStream would redeliver after `ack_wait`).
struct MemAcker {
    queue: MemJobQueue,
    /// `Some` until the delivery is settled.
    job: Mutex<Option<JobSpec>>,
}

impl MemAcker {
    fn take(&self) -> Option<JobSpec> {
        self.job
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

#[async_trait]
impl Acker for MemAcker {
    async fn ack(&self) -> Result<(), QueueError> {
        if let Some(job) = self.take() {
            // A settled job keeps no state: a batch of a million jobs costs no memory here.
            let message_id = job.message_id();
            let mut state = self.queue.lock();
            state.unsettled.remove(&message_id);
            state.attempts.remove(&message_id);
        }
        Ok(())
    }

    async fn nak(&self, delay: Duration) -> Result<(), QueueError> {
        let Some(job) = self.take() else {
            return Ok(());
        };
        if delay.is_zero() {
            self.queue.requeue(job);
            return Ok(());
        }
        let queue = self.queue.clone();
        // Detached on purpose: the timer only puts the job back and ends; nothing needs to
        // wait for it, and a closed queue simply never delivers the job again.
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.requeue(job);
        });
        Ok(())
    }

    async fn in_progress(&self) -> Result<(), QueueError> {
        // The embedded queue has no ack deadline: a job is owned until settled or dropped.
        Ok(())
    }
}

impl Drop for MemAcker {
    fn drop(&mut self) {
        if let Some(job) = self.take() {
            self.queue.requeue(job);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_schema::batch::ExecutorKind;
    use cowork_schema::ids::{BatchId, JobId, UnitRef};
    use cowork_schema::job::JobCommand;

    fn job(index: u32, tier: Tier) -> JobSpec {
        let batch = BatchId::new("b1").expect("valid literal");
        JobSpec {
            protocol: cowork_schema::job::PROTOCOL_VERSION,
            job_id: JobId::new(&batch, UnitRef::File(0), Some(index)),
            batch_id: batch,
            command: JobCommand::Run,
            tier,
            unit: UnitRef::File(0),
            repeat_index: Some(index),
            scenario_file: "s.yaml".into(),
            scenario_name: "s".into(),
            axes: None,
            arm: None,
            forwarded_flags: vec![],
            bundle_sha256: "00".into(),
            timeout_ms: 1000,
            executor: ExecutorKind::Sim,
            sim: None,
            generation: 0,
            traceparent: None,
            republished: 0,
            dispatch_epoch: 0,
            leader_term: 0,
        }
    }

    #[tokio::test]
    async fn publish_is_deduplicated_until_acked() {
        let queue = MemJobQueue::new();
        queue
            .publish(&job(0, Tier::Container))
            .await
            .expect("open queue");
        queue
            .publish(&job(0, Tier::Container))
            .await
            .expect("open queue");
        assert_eq!(queue.n_ready(), 1);
        let delivery = queue
            .pull(&[Tier::Container])
            .await
            .expect("pull")
            .expect("a job");
        delivery.acker.ack().await.expect("ack");
        queue
            .publish(&job(0, Tier::Container))
            .await
            .expect("open queue");
        assert_eq!(queue.n_ready(), 1);
        // An acked job left nothing behind: its next publish is a first delivery again.
        let again = queue
            .pull(&[Tier::Container])
            .await
            .expect("pull")
            .expect("a job");
        assert_eq!(again.attempt, 1);
    }

    #[tokio::test]
    async fn a_withdrawal_takes_back_one_batchs_queued_jobs_of_one_tier() {
        let queue = MemJobQueue::new();
        let mut other = job(0, Tier::Microvm);
        other.batch_id = BatchId::new("b2").expect("valid literal");
        other.job_id = JobId::new(&other.batch_id, UnitRef::File(0), Some(0));
        for sent in [job(0, Tier::Microvm), job(1, Tier::Microvm), other.clone()] {
            queue.publish(&sent).await.expect("open queue");
        }
        let b1 = BatchId::new("b1").expect("valid literal");
        assert_eq!(
            queue.withdraw(&b1, Tier::Microvm).await.expect("withdraw"),
            2
        );
        assert_eq!(
            queue.withdraw(&b1, Tier::Replay).await.expect("withdraw"),
            0
        );
        assert_eq!(queue.n_ready(), 1);
        // A withdrawn job may be published again (a resumed batch).
        queue
            .publish(&job(0, Tier::Microvm))
            .await
            .expect("open queue");
        assert_eq!(queue.n_ready(), 2);
        let delivery = queue
            .pull(&[Tier::Microvm])
            .await
            .expect("pull")
            .expect("a job");
        assert_eq!(delivery.job, other);
    }

    #[tokio::test]
    async fn publish_reports_the_first_sequence_of_a_duplicate() {
        let queue = MemJobQueue::new();
        let first = queue.publish(&job(0, Tier::Container)).await.expect("open");
        let second = queue.publish(&job(1, Tier::Container)).await.expect("open");
        assert_eq!((first.seq, first.duplicate), (1, false));
        assert_eq!((second.seq, second.duplicate), (2, false));
        let again = queue
            .publish_many(&[job(0, Tier::Container), job(2, Tier::Replay)])
            .await;
        let again: Vec<Published> = again.into_iter().map(|r| r.expect("open")).collect();
        assert_eq!(
            again,
            vec![
                Published {
                    seq: 1,
                    duplicate: true
                },
                Published {
                    seq: 3,
                    duplicate: false
                }
            ]
        );
        queue.close();
        let closed = queue
            .publish_many(&[job(4, Tier::Container), job(5, Tier::Container)])
            .await;
        assert!(closed.iter().all(|r| matches!(r, Err(QueueError::Closed))));
    }

    #[tokio::test]
    async fn pull_many_takes_up_to_max_from_every_tier_in_turn() {
        let queue = MemJobQueue::new();
        for index in 0..3 {
            queue
                .publish(&job(index, Tier::Container))
                .await
                .expect("open");
        }
        for index in 3..6 {
            queue
                .publish(&job(index, Tier::Replay))
                .await
                .expect("open");
        }
        let mut puller = queue.puller(&[Tier::Container, Tier::Replay]);
        let first = puller.pull_many(4).await.expect("pull").expect("jobs");
        let tiers: Vec<Tier> = first.iter().map(|d| d.job.tier).collect();
        assert_eq!(
            tiers,
            vec![Tier::Container, Tier::Replay, Tier::Container, Tier::Replay]
        );
        let rest = puller.pull_many(4).await.expect("pull").expect("jobs");
        assert_eq!(rest.len(), 2);
        let none = puller.pull_many(0).await.expect("pull").expect("open");
        assert!(none.is_empty());
        queue.close();
        assert!(puller.pull_many(4).await.expect("pull").is_none());
        assert!(queue.puller(&[]).pull_many(1).await.is_err());
    }

    #[tokio::test]
    async fn pull_only_sees_requested_tiers() {
        let queue = MemJobQueue::new();
        queue
            .publish(&job(0, Tier::Microvm))
            .await
            .expect("open queue");
        queue
            .publish(&job(1, Tier::Container))
            .await
            .expect("open queue");
        let delivery = queue
            .pull(&[Tier::Container])
            .await
            .expect("pull")
            .expect("a job");
        assert_eq!(delivery.job.tier, Tier::Container);
        delivery.acker.ack().await.expect("ack");
        queue.close();
        assert!(
            queue
                .pull(&[Tier::Container])
                .await
                .expect("pull")
                .is_none()
        );
        let delivery = queue
            .pull(&[Tier::Microvm])
            .await
            .expect("pull")
            .expect("a job");
        assert_eq!(delivery.job.tier, Tier::Microvm);
    }

    #[tokio::test]
    async fn dropped_and_naked_deliveries_come_back_with_a_higher_attempt() {
        let queue = MemJobQueue::new();
        queue
            .publish(&job(0, Tier::Container))
            .await
            .expect("open queue");
        let first = queue
            .pull(&[Tier::Container])
            .await
            .expect("pull")
            .expect("a job");
        assert_eq!(first.attempt, 1);
        drop(first);
        let second = queue
            .pull(&[Tier::Container])
            .await
            .expect("pull")
            .expect("a job");
        assert_eq!(second.attempt, 2);
        second.acker.nak(Duration::ZERO).await.expect("nak");
        let third = queue
            .pull(&[Tier::Container])
            .await
            .expect("pull")
            .expect("a job");
        assert_eq!(third.attempt, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn nak_with_delay_redelivers_after_the_delay() {
        let queue = MemJobQueue::new();
        queue
            .publish(&job(0, Tier::Container))
            .await
            .expect("open queue");
        let first = queue
            .pull(&[Tier::Container])
            .await
            .expect("pull")
            .expect("a job");
        first.acker.nak(Duration::from_secs(30)).await.expect("nak");
        assert_eq!(queue.n_ready(), 0);
        let again = queue
            .pull(&[Tier::Container])
            .await
            .expect("pull")
            .expect("a job");
        assert_eq!(again.attempt, 2);
    }
}
