//! The sequential stop of an eval (`--sequential`): admission stops at the deciding look, the
//! jobs out finish and are folded, and the batch is decided on the runs it has.

use crate::eval::sequential::{SequentialDecision, SequentialSettings};

use super::*;

/// One scenario × 2 arms × `runs`, sequential with `looks` looks at alpha 0.05.
fn sequential_eval(runs: u32, looks: u32) -> Plan {
    let mut plan = plan_of(
        &[unit(Tier::Container), unit(Tier::Container)],
        repeat(runs),
    );
    plan.mode = BatchMode::Eval;
    plan.interleave = true;
    plan.sequential = Some(SequentialSettings {
        looks,
        alpha: 0.05,
        mde: None,
    });
    plan
}

/// Runs the batch to its end, finishing the published jobs in order: arm A (unit 0) fails,
/// arm B passes. Returns the jobs finished and the notes.
fn drive(admission: &mut Admission, t0: Instant) -> (Vec<JobRef>, Vec<Note>) {
    let mut queue: std::collections::VecDeque<JobRef> = std::collections::VecDeque::new();
    let (mut done, mut notes) = (Vec::new(), Vec::new());
    loop {
        let mut decision = admission.next(t0);
        queue.extend(published(&decision));
        notes.append(&mut decision.notes);
        if decision.end.is_some() {
            assert_eq!(decision.end, Some(End::Decided));
            return (done, notes);
        }
        if admission.sequential_stop().is_some() {
            assert_eq!(
                admission.progress().held_by.as_deref(),
                Some("decided early by the sequential test")
            );
        }
        let job = queue
            .pop_front()
            .expect("a job is out while the batch runs");
        let input = finished_with(admission, job, completed(job.unit == 1, Some(0.1), false));
        admission.apply(input, t0);
        done.push(job);
    }
}

#[test]
fn a_sequential_eval_stops_admitting_at_the_deciding_look_and_folds_the_jobs_out() {
    // 40 pairs, looks at 8, 16, …: eight pairs where only B passed give E = 256/9 ≥ 20 at look 1.
    let plan = sequential_eval(40, 5);
    let (mut admission, t0) = start(&plan, config(4));
    let (done, notes) = drive(&mut admission, t0);
    let stops: Vec<&SequentialStop> = notes
        .iter()
        .filter_map(|note| match note {
            Note::SequentialStopped(stop) => Some(stop),
            _ => None,
        })
        .collect();
    let [stop] = stops[..] else {
        panic!("one sequential stop, got {notes:?}");
    };
    assert_eq!(
        (stop.look, stop.looks, stop.pairs, stop.planned_pairs),
        (1, 5, 8, 40)
    );
    assert_eq!(
        stop.decision,
        SequentialDecision::Decided {
            verdict: cowork_schema::eval::EvalVerdict::BBetter
        }
    );
    assert_eq!(admission.sequential_stop(), Some(*stop));
    // The 16 runs of look 1, and the 3 the window had out when it decided: folded, not lost.
    assert_eq!(done.len(), 19);
    assert_eq!(admission.progress().finished, 19);
    let reduction = admission.finish().expect("decided on the runs it has");
    let rollups = reduction.rollups.expect("a repeat batch");
    assert_eq!(
        rollups.iter().map(|rollup| rollup.completed).sum::<u32>(),
        19
    );
    assert!(rollups.iter().all(|rollup| rollup.stopped_early.is_none()));
}

#[test]
fn a_restarted_admission_reaches_the_same_stop_during_catch_up() {
    let plan = sequential_eval(40, 5);
    let (mut first, t0) = start(&plan, config(4));
    let (done, _) = drive(&mut first, t0);
    // A new supervisor folds the same events (in another order) before admitting anything.
    let mut again = Admission::new(&plan, config(4)).expect("reduces");
    for job in done.iter().rev() {
        let input = finished_with(&again, *job, completed(job.unit == 1, Some(0.1), false));
        again.apply(input, t0);
    }
    again.end_catch_up();
    let decision = again.next(t0);
    assert_eq!(published(&decision), []);
    assert_eq!(decision.end, Some(End::Decided));
    assert_eq!(again.sequential_stop(), first.sequential_stop());
}

#[test]
fn without_a_decision_the_eval_runs_every_planned_pair() {
    // 4 pairs and one look: the only look is the last, which is no early stop.
    let plan = sequential_eval(4, 1);
    let (mut admission, t0) = start(&plan, config(2));
    let (done, notes) = drive(&mut admission, t0);
    assert_eq!(done.len(), 8);
    assert!(
        !notes
            .iter()
            .any(|note| matches!(note, Note::SequentialStopped(_)))
    );
    assert_eq!(admission.sequential_stop(), None);
}
