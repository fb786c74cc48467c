//! `NatsPuller`: one worker's standing pull on all of its tiers at once.
//!
//! Each tier has its own durable consumer (a WorkQueue stream refuses overlapping filters, and
//! workers serve different tier sets), so a worker cannot ask one consumer for "any of my
//! tiers". Instead the puller keeps, for every tier, one *watch* open: a pull request for one
//! message that the server holds for `pull_expiry`. Whichever tier gets work first answers at
//! once; no slot waits on an empty tier while another has work. A tier that delivered recently
//! is *hot*: the puller also sends it a no-wait *fetch* for the free slots the open requests do
//! not already cover, so a busy tier fills every free slot in one round trip.
//!
//! The cost is a bounded over-pull: a watch on a tier that was quiet may deliver after the
//! free slots were filled from another tier. Such a job is held, renewed every `ack_wait / 3`
//! like a running job, and handed out first on the next call. At most one job per served tier
//! is ever held: only watches on quiet tiers are not counted against the free slots, and each
//! tier has one. Holding was chosen over a nak: a nak counts as a delivery (the job's attempt
//! goes up and `max_deliver` comes closer for a job that never ran), and the held job is
//! usually started within one job's run time. When the puller is closed (or dropped), what it
//! holds and whatever its open requests still deliver is naked at once, so other workers get it
//! without waiting for `ack_wait`.
//!
//! The state lives in a pump task (a mailbox actor): it must keep renewing held jobs while the
//! worker is busy and does not call.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use async_nats::jetstream::Message;
use async_trait::async_trait;
use cowork_schema::job::Tier;
use futures::future::FutureExt;
use futures::stream::{self, BoxStream, SelectAll, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::nats::consumer_name;
use crate::nats::consumers::{JobConsumers, SWEEP_EXPIRY, into_delivery};
use crate::queue::{Delivery, JobPuller, QueueError};

/// How long a dropped puller keeps draining its open requests (to nak what they still
/// deliver) beyond their own expiry; async-nats ends a request 5 s after its expiry at the
/// latest, so this is only a backstop.
const DRAIN_MARGIN: Duration = Duration::from_secs(10);

/// How long `close` waits for the held jobs to be handed back.
const HAND_BACK_BOUND: Duration = Duration::from_secs(10);

/// The worker's handle; the pump task behind it ends once the handle is closed or dropped.
pub(crate) struct NatsPuller {
    /// `None` once closed.
    wants: Option<mpsc::Sender<Want>>,
    /// Resolves once the pump has handed back what it held.
    handed_back: Option<oneshot::Receiver<()>>,
    has_tiers: bool,
}

impl NatsPuller {
    /// Starts the pump of a standing pull on `tiers`.
    pub(crate) fn start(queue: JobConsumers, tiers: &[Tier]) -> NatsPuller {
        // One want at a time: `pull_many` takes `&mut self`.
        let (wants, wants_rx) = mpsc::channel(1);
        let mut unique = Vec::new();
        for tier in tiers {
            if !unique.contains(tier) {
                unique.push(*tier);
            }
        }
        let has_tiers = !unique.is_empty();
        let span = tracing::info_span!(
            "puller",
            tiers = %unique.iter().map(|tier| tier.as_str()).collect::<Vec<_>>().join(",")
        );
        let (handed_back_tx, handed_back) = oneshot::channel();
        let pump = Pump {
            state: unique
                .iter()
                .map(|tier| (*tier, TierState::default()))
                .collect(),
            tiers: unique,
            queue,
            pulls: SelectAll::new(),
            held: VecDeque::new(),
            want: None,
            gathered: Vec::new(),
            failure: None,
            n_arrivals: 0,
        };
        // Detached on purpose: the pump ends by itself once this handle (the only sender) is
        // dropped and it has handed back what it held; nobody needs to wait for that.
        tokio::spawn(pump.run(wants_rx, handed_back_tx).instrument(span));
        NatsPuller {
            wants: Some(wants),
            handed_back: Some(handed_back),
            has_tiers,
        }
    }
}

#[async_trait]
impl JobPuller for NatsPuller {
    async fn pull_many(&mut self, max: usize) -> Result<Option<Vec<Delivery>>, QueueError> {
        if !self.has_tiers {
            return Err(QueueError::Malformed {
                message: "pull needs at least one tier".to_owned(),
            });
        }
        if max == 0 {
            return Ok(Some(Vec::new()));
        }
        let Some(wants) = &self.wants else {
            return Err(QueueError::Closed);
        };
        let (reply, answer) = oneshot::channel();
        // The pump only stops once this handle is closed, so a failed send means it panicked.
        if wants.send(Want { max, reply }).await.is_err() {
            return Err(QueueError::Closed);
        }
        match answer.await {
            Ok(Ok(deliveries)) => Ok(Some(deliveries)),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(QueueError::Closed),
        }
    }

    async fn close(&mut self) {
        // Dropping the only sender ends the pump's loop; it then naks what it holds and says so.
        self.wants = None;
        if let Some(handed_back) = self.handed_back.take() {
            // An error means the pump is gone already, with nothing left to hand back. The bound
            // only matters when the server does not answer the naks: the held jobs then come
            // back after ack_wait, as if the worker had crashed.
            let _ = tokio::time::timeout(HAND_BACK_BOUND, handed_back).await;
        }
    }
}

/// One call of `pull_many`, waiting in the pump.
struct Want {
    max: usize,
    reply: oneshot::Sender<Result<Vec<Delivery>, QueueError>>,
}

/// What an open pull request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PullKind {
    /// A request for one message, held by the server for `pull_expiry`: it notices work on
    /// its tier.
    Watch,
    /// A no-wait request for up to the uncovered free slots on a tier that has work.
    Fetch,
}

/// Something that happened to an open pull request.
struct PullEvent {
    tier: Tier,
    kind: PullKind,
    item: PullItem,
}

enum PullItem {
    /// Boxed: a message is large, and the other items are tiny.
    Message(Box<Message>),
    /// The server answered with an error status (a deleted consumer, a leader change, too many
    /// waiting requests); the request is over.
    Failed(String),
    /// The request is over: filled, expired or answered "no messages".
    Ended,
}

/// The puller's view of one tier.
#[derive(Default)]
struct TierState {
    watch_open: bool,
    /// Messages the open fetch may still deliver; `None` when no fetch is open.
    fetch_remaining: Option<usize>,
    /// Set when the tier delivered (the arrival count then), cleared when a request found it
    /// empty: hot tiers get fetches, most recent first.
    hot_since: Option<u64>,
}

struct Pump {
    queue: JobConsumers,
    /// The served tiers, without repeats, in the worker's order.
    tiers: Vec<Tier>,
    state: BTreeMap<Tier, TierState>,
    /// Every open pull request, as one merged stream.
    pulls: SelectAll<BoxStream<'static, PullEvent>>,
    /// Jobs that arrived while no call was waiting; renewed until handed out.
    held: VecDeque<Delivery>,
    /// The call waiting for jobs, if any.
    want: Option<Want>,
    /// Jobs for the waiting call, handed over once nothing more is ready at once.
    gathered: Vec<Delivery>,
    /// A failed pull request, reported to the waiting call when it has nothing else.
    failure: Option<QueueError>,
    n_arrivals: u64,
}

impl Pump {
    async fn run(mut self, mut wants: mpsc::Receiver<Want>, handed_back: oneshot::Sender<()>) {
        let mut renew = tokio::time::interval(self.queue.renew_every);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Biased: a new call and the requests' answers are handled before a renewal; dropping
        // any branch that did not win loses nothing (each is a plain receive or timer).
        loop {
            tokio::select! {
                biased;
                want = wants.recv(), if self.want.is_none() => match want {
                    Some(want) => self.take_want(want),
                    None => break,
                },
                Some(event) = self.pulls.next(), if !self.pulls.is_empty() => {
                    self.on_event(event).await;
                }
                () = abandoned(self.want.as_mut()) => self.drop_want(),
                _ = renew.tick() => self.renew_held().await,
            }
            self.serve_want().await;
        }
        self.hand_back(handed_back).await;
    }

    /// A new call: served from the held jobs when there are any, else it waits.
    fn take_want(&mut self, want: Want) {
        if self.held.is_empty() {
            self.want = Some(want);
            return;
        }
        let n_take = want.max.min(self.held.len());
        let deliveries: Vec<Delivery> = self.held.drain(..n_take).collect();
        if let Err(Ok(deliveries)) = want.reply.send(Ok(deliveries)) {
            // The caller gave up meanwhile: keep them, in their order, for the next call.
            for delivery in deliveries.into_iter().rev() {
                self.held.push_front(delivery);
            }
        }
    }

    /// The waiting call went away: what was gathered for it is held for the next one.
    fn drop_want(&mut self) {
        self.want = None;
        self.held.extend(self.gathered.drain(..));
    }

    /// Answers the waiting call when there is something to answer, else makes sure requests
    /// are open for it.
    async fn serve_want(&mut self) {
        let Some(max) = self.want.as_ref().map(|want| want.max) else {
            return;
        };
        if !self.gathered.is_empty() {
            // Take what has already arrived too: a fetch's messages come back to back.
            while self.gathered.len() < max {
                let Some(Some(event)) = self.pulls.next().now_or_never() else {
                    break;
                };
                self.on_event(event).await;
            }
            let Some(want) = self.want.take() else {
                return;
            };
            let deliveries = std::mem::take(&mut self.gathered);
            if let Err(Ok(deliveries)) = want.reply.send(Ok(deliveries)) {
                self.held.extend(deliveries);
            }
            return;
        }
        if let Some(error) = self.failure.take() {
            if let Some(want) = self.want.take() {
                // A caller that went away needs no error.
                let _ = want.reply.send(Err(error));
            }
            return;
        }
        self.open_requests(max).await;
    }

    /// Opens a watch on every tier that has none, then fetches from hot tiers (most recent
    /// first) for the `max` free slots that the gathered jobs, the open fetches and the
    /// watches on hot tiers do not cover.
    async fn open_requests(&mut self, max: usize) {
        for tier in self.tiers.clone() {
            if !self.tier(tier).watch_open {
                self.open(tier, PullKind::Watch, 1).await;
            }
        }
        let mut hot: Vec<(u64, Tier)> = self
            .state
            .iter()
            .filter_map(|(tier, state)| state.hot_since.map(|since| (since, *tier)))
            .collect();
        hot.sort_unstable_by(|a, b| b.cmp(a));
        let mut covered = self.gathered.len()
            + self
                .state
                .values()
                .map(|state| {
                    state.fetch_remaining.unwrap_or(0)
                        + usize::from(state.watch_open && state.hot_since.is_some())
                })
                .sum::<usize>();
        for (_, tier) in hot {
            if self.tier(tier).fetch_remaining.is_some() {
                continue;
            }
            let room = max.saturating_sub(covered);
            if room == 0 {
                break;
            }
            self.open(tier, PullKind::Fetch, room).await;
            covered += room;
        }
    }

    fn tier(&mut self, tier: Tier) -> &mut TierState {
        self.state.entry(tier).or_default()
    }

    /// Sends one pull request; a failure is kept for the waiting call.
    async fn open(&mut self, tier: Tier, kind: PullKind, n_messages: usize) {
        let consumer = match self.queue.consumer(tier) {
            Ok(consumer) => consumer,
            Err(error) => {
                self.failure = Some(error);
                return;
            }
        };
        let batch = match kind {
            PullKind::Watch => {
                consumer
                    .batch()
                    .max_messages(1)
                    .expires(self.queue.pull_expiry)
                    .messages()
                    .await
            }
            // The server holds even a no-wait request while the tier is at its in-flight cap,
            // until the request expires: a short expiry keeps that case short.
            PullKind::Fetch => {
                consumer
                    .fetch()
                    .max_messages(n_messages)
                    .expires(SWEEP_EXPIRY)
                    .messages()
                    .await
            }
        };
        let batch = match batch {
            Ok(batch) => batch,
            Err(error) => {
                self.failure = Some(QueueError::Transient {
                    message: format!("pulling from consumer {}: {error}", consumer_name(tier)),
                });
                return;
            }
        };
        let events = batch
            .map(move |item| PullEvent {
                tier,
                kind,
                item: match item {
                    Ok(message) => PullItem::Message(Box::new(message)),
                    Err(error) => PullItem::Failed(error.to_string()),
                },
            })
            .chain(stream::once(async move {
                PullEvent {
                    tier,
                    kind,
                    item: PullItem::Ended,
                }
            }));
        self.pulls.push(events.boxed());
        let state = self.tier(tier);
        match kind {
            PullKind::Watch => state.watch_open = true,
            PullKind::Fetch => state.fetch_remaining = Some(n_messages),
        }
    }

    async fn on_event(&mut self, event: PullEvent) {
        let PullEvent { tier, kind, item } = event;
        match item {
            PullItem::Message(message) => {
                self.n_arrivals += 1;
                let n_arrivals = self.n_arrivals;
                let state = self.tier(tier);
                state.hot_since = Some(n_arrivals);
                if kind == PullKind::Fetch
                    && let Some(remaining) = state.fetch_remaining.as_mut()
                {
                    *remaining = remaining.saturating_sub(1);
                }
                let Some(delivery) = into_delivery(tier, *message).await else {
                    return;
                };
                if self.want.is_some() {
                    self.gathered.push(delivery);
                } else {
                    self.held.push_back(delivery);
                }
            }
            PullItem::Failed(message) => {
                tracing::debug!(tier = tier.as_str(), error = %message, "pull request failed");
                self.failure = Some(QueueError::Transient {
                    message: format!("pulling from consumer {}: {message}", consumer_name(tier)),
                });
            }
            PullItem::Ended => {
                let state = self.tier(tier);
                match kind {
                    PullKind::Watch => state.watch_open = false,
                    PullKind::Fetch => {
                        // A fetch that came back short found the tier empty (or at its cap).
                        if state.fetch_remaining.is_some_and(|remaining| remaining > 0) {
                            state.hot_since = None;
                        }
                        state.fetch_remaining = None;
                    }
                }
            }
        }
    }

    /// Extends the ack deadline of every held job, as the worker does for running ones.
    async fn renew_held(&mut self) {
        for delivery in &self.held {
            if let Err(error) = delivery.acker.in_progress().await {
                tracing::warn!(job_id = %delivery.job.job_id, error = %error, "renewing a held job failed");
            }
        }
    }

    /// The worker stopped pulling: every held job goes back to the queue at once (then
    /// `handed_back` fires), and so does whatever the open requests still deliver.
    async fn hand_back(mut self, handed_back: oneshot::Sender<()>) {
        self.drop_want();
        for delivery in std::mem::take(&mut self.held) {
            nak_now(&delivery).await;
        }
        // Nobody waiting (the puller was dropped, not closed) is fine.
        let _ = handed_back.send(());
        let deadline = self.queue.pull_expiry + DRAIN_MARGIN;
        let drain = async {
            while let Some(event) = self.pulls.next().await {
                if let PullItem::Message(message) = event.item
                    && let Some(delivery) = into_delivery(event.tier, *message).await
                {
                    nak_now(&delivery).await;
                }
            }
        };
        if tokio::time::timeout(deadline, drain).await.is_err() {
            tracing::debug!(
                "stopped draining open pull requests; late jobs come back after ack_wait"
            );
        }
    }
}

/// Resolves when the waiting call has gone away; never when there is none.
async fn abandoned(want: Option<&mut Want>) {
    match want {
        Some(want) => want.reply.closed().await,
        None => std::future::pending().await,
    }
}

async fn nak_now(delivery: &Delivery) {
    if let Err(error) = delivery.acker.nak(Duration::ZERO).await {
        tracing::warn!(job_id = %delivery.job.job_id, error = %error, "handing back a held job failed; it comes back after ack_wait");
    }
}
