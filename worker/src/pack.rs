//! A slot's jobs run together (replay packs, harness-behaviour.md#replay-packs).
//!
//! Each job of a pack is still settled by its own task ([`crate::job_run`]): it holds its own
//! lease, is checked, skipped, stored, reported and acked on its own. Only running it is
//! shared: every job task either takes its [`Seat`] to the executor with its context, or gives
//! it up without running (a skipped, refused or already stored job). Once every seat is taken
//! or given up, the jobs that took one run with one [`Executor::execute_many`] call, and each
//! task gets its own output back.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cowork_fabric::{JobQueue, WorkerRegistry};
use cowork_schema::event::ErrorCategory;
use cowork_schema::job::Tier;
use tokio::sync::{OwnedSemaphorePermit, oneshot};
use tokio_util::sync::CancellationToken;

use crate::executor::{Classified, ExecOutput, Executor, JobContext};

/// The fewest replay jobs a slot's pack is cut to as the queue runs dry (unless
/// `--replay-pack` is smaller): the CLI starts in about 0.4 s and replays a cassette in about
/// 6 ms, so a pack of 32 still spends a third of its time replaying, and the idle tail while
/// the last packs end stays under a second.
pub(crate) const MIN_PACK_SHARE: usize = 32;

/// How many replay jobs one free slot takes when `n_queued` are queued and the fleet has
/// `fleet_slots` replay slots: an even share of the queue (so every slot gets a pack of about
/// the same length and none idles at the end of a corpus), at most `replay_pack`, at least
/// [`MIN_PACK_SHARE`] (each pack pays one process start).
pub(crate) fn pack_share(n_queued: u64, fleet_slots: usize, replay_pack: usize) -> usize {
    let fleet_slots = u64::try_from(fleet_slots.max(1)).unwrap_or(u64::MAX);
    let share = usize::try_from(n_queued.div_ceil(fleet_slots)).unwrap_or(usize::MAX);
    share.clamp(MIN_PACK_SHARE.min(replay_pack), replay_pack.max(1))
}

/// Replay jobs queued now; `None` when the queue cannot say (or the question failed: the
/// caller then sizes packs without it).
pub(crate) async fn queued_replays(queue: &dyn JobQueue) -> Option<u64> {
    match queue.pending().await {
        Ok(pending) => pending
            .into_iter()
            .find_map(|(tier, n_jobs)| (tier == Tier::Replay).then_some(n_jobs)),
        Err(error) => {
            tracing::debug!(error = %error, "reading the queue's depth failed; packs are sized without it");
            None
        }
    }
}

/// Replay slots of the fleet: every live worker's that serves the replay tier and is not
/// draining, as their heartbeats say, and never fewer than this worker's own `own_slots`
/// (its heartbeat may not be in yet). Without a registry, this worker is the fleet.
pub(crate) async fn fleet_replay_slots(
    workers: Option<&dyn WorkerRegistry>,
    own_slots: usize,
) -> usize {
    let Some(workers) = workers else {
        return own_slots;
    };
    match workers.list().await {
        Ok(list) => list
            .iter()
            .filter(|worker| !worker.draining && worker.tiers.contains(&Tier::Replay))
            .map(|worker| usize::try_from(worker.slots).unwrap_or(usize::MAX))
            .sum::<usize>()
            .max(own_slots),
        Err(error) => {
            tracing::debug!(error = %error, "listing the fleet's workers failed; packs are sized by this worker's slots");
            own_slots
        }
    }
}

/// The jobs of one slot that run with one executor call.
pub(crate) struct Pack {
    executor: Arc<dyn Executor>,
    state: Mutex<PackState>,
}

struct PackState {
    /// Seats neither taken nor given up yet.
    open: usize,
    joined: Vec<Joined>,
    /// The slot the pack runs in; released once its executor call returns (or, when every
    /// seat is given up, with the pack).
    slot: Option<OwnedSemaphorePermit>,
}

struct Joined {
    ctx: JobContext,
    cancel: CancellationToken,
    reply: oneshot::Sender<ExecOutput>,
}

/// One job's place in a [`Pack`]; dropping it untaken gives the place up.
pub(crate) struct Seat {
    pack: Arc<Pack>,
    taken: bool,
}

impl Pack {
    /// A pack of `n_jobs` seats that runs in `slot`.
    pub(crate) fn seats(
        executor: Arc<dyn Executor>,
        n_jobs: usize,
        slot: OwnedSemaphorePermit,
    ) -> Vec<Seat> {
        let pack = Arc::new(Pack {
            executor,
            state: Mutex::new(PackState {
                open: n_jobs,
                joined: Vec::new(),
                slot: Some(slot),
            }),
        });
        (0..n_jobs)
            .map(|_| Seat {
                pack: Arc::clone(&pack),
                taken: false,
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, PackState> {
        // Only pushes and counts happen under the lock; a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes one seat; runs the pack when it was the last open one.
    fn close_seat(&self, joined: Option<Joined>) {
        let ready = {
            let mut state = self.lock();
            state.open -= 1;
            state.joined.extend(joined);
            (state.open == 0).then(|| (std::mem::take(&mut state.joined), state.slot.take()))
        };
        // Every seat given up: the slot is free at once (the permit drops here).
        let Some((joined, slot)) = ready.filter(|(joined, _)| !joined.is_empty()) else {
            return;
        };
        let executor = Arc::clone(&self.executor);
        // Not tracked: every job task of the pack awaits its reply, and the job loop's tracker
        // waits for those tasks, so the loop never ends before this task has answered them.
        tokio::spawn(async move {
            let (jobs, replies): (Vec<_>, Vec<_>) = joined
                .into_iter()
                .map(|joined| ((joined.ctx, joined.cancel), joined.reply))
                .unzip();
            let outputs = executor.execute_many(&jobs).await;
            drop(slot);
            for (reply, output) in replies.into_iter().zip(outputs) {
                // A job task that is gone no longer needs its output.
                let _ = reply.send(output);
            }
        });
    }
}

impl Seat {
    /// Runs the job with the others of its pack and returns its own output.
    pub(crate) async fn execute(
        mut self,
        ctx: JobContext,
        cancel: CancellationToken,
    ) -> ExecOutput {
        self.taken = true;
        let (reply, output) = oneshot::channel();
        self.pack.close_seat(Some(Joined { ctx, cancel, reply }));
        output.await.unwrap_or_else(|_| ExecOutput {
            classified: Classified::error(
                ErrorCategory::Internal,
                "the job's pack ended without an output for it".to_owned(),
            ),
            exit_code: None,
            harness_version: None,
            spawned: false,
            artifacts: Vec::new(),
            run_ms: 0,
        })
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if !self.taken {
            self.pack.close_seat(None);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_slot_takes_an_even_share_of_the_queue_within_its_bounds() {
        let check = |n_queued: u64, fleet_slots: usize, replay_pack: usize, expect: usize| {
            assert_eq!(
                super::pack_share(n_queued, fleet_slots, replay_pack),
                expect,
                "{n_queued} queued on {fleet_slots} slots, --replay-pack {replay_pack}"
            );
        };
        // 300 cassettes on 2 slots: two packs, as the CLI's two processes over halves.
        check(300, 2, 256, 150);
        check(301, 2, 256, 151);
        // A long corpus: capped by --replay-pack.
        check(2000, 2, 256, 256);
        // The end of a corpus: never below the floor, so no pack is mostly start-up.
        check(40, 4, 256, 32);
        check(0, 2, 256, 32);
        // A --replay-pack below the floor wins; no slots is one slot.
        check(300, 2, 8, 8);
        check(10, 0, 256, 32);
        check(100, 0, 64, 64);
    }
}
