//! A slot's jobs run together (replay packs, harness-behaviour.md#replay-packs).
//!
//! Each job of a pack is still settled by its own task ([`crate::job_run`]): it holds its own
//! lease, is checked, skipped, stored, reported and acked on its own. Only running it is
//! shared: every job task either takes its [`Seat`] to the executor with its context, or gives
//! it up without running (a skipped, refused or already stored job). Once every seat is taken
//! or given up, the jobs that took one run with one [`Executor::execute_many`] call, and each
//! task gets its own output back.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cowork_schema::event::ErrorCategory;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::executor::{Classified, ExecOutput, Executor, JobContext};

/// The jobs of one slot that run with one executor call.
pub(crate) struct Pack {
    executor: Arc<dyn Executor>,
    state: Mutex<PackState>,
}

struct PackState {
    /// Seats neither taken nor given up yet.
    open: usize,
    joined: Vec<Joined>,
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
    /// A pack of `n_jobs` seats.
    pub(crate) fn seats(executor: Arc<dyn Executor>, n_jobs: usize) -> Vec<Seat> {
        let pack = Arc::new(Pack {
            executor,
            state: Mutex::new(PackState {
                open: n_jobs,
                joined: Vec::new(),
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
            (state.open == 0).then(|| std::mem::take(&mut state.joined))
        };
        let Some(joined) = ready.filter(|joined| !joined.is_empty()) else {
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
