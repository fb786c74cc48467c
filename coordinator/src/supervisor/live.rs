//! The supervisor's side of the live page: the batch's controls coming in, its live view going
//! out at most every [`LIVE_EVERY`], and the runs of one unit on request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cowork_core::admission::Admission;
use cowork_schema::live::{LiveSnapshot, LiveUnitRuns};
use cowork_schema::registry::BatchControls;
use tokio::sync::{OwnedMutexGuard, mpsc, oneshot, watch};

/// The live view is sent at most this often: four times a second is smooth on a page, and a
/// 100,000-job batch finishing hundreds of jobs a second still builds only four views.
pub const LIVE_EVERY: Duration = Duration::from_millis(250);

/// The latest live view of a batch, shared with its watchers.
pub type LiveSnapshotSender = watch::Sender<Option<Arc<LiveSnapshot>>>;

/// What connects a supervised batch to its live page; every part is optional.
#[derive(Clone, Debug, Default)]
pub struct LiveLink {
    /// The batch's controls as its record says them.
    pub controls: Option<watch::Receiver<BatchControls>>,
    /// Where the live view goes.
    pub snapshot: Option<Arc<LiveSnapshotSender>>,
    /// Requests for one unit's runs, answered by the supervision that holds the lock.
    pub unit_requests: Option<Arc<tokio::sync::Mutex<mpsc::Receiver<UnitRunsRequest>>>>,
}

/// A request for one unit's runs (the strip of a heatmap cell).
#[derive(Debug)]
pub struct UnitRunsRequest {
    pub unit: u32,
    pub reply: oneshot::Sender<Option<LiveUnitRuns>>,
}

impl UnitRunsRequest {
    pub(super) fn answer(self, admission: &Admission) {
        // The asker may have gone (its request timed out); nothing to do then.
        let _ = self.reply.send(admission.live_unit_runs(self.unit));
    }
}

/// The live side of one supervision.
pub(super) struct LiveFeed {
    link: LiveLink,
    /// Outcomes or controls arrived since the view was last sent.
    dirty: bool,
    next_at: tokio::time::Instant,
}

impl LiveFeed {
    pub(super) fn new(link: LiveLink) -> LiveFeed {
        LiveFeed {
            link,
            dirty: false,
            next_at: tokio::time::Instant::now(),
        }
    }

    /// The controls as they are now (seen: a later change is a change from these).
    pub(super) fn controls_now(&mut self) -> Option<BatchControls> {
        let controls = self.link.controls.as_mut()?;
        let now = controls.borrow_and_update().clone();
        Some(now)
    }

    /// Resolves with the controls when they change; never without a controls channel, or once
    /// its sender is gone.
    pub(super) async fn controls_changed(&mut self) -> Option<BatchControls> {
        let Some(controls) = self.link.controls.as_mut() else {
            return std::future::pending().await;
        };
        if controls.changed().await.is_err() {
            return std::future::pending().await;
        }
        Some(controls.borrow_and_update().clone())
    }

    pub(super) async fn lock_unit_requests(
        &self,
    ) -> Option<OwnedMutexGuard<mpsc::Receiver<UnitRunsRequest>>> {
        let requests = self.link.unit_requests.clone()?;
        Some(requests.lock_owned().await)
    }

    /// Something changed: the view is sent at its next turn.
    pub(super) fn touch(&mut self) {
        self.dirty = self.link.snapshot.is_some();
    }

    /// When the view is to be sent next, if something changed.
    pub(super) fn due_at(&self) -> Option<tokio::time::Instant> {
        self.dirty.then_some(self.next_at)
    }

    /// Sends the view now.
    pub(super) fn publish(&mut self, admission: &Admission, now: Instant) {
        let Some(sender) = &self.link.snapshot else {
            return;
        };
        sender.send_replace(Some(Arc::new(admission.live_snapshot(now))));
        self.dirty = false;
        self.next_at = tokio::time::Instant::now() + LIVE_EVERY;
    }

    /// Sends the view if something changed and its turn came.
    pub(super) fn publish_if_due(&mut self, admission: &Admission, now: Instant) {
        if self.dirty && tokio::time::Instant::now() >= self.next_at {
            self.publish(admission, now);
        }
    }
}
