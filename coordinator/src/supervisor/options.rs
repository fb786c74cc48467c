//! What one supervised batch is given: the ports, its settings (window, pauses, speculation,
//! history), the model limits its process shares, and the signals that stop it early.

use std::sync::Arc;
use std::time::Duration;

use cowork_core::limits::{ModelLimit, ModelLimits};
use cowork_fabric::{ArtifactStore, EventLog, JobQueue};
use tokio_util::sync::CancellationToken;

use cowork_core::admission::{DEFAULT_DEADLINE_GRACE, DEFAULT_SPECULATION};

use super::live::LiveLink;

/// Ports the supervisor uses.
#[derive(Clone)]
pub struct CoordinatorPorts {
    pub queue: Arc<dyn JobQueue>,
    pub events: Arc<dyn EventLog>,
    pub store: Arc<dyn ArtifactStore>,
}

/// Settings of one supervised batch.
#[derive(Clone, Debug)]
pub struct SuperviseOptions {
    /// Jobs of this batch outstanding (published, not finished) at most.
    pub window: usize,
    /// The envelope's `command` (`run`, `record`, `replay`).
    pub command: String,
    /// First dispatch pause of a tier after a `usage_limit` result
    /// (harness-behaviour.md#choice-c9); it doubles with each further one in a row, up to
    /// `usage_pause_max`.
    pub usage_pause: Duration,
    pub usage_pause_max: Duration,
    /// Per-model admission limits, shared by every batch of this process.
    pub model_limits: Arc<SharedModelLimits>,
    /// With `--stop-on-diverge`: jobs of a unit admitted beyond the lowest index its fold
    /// waits for (default [`DEFAULT_SPECULATION`]).
    pub speculation: u32,
    /// Time a started job has beyond its timeout to report back before it is published again
    /// (default [`DEFAULT_DEADLINE_GRACE`]).
    pub deadline_grace: Duration,
    /// Earlier batches whose `stats.json` order the units longest-expected-first (0: plan
    /// order).
    pub history_batches: usize,
    /// Where those stats are read once and shared by the batches of a process.
    pub history: Arc<crate::history::HistoryCache>,
    /// Told of a budget stop; `None` tells no one.
    pub notifier: Option<crate::notify::Notifier>,
    /// The process's sandbox and model prices (`--sandbox-price`, `--model-price`); a batch's
    /// own prices override them (decisions.md#whole-cost).
    pub prices: cowork_schema::pricing::Pricing,
    /// The fleet's slots this batch shares with the other batches of the process
    /// (decisions.md#fair-share); `None`: only its window bounds it.
    pub fair_share: Option<FairShareLink>,
    /// The end of the coordinator's term as leader (decisions.md#coordinator-lease): nothing
    /// is published once it passed. `None`: the only coordinator, no term.
    pub lease_term: Option<Arc<crate::leadership::TermClock>>,
    /// The term's lease revision, carried by every job published as its fencing token
    /// (`JobSpec::leader_term`); 0 without a lease.
    pub leader_term: u64,
}

/// Default first pause after a `usage_limit` result.
pub const DEFAULT_USAGE_PAUSE: Duration = cowork_schema::retries::admission::USAGE_PAUSE;
/// Default longest pause after repeated `usage_limit` results.
pub const DEFAULT_USAGE_PAUSE_MAX: Duration = cowork_schema::retries::admission::USAGE_PAUSE_MAX;
/// Default number of earlier batches read for scheduling.
pub const DEFAULT_HISTORY_BATCHES: usize = 20;

/// Jobs of a replay batch outstanding at least, whatever the configured window: a worker
/// replays many cassettes with one harness process (harness-behaviour.md#replay-packs), so its
/// slots need whole packs in the queue, and a replay spends nothing a window could hold back.
pub const REPLAY_MIN_WINDOW: usize = 1024;

/// The admission window of a batch: the configured one, widened for replays.
pub(super) fn admission_window(options: &SuperviseOptions) -> usize {
    if options.command == "replay" {
        options.window.max(REPLAY_MIN_WINDOW)
    } else {
        options.window
    }
}

impl SuperviseOptions {
    /// Options with the default pauses, speculation, grace and history.
    pub fn new(window: usize, command: &str) -> SuperviseOptions {
        SuperviseOptions {
            window,
            command: command.to_owned(),
            usage_pause: DEFAULT_USAGE_PAUSE,
            usage_pause_max: DEFAULT_USAGE_PAUSE_MAX,
            model_limits: Arc::default(),
            speculation: DEFAULT_SPECULATION,
            deadline_grace: DEFAULT_DEADLINE_GRACE,
            history_batches: DEFAULT_HISTORY_BATCHES,
            history: Arc::default(),
            notifier: None,
            prices: cowork_schema::pricing::Pricing::default(),
            fair_share: None,
            lease_term: None,
            leader_term: 0,
        }
    }
}

/// The model limits of one process, shared by its batches, with the wake-up of batches that
/// wait for a model's concurrency.
#[derive(Debug, Default)]
pub struct SharedModelLimits {
    pub(super) limits: Arc<ModelLimits>,
    released: tokio::sync::Notify,
}

impl SharedModelLimits {
    pub fn new(rules: Vec<ModelLimit>) -> SharedModelLimits {
        SharedModelLimits {
            limits: Arc::new(ModelLimits::new(rules)),
            released: tokio::sync::Notify::new(),
        }
    }

    /// The limits and their counters.
    pub fn limits(&self) -> &ModelLimits {
        &self.limits
    }

    /// Wakes the batches waiting for a model slot (one was given back).
    pub fn notify_released(&self) {
        self.released.notify_waiters();
    }

    /// Resolves when some job is released.
    pub async fn released(&self) {
        self.released.notified().await;
    }
}

/// The ways to stop a supervised batch early.
#[derive(Clone, Debug, Default)]
pub struct SuperviseSignals {
    /// Process shutdown: supervision returns [`SuperviseError::Cancelled`](super::SuperviseError::Cancelled) at once and leaves
    /// the batch for the next coordinator to resume.
    pub shutdown: CancellationToken,
    /// Batch cancel: admission stops at once, queued jobs are withdrawn, started ones finish
    /// (harness-behaviour.md#choice-c4), and supervision returns [`SuperviseEnd::Cancelled`](super::SuperviseEnd::Cancelled) unless
    /// the batch was decided anyway.
    pub cancel: CancellationToken,
    /// The batch's controls in, its live view out (all optional).
    pub live: LiveLink,
}

/// The fair share of one process (`cowork_core::share`), with the wake-up of batches that
/// wait for their share when another batch frees slots or the live slots change.
#[derive(Debug)]
pub struct SharedFairShare {
    share: Arc<cowork_core::share::FairShare>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for SharedFairShare {
    fn default() -> Self {
        SharedFairShare {
            share: Arc::new(cowork_core::share::FairShare::new()),
            changed: tokio::sync::watch::channel(0).0,
        }
    }
}

impl SharedFairShare {
    /// The division itself (slots, quotas, what each batch holds).
    pub fn share(&self) -> &cowork_core::share::FairShare {
        &self.share
    }

    /// Wakes the batches waiting for their share.
    pub fn notify(&self) {
        self.changed
            .send_modify(|version| *version = version.wrapping_add(1));
    }

    /// A receiver that sees every [`SharedFairShare::notify`] after it was last marked seen.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The live slots per tier, from the workers' heartbeats; wakes waiting batches when
    /// they changed.
    pub fn set_slots(&self, slots: std::collections::BTreeMap<cowork_schema::job::Tier, u64>) {
        if self.share.set_slots(slots) {
            self.notify();
        }
    }
}

/// One batch's link to its process's fair share.
#[derive(Clone, Debug)]
pub struct FairShareLink {
    pub shared: Arc<SharedFairShare>,
    /// The token policy the batch was submitted under (its record's `tokenName`).
    pub token: Option<String>,
}

impl FairShareLink {
    pub(super) fn claim(&self) -> cowork_core::admission::ShareClaim {
        cowork_core::admission::ShareClaim {
            share: Arc::clone(&self.shared.share),
            token: self.token.clone(),
        }
    }
}
