//! The coordinator's view of its fleet: which workers it refuses, which tiers of a batch
//! have waiting jobs that no live worker serves, whether a batch about to be submitted can run
//! on the live workers at all, and which workers' heartbeats are late.
//!
//! A worker of another protocol version is refused: it may misread the jobs of this
//! coordinator, and its events may mean something else. Versions are compatible only when
//! equal — the protocol number changes only for a change older peers cannot read (new fields
//! alone do not change it, because every wire type ignores fields it does not know).
//!
//! **Invariant:** pure — the caller reads the heartbeats and the queue and passes them in.

use cowork_schema::api::{LostWorker, UnservedTier};
use cowork_schema::batch::ExecutorKind;
use cowork_schema::job::Tier;
use cowork_schema::registry::WorkerInfo;

/// Why a coordinator speaking `protocol` refuses `worker`; `None` when it accepts it.
pub fn refusal(worker: &WorkerInfo, protocol: u32) -> Option<String> {
    (worker.protocol != protocol).then(|| {
        format!(
            "speaks protocol {}, this coordinator speaks {protocol}: run the coordinator's version of cowork on it",
            worker.protocol
        )
    })
}

/// Whether `worker` takes jobs from a coordinator speaking `protocol`: it is not draining and
/// not refused. What "live" means wherever the fleet counts the workers serving a tier.
pub fn takes_jobs(worker: &WorkerInfo, protocol: u32) -> bool {
    !worker.draining && refusal(worker, protocol).is_none()
}

/// The tiers among `batch_tiers` with jobs waiting in the queue (`pending`, per tier) that no
/// live worker serves: none advertises the tier, or every one that does is refused or
/// draining. In tier order, each tier once.
pub fn unserved_tiers(
    batch_tiers: &[Tier],
    workers: &[WorkerInfo],
    pending: &[(Tier, u64)],
    protocol: u32,
) -> Vec<UnservedTier> {
    Tier::ALL
        .iter()
        .filter(|tier| batch_tiers.contains(tier))
        .filter_map(|tier| {
            let waiting = pending
                .iter()
                .filter(|(pending_tier, _)| pending_tier == tier)
                .map(|(_, n)| *n)
                .sum::<u64>();
            let served = workers
                .iter()
                .any(|worker| worker.tiers.contains(tier) && takes_jobs(worker, protocol));
            (waiting > 0 && !served).then_some(UnservedTier {
                tier: *tier,
                waiting,
            })
        })
        .collect()
}

/// [`unserved_tiers`] as a coordinator started at `started_ms` says them at `now_ms`: nothing
/// until one heartbeat period has passed since it started, because until then a worker that is
/// up may simply not have beaten to this coordinator yet. The period is the longest any worker
/// advertises, or the default when none does.
pub fn unserved_tiers_since(
    batch_tiers: &[Tier],
    workers: &[WorkerInfo],
    pending: &[(Tier, u64)],
    protocol: u32,
    started_ms: u64,
    now_ms: u64,
) -> Vec<UnservedTier> {
    let every_ms = workers
        .iter()
        .map(|worker| worker.heartbeat_every_ms)
        .max()
        .filter(|every_ms| *every_ms > 0)
        .unwrap_or(DEFAULT_HEARTBEAT_EVERY_MS);
    if now_ms.saturating_sub(started_ms) < every_ms {
        return Vec::new();
    }
    unserved_tiers(batch_tiers, workers, pending, protocol)
}

/// What the live fleet says about a batch about to be submitted: a reason to refuse it, or
/// warnings to print before it waits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchFit {
    /// Why no live worker can run the batch at all (its executor): it would fail or wait in
    /// silence, so submit refuses it.
    pub refusal: Option<String>,
    /// Tiers of the batch no live worker of its executor serves, and an empty fleet: its jobs
    /// wait in the queue until such a worker joins.
    pub warnings: Vec<String>,
}

/// Whether a worker running `worker_executor` runs a job of a batch for `batch_executor`: a
/// worker runs every job with its own executor, so a sim worker answers a harness job with an
/// error, and a harness (or container) worker would run a simulated batch for real. The real
/// CLI runs on the host or in a container, so those two take each other's jobs.
fn runs_executor(worker_executor: &str, batch_executor: ExecutorKind) -> bool {
    let sim_worker = worker_executor == ExecutorKind::Sim.as_str();
    sim_worker == (batch_executor == ExecutorKind::Sim)
}

/// Checks a batch of `executor` with jobs on `batch_tiers` against the live `workers` (a
/// coordinator speaking `protocol`; draining and refused workers serve nothing).
pub fn batch_fit(
    executor: ExecutorKind,
    batch_tiers: &[Tier],
    workers: &[WorkerInfo],
    protocol: u32,
) -> BatchFit {
    let live: Vec<&WorkerInfo> = workers
        .iter()
        .filter(|worker| takes_jobs(worker, protocol))
        .collect();
    if live.is_empty() {
        return BatchFit {
            refusal: None,
            warnings: vec![
                "no live worker yet: the batch's jobs wait in the queue until one joins (`cowork workers` lists them)"
                    .to_owned(),
            ],
        };
    }
    let able: Vec<&WorkerInfo> = live
        .iter()
        .copied()
        .filter(|worker| runs_executor(&worker.executor, executor))
        .collect();
    if able.is_empty() {
        let mut kinds: Vec<&str> = live.iter().map(|worker| worker.executor.as_str()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        let fix = if executor == ExecutorKind::Sim {
            "start a worker without --executor sim, or submit without --executor sim".to_owned()
        } else {
            "submit with --executor sim to simulate, or start a worker with --executor harness"
                .to_owned()
        };
        return BatchFit {
            refusal: Some(format!(
                "no live worker runs {} batches: the {} live worker(s) run the {} executor, so every job would end in error; {fix}",
                executor.as_str(),
                live.len(),
                kinds.join(", ")
            )),
            warnings: Vec::new(),
        };
    }
    let warnings = Tier::ALL
        .iter()
        .filter(|tier| batch_tiers.contains(tier))
        .filter(|tier| !able.iter().any(|worker| worker.tiers.contains(tier)))
        .map(|tier| {
            format!(
                "no live worker serves tier {tier}: its jobs wait in the queue until a worker with --tiers {tier} joins (`--watch --unserved-timeout 5m` gives up after 5 minutes)",
                tier = tier.as_str()
            )
        })
        .collect();
    BatchFit {
        refusal: None,
        warnings,
    }
}

/// How late a worker's heartbeat is at `now_ms`, in whole seconds, once it missed more than
/// one beat and a half; `None` while it beats on time. A worker killed with `kill -9` stays in
/// the registry until its entry expires (three beats); this names it before that.
pub fn heartbeat_late_s(worker: &WorkerInfo, now_ms: u64) -> Option<u64> {
    let every_ms = if worker.heartbeat_every_ms == 0 {
        DEFAULT_HEARTBEAT_EVERY_MS
    } else {
        worker.heartbeat_every_ms
    };
    let age_ms = now_ms.saturating_sub(worker.heartbeat_at_ms);
    (age_ms > every_ms + every_ms / 2).then_some(age_ms / 1000)
}

/// The workers among `workers` whose heartbeat is late at `now_ms` while they were running
/// jobs: what a watch names as lost, with what waits on them. In worker id order.
pub fn lost_workers(workers: &[WorkerInfo], now_ms: u64) -> Vec<LostWorker> {
    let mut lost: Vec<LostWorker> = workers
        .iter()
        .filter(|worker| worker.busy > 0 && heartbeat_late_s(worker, now_ms).is_some())
        .map(|worker| LostWorker {
            worker_id: worker.worker_id.clone(),
            busy: worker.busy,
            heartbeat_at_ms: worker.heartbeat_at_ms,
        })
        .collect();
    lost.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
    lost
}

/// The slots of live workers per tier at `now_ms`, what the fair share divides
/// (decisions.md#fair-share): every worker that beats on time, speaks `protocol` and is not
/// draining counts its slots for each tier it takes now (not one it backed off). A worker
/// serving several tiers counts on each: its slots go to whichever has work.
pub fn live_slots(
    workers: &[WorkerInfo],
    protocol: u32,
    now_ms: u64,
) -> std::collections::BTreeMap<Tier, u64> {
    let mut slots = std::collections::BTreeMap::new();
    for worker in workers {
        if worker.draining
            || refusal(worker, protocol).is_some()
            || heartbeat_late_s(worker, now_ms).is_some()
        {
            continue;
        }
        for tier in &worker.tiers {
            if worker.backed_off_tiers.iter().any(|off| off.tier == *tier) {
                continue;
            }
            *slots.entry(*tier).or_insert(0) += u64::from(worker.slots);
        }
    }
    slots
}

/// The beat of a worker that does not say its own: a third of the registry's default 30 s TTL.
const DEFAULT_HEARTBEAT_EVERY_MS: u64 = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(id: &str, tiers: &[Tier], protocol: u32, draining: bool) -> WorkerInfo {
        WorkerInfo {
            protocol,
            worker_id: id.to_owned(),
            tiers: tiers.to_vec(),
            slots: 1,
            busy: 0,
            executor: "sim".to_owned(),
            harness_version: None,
            os: "linux".to_owned(),
            arch: "x86_64".to_owned(),
            hostname: "h".to_owned(),
            jobs_finished: 0,
            started_at_ms: 0,
            heartbeat_at_ms: 0,
            heartbeat_every_ms: 0,
            draining,
            sandbox_start_failures: 0,
            backed_off_tiers: Vec::new(),
        }
    }

    #[test]
    fn a_coordinator_names_no_unserved_tier_before_one_heartbeat_period_has_passed() {
        let pending = [(Tier::Microvm, 2)];
        let unserved = |workers: &[WorkerInfo], now_ms| {
            unserved_tiers_since(&[Tier::Microvm], workers, &pending, 1, 1_000, now_ms)
        };
        // No worker has beaten yet: the default period applies.
        assert!(unserved(&[], 1_000 + DEFAULT_HEARTBEAT_EVERY_MS - 1).is_empty());
        assert_eq!(unserved(&[], 1_000 + DEFAULT_HEARTBEAT_EVERY_MS).len(), 1);
        // A worker of another tier advertises a longer period: that one applies.
        let mut other = worker("w1", &[Tier::Container], 1, false);
        other.heartbeat_every_ms = 30_000;
        assert!(unserved(std::slice::from_ref(&other), 30_999).is_empty());
        assert_eq!(unserved(std::slice::from_ref(&other), 31_000).len(), 1);
    }

    fn check(workers: &[WorkerInfo], pending: &[(Tier, u64)], expect: &[(Tier, u64)]) {
        let batch = [Tier::Container, Tier::Microvm];
        let found: Vec<(Tier, u64)> = unserved_tiers(&batch, workers, pending, 2)
            .into_iter()
            .map(|unserved| (unserved.tier, unserved.waiting))
            .collect();
        assert_eq!(found, expect, "{workers:?} {pending:?}");
    }

    #[test]
    fn tiers_with_waiting_jobs_and_no_live_worker_are_unserved() {
        let container = worker("c", &[Tier::Container], 2, false);
        let pending = [(Tier::Container, 3), (Tier::Microvm, 2), (Tier::Replay, 9)];
        // No worker at all: both tiers of the batch; the replay tier is not the batch's.
        check(&[], &pending, &[(Tier::Container, 3), (Tier::Microvm, 2)]);
        check(
            std::slice::from_ref(&container),
            &pending,
            &[(Tier::Microvm, 2)],
        );
        // Nothing waiting: nothing to say, served or not.
        check(std::slice::from_ref(&container), &[(Tier::Microvm, 0)], &[]);
        // A draining worker and a worker of another protocol serve nothing.
        check(
            &[
                worker("d", &[Tier::Microvm], 2, true),
                worker("old", &[Tier::Microvm], 1, false),
                container.clone(),
            ],
            &pending,
            &[(Tier::Microvm, 2)],
        );
        check(
            &[worker("m", &[Tier::Microvm, Tier::Container], 2, false)],
            &pending,
            &[],
        );
    }

    fn with_executor(mut worker: WorkerInfo, executor: &str) -> WorkerInfo {
        worker.executor = executor.to_owned();
        worker
    }

    #[test]
    fn a_batch_no_live_worker_can_run_is_refused_and_unserved_tiers_are_warned() {
        let sim = worker("s", &[Tier::Container], 2, false);
        let harness = with_executor(worker("h", &[Tier::Container], 2, false), "harness");
        let tiers = [Tier::Container, Tier::Microvm];
        // Sim workers only, a harness batch: every job would error ("carries no sim spec").
        let fit = batch_fit(ExecutorKind::Harness, &tiers, std::slice::from_ref(&sim), 2);
        let refusal = fit.refusal.expect("refused");
        assert!(
            refusal.starts_with(
                "no live worker runs harness batches: the 1 live worker(s) run the sim executor"
            ) && refusal.contains("--executor sim"),
            "{refusal}"
        );
        // A simulated batch on harness workers would run for real.
        assert!(
            batch_fit(ExecutorKind::Sim, &tiers, std::slice::from_ref(&harness), 2)
                .refusal
                .is_some()
        );
        // Container and harness workers take each other's batches; microvm is unserved.
        let fit = batch_fit(ExecutorKind::Container, &tiers, &[sim.clone(), harness], 2);
        assert_eq!(fit.refusal, None);
        assert_eq!(fit.warnings.len(), 1, "{:?}", fit.warnings);
        assert!(fit.warnings[0].starts_with("no live worker serves tier microvm"));
        // No live worker at all (draining, other protocol): a warning, not a refusal.
        let fit = batch_fit(
            ExecutorKind::Sim,
            &tiers,
            &[
                worker("d", &[Tier::Container], 2, true),
                worker("old", &[Tier::Container], 1, false),
            ],
            2,
        );
        assert_eq!(fit.refusal, None);
        assert!(
            fit.warnings[0].starts_with("no live worker yet"),
            "{:?}",
            fit.warnings
        );
    }

    #[test]
    fn a_busy_worker_with_a_late_heartbeat_is_lost() {
        let beating = |id: &str, busy: u32, at_ms: u64| WorkerInfo {
            busy,
            heartbeat_at_ms: at_ms,
            heartbeat_every_ms: 10_000,
            ..worker(id, &[Tier::Container], 2, false)
        };
        let workers = [
            beating("w2", 2, 100_000),
            beating("w1", 1, 119_000),
            beating("idle", 0, 100_000),
        ];
        let lost = lost_workers(&workers, 120_000);
        assert_eq!(
            lost,
            vec![LostWorker {
                worker_id: "w2".to_owned(),
                busy: 2,
                heartbeat_at_ms: 100_000,
            }]
        );
        assert!(
            lost[0].describe(120_000).starts_with(
                "worker w2 lost: no heartbeat since 00:01:40 UTC (20s); the 2 jobs it was running wait for redelivery"
            ),
            "{}",
            lost[0].describe(120_000)
        );
    }

    #[test]
    fn a_heartbeat_is_late_after_one_beat_and_a_half() {
        let mut beating = worker("w", &[Tier::Container], 2, false);
        beating.heartbeat_at_ms = 100_000;
        beating.heartbeat_every_ms = 10_000;
        assert_eq!(heartbeat_late_s(&beating, 100_000), None);
        assert_eq!(heartbeat_late_s(&beating, 115_000), None);
        assert_eq!(heartbeat_late_s(&beating, 117_500), Some(17));
        // A worker that does not say its beat is taken to beat every 10 s.
        beating.heartbeat_every_ms = 0;
        assert_eq!(heartbeat_late_s(&beating, 116_000), Some(16));
        // A clock behind the heartbeat is not late.
        assert_eq!(heartbeat_late_s(&beating, 0), None);
    }

    #[test]
    fn workers_of_another_protocol_are_refused_with_both_versions() {
        assert_eq!(refusal(&worker("w", &[], 2, false), 2), None);
        let reason = refusal(&worker("w", &[], 1, false), 2).expect("refused");
        assert!(
            reason.contains("protocol 1") && reason.contains("speaks 2"),
            "{reason}"
        );
        assert!(refusal(&worker("w", &[], 3, false), 2).is_some());
    }

    #[test]
    fn live_slots_count_every_worker_on_time_for_each_tier_it_takes() {
        let mut big = worker("big", &[Tier::Container, Tier::Microvm], 1, false);
        big.slots = 4;
        let mut backed_off = worker("off", &[Tier::Container, Tier::Microvm], 1, false);
        backed_off.slots = 2;
        backed_off.backed_off_tiers = vec![cowork_schema::registry::TierBackoff {
            tier: Tier::Microvm,
            failures: 3,
            until_ms: 0,
        }];
        let mut late = worker("late", &[Tier::Container], 1, false);
        late.slots = 8;
        late.heartbeat_at_ms = 0;
        let mut fresh = [
            big,
            backed_off,
            worker("drain", &[Tier::Container], 1, true),
            late,
        ];
        for worker in fresh.iter_mut().take(3) {
            worker.heartbeat_at_ms = 100_000;
        }
        let slots = live_slots(&fresh, 1, 100_000);
        assert_eq!(slots.get(&Tier::Container), Some(&6));
        assert_eq!(slots.get(&Tier::Microvm), Some(&4));
    }
}
