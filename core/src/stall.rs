//! The stall watchdog's decisions: whether a batch with jobs outstanding that has not moved for
//! its `--stall-after` is stalled, and why in words; the default threshold from history; and
//! how many live workers serve a tier.
//!
//! Pure: the coordinator reads the clock, the workers registry, the fabric's health and the
//! batch's progress, and passes them in.

use cowork_schema::api::{ProgressSnapshot, StallReason};
use cowork_schema::history::BatchStats;
use cowork_schema::job::Tier;
use cowork_schema::registry::WorkerInfo;

use crate::fleet::{heartbeat_late_s, takes_jobs};

/// The threshold when history has no run times: 15 minutes.
pub const DEFAULT_STALL_AFTER_MS: u64 = 15 * 60 * 1000;

/// The default threshold is this many times the p95 run time of recent batches.
const P95_FACTOR: u64 = 3;

/// The shortest default threshold: a fleet of quick jobs still gets a minute before a batch is
/// called stalled (a worker's start-up, a redelivery after a lost ack).
const MIN_DEFAULT_STALL_AFTER_MS: u64 = 60 * 1000;

/// What the watchdog knows about one batch at one tick.
#[derive(Clone, Debug, PartialEq)]
pub struct StallInputs<'a> {
    /// The coordinator's clock, in milliseconds since the Unix epoch.
    pub now_ms: u64,
    /// The last time a job of the batch started or finished (or supervision began).
    pub progress_at_ms: u64,
    /// Jobs of the batch not finished yet (queued, running, or still to be admitted).
    pub outstanding: u64,
    /// Every tier of the batch with the number of live workers serving it.
    pub tiers: &'a [(Tier, u32)],
    /// Dispatch of the batch is paused.
    pub paused: bool,
    /// The broker answers and every stream and bucket it needs can serve.
    pub broker_healthy: bool,
    /// Sandbox (or CLI) start failures reported since the last progress.
    pub sandbox_start_failures: u64,
    /// The batch's threshold (`--stall-after`, else [`default_stall_after_ms`]).
    pub stall_after_ms: u64,
}

/// What a watchdog remembers of one batch between looks: its jobs finished and running when
/// last seen (any change is progress, a start or a finish), when that last changed, and the
/// sandbox start failures counted then. The coordinator's watchdog and `cowork run`'s keep one
/// each per batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgressMark {
    moved: (u64, u64),
    at_ms: u64,
    failures_at: u64,
}

impl ProgressMark {
    /// The mark of a batch first seen at `now_ms` with `progress`.
    pub fn new(progress: &ProgressSnapshot, now_ms: u64) -> ProgressMark {
        ProgressMark {
            moved: moved(progress),
            at_ms: now_ms,
            failures_at: progress.sandbox_start_failures,
        }
    }

    /// Takes `progress`, seen at `now_ms`, in; `true` when the batch moved since the last look.
    pub fn observe(&mut self, progress: &ProgressSnapshot, now_ms: u64) -> bool {
        if moved(progress) == self.moved {
            return false;
        }
        *self = ProgressMark::new(progress, now_ms);
        true
    }

    /// When a job of the batch last started or finished (or the batch was first seen).
    pub fn at_ms(&self) -> u64 {
        self.at_ms
    }

    /// Sandbox start failures of `progress` since the batch last moved.
    pub fn failures_since(&self, progress: &ProgressSnapshot) -> u64 {
        progress
            .sandbox_start_failures
            .saturating_sub(self.failures_at)
    }
}

/// Jobs finished and running: what moves when a job starts or finishes.
fn moved(progress: &ProgressSnapshot) -> (u64, u64) {
    (progress.finished, progress.running)
}

/// Jobs of the batch not finished yet (queued, running, or still to be admitted).
pub fn outstanding(progress: &ProgressSnapshot) -> u64 {
    progress
        .planned
        .saturating_sub(progress.finished.saturating_add(progress.skipped))
}

/// `Some(reason)` when the batch is stalled: jobs outstanding and no job started or finished
/// for `stall_after_ms`. The first cause that holds is the reason: the broker, a pause, tiers
/// without a live worker, sandbox start failures; else it is unexplained.
pub fn stall_reason(inputs: &StallInputs<'_>) -> Option<StallReason> {
    let idle_ms = inputs.now_ms.saturating_sub(inputs.progress_at_ms);
    if inputs.outstanding == 0 || idle_ms < inputs.stall_after_ms {
        return None;
    }
    if !inputs.broker_healthy {
        return Some(StallReason::BrokerUnreachable);
    }
    if inputs.paused {
        return Some(StallReason::Paused);
    }
    let unserved: Vec<Tier> = inputs
        .tiers
        .iter()
        .filter(|(_, live)| *live == 0)
        .map(|(tier, _)| *tier)
        .collect();
    if !unserved.is_empty() {
        return Some(StallReason::NoWorker { tiers: unserved });
    }
    if inputs.sandbox_start_failures > 0 {
        return Some(StallReason::SandboxStart {
            failures: inputs.sandbox_start_failures,
        });
    }
    Some(StallReason::Unexplained)
}

/// The default `--stall-after`: three times the p95 of the longest run of each unit of the
/// recent batches (at least a minute), or [`DEFAULT_STALL_AFTER_MS`] when history has no run
/// times.
pub fn default_stall_after_ms(history: &[BatchStats]) -> u64 {
    let mut times: Vec<u64> = history
        .iter()
        .flat_map(|batch| &batch.units)
        .filter_map(|unit| unit.max_run_ms.or(unit.median_run_ms))
        .collect();
    if times.is_empty() {
        return DEFAULT_STALL_AFTER_MS;
    }
    times.sort_unstable();
    // Nearest rank: the smallest time at or above 95 % of them.
    let rank = (times.len() * 95).div_ceil(100).max(1);
    let p95 = times[rank - 1];
    p95.saturating_mul(P95_FACTOR)
        .max(MIN_DEFAULT_STALL_AFTER_MS)
}

/// Workers among `workers` that serve `tier` now at `now_ms`: beating on time, not draining,
/// and speaking `protocol`.
pub fn live_workers(tier: Tier, workers: &[WorkerInfo], now_ms: u64, protocol: u32) -> u32 {
    let live = workers
        .iter()
        .filter(|worker| {
            worker.tiers.contains(&tier)
                && takes_jobs(worker, protocol)
                && heartbeat_late_s(worker, now_ms).is_none()
        })
        .count();
    u32::try_from(live).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use cowork_schema::BatchId;
    use cowork_schema::history::UnitStats;

    use super::*;

    const MINUTE: u64 = 60_000;

    fn inputs(tiers: &[(Tier, u32)]) -> StallInputs<'_> {
        StallInputs {
            now_ms: 100 * MINUTE,
            progress_at_ms: 90 * MINUTE,
            outstanding: 4,
            tiers,
            paused: false,
            broker_healthy: true,
            sandbox_start_failures: 0,
            stall_after_ms: 5 * MINUTE,
        }
    }

    #[test]
    fn a_mark_moves_on_a_start_or_a_finish_and_counts_failures_since() {
        let mut progress = ProgressSnapshot {
            planned: 10,
            sandbox_start_failures: 2,
            ..ProgressSnapshot::default()
        };
        let mut mark = ProgressMark::new(&progress, 1_000);
        progress.sandbox_start_failures = 5;
        progress.skipped = 1;
        assert!(!mark.observe(&progress, 2_000), "failures are not progress");
        assert_eq!((mark.at_ms(), mark.failures_since(&progress)), (1_000, 3));
        assert_eq!(outstanding(&progress), 9);
        progress.running = 1;
        assert!(mark.observe(&progress, 3_000), "a start is progress");
        assert_eq!((mark.at_ms(), mark.failures_since(&progress)), (3_000, 0));
        progress.running = 0;
        progress.finished = 1;
        assert!(mark.observe(&progress, 4_000), "a finish is progress");
        assert_eq!(outstanding(&progress), 8);
    }

    #[test]
    fn a_moving_or_finished_batch_is_not_stalled() {
        let tiers = [(Tier::Microvm, 0)];
        let recent = StallInputs {
            progress_at_ms: 96 * MINUTE,
            ..inputs(&tiers)
        };
        assert_eq!(stall_reason(&recent), None);
        let nothing_left = StallInputs {
            outstanding: 0,
            ..inputs(&tiers)
        };
        assert_eq!(stall_reason(&nothing_left), None);
        // Exactly at the threshold it is stalled; a millisecond before it is not.
        let at = StallInputs {
            progress_at_ms: 95 * MINUTE,
            ..inputs(&tiers)
        };
        assert!(stall_reason(&at).is_some());
        let before = StallInputs {
            progress_at_ms: 95 * MINUTE + 1,
            ..inputs(&tiers)
        };
        assert_eq!(stall_reason(&before), None);
        // A clock behind the last progress is not a stall.
        let behind = StallInputs {
            now_ms: 0,
            ..inputs(&tiers)
        };
        assert_eq!(stall_reason(&behind), None);
    }

    #[test]
    fn the_first_cause_that_holds_is_the_reason() {
        let tiers = [(Tier::Container, 2), (Tier::Microvm, 0), (Tier::Replay, 0)];
        let all = StallInputs {
            paused: true,
            broker_healthy: false,
            sandbox_start_failures: 3,
            ..inputs(&tiers)
        };
        assert_eq!(stall_reason(&all), Some(StallReason::BrokerUnreachable));
        let paused = StallInputs {
            broker_healthy: true,
            ..all.clone()
        };
        assert_eq!(stall_reason(&paused), Some(StallReason::Paused));
        let unserved = StallInputs {
            paused: false,
            ..paused
        };
        assert_eq!(
            stall_reason(&unserved),
            Some(StallReason::NoWorker {
                tiers: vec![Tier::Microvm, Tier::Replay]
            })
        );
        let served = [(Tier::Container, 2)];
        let failing = StallInputs {
            tiers: &served,
            ..unserved
        };
        assert_eq!(
            stall_reason(&failing),
            Some(StallReason::SandboxStart { failures: 3 })
        );
        let quiet = StallInputs {
            sandbox_start_failures: 0,
            ..failing
        };
        assert_eq!(stall_reason(&quiet), Some(StallReason::Unexplained));
    }

    fn batch(times: &[Option<u64>]) -> BatchStats {
        BatchStats {
            batch_id: BatchId::new("b1").expect("valid batch id"),
            decided_at_ms: 0,
            wall_ms: 0,
            units: times
                .iter()
                .enumerate()
                .map(|(index, ms)| UnitStats {
                    label: format!("u{index}"),
                    scenario: format!("u{index}"),
                    axes: None,
                    arm: None,
                    runs: 1,
                    folded: 1,
                    passes: 1,
                    priced_runs: 0,
                    cost_usd: 0.0,
                    median_cost_usd: None,
                    median_run_ms: *ms,
                    max_run_ms: *ms,
                })
                .collect(),
        }
    }

    #[test]
    fn the_default_threshold_is_three_p95_run_times() {
        assert_eq!(default_stall_after_ms(&[]), DEFAULT_STALL_AFTER_MS);
        assert_eq!(
            default_stall_after_ms(&[batch(&[None])]),
            DEFAULT_STALL_AFTER_MS
        );
        // 20 runs of 1..=20 minutes: the p95 is the 19th, 19 minutes.
        let times: Vec<Option<u64>> = (1..=20).map(|m| Some(m * MINUTE)).collect();
        assert_eq!(default_stall_after_ms(&[batch(&times)]), 57 * MINUTE);
        // Quick jobs still get a minute.
        assert_eq!(
            default_stall_after_ms(&[batch(&[Some(1_000)])]),
            MIN_DEFAULT_STALL_AFTER_MS
        );
    }

    fn worker(id: &str, tiers: &[Tier], heartbeat_at_ms: u64, draining: bool) -> WorkerInfo {
        WorkerInfo {
            protocol: cowork_schema::job::PROTOCOL_VERSION,
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
            heartbeat_at_ms,
            heartbeat_every_ms: 1_000,
            draining,
            sandbox_start_failures: 0,
            backed_off_tiers: Vec::new(),
        }
    }

    #[test]
    fn live_workers_beat_on_time_and_take_jobs() {
        let now = 100_000;
        let workers = [
            worker("on-time", &[Tier::Container], now - 500, false),
            worker("late", &[Tier::Container], now - 5_000, false),
            worker("draining", &[Tier::Container], now, true),
            worker("other-tier", &[Tier::Microvm], now, false),
        ];
        let protocol = cowork_schema::job::PROTOCOL_VERSION;
        assert_eq!(live_workers(Tier::Container, &workers, now, protocol), 1);
        assert_eq!(live_workers(Tier::Microvm, &workers, now, protocol), 1);
        assert_eq!(live_workers(Tier::Replay, &workers, now, protocol), 0);
        assert_eq!(live_workers(Tier::Microvm, &workers, now, protocol + 1), 0);
    }
}
