//! The worker's job loop (decisions.md#wire-protocol "Worker protocol").
//!
//! Jobs are pulled for every free slot at once (a standing pull on every tier the worker
//! serves, so no slot waits on an empty tier while another has work); each delivery is settled
//! by [`crate::job_run`], whose order is fixed: run → upload artifacts → store the job's record
//! → publish `finished` and await its acknowledgement → ack the job. A crash before the record
//! is stored means the job is delivered again and run again; after it, the next delivery
//! reports the stored record without running the job; after the ack nothing is lost because
//! the event is already durable.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cowork_fabric::BatchRegistry;
use cowork_fabric::backoff::Backoff;
use cowork_schema::BatchId;
use cowork_schema::job::Tier;
use cowork_schema::registry::{BatchRecord, BatchState};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::bundle_cache::BundleCache;
use crate::config::{WorkerConfig, WorkerPorts, WorkerStats};

/// Per-batch cancellation of running jobs (`cowork cancel --kill-running`). Tokens are kept
/// per resume generation: a kill of generation 0 never touches the jobs `cowork resume` runs
/// in generation 1, even when a worker pulls one before it sees the resumed record.
#[derive(Default)]
pub struct KillSwitch {
    tokens: std::sync::Mutex<HashMap<(BatchId, u32), CancellationToken>>,
}

impl KillSwitch {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(BatchId, u32), CancellationToken>> {
        // Only inserts and lookups happen under the lock; a poisoned map is still consistent.
        self.tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The token a job of `batch_id` in `generation` runs under; cancelled once that
    /// generation of the batch is killed.
    pub fn token(&self, batch_id: &BatchId, generation: u32) -> CancellationToken {
        self.lock()
            .entry((batch_id.clone(), generation))
            .or_default()
            .child_token()
    }

    /// Kills every running and future job of `batch_id`'s `generation` on this worker.
    pub fn kill(&self, batch_id: &BatchId, generation: u32) {
        let token = self
            .lock()
            .entry((batch_id.clone(), generation))
            .or_default()
            .clone();
        if !token.is_cancelled() {
            // Info, not a warning: the kill was asked for (`cancel --kill-running`, a second
            // Ctrl-C), and whoever asked is told in words; at the default `warn` level a raw
            // log line would only repeat that in the middle of `cowork run`'s output.
            tracing::info!(batch_id = %batch_id, generation, "killing the running jobs of a cancelled batch");
            token.cancel();
        }
    }

    /// Forgets a batch that is done (its jobs are all settled).
    fn forget(&self, batch_id: &BatchId) {
        self.lock().retain(|(id, _), _| id != batch_id);
    }

    /// Applies one batch record.
    pub fn apply(&self, record: &BatchRecord) {
        if record.kill_running && record.state != BatchState::Done {
            self.kill(&record.batch_id, record.generation);
        } else if record.state == BatchState::Done {
            self.forget(&record.batch_id);
        }
    }
}

/// Follows the batch registry and kills the jobs of batches cancelled with `--kill-running`,
/// until `shutdown`. A broken watch is opened again with backoff (it replays current values).
async fn follow_kills(
    batches: Arc<dyn BatchRegistry>,
    kills: Arc<KillSwitch>,
    backoff: Backoff,
    shutdown: CancellationToken,
) {
    use futures::StreamExt;
    let mut failures = 0u32;
    loop {
        let watch = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            watch = batches.watch() => watch,
        };
        match watch {
            Ok(mut records) => loop {
                let next = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return,
                    next = records.next() => next,
                };
                match next {
                    Some(Ok(record)) => {
                        failures = 0;
                        kills.apply(&record);
                    }
                    Some(Err(error)) => {
                        tracing::warn!(error = %error, "following batch records failed");
                        break;
                    }
                    None => break,
                }
            },
            Err(error) => tracing::warn!(error = %error, "watching batch records failed"),
        }
        failures += 1;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff.delay(failures)) => {}
        }
    }
}

/// Runs the job loop until `shutdown` is cancelled or the queue closes, then drains: no new
/// job is pulled, running jobs finish and are stored, and `run` returns.
pub async fn run(
    config: WorkerConfig,
    ports: WorkerPorts,
    stats: Arc<WorkerStats>,
    shutdown: CancellationToken,
) -> Result<(), cowork_fabric::QueueError> {
    run_loop(config, ports, stats, shutdown, None).await
}

/// [`run`] that also ends once the worker has been idle — no job running and none pulled —
/// for `idle_exit` (`cowork worker --exit-when-idle`): a Kubernetes Job of workers for one
/// batch then completes when the queue is drained.
pub async fn run_until_idle(
    config: WorkerConfig,
    ports: WorkerPorts,
    stats: Arc<WorkerStats>,
    shutdown: CancellationToken,
    idle_exit: Duration,
) -> Result<(), cowork_fabric::QueueError> {
    run_loop(config, ports, stats, shutdown, Some(idle_exit)).await
}

#[tracing::instrument(skip_all, fields(worker_id = %config.worker_id))]
async fn run_loop(
    config: WorkerConfig,
    ports: WorkerPorts,
    stats: Arc<WorkerStats>,
    shutdown: CancellationToken,
    idle_exit: Option<Duration>,
) -> Result<(), cowork_fabric::QueueError> {
    let slots = Arc::new(Semaphore::new(config.slots.max(1)));
    let kills = Arc::new(KillSwitch::default());
    // The follower is not tracked: it holds nothing and stops with the loop below.
    let follower_stop = CancellationToken::new();
    let _follower_guard = follower_stop.clone().drop_guard();
    if let Some(batches) = ports.batches.clone() {
        tokio::spawn(follow_kills(
            batches,
            kills.clone(),
            config.backoff,
            follower_stop.clone(),
        ));
    }
    let config = Arc::new(config);
    let mut pull_failures = 0u32;
    // Jobs running now, watched by the idle exit: the worker is idle only when this is 0.
    let (running_tx, running_rx) = tokio::sync::watch::channel(0usize);
    let starter = JobStarter::new(&config, &ports, &stats, kills, running_tx);
    let mut tiers_now = stats.sandbox_starts.takeable(&config.tiers).0;
    let (mut puller, mut replay_puller) = open_pullers(&config, &ports, &tiers_now);
    let mut packed_batches = PackedBatches::default();
    loop {
        let Some(permits) = free_slots(&slots, &shutdown).await else {
            break;
        };
        // Tiers backed off after sandbox start failures are not pulled until their back-off
        // ends; the wake-up is enabled before the tiers are read, so none is missed.
        let backoff_changed = stats.sandbox_starts.changed();
        tokio::pin!(backoff_changed);
        backoff_changed.as_mut().enable();
        let (takeable, backoff_ends) = stats.sandbox_starts.takeable(&config.tiers);
        if takeable != tiers_now {
            close_pullers(&mut puller, &mut replay_puller).await;
            (puller, replay_puller) = open_pullers(&config, &ports, &takeable);
            tiers_now = takeable;
        }
        let n_free = permits.len();
        // Replay jobs are pulled by the pack: an even share of the queue per free slot
        // (`pack::pack_share`), so the last packs of a corpus end together.
        let replay_max = match &replay_puller {
            Some(_) => n_free * replay_share(&config, &ports).await,
            None => 0,
        };
        // Dropping a pull that has not returned loses no job: the puller keeps what arrives
        // for its next call, and hands it back to the queue when it is dropped. So the two
        // pulls may race: the one that loses keeps what it got for the next round.
        let pulled = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = &mut backoff_changed => continue,
            _ = sleep_until(backoff_ends) => continue,
            _ = idle_for(running_rx.clone(), idle_exit) => {
                tracing::info!(idle_s = idle_exit.map(|idle| idle.as_secs()), "idle for the configured time, exiting");
                break;
            }
            pulled = pull_from(puller.as_mut(), n_free) => pulled.map(|pulled| pulled.map(|deliveries| (deliveries, false))),
            pulled = pull_from(replay_puller.as_mut(), replay_max) => pulled.map(|pulled| pulled.map(|deliveries| (deliveries, true))),
        };
        let (mut deliveries, packed) = match pulled {
            Ok(Some(pulled)) => pulled,
            Ok(None) => break,
            Err(error) if error.is_transient() => {
                pull_failures += 1;
                stats.outages.failed("pulling jobs", &error);
                tokio::time::sleep(config.backoff.delay(pull_failures)).await;
                continue;
            }
            Err(error) => {
                close_pullers(&mut puller, &mut replay_puller).await;
                starter.drain(config.drain_grace).await;
                return Err(error);
            }
        };
        pull_failures = 0;
        stats.outages.succeeded("pulling jobs");
        if packed {
            top_up(
                &config,
                &ports,
                replay_puller.as_mut(),
                &mut deliveries,
                n_free,
                &mut packed_batches,
            )
            .await;
        }
        starter.start_units(units_of(deliveries, packed, n_free), permits);
    }
    // Stop pulling before the drain: the puller hands back what it holds at once.
    close_pullers(&mut puller, &mut replay_puller).await;
    starter.drain(config.drain_grace).await;
    Ok(())
}

/// Waits for a free slot, then takes every other slot free now; `None` at shutdown. Waiting
/// may be abandoned at shutdown: nothing is held yet.
async fn free_slots(
    slots: &Arc<Semaphore>,
    shutdown: &CancellationToken,
) -> Option<Vec<OwnedSemaphorePermit>> {
    let first = tokio::select! {
        biased;
        _ = shutdown.cancelled() => return None,
        permit = slots.clone().acquire_owned() => permit.expect("the slot semaphore is never closed"),
    };
    // Every slot free now is pulled for at once; only the job loop takes permits, so they
    // stay ours while the pull waits.
    let mut permits = vec![first];
    while let Ok(permit) = slots.clone().try_acquire_owned() {
        permits.push(permit);
    }
    Some(permits)
}

/// One standing pull for the worker's tiers: it watches every tier at once and hands out as
/// many jobs as there are free slots. With replay packs, the replay tier has a pull of its own
/// that takes up to `replay_pack` jobs per free slot.
fn open_pullers<'a>(
    config: &WorkerConfig,
    ports: &'a WorkerPorts,
    tiers: &[Tier],
) -> (Option<Puller<'a>>, Option<Puller<'a>>) {
    let pack_replays = config.replay_pack > 1 && tiers.contains(&Tier::Replay);
    let single_tiers: Vec<Tier> = tiers
        .iter()
        .copied()
        .filter(|tier| !(pack_replays && *tier == Tier::Replay))
        .collect();
    let puller = (!single_tiers.is_empty()).then(|| ports.queue.puller(&single_tiers));
    let replay_puller = pack_replays.then(|| ports.queue.puller(&[Tier::Replay]));
    (puller, replay_puller)
}

/// Each slot gets one unit: a single job, or with packs an even share of the replay jobs
/// pulled (so the last, smaller pulls still keep every free slot busy). The puller never
/// returns more than asked for; permits left over go back when they are dropped.
fn units_of(
    deliveries: Vec<cowork_fabric::Delivery>,
    packed: bool,
    n_free: usize,
) -> Vec<Vec<cowork_fabric::Delivery>> {
    if packed {
        deal(deliveries, n_free)
    } else {
        deliveries
            .into_iter()
            .map(|delivery| vec![delivery])
            .collect()
    }
}

/// What every job the loop starts shares, and the tracker the drain waits on.
struct JobStarter {
    config: Arc<WorkerConfig>,
    ports: WorkerPorts,
    cache: Arc<BundleCache>,
    specs: Arc<crate::admitted::AdmittedSpecs>,
    stats: Arc<WorkerStats>,
    kills: Arc<KillSwitch>,
    /// Jobs running now, watched by the idle exit.
    running: Arc<tokio::sync::watch::Sender<usize>>,
    tracker: TaskTracker,
    /// Cancelled when the drain grace passes: the jobs still running are cut short and
    /// handed back.
    disrupt: CancellationToken,
}

impl JobStarter {
    fn new(
        config: &Arc<WorkerConfig>,
        ports: &WorkerPorts,
        stats: &Arc<WorkerStats>,
        kills: Arc<KillSwitch>,
        running: tokio::sync::watch::Sender<usize>,
    ) -> JobStarter {
        let cache = Arc::new(
            BundleCache::new(&config.cache_dir, ports.store.clone(), config.unpack_limits)
                .bounded(config.cache_max_bytes),
        );
        JobStarter {
            config: config.clone(),
            ports: ports.clone(),
            cache,
            specs: Arc::new(crate::admitted::AdmittedSpecs::default()),
            stats: stats.clone(),
            kills,
            running: Arc::new(running),
            tracker: TaskTracker::new(),
            disrupt: CancellationToken::new(),
        }
    }

    /// Starts the jobs of each unit on its slot's permit.
    fn start_units(
        &self,
        units: Vec<Vec<cowork_fabric::Delivery>>,
        permits: Vec<OwnedSemaphorePermit>,
    ) {
        for (unit, permit) in units.into_iter().zip(permits) {
            // A pack holds its slot until its harness process is done (see `pack`); a single
            // job holds it until the job is settled.
            let (mut seats, mut job_permit) = if unit.len() > 1 {
                let seats =
                    crate::pack::Pack::seats(self.ports.executor.clone(), unit.len(), permit);
                (seats.into_iter().map(Some).collect(), None)
            } else {
                (vec![None], Some(permit))
            };
            for (delivery, seat) in unit.into_iter().zip(seats.drain(..)) {
                // A single job's unit has one delivery, so its one task takes the permit.
                self.start(delivery, seat, job_permit.take());
            }
        }
    }

    /// Starts one job's task; it holds `held` (a single job's slot) until the job is settled.
    fn start(
        &self,
        delivery: cowork_fabric::Delivery,
        seat: Option<crate::pack::Seat>,
        held: Option<OwnedSemaphorePermit>,
    ) {
        let span = tracing::info_span!("job", job_id = %delivery.job.job_id, batch_id = %delivery.job.batch_id, attempt = delivery.attempt, tier = delivery.job.tier.as_str());
        cowork_fabric::trace_context::continue_trace(&span, delivery.job.traceparent.as_deref());
        let job = crate::job_run::JobRun {
            config: self.config.clone(),
            ports: self.ports.clone(),
            cache: self.cache.clone(),
            specs: self.specs.clone(),
            stats: self.stats.clone(),
            kill: self
                .kills
                .token(&delivery.job.batch_id, delivery.job.generation),
            seat: std::sync::Mutex::new(seat),
            disrupt: self.disrupt.clone(),
        };
        self.running.send_modify(|running| *running += 1);
        let running = Arc::clone(&self.running);
        self.tracker.spawn(
            async move {
                job.stats.jobs_running.fetch_add(1, Ordering::Relaxed);
                let stats = job.stats.clone();
                job.run(delivery).await;
                stats.jobs_running.fetch_sub(1, Ordering::Relaxed);
                running.send_modify(|running| *running -= 1);
                drop(held);
            }
            .instrument(span),
        );
    }

    /// Waits for every started job to be settled; no job is started after. With a `grace`,
    /// the jobs still running when it passes are cut short and handed back (`job_run`).
    async fn drain(&self, grace: Option<Duration>) {
        self.tracker.close();
        let Some(grace) = grace else {
            return self.tracker.wait().await;
        };
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                running = self.stats.jobs_running.load(Ordering::Relaxed),
                "the drain grace passed: stopping the running jobs and handing them back"
            );
            self.disrupt.cancel();
            self.tracker.wait().await;
        }
    }
}

type Puller<'a> = Box<dyn cowork_fabric::queue::JobPuller + 'a>;

/// How long a top-up pull may wait: the jobs it asks for were queued a moment ago, so it
/// answers at once unless another worker took them meanwhile; then the pack runs with what it
/// has rather than waiting for new work.
const TOP_UP_WAIT: Duration = Duration::from_millis(200);

/// Replay jobs one free slot takes now: a share of what is queued across the fleet's replay
/// slots (`pack::pack_share`); with an empty queue (the pull is about to wait for a new
/// batch) the smallest share, topped up once the batch's jobs are in.
async fn replay_share(config: &WorkerConfig, ports: &WorkerPorts) -> usize {
    let n_queued = match crate::pack::queued_replays(ports.queue.as_ref()).await {
        None => return config.replay_pack,
        Some(n_queued) => n_queued,
    };
    let fleet_slots = if n_queued == 0 {
        config.slots
    } else {
        crate::pack::fleet_replay_slots(ports.workers.as_deref(), config.slots).await
    };
    crate::pack::pack_share(n_queued, fleet_slots, config.replay_pack)
}

/// Batches this worker has cut a replay pack of, most recent last: only a batch's first pack is
/// sized from its record ([`first_pack_floor`]). Bounded: a batch not seen for
/// [`PackedBatches::CAPACITY`] batches is long past its first pack.
#[derive(Default)]
struct PackedBatches {
    seen: std::collections::VecDeque<(BatchId, u32)>,
}

impl PackedBatches {
    const CAPACITY: usize = 64;

    /// Records `batch`'s generation; `true` if it was not seen before.
    fn first_time(&mut self, batch_id: &BatchId, generation: u32) -> bool {
        if self
            .seen
            .iter()
            .any(|(id, seen)| id == batch_id && *seen == generation)
        {
            return false;
        }
        if self.seen.len() == Self::CAPACITY {
            self.seen.pop_front();
        }
        self.seen.push_back((batch_id.clone(), generation));
        true
    }
}

/// The jobs the free slots' first pack of a batch should hold: their share of the whole batch
/// (its record's `n_jobs`) over the fleet's replay slots. The queue's depth cannot say it while
/// the batch is being published: on JetStream it leaves out what other workers (and this
/// worker's own open requests) took meanwhile, so the first packs were cut at a fraction of
/// their share (11, then 32s, where 150 + 150 was due). `0` when there is no registry, the
/// record cannot be read, or the batch was packed before.
async fn first_pack_floor(
    config: &WorkerConfig,
    ports: &WorkerPorts,
    deliveries: &[cowork_fabric::Delivery],
    n_free: usize,
    fleet_slots: usize,
    packed: &mut PackedBatches,
) -> usize {
    let (Some(batches), Some(first)) = (ports.batches.as_deref(), deliveries.first()) else {
        return 0;
    };
    if !packed.first_time(&first.job.batch_id, first.job.generation) {
        return 0;
    }
    match batches.get(&first.job.batch_id).await {
        Ok(Some((record, _))) => {
            n_free * crate::pack::pack_share(record.n_jobs, fleet_slots, config.replay_pack)
        }
        Ok(None) => 0,
        Err(error) => {
            tracing::debug!(error = %error, "reading a batch record to size its first replay pack failed");
            0
        }
    }
}

/// Tops a replay pull up to the free slots' share of the queue as it is now. The first pull of
/// a batch wakes on its first job, when the queue held only part of it (or was sized for an
/// empty queue), so without this the first packs would be small and the slots' packs uneven.
/// While the batch is still being published the depth grows between looks, so the share is
/// read again after every top-up until it is met, nothing more arrives, or [`TOP_UP_WAIT`]
/// is spent: a corpus published in a few hundred milliseconds still ends up in one even pack
/// per slot rather than in many small ones, each paying a harness start. A batch's first pack
/// is also held to its share of the whole batch ([`first_pack_floor`]): until that is met or
/// the wait is spent, an empty queue means "not published yet", not "nothing more".
async fn top_up(
    config: &WorkerConfig,
    ports: &WorkerPorts,
    mut puller: Option<&mut Puller<'_>>,
    deliveries: &mut Vec<cowork_fabric::Delivery>,
    n_free: usize,
    packed: &mut PackedBatches,
) {
    let deadline = tokio::time::Instant::now() + TOP_UP_WAIT;
    let fleet_slots = crate::pack::fleet_replay_slots(ports.workers.as_deref(), config.slots).await;
    let floor = first_pack_floor(config, ports, deliveries, n_free, fleet_slots, packed).await;
    loop {
        let Some(n_queued) = crate::pack::queued_replays(ports.queue.as_ref()).await else {
            return;
        };
        let n_known = n_queued + deliveries.len() as u64;
        let target =
            (n_free * crate::pack::pack_share(n_known, fleet_slots, config.replay_pack)).max(floor);
        let below_floor = deliveries.len() < floor;
        let wanted = if below_floor {
            target.saturating_sub(deliveries.len())
        } else {
            target
                .saturating_sub(deliveries.len())
                .min(usize::try_from(n_queued).unwrap_or(usize::MAX))
        };
        if wanted == 0 {
            return;
        }
        // Abandoning the pull at the bound loses no job (see the main pull); a failed one
        // leaves the pack as it is, and the next round pulls again.
        match tokio::time::timeout_at(deadline, pull_from(puller.as_deref_mut(), wanted)).await {
            Ok(Ok(Some(more))) if !more.is_empty() => deliveries.extend(more),
            Ok(Ok(_)) | Err(_) => return,
            Ok(Err(error)) => {
                tracing::debug!(error = %error, "topping up a replay pack failed");
                return;
            }
        }
    }
}

/// Resolves at `until`; never without one.
async fn sleep_until(until: Option<tokio::time::Instant>) {
    match until {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

/// Pulls up to `max` jobs; never resolves without a puller.
async fn pull_from(
    puller: Option<&mut Puller<'_>>,
    max: usize,
) -> Result<Option<Vec<cowork_fabric::Delivery>>, cowork_fabric::QueueError> {
    match puller {
        Some(puller) => puller.pull_many(max).await,
        None => std::future::pending().await,
    }
}

async fn close_pullers<'a>(first: &mut Option<Puller<'a>>, second: &mut Option<Puller<'a>>) {
    for puller in [first, second].into_iter().flatten() {
        puller.close().await;
    }
}

/// Deals `deliveries` into at most `n_units` units of near-equal size, jobs of one batch,
/// bundle and cassette dir side by side (they can share a process).
fn deal(
    mut deliveries: Vec<cowork_fabric::Delivery>,
    n_units: usize,
) -> Vec<Vec<cowork_fabric::Delivery>> {
    deliveries.sort_by(|a, b| {
        (
            a.job.batch_id.as_str(),
            a.job.generation,
            &a.job.bundle_sha256,
            &a.job.scenario_file,
        )
            .cmp(&(
                b.job.batch_id.as_str(),
                b.job.generation,
                &b.job.bundle_sha256,
                &b.job.scenario_file,
            ))
    });
    let mut rest = deliveries.into_iter();
    unit_sizes(rest.len(), n_units)
        .into_iter()
        .map(|size| rest.by_ref().take(size).collect())
        .collect()
}

/// The sizes of the units `n_jobs` jobs are dealt into on `n_units` free slots: as many units
/// as slots (never more than jobs), sizes differing by at most one.
fn unit_sizes(n_jobs: usize, n_units: usize) -> Vec<usize> {
    let n_units = n_units.min(n_jobs).max(1);
    (0..n_units)
        .map(|unit_idx| n_jobs / n_units + usize::from(unit_idx < n_jobs % n_units))
        .collect()
}

/// Resolves once no job has been running for `idle_exit` (measured from the later of the
/// call and the last job's end); never when `idle_exit` is `None`. The caller makes a new one
/// for every pull, so each pulled job restarts the clock.
async fn idle_for(mut running: tokio::sync::watch::Receiver<usize>, idle_exit: Option<Duration>) {
    let Some(idle_exit) = idle_exit else {
        return std::future::pending().await;
    };
    loop {
        // The sender lives as long as the job loop that awaits this future, so an error
        // (sender gone) cannot happen; waiting forever is the harmless reading of it.
        if running.wait_for(|running| *running == 0).await.is_err() {
            return std::future::pending().await;
        }
        tokio::select! {
            _ = tokio::time::sleep(idle_exit) => return,
            // A job started or ended meanwhile: look again and restart the clock.
            _ = running.changed() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn units_are_near_equal_and_never_more_than_the_free_slots() {
        let check = |n_jobs: usize, n_units: usize, expect: &[usize]| {
            assert_eq!(
                super::unit_sizes(n_jobs, n_units),
                expect,
                "{n_jobs} jobs on {n_units} slots"
            );
        };
        check(128, 2, &[64, 64]);
        check(31, 2, &[16, 15]);
        check(1, 4, &[1]);
        check(5, 3, &[2, 2, 1]);
        check(0, 2, &[0]);
    }
}
