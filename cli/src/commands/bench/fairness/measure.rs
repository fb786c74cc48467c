//! What `cowork bench fairness` computes from the batches' events once they are read back: pure
//! functions of start times, so they are tested on synthetic event lists.

use std::collections::HashMap;

use cowork_schema::event::{JobEvent, JobEventKind};

/// The first start of each job of a batch, from its `started` events and the times the events
/// stream stored them (Unix milliseconds), sorted. A job delivered again starts again; its first
/// start is the one that took a slot from the other batches first.
pub(super) fn first_starts<'a>(
    events: impl IntoIterator<Item = (i128, &'a JobEvent)>,
) -> Vec<i128> {
    let mut first: HashMap<&str, i128> = HashMap::new();
    for (stored_ms, event) in events {
        if matches!(event.event, JobEventKind::Started) {
            first
                .entry(event.job_id.as_str())
                .and_modify(|at| *at = (*at).min(stored_ms))
                .or_insert(stored_ms);
        }
    }
    let mut starts: Vec<i128> = first.into_values().collect();
    starts.sort_unstable();
    starts
}

/// How two sweeps submitted together divided the fleet's job starts while both had jobs to
/// start: from the later submit to the earlier last start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct OverlapShare {
    pub(super) from_ms: i128,
    pub(super) to_ms: i128,
    /// Starts of each sweep within `[from_ms, to_ms]`.
    pub(super) starts: [u64; 2],
}

impl OverlapShare {
    /// Sweep `index`'s share of the starts in the overlap, in percent.
    pub(super) fn percent(&self, index: usize) -> f64 {
        let total = self.starts[0] + self.starts[1];
        if total == 0 {
            return 0.0;
        }
        100.0 * self.starts[index] as f64 / total as f64
    }
}

/// The overlap of two sweeps and each one's starts in it; `None` when a sweep never started.
/// The overlap opens at the later submit, not at the later first start: a sweep that waits for
/// its first start while the other runs is the very unfairness measured. It closes at the
/// earlier last start: past it one sweep has nothing left to start and is owed no share.
pub(super) fn overlap_share(submitted_ms: [i128; 2], starts: [&[i128]; 2]) -> Option<OverlapShare> {
    let from_ms = submitted_ms[0].max(submitted_ms[1]);
    let to_ms = starts[0].last()?.min(starts[1].last()?).to_owned();
    let within = |starts: &[i128]| {
        starts
            .iter()
            .filter(|&&at| at >= from_ms && at <= to_ms)
            .count() as u64
    };
    Some(OverlapShare {
        from_ms,
        to_ms,
        starts: [within(starts[0]), within(starts[1])],
    })
}

/// One running sweep as the urgent batch found it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SweepAtAdmission {
    /// The sweep's first starts, sorted.
    pub(super) starts: Vec<i128>,
    /// Jobs the sweep had handed to the queue, read from its status at the admission instant.
    pub(super) admitted: u64,
}

/// What the sweeps' queued jobs did while the urgent batch started.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Overtakes {
    /// Sweep jobs handed to the queue and not started at the admission instant.
    pub(super) queued_at_admission: u64,
    /// Sweep jobs started after the admission instant and before the urgent batch's last start.
    pub(super) started_before_urgent: u64,
    /// Of those, the ones queued at the admission instant: the target is none.
    pub(super) queued_started_before_urgent: u64,
}

/// Counts the sweep jobs that started between the urgent batch's admission and its last start,
/// and those of them that were queued at the admission instant. The events carry no publication
/// time, so a sweep's queued jobs are counted (jobs admitted by its status less jobs started by
/// the events) and taken to be its next starts: the queue hands a tier's jobs out in the order
/// they were published, so a job published after the admission starts after every job queued
/// before it. `None` when the urgent batch never started.
pub(super) fn overtakes(
    admission_ms: i128,
    urgent_starts: &[i128],
    sweeps: &[SweepAtAdmission],
) -> Option<Overtakes> {
    let urgent_last_ms = *urgent_starts.last()?;
    let mut counted = Overtakes::default();
    for sweep in sweeps {
        let started_by_admission = sweep
            .starts
            .iter()
            .filter(|&&at| at <= admission_ms)
            .count() as u64;
        let queued = sweep.admitted.saturating_sub(started_by_admission);
        let before_urgent = sweep
            .starts
            .iter()
            .filter(|&&at| at > admission_ms && at < urgent_last_ms)
            .count() as u64;
        counted.queued_at_admission += queued;
        counted.started_before_urgent += before_urgent;
        counted.queued_started_before_urgent += before_urgent.min(queued);
    }
    Some(counted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_schema::{BatchId, JobId, UnitRef};

    fn event(file: u32, repeat: u32, kind: JobEventKind) -> JobEvent {
        let batch_id = BatchId::new("b1").expect("a valid id");
        JobEvent {
            protocol: cowork_schema::job::PROTOCOL_VERSION,
            job_id: JobId::new(&batch_id, UnitRef::File(file), Some(repeat)),
            batch_id,
            attempt: 1,
            generation: 0,
            worker_id: "w".into(),
            event: kind,
        }
    }

    fn failed() -> JobEventKind {
        JobEventKind::Failed {
            class: cowork_schema::event::InfraClass::Spawn,
            message: "x".into(),
            will_retry: true,
        }
    }

    #[test]
    fn a_job_counts_once_at_its_first_start() {
        let events = [
            (30, event(0, 1, JobEventKind::Started)),
            (10, event(0, 0, JobEventKind::Started)),
            (20, event(0, 0, failed())),
            (40, event(0, 0, JobEventKind::Started)),
            (50, event(1, 0, failed())),
        ];
        let starts = first_starts(events.iter().map(|(at, event)| (*at, event)));
        assert_eq!(starts, vec![10, 30]);
    }

    #[test]
    fn the_overlap_runs_from_the_later_submit_to_the_earlier_last_start() {
        // Sweep 0 starts at 100, 200, …, 1000; sweep 1 at 150, 350, 550, then alone 2000, 3000.
        let sweep_0: Vec<i128> = (1..=10).map(|n| n * 100).collect();
        let sweep_1 = vec![150, 350, 550, 2000, 3000];
        let share = overlap_share([90, 120], [&sweep_0, &sweep_1]).expect("both started");
        assert_eq!(share.from_ms, 120);
        assert_eq!(share.to_ms, 1000);
        // Sweep 0's start at 100 is before the later submit.
        assert_eq!(share.starts, [9, 3]);
        assert_eq!(share.percent(0), 75.0);
        assert_eq!(share.percent(1), 25.0);
    }

    #[test]
    fn a_sweep_that_waits_for_the_other_gets_no_share() {
        // Sweep 1 starts only after sweep 0's last start: all of the overlap went to sweep 0.
        let share = overlap_share([0, 0], [&[10, 20, 30], &[40, 50]]).expect("both started");
        assert_eq!(share.starts, [3, 0]);
        assert_eq!(share.percent(1), 0.0);
        assert_eq!(overlap_share([0, 0], [&[10], &[]]), None);
    }

    #[test]
    fn only_sweep_jobs_queued_at_admission_count_as_overtaking() {
        // Admission at 1000; the urgent batch starts at 1500, 2500 and 3000 (its last).
        let urgent = [1500, 2500, 3000];
        let sweeps = [
            // 4 started by admission, 7 admitted: 3 queued. Starts after admission at 1200,
            // 1800, 2900 (before the last urgent start) and 3500 (after it).
            SweepAtAdmission {
                starts: vec![100, 200, 300, 1000, 1200, 1800, 2900, 3500],
                admitted: 7,
            },
            // 2 started, 3 admitted: 1 queued; 2 start before the last urgent start, of which
            // only 1 can have been queued (the other was published after the admission).
            SweepAtAdmission {
                starts: vec![400, 500, 2000, 2100],
                admitted: 3,
            },
        ];
        let counted = overtakes(1000, &urgent, &sweeps).expect("urgent started");
        assert_eq!(
            counted,
            Overtakes {
                queued_at_admission: 4,
                started_before_urgent: 5,
                queued_started_before_urgent: 4,
            }
        );
    }

    #[test]
    fn sweeps_held_back_at_admission_overtake_nothing() {
        // Every admitted sweep job was running at admission; what starts later was published
        // after it.
        let sweeps = [SweepAtAdmission {
            starts: vec![100, 200, 1100, 1200],
            admitted: 2,
        }];
        let counted = overtakes(1000, &[1050, 1300], &sweeps).expect("urgent started");
        assert_eq!(counted.queued_at_admission, 0);
        assert_eq!(counted.started_before_urgent, 2);
        assert_eq!(counted.queued_started_before_urgent, 0);
        assert_eq!(overtakes(1000, &[], &sweeps), None);
    }
}
