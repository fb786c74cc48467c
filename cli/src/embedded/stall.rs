//! The stall watchdog of a batch run in this process (`cowork run`, `cowork eval` without
//! `--coordinator`): the same decision as the coordinator's (`cowork_core::stall`), with what
//! applies here. This process's worker serves every tier of the batch and its queue is in
//! memory, so a stall is a pause (from the live page), sandbox start failures, or a cause this
//! process cannot see. The clock is read here, once a second.

use std::time::{Duration, Instant};

use cowork_core::stall::{
    ProgressMark, StallInputs, default_stall_after_ms, outstanding, stall_reason,
};
use cowork_schema::api::{BatchStall, ProgressSnapshot, StallReason};
use cowork_schema::batch::{BatchFlags, OnStall};
use cowork_schema::history::BatchStats;
use cowork_schema::registry::BatchControls;
use tokio::sync::watch;

/// How often the watchdog looks.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The watchdog of one batch run here.
pub(super) struct StallWatch {
    progress: watch::Receiver<ProgressSnapshot>,
    controls: Option<watch::Receiver<BatchControls>>,
    stall_after_ms: u64,
    /// `--on-stall cancel`.
    pub(super) cancels: bool,
    started: Instant,
    ticks: tokio::time::Interval,
    /// When the batch last moved, in milliseconds since `started`.
    mark: ProgressMark,
    /// Said once per stall: a stalled batch is not reported again until it moves.
    stalled: bool,
}

impl StallWatch {
    pub(super) fn new(
        flags: &BatchFlags,
        history: &[BatchStats],
        progress: watch::Receiver<ProgressSnapshot>,
        controls: Option<watch::Receiver<BatchControls>>,
    ) -> StallWatch {
        let started = Instant::now();
        let mark = ProgressMark::new(&progress.borrow(), 0);
        StallWatch {
            progress,
            controls,
            stall_after_ms: flags
                .stall_after_ms
                .unwrap_or_else(|| default_stall_after_ms(history)),
            cancels: flags.on_stall == Some(OnStall::Cancel),
            started,
            ticks: tokio::time::interval(LOOK_EVERY),
            mark,
            stalled: false,
        }
    }

    /// Waits until the batch becomes stalled, and says why. Cancel-safe: a dropped wait loses
    /// nothing (the state is kept here).
    pub(super) async fn next(&mut self) -> BatchStall {
        loop {
            self.ticks.tick().await;
            if let Some(stall) = self.look(Instant::now()) {
                return stall;
            }
        }
    }

    fn look(&mut self, now: Instant) -> Option<BatchStall> {
        let progress = self.progress.borrow().clone();
        let now_ms = u64::try_from(now.saturating_duration_since(self.started).as_millis())
            .unwrap_or(u64::MAX);
        if self.mark.observe(&progress, now_ms) {
            self.stalled = false;
        }
        // This process's worker serves every tier: no tier goes unserved.
        let inputs = StallInputs {
            now_ms,
            progress_at_ms: self.mark.at_ms(),
            outstanding: outstanding(&progress),
            tiers: &[],
            paused: self
                .controls
                .as_ref()
                .is_some_and(|controls| controls.borrow().paused),
            broker_healthy: true,
            sandbox_start_failures: self.mark.failures_since(&progress),
            stall_after_ms: self.stall_after_ms,
        };
        let reason = stall_reason(&inputs)?;
        if self.stalled {
            return None;
        }
        self.stalled = true;
        let wall_ms = crate::progress::now_ms();
        Some(BatchStall {
            message: reason.describe(),
            cancelled: self.cancels && reason != StallReason::Paused,
            reason,
            progress_at_ms: wall_ms.saturating_sub(now_ms.saturating_sub(self.mark.at_ms())),
            stall_after_ms: self.stall_after_ms,
        })
    }
}

/// Says a stall on the terminal and tells the batch's hooks (a `stalled` event).
pub(super) fn tell(
    stall: &BatchStall,
    batch_id: &cowork_schema::BatchId,
    notifier: Option<&cowork_coordinator::notify::Notifier>,
) {
    crate::progress::note(&stall.describe(crate::progress::now_ms()));
    if let Some(notifier) = notifier {
        notifier.send(cowork_core::notify::NotifyEvent::Stalled {
            batch_id: batch_id.clone(),
            reason: stall.message.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch_of(
        progress: ProgressSnapshot,
        flags: &BatchFlags,
    ) -> (watch::Sender<ProgressSnapshot>, StallWatch) {
        let (sender, receiver) = watch::channel(progress);
        (sender, StallWatch::new(flags, &[], receiver, None))
    }

    #[tokio::test]
    async fn a_batch_that_stops_moving_is_said_stalled_once_until_it_moves() {
        let flags = BatchFlags {
            stall_after_ms: Some(60_000),
            on_stall: Some(OnStall::Cancel),
            ..BatchFlags::default()
        };
        let progress = ProgressSnapshot {
            planned: 3,
            ..ProgressSnapshot::default()
        };
        let (sender, mut watch) = watch_of(progress.clone(), &flags);
        let t0 = watch.started;
        assert_eq!(watch.look(t0 + Duration::from_secs(59)), None);
        let stall = watch
            .look(t0 + Duration::from_secs(60))
            .expect("stalled after a minute");
        assert_eq!(stall.reason, StallReason::Unexplained);
        assert!(stall.cancelled, "--on-stall cancel");
        assert_eq!(watch.look(t0 + Duration::from_secs(90)), None, "said once");
        // A job finishes: the clock starts again.
        sender.send_replace(ProgressSnapshot {
            finished: 1,
            ..progress
        });
        assert_eq!(watch.look(t0 + Duration::from_secs(100)), None);
        assert!(watch.look(t0 + Duration::from_secs(160)).is_some());
    }

    #[tokio::test]
    async fn a_finished_batch_and_the_default_policy_cancel_nothing() {
        let (_sender, mut watch) = watch_of(ProgressSnapshot::default(), &BatchFlags::default());
        assert_eq!(
            watch.stall_after_ms,
            cowork_core::stall::DEFAULT_STALL_AFTER_MS
        );
        assert!(!watch.cancels);
        let t0 = watch.started;
        assert_eq!(
            watch.look(t0 + Duration::from_secs(3600)),
            None,
            "no job outstanding"
        );
    }
}
