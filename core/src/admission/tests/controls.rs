//! Table tests of the controls people change while a batch runs (pause, resume of dispatch,
//! adjusted window and budget) and of the live view.

use cowork_schema::registry::BatchControls;

use super::*;

fn paused(epoch: u32) -> Input {
    Input::Controls(BatchControls {
        paused: true,
        dispatch_epoch: epoch,
        ..BatchControls::default()
    })
}

fn resumed(epoch: u32) -> Input {
    Input::Controls(BatchControls {
        dispatch_epoch: epoch,
        ..BatchControls::default()
    })
}

/// Runs `plan` to its end, passing every job as it is published (each run `pass` by its
/// index: odd runs fail), pausing after `pause_after` publications if given; returns the
/// rollup and every publication with its epoch.
fn drive(plan: &Plan, pause_after: Option<usize>) -> (RollupDoc, Vec<(JobRef, u32)>) {
    let (mut admission, t0) = start(plan, config(3));
    let mut publications = Vec::new();
    let mut queue: Vec<JobRef> = Vec::new();
    let mut paused_once = false;
    loop {
        let decision = admission.next(t0);
        if let Some(end) = decision.end {
            assert_eq!(end, End::Decided);
            break;
        }
        for publish in &decision.publish {
            publications.push((publish.job, admission.dispatch_epoch()));
            queue.push(publish.job);
        }
        if !decision.withdraw.is_empty() {
            // The queue takes back every job no worker started.
            let n = queue.len() as u64;
            queue.clear();
            admission.apply(Input::Withdrawn { jobs: n }, t0);
            continue;
        }
        if !paused_once && pause_after.is_some_and(|after| publications.len() >= after) {
            paused_once = true;
            // One job starts before the pause lands; it runs on and counts.
            let first = queue.remove(0);
            let input = started(&admission, first);
            admission.apply(input, t0);
            admission.apply(paused(0), t0);
            let decision = admission.next(t0);
            assert_eq!(published(&decision), [], "a pause publishes nothing");
            assert!(
                !decision.withdraw.is_empty(),
                "a pause takes queued jobs back"
            );
            assert_eq!(decision.end, None);
            queue.clear();
            admission.apply(Input::Withdrawn { jobs: 2 }, t0);
            let input = finished_with(
                &admission,
                first,
                completed(
                    first.repeat_index.unwrap_or(0).is_multiple_of(2),
                    Some(0.1),
                    false,
                ),
            );
            admission.apply(input, t0);
            let decision = admission.next(t0);
            assert_eq!(published(&decision), [], "nothing is admitted while paused");
            assert_eq!(
                decision.end, None,
                "a paused batch waits for resume-dispatch"
            );
            assert_eq!(
                admission.progress().held_by.as_deref(),
                Some("dispatch paused")
            );
            let view = admission.live_snapshot(t0 + Duration::from_secs(60));
            assert_eq!((view.state.as_str(), view.progress.eta_s), ("paused", None));
            admission.apply(resumed(1), t0);
            continue;
        }
        let Some(next) = (!queue.is_empty()).then(|| queue.remove(0)) else {
            continue;
        };
        let pass = next.repeat_index.unwrap_or(0).is_multiple_of(2);
        let input = finished_with(&admission, next, completed(pass, Some(0.1), false));
        admission.apply(input, t0);
    }
    let reduction = admission.finish().expect("decided");
    (reduction.to_rollup_doc("run"), publications)
}

use cowork_schema::rollup::RollupDoc;

#[test]
fn pause_then_resume_admits_from_where_each_unit_stopped_with_the_undisturbed_rollup() {
    let plan = plan_of(&[unit(Tier::Container), unit(Tier::Container)], repeat(4));
    let (undisturbed, plain) = drive(&plan, None);
    let (resumed, publications) = drive(&plan, Some(3));
    assert_eq!(resumed, undisturbed, "same rollup as an undisturbed run");
    assert_eq!(plain.len(), 8, "each job published once");
    // The two jobs taken back are published again, under epoch 1; nothing else twice.
    let again: Vec<_> = publications
        .iter()
        .filter(|(_, epoch)| *epoch == 1)
        .collect();
    assert_eq!(publications.len(), 8 + 2);
    let mut taken_back: Vec<_> = publications[1..3].iter().map(|(job, _)| *job).collect();
    let mut republished: Vec<_> = again.iter().take(2).map(|(job, _)| *job).collect();
    taken_back.sort_by_key(|job| (job.unit, job.repeat_index));
    republished.sort_by_key(|job| (job.unit, job.repeat_index));
    assert_eq!(republished, taken_back);
}

#[test]
fn a_job_a_worker_took_just_before_the_pause_runs_on_and_is_not_published_again() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(3));
    let (mut admission, t0) = start(&plan, config(3));
    assert_eq!(published(&admission.next(t0)), [r(0, 0), r(0, 1), r(0, 2)]);
    admission.apply(paused(0), t0);
    assert_eq!(admission.next(t0).withdraw, [Tier::Container]);
    admission.apply(Input::Withdrawn { jobs: 2 }, t0);
    // r0/0 was pulled before the purge: its start arrives after the withdrawal.
    let input = started(&admission, r(0, 0));
    admission.apply(input, t0);
    admission.apply(resumed(1), t0);
    assert_eq!(published(&admission.next(t0)), [r(0, 1), r(0, 2)]);
    assert_eq!(admission.progress().admitted, 3);
}

#[test]
fn a_paused_batch_restarted_stays_paused_and_admits_nothing() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(3));
    let mut admission = Admission::new(&plan, config(3)).expect("reduces");
    admission.apply(paused(0), Instant::now());
    admission.end_catch_up();
    let decision = admission.next(Instant::now());
    assert_eq!(
        (published(&decision), decision.withdraw.len(), decision.end),
        (vec![], 0, None)
    );
    admission.apply(resumed(1), Instant::now());
    assert_eq!(admission.next(Instant::now()).publish.len(), 3);
    assert_eq!(admission.dispatch_epoch(), 1);
}

#[test]
fn adjusted_limits_hold_admission_at_once() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(10));
    let (mut admission, t0) = start(&plan, config(4));
    assert_eq!(admission.next(t0).publish.len(), 4);
    admission.apply(
        Input::Controls(BatchControls {
            max_running: Some(1),
            ..BatchControls::default()
        }),
        t0,
    );
    for index in 0..3 {
        let input = passed(&admission, r(0, index), 0.1);
        admission.apply(input, t0);
        assert_eq!(published(&admission.next(t0)), [], "3 outstanding > 1");
    }
    let input = passed(&admission, r(0, 3), 0.1);
    admission.apply(input, t0);
    assert_eq!(published(&admission.next(t0)), [r(0, 4)]);
    // A batch budget set while it runs: $0.4 spent, price estimate 0.1 × 5/4 = 0.125.
    admission.apply(
        Input::Controls(BatchControls {
            max_running: Some(8),
            batch_budget_usd: Some(0.5),
            ..BatchControls::default()
        }),
        t0,
    );
    assert_eq!(published(&admission.next(t0)), [], "0.4 + 2 × 0.125 > 0.5");
    assert_eq!(admission.progress().batch_budget_usd, Some(0.5));
    assert_eq!(admission.live_snapshot(t0).cost.batch_budget_usd, Some(0.5));
}

#[test]
fn the_live_view_counts_cells_and_failures_and_its_delta_names_only_what_changed() {
    let plan = plan_of(&[unit(Tier::Container), unit(Tier::Container)], repeat(2));
    let (mut admission, t0) = start(&plan, config(4));
    admission.next(t0);
    let before = admission.live_snapshot(t0);
    assert_eq!(before.progress.queued, 4);
    assert!(before.simulated);
    let input = finished_with(&admission, r(1, 0), completed(false, Some(0.2), false));
    admission.apply(input, t0);
    let after = admission.live_snapshot(t0 + Duration::from_secs(60));
    assert_eq!((after.cells[1].finished, after.cells[1].failed), (1, 1));
    assert_eq!(after.failures.len(), 1);
    assert_eq!(after.failures[0].kind, "fail");
    assert_eq!(after.progress.per_minute, Some(1.0));
    assert_eq!(after.progress.eta_s, Some(180));
    assert_eq!(after.cost.projected_usd, Some(0.2 + 3.0 * 0.2));
    let delta = live_delta(&before, &after);
    assert_eq!(delta.cells.len(), 1, "only cell 1 changed");
    assert_eq!(delta.cells[0].0, 1);
    assert!(delta.dispatch.is_none());
    assert!(live_delta(&after, &after).is_empty());
    let strip = admission.live_unit_runs(1).expect("unit 1");
    let states: Vec<_> = strip.runs.iter().map(|run| run.state.as_str()).collect();
    assert_eq!(states, ["fail", "queued"]);
}

#[test]
fn the_snapshot_of_a_100000_job_batch_stays_under_200_kb() {
    for (units, repeats) in [(100_000, None), (1_000, Some(100))] {
        let specs = vec![unit(Tier::Container); units];
        let flags = repeats.map_or_else(BatchFlags::default, repeat);
        let plan = plan_of(&specs, flags);
        let (mut admission, t0) = start(&plan, config(64));
        admission.next(t0);
        for index in 0..LIVE_FAILURES_MAX as u32 + 5 {
            let job = JobRef {
                unit: index,
                repeat_index: repeats.map(|_| 0),
            };
            let error = JobOutcome::Error {
                category: ErrorCategory::Infra,
                message: "x".repeat(400),
            };
            let input = finished_with(&admission, job, error);
            admission.apply(input, t0);
        }
        let snapshot = admission.live_snapshot(t0);
        let bytes = serde_json::to_vec(&snapshot).expect("serializes").len();
        assert!(
            bytes < 200_000,
            "{units} units × {repeats:?}: {bytes} bytes"
        );
        assert!(snapshot.cells.len() <= LIVE_CELLS_MAX);
        assert_eq!(snapshot.failures.len(), LIVE_FAILURES_MAX);
        assert_eq!(snapshot.progress.infra_failed, LIVE_FAILURES_MAX as u64 + 5);
    }
}

/// Controls that cap the batch at `max` jobs outstanding, under dispatch epoch `epoch` (the
/// coordinator raises it with a lowered cap).
fn capped(max: u32, epoch: u32) -> Input {
    Input::Controls(BatchControls {
        max_running: Some(max),
        dispatch_epoch: epoch,
        ..BatchControls::default()
    })
}

fn finish_by_index(admission: &mut Admission, job: JobRef, t0: Instant) {
    let pass = job.repeat_index.unwrap_or(0).is_multiple_of(2);
    let input = finished_with(admission, job, completed(pass, Some(0.1), false));
    admission.apply(input, t0);
}

#[test]
fn a_lowered_cap_takes_back_the_unstarted_jobs_and_admits_within_it() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(10));
    let (mut admission, t0) = start(&plan, config(4));
    assert_eq!(
        published(&admission.next(t0)),
        [r(0, 0), r(0, 1), r(0, 2), r(0, 3)]
    );
    for index in [0, 1] {
        let input = started(&admission, r(0, index));
        admission.apply(input, t0);
    }
    admission.apply(capped(1, 1), t0);
    let decision = admission.next(t0);
    assert_eq!(
        published(&decision),
        [],
        "nothing is published beside a take-back"
    );
    assert_eq!(decision.withdraw, [Tier::Container]);
    assert_eq!(decision.end, None);
    admission.apply(Input::Withdrawn { jobs: 2 }, t0);
    assert_eq!(admission.dispatch_epoch(), 1);
    assert_eq!(
        (admission.progress().admitted, admission.progress().running),
        (2, 2),
        "the two unstarted jobs are off the admitted count"
    );
    assert_eq!(
        admission.progress().withdrawn,
        0,
        "a take-back is no cancel"
    );
    assert_eq!(published(&admission.next(t0)), [], "2 running > 1");
    finish_by_index(&mut admission, r(0, 0), t0);
    assert_eq!(published(&admission.next(t0)), [], "1 running = 1");
    finish_by_index(&mut admission, r(0, 1), t0);
    // The jobs taken back go first, one at a time.
    assert_eq!(published(&admission.next(t0)), [r(0, 2)]);
    assert_eq!(published(&admission.next(t0)), []);
    finish_by_index(&mut admission, r(0, 2), t0);
    assert_eq!(published(&admission.next(t0)), [r(0, 3)]);
    // Raised again: no take-back (same epoch), the window admits at once.
    admission.apply(capped(4, 1), t0);
    let decision = admission.next(t0);
    assert_eq!(decision.withdraw, []);
    assert_eq!(published(&decision), [r(0, 4), r(0, 5), r(0, 6)]);
    assert_eq!(admission.progress().admitted, 7);
}

#[test]
fn a_late_start_of_a_job_the_lowered_cap_took_back_runs_on_and_is_not_published_again() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(4));
    let (mut admission, t0) = start(&plan, config(4));
    assert_eq!(admission.next(t0).publish.len(), 4);
    let input = started(&admission, r(0, 0));
    admission.apply(input, t0);
    admission.apply(capped(2, 1), t0);
    assert_eq!(admission.next(t0).withdraw, [Tier::Container]);
    admission.apply(Input::Withdrawn { jobs: 3 }, t0);
    assert_eq!(admission.progress().admitted, 1);
    // r0/1 was pulled before the record changed: its start arrives after the take-back.
    let input = started(&admission, r(0, 1));
    admission.apply(input, t0);
    assert_eq!(
        (admission.progress().admitted, admission.progress().running),
        (2, 2),
        "tracked as running, admitted once"
    );
    assert_eq!(published(&admission.next(t0)), [], "2 running = the cap");
    finish_by_index(&mut admission, r(0, 0), t0);
    assert_eq!(
        published(&admission.next(t0)),
        [r(0, 2)],
        "r0/1 runs: it is passed over, never published again"
    );
    finish_by_index(&mut admission, r(0, 1), t0);
    assert_eq!(published(&admission.next(t0)), [r(0, 3)]);
    for index in [2, 3] {
        finish_by_index(&mut admission, r(0, index), t0);
    }
    let decision = admission.next(t0);
    assert_eq!(decision.end, Some(End::Decided));
    let progress = admission.progress();
    assert_eq!(
        (progress.admitted, progress.finished, progress.duplicates),
        (4, 4, 0)
    );
}

/// Runs `plan` with a window of 4: after the first publications two jobs start and the cap
/// goes down to 1 (next epoch); after three more jobs finished under it, it goes up to 8.
/// Workers start queued jobs in publication order and finish the oldest running one first.
/// Returns the rollup and the most jobs outstanding at once (queued or running) under the
/// cap of 1, from when the jobs running at the adjust were down to 1.
fn drive_adjusted(plan: &Plan) -> (RollupDoc, usize) {
    let (mut admission, t0) = start(plan, config(4));
    let (mut queue, mut running): (Vec<JobRef>, Vec<JobRef>) = (Vec::new(), Vec::new());
    let (mut lowered, mut raised, mut under_cap) = (false, false, None::<(usize, usize)>);
    loop {
        let decision = admission.next(t0);
        if let Some(end) = decision.end {
            assert_eq!(end, End::Decided);
            break;
        }
        queue.extend(published(&decision));
        if !decision.withdraw.is_empty() {
            let n = queue.len() as u64;
            queue.clear();
            admission.apply(Input::Withdrawn { jobs: n }, t0);
            continue;
        }
        if !lowered && queue.len() >= 4 {
            lowered = true;
            for job in queue.drain(..2) {
                let input = started(&admission, job);
                admission.apply(input, t0);
                running.push(job);
            }
            admission.apply(capped(1, 1), t0);
            continue;
        }
        if lowered && !raised {
            let outstanding = queue.len() + running.len();
            if let Some((finished, most)) = &mut under_cap {
                *most = (*most).max(outstanding);
                if *finished >= 3 {
                    raised = true;
                    admission.apply(capped(8, 1), t0);
                    continue;
                }
            } else if outstanding <= 1 {
                under_cap = Some((0, outstanding));
            }
        }
        if running.is_empty() && !queue.is_empty() {
            let job = queue.remove(0);
            let input = started(&admission, job);
            admission.apply(input, t0);
            running.push(job);
        }
        let Some(job) = (!running.is_empty()).then(|| running.remove(0)) else {
            continue;
        };
        finish_by_index(&mut admission, job, t0);
        if let Some((finished, _)) = &mut under_cap {
            *finished += 1;
        }
    }
    let progress = admission.progress();
    assert_eq!(
        (progress.finished, progress.duplicates, progress.redelivered),
        (progress.planned, 0, 0)
    );
    let (_, most) = under_cap.expect("the cap of 1 held for a while");
    let reduction = admission.finish().expect("decided");
    (reduction.to_rollup_doc("run"), most)
}

#[test]
fn a_cap_lowered_then_raised_keeps_the_undisturbed_rollup() {
    let plan = plan_of(&[unit(Tier::Container), unit(Tier::Container)], repeat(6));
    let (undisturbed, _) = drive(&plan, None);
    let (adjusted, most_outstanding) = drive_adjusted(&plan);
    assert_eq!(adjusted, undisturbed, "same rollup as an undisturbed run");
    assert_eq!(most_outstanding, 1, "at most 1 job out under the cap of 1");
}
