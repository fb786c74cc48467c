//! One batch supervised by this process as the API sees it: its progress, end, controls and
//! live view, each in a channel its supervisor writes and the API reads.

use std::sync::Arc;

use cowork_schema::api::{BatchEnd, ProgressSnapshot};
use cowork_schema::batch::{BatchFlags, OnStall};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// One batch supervised by this process: what the API reads and how it cancels.
pub(crate) struct LiveBatch {
    pub(crate) progress: watch::Sender<ProgressSnapshot>,
    /// The tiers of the batch's jobs (for the fleet view).
    pub(crate) tiers: Vec<cowork_schema::job::Tier>,
    /// Tiers of the batch with waiting jobs and no live worker, kept by the fleet view and
    /// merged into the progress the API serves (the supervisor owns the rest of it).
    pub(crate) unserved: watch::Sender<Vec<cowork_schema::api::UnservedTier>>,
    /// What the stall watchdog says of the batch (`crate::stall_watch`), merged into the
    /// progress the API serves like the unserved tiers.
    pub(crate) stall: watch::Sender<Option<cowork_schema::api::BatchStall>>,
    /// The batch's `--stall-after` and `--on-stall`.
    pub(crate) stall_policy: StallPolicy,
    /// `Some` once the batch reached a final state (set after the record was updated).
    pub(crate) end: watch::Sender<Option<BatchEnd>>,
    pub(crate) cancel: CancellationToken,
    /// The batch's controls as its record says them (sent after each change is stored).
    pub(crate) controls: watch::Sender<cowork_schema::registry::BatchControls>,
    /// The supervisor's latest live view (at most every `LIVE_EVERY`).
    pub(crate) snapshot: Arc<crate::supervisor::LiveSnapshotSender>,
    /// Strip requests of the live page, answered by the supervisor.
    pub(crate) unit_requests: tokio::sync::mpsc::Sender<crate::supervisor::UnitRunsRequest>,
    unit_receiver:
        Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<crate::supervisor::UnitRunsRequest>>>,
}

impl LiveBatch {
    pub(crate) fn new(
        progress: ProgressSnapshot,
        tiers: Vec<cowork_schema::job::Tier>,
        stall_policy: StallPolicy,
    ) -> LiveBatch {
        // A few strip requests queue at most; more wait in the API (each page asks for one
        // strip at a time).
        let (unit_requests, unit_receiver) = tokio::sync::mpsc::channel(16);
        LiveBatch {
            progress: watch::Sender::new(progress),
            tiers,
            unserved: watch::Sender::new(Vec::new()),
            stall: watch::Sender::new(None),
            stall_policy,
            end: watch::Sender::new(None),
            cancel: CancellationToken::new(),
            controls: watch::Sender::new(Default::default()),
            snapshot: Arc::new(watch::Sender::new(None)),
            unit_requests,
            unit_receiver: Arc::new(tokio::sync::Mutex::new(unit_receiver)),
        }
    }

    /// What connects the batch's supervisor to its live page.
    pub(crate) fn link(&self) -> crate::supervisor::LiveLink {
        crate::supervisor::LiveLink {
            controls: Some(self.controls.subscribe()),
            snapshot: Some(Arc::clone(&self.snapshot)),
            unit_requests: Some(Arc::clone(&self.unit_receiver)),
        }
    }
}

/// A batch's `--stall-after` and `--on-stall`, from its flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StallPolicy {
    /// `None`: the default from history.
    pub(crate) after_ms: Option<u64>,
    pub(crate) cancel: bool,
}

impl StallPolicy {
    pub(crate) fn of(flags: &BatchFlags) -> StallPolicy {
        StallPolicy {
            after_ms: flags.stall_after_ms,
            cancel: flags.on_stall == Some(OnStall::Cancel),
        }
    }
}
