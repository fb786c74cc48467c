//! The coordinator's view of its fleet: which workers it refuses, and which tiers of a batch
//! have waiting jobs that no live worker serves.
//!
//! A worker of another protocol version is refused: it may misread the jobs of this
//! coordinator, and its events may mean something else. Versions are compatible only when
//! equal — the protocol number changes only for a change older peers cannot read (new fields
//! alone do not change it, because every wire type ignores fields it does not know).
//!
//! **Invariant:** pure — the caller reads the heartbeats and the queue and passes them in.

use cowork_schema::api::UnservedTier;
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
            let served = workers.iter().any(|worker| {
                !worker.draining
                    && worker.tiers.contains(tier)
                    && refusal(worker, protocol).is_none()
            });
            (waiting > 0 && !served).then_some(UnservedTier {
                tier: *tier,
                waiting,
            })
        })
        .collect()
}

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
            draining,
        }
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
}
