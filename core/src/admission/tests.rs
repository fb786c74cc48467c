//! Table tests of admission, one per rule: a plan, a sequence of inputs at instants of a fake
//! clock, and what each decision publishes, declares or ends. No IO, no sleep: time is an
//! `Instant` offset the test chooses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cowork_schema::batch::{BatchFlags, BatchMode, ExecutorKind};
use cowork_schema::event::{ArtifactRef, ErrorCategory, JobEvent, JobEventKind, JobOutcome};
use cowork_schema::ids::{BatchId, JobId, UnitRef};
use cowork_schema::job::{CellAxes, PROTOCOL_VERSION, Tier};
use cowork_schema::rollup::StopReason;
use cowork_schema::run_result::RunView;
use serde_json::json;

use super::*;
use crate::limits::{ModelLimit, ModelLimits};
use crate::plan::{Plan, PlanInput, PlanKind, PlanLayout, PlanUnit};

const TIMEOUT: Duration = Duration::from_secs(60);
const GRACE: Duration = Duration::from_secs(30);
const PAUSE: Duration = Duration::from_secs(10);

/// A unit of a test plan: its tier and, for a cell, its model.
#[derive(Clone, Copy)]
struct UnitSpec {
    tier: Tier,
    model: Option<&'static str>,
}

fn unit(tier: Tier) -> UnitSpec {
    UnitSpec { tier, model: None }
}

fn cell(model: &'static str) -> UnitSpec {
    UnitSpec {
        tier: Tier::Container,
        model: Some(model),
    }
}

fn plan_of(units: &[UnitSpec], flags: BatchFlags) -> Plan {
    let matrix = units.iter().any(|unit| unit.model.is_some());
    let plan_units = units
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            let index = index as u32;
            let axes = spec.model.map(|model| CellAxes {
                model: Some(model.to_owned()),
                ..CellAxes::default()
            });
            PlanUnit {
                unit: if matrix {
                    UnitRef::Cell(index)
                } else {
                    UnitRef::File(index)
                },
                scenario_name: format!("s{index}"),
                label: format!("s{index}"),
                axes,
                scenario_file: format!("s{index}.yaml"),
                tier: spec.tier,
                cell_error: None,
                timeout_ms: TIMEOUT.as_millis() as u64,
                arm: None,
            }
        })
        .collect();
    let layout = PlanLayout {
        kind: if matrix {
            PlanKind::Matrix
        } else {
            PlanKind::Files
        },
        mode: BatchMode::Run,
        flags: flags.clone(),
        units: plan_units,
        requested_cells: units.len() as u32,
        truncated: false,
        derived_files: Vec::new(),
        forwarded_flags: Vec::new(),
    };
    Plan::new(
        layout,
        PlanInput {
            batch_id: BatchId::new("b1").expect("valid literal"),
            flags,
            mode: BatchMode::Run,
            executor: ExecutorKind::Sim,
            sim: None,
            bundle_sha256: "00".into(),
        },
    )
}

fn repeat(n: u32) -> BatchFlags {
    BatchFlags {
        repeat: Some(n),
        ..BatchFlags::default()
    }
}

fn config(window: usize) -> AdmissionConfig {
    AdmissionConfig {
        window,
        speculation: DEFAULT_SPECULATION,
        usage_pause: PAUSE,
        usage_pause_max: PAUSE * 4,
        deadline_grace: GRACE,
        model_limits: Arc::new(ModelLimits::default()),
        expected_run_ms: Vec::new(),
        fair_share: None,
    }
}

/// An admission past its (empty) catch-up, and the clock's origin.
fn start(plan: &Plan, config: AdmissionConfig) -> (Admission, Instant) {
    let mut admission = Admission::new(plan, config).expect("the test plan reduces");
    admission.end_catch_up();
    (admission, Instant::now())
}

fn job(unit: u32, repeat_index: Option<u32>) -> JobRef {
    JobRef { unit, repeat_index }
}

fn r(unit: u32, index: u32) -> JobRef {
    job(unit, Some(index))
}

fn published(decision: &Decision) -> Vec<JobRef> {
    decision.publish.iter().map(|publish| publish.job).collect()
}

fn event(admission: &Admission, job: JobRef, kind: JobEventKind) -> Input {
    Input::Event(JobEvent {
        protocol: PROTOCOL_VERSION,
        batch_id: BatchId::new("b1").expect("valid literal"),
        job_id: admission.job_id(job),
        attempt: 1,
        generation: 0,
        worker_id: "w1".into(),
        event: kind,
    })
}

fn started(admission: &Admission, job: JobRef) -> Input {
    event(admission, job, JobEventKind::Started)
}

/// A completed run with `pass`, `cost` and optionally the usage-limit signal.
fn completed(pass: bool, cost: Option<f64>, usage_limit: bool) -> JobOutcome {
    let signals = if usage_limit {
        json!([{ "code": "usage_limit", "severity": "fail", "message": "limit" }])
    } else {
        json!([])
    };
    let mut result = json!({
        "result": if pass { "success" } else { "failure" },
        "assertions": [],
        "verdict": { "pass": pass, "signals": signals },
    });
    if let Some(cost) = cost {
        result["cost"] = json!({ "usd": cost });
    }
    JobOutcome::Completed {
        run: RunView::from_result(&result).expect("a readable result"),
    }
}

fn finished_with(admission: &Admission, job: JobRef, outcome: JobOutcome) -> Input {
    event(
        admission,
        job,
        JobEventKind::Finished {
            outcome,
            artifacts: Vec::new(),
            harness_version: Some("2.0.0".into()),
            exit_code: Some(0),
            run_ms: 5,
            unstored_outcome: None,
            from_record_of_attempt: None,
        },
    )
}

fn passed(admission: &Admission, job: JobRef, cost: f64) -> Input {
    finished_with(admission, job, completed(true, Some(cost), false))
}

#[test]
fn window_holds_at_most_window_jobs_outstanding() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(5));
    let (mut admission, t0) = start(&plan, config(2));
    assert_eq!(published(&admission.next(t0)), [r(0, 0), r(0, 1)]);
    assert_eq!(published(&admission.next(t0)), [], "the window is full");
    let input = passed(&admission, r(0, 1), 0.1);
    admission.apply(input, t0);
    assert_eq!(published(&admission.next(t0)), [r(0, 2)]);
    for index in [0, 2] {
        let input = passed(&admission, r(0, index), 0.1);
        admission.apply(input, t0);
    }
    assert_eq!(published(&admission.next(t0)), [r(0, 3), r(0, 4)]);
    for index in [3, 4] {
        let input = passed(&admission, r(0, index), 0.1);
        admission.apply(input, t0);
    }
    let last = admission.next(t0);
    assert_eq!(last.end, Some(End::Decided));
    assert_eq!(admission.progress().admitted, 5);
}

#[test]
fn a_decided_unit_admits_nothing_more() {
    let plan = plan_of(&[unit(Tier::Container), unit(Tier::Container)], repeat(4));
    let (mut admission, t0) = start(&plan, config(2));
    assert_eq!(published(&admission.next(t0)), [r(0, 0), r(0, 1)]);
    let error = JobOutcome::Error {
        category: ErrorCategory::Runtime,
        message: "boom".into(),
    };
    let input = finished_with(&admission, r(0, 0), error);
    admission.apply(input, t0);
    // Unit 0 stopped at index 0 ("error"): r0/2 and r0/3 are skipped, unit 1 goes on.
    assert_eq!(published(&admission.next(t0)), [r(1, 0)]);
    assert_eq!(admission.progress().skipped, 2);
    let input = passed(&admission, r(0, 1), 0.1);
    admission.apply(input, t0);
    assert_eq!(admission.progress().discarded, 1, "overshoot is discarded");
    assert_eq!(published(&admission.next(t0)), [r(1, 1)]);
}

#[test]
fn a_run_buffered_before_its_unit_stopped_counts_as_discarded() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(4));
    let (mut admission, t0) = start(&plan, config(2));
    assert_eq!(published(&admission.next(t0)), [r(0, 0), r(0, 1)]);
    // r1 finishes first and waits for r0; r0 then stops the unit, so r1 is never folded.
    let input = passed(&admission, r(0, 1), 0.1);
    admission.apply(input, t0);
    let error = JobOutcome::Error {
        category: ErrorCategory::Runtime,
        message: "boom".into(),
    };
    let input = finished_with(&admission, r(0, 0), error);
    admission.apply(input, t0);
    let _ = admission.next(t0);
    let progress = admission.progress();
    assert_eq!((progress.finished, progress.skipped), (2, 2));
    assert_eq!(progress.discarded, 1, "the buffered run is discarded");
}

/// Drives one unit to its end with runs finishing in a seeded pseudo-random order at seeded
/// prices within ±50% of `mean`; returns (spend, most expensive run).
fn budget_run(seed: u64, cap: f64, mean: f64, window: usize) -> (f64, f64) {
    let plan = plan_of(
        &[unit(Tier::Container)],
        BatchFlags {
            max_budget_usd: Some(cap),
            ..repeat(20)
        },
    );
    let (mut admission, t0) = start(&plan, config(window));
    let mut state = seed;
    let mut draw = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let (mut spent, mut highest) = (0.0, 0.0f64);
    let mut running: Vec<JobRef> = Vec::new();
    loop {
        let decision = admission.next(t0);
        running.extend(published(&decision));
        if decision.end.is_some() {
            return (spent, highest);
        }
        // Any running job may finish next.
        let position = (draw() * running.len() as f64) as usize % running.len().max(1);
        let job = running.swap_remove(position);
        let price = mean * (0.5 + draw());
        spent += price;
        highest = highest.max(price);
        let input = passed(&admission, job, price);
        admission.apply(input, t0);
    }
}

#[test]
fn a_unit_budget_runs_one_job_until_priced_then_fits_the_estimate() {
    let plan = plan_of(
        &[unit(Tier::Container)],
        BatchFlags {
            max_budget_usd: Some(1.0),
            ..repeat(20)
        },
    );
    let (mut admission, t0) = start(&plan, config(8));
    // (finish this run at this price, then expect these admissions)
    type Step = (Option<(u32, f64)>, &'static [u32]);
    let steps: [Step; 4] = [
        (None, &[0]),
        // One price: the next job runs alone (a slow start: one priced run, one at once).
        (Some((0, 0.1)), &[1]),
        // Two prices (estimate 0.15): spent 0.2 + 2 × 0.15 ≤ 1, a third would need 3 prices.
        (Some((1, 0.1)), &[2, 3]),
        (Some((2, 0.1)), &[4, 5]),
    ];
    for (finish, expected) in steps {
        if let Some((index, price)) = finish {
            let input = passed(&admission, r(0, index), price);
            admission.apply(input, t0);
        }
        let expected: Vec<JobRef> = expected.iter().map(|index| r(0, *index)).collect();
        let decision = admission.next(t0);
        assert_eq!(published(&decision), expected);
    }
    assert_eq!(admission.progress().held_by.as_deref(), Some("unit budget"));
    // Whatever the order runs finish in, the unit's spend stays within one run of its cap.
    for seed in 0..300 {
        for (cap, window) in [(0.3, 16), (0.6, 8), (1.0, 16)] {
            let (spent, highest) = budget_run(seed, cap, 0.05, window);
            assert!(
                spent <= cap + highest + 1e-9,
                "seed {seed}: spent {spent} against a cap of {cap} (+ {highest})"
            );
        }
    }
}

#[test]
fn a_batch_budget_stops_every_open_unit_when_one_more_job_does_not_fit() {
    let flags = BatchFlags {
        batch_budget_usd: Some(0.5),
        ..repeat(10)
    };
    let plan = plan_of(&[unit(Tier::Container), unit(Tier::Container)], flags);
    let (mut admission, t0) = start(&plan, config(4));
    assert_eq!(
        published(&admission.next(t0)),
        [r(0, 0)],
        "one at a time before a price"
    );
    let input = passed(&admission, r(0, 0), 0.1);
    admission.apply(input, t0);
    // Estimate 0.2: with nothing in flight, 0.1 + 0.2 fits; a second beside it needs 2 prices.
    assert_eq!(published(&admission.next(t0)), [r(0, 1)]);
    let input = passed(&admission, r(0, 1), 0.1);
    admission.apply(input, t0);
    // Estimate 0.15: 0.2 + 2 × 0.15 = 0.5 fits, a third does not.
    assert_eq!(published(&admission.next(t0)), [r(0, 2), r(0, 3)]);
    assert_eq!(
        admission.progress().held_by.as_deref(),
        Some("batch budget")
    );
    for index in [2, 3] {
        let input = passed(&admission, r(0, index), 0.1);
        admission.apply(input, t0);
    }
    // Spent 0.4 + 0.15 > 0.5 with nothing in flight: the budget ends the batch.
    let decision = admission.next(t0);
    assert_eq!(published(&decision), []);
    assert!(matches!(
        decision.notes[..],
        [Note::BudgetStopped { units: 2, .. }]
    ));
    assert_eq!(decision.end, Some(End::Decided));
    let reduction = admission.finish().expect("decided");
    let rollups = reduction.rollups.expect("a repeat batch");
    assert_eq!(rollups[0].stopped_early, Some(StopReason::Budget));
    assert_eq!(rollups[1].completed, 0);
    let meta = admission.fleet_meta(&admission.finish().expect("decided"));
    let budget = meta.batch_budget.expect("a batch budget");
    assert!(budget.stopped && budget.stopped_units.len() == 2);
}

#[test]
fn a_model_limit_holds_its_model_and_lets_others_go() {
    let limits = Arc::new(ModelLimits::new(vec![
        ModelLimit::parse("sonnet=1").expect("a valid rule"),
    ]));
    let plan = plan_of(&[cell("sonnet-4"), cell("opus-4")], repeat(3));
    let (mut admission, t0) = start(
        &plan,
        AdmissionConfig {
            model_limits: Arc::clone(&limits),
            ..config(4)
        },
    );
    let decision = admission.next(t0);
    assert_eq!(published(&decision), [r(0, 0), r(1, 0), r(1, 1), r(1, 2)]);
    assert!(
        decision.wait_for_release,
        "a release of sonnet may unblock it"
    );
    assert_eq!(
        admission.progress().held_by.as_deref(),
        None,
        "the window is full"
    );
    let input = passed(&admission, r(1, 0), 0.1);
    admission.apply(input, t0);
    let decision = admission.next(t0);
    assert_eq!(published(&decision), [], "sonnet is still at its limit");
    assert_eq!(
        admission.progress().held_by.as_deref(),
        Some("model limit sonnet=1")
    );
    let input = passed(&admission, r(0, 0), 0.1);
    admission.apply(input, t0);
    let decision = admission.next(t0);
    assert!(decision.released_slots);
    assert_eq!(published(&decision), [r(0, 1)]);
    let meta = admission.fleet_meta(&reduction_so_far(&admission));
    assert_eq!(meta.model_limits["sonnet=1"].max_in_flight, 1);
    assert_eq!(
        meta.model_limits["sonnet=1"].delayed_admissions, 2,
        "r0/1 counts once however long it waited, then r0/2 waits behind it"
    );
    drop(admission);
    assert_eq!(
        limits.snapshot()[0].1,
        0,
        "slots go back when admission ends"
    );
}

/// A reduction for reading the `fleet` key of an undecided batch in a test.
fn reduction_so_far(admission: &Admission) -> BatchReduction {
    let mut reducer = admission.reducer().clone();
    reducer.stop_for_batch_budget();
    reducer.finish().expect("every unit stopped")
}

#[test]
fn a_usage_limit_pauses_its_tier_with_doubling_pauses() {
    let plan = plan_of(&[unit(Tier::Container), unit(Tier::Replay)], repeat(4));
    let (mut admission, t0) = start(&plan, config(1));
    assert_eq!(published(&admission.next(t0)), [r(0, 0)]);
    let limited = finished_with(&admission, r(0, 0), completed(false, Some(0.1), true));
    admission.apply(limited, t0);
    let decision = admission.next(t0);
    assert_eq!(
        decision.notes,
        [Note::Paused {
            tier: Tier::Container,
            pause: PAUSE
        }]
    );
    // The container tier waits; the replay unit goes ahead.
    assert_eq!(published(&decision), [r(1, 0)]);
    assert_eq!(admission.progress().paused_tiers, [Tier::Container]);
    let input = passed(&admission, r(1, 0), 0.1);
    admission.apply(input, t0);
    let decision = admission.next(t0);
    assert_eq!(published(&decision), [r(1, 1)]);
    let input = passed(&admission, r(1, 1), 0.1);
    admission.apply(input, t0);
    let input = passed(&admission, r(1, 2), 0.1);
    let decision = admission.next(t0);
    assert_eq!(published(&decision), [r(1, 2)]);
    admission.apply(input, t0);
    let input = passed(&admission, r(1, 3), 0.1);
    let decision = admission.next(t0);
    assert_eq!(published(&decision), [r(1, 3)]);
    admission.apply(input, t0);
    let decision = admission.next(t0);
    assert_eq!(published(&decision), []);
    assert_eq!(decision.wake_at, Some(t0 + PAUSE));
    assert_eq!(
        admission.progress().held_by.as_deref(),
        Some("usage-limit pause (container)")
    );
    // The pause is over: r0/1 goes, hits the limit again, and the next pause doubles.
    let t1 = t0 + PAUSE;
    assert_eq!(published(&admission.next(t1)), [r(0, 1)]);
    let limited = finished_with(&admission, r(0, 1), completed(false, Some(0.1), true));
    admission.apply(limited, t1);
    let decision = admission.next(t1);
    assert_eq!(decision.wake_at, Some(t1 + PAUSE * 2));
    // A completed run without the limit ends the streak: the next pause starts over.
    let t2 = t1 + PAUSE * 2;
    assert_eq!(published(&admission.next(t2)), [r(0, 2)]);
    let input = passed(&admission, r(0, 2), 0.1);
    admission.apply(input, t2);
    assert_eq!(published(&admission.next(t2)), [r(0, 3)]);
    let limited = finished_with(&admission, r(0, 3), completed(false, Some(0.1), true));
    admission.apply(limited, t2);
    let decision = admission.next(t2);
    assert_eq!(
        decision.notes,
        [Note::Paused {
            tier: Tier::Container,
            pause: PAUSE
        }]
    );
    assert_eq!(
        decision.end,
        Some(End::Decided),
        "a pause holds no job back"
    );
}

#[test]
fn a_cancel_admits_nothing_withdraws_the_queued_and_ends_when_the_started_end() {
    let plan = plan_of(&[unit(Tier::Microvm)], repeat(6));
    let (mut admission, t0) = start(&plan, config(3));
    assert_eq!(published(&admission.next(t0)), [r(0, 0), r(0, 1), r(0, 2)]);
    let input = started(&admission, r(0, 0));
    admission.apply(input, t0);
    admission.apply(Input::Cancel, t0);
    let decision = admission.next(t0);
    assert_eq!(published(&decision), []);
    assert_eq!(decision.withdraw, [Tier::Microvm]);
    assert_eq!(decision.end, None, "waiting for the withdrawal");
    admission.apply(Input::Withdrawn { jobs: 2 }, t0);
    let decision = admission.next(t0);
    assert_eq!(
        (decision.end, decision.withdraw.len()),
        (None, 0),
        "r0 runs"
    );
    let input = passed(&admission, r(0, 0), 0.1);
    admission.apply(input, t0);
    let decision = admission.next(t0);
    assert_eq!(decision.end, Some(End::Cancelled));
    assert_eq!(admission.progress().withdrawn, 2);
    assert_eq!(admission.progress().admitted, 3);

    // Nothing started (a tier no worker serves): the withdrawal alone ends the batch.
    let (mut admission, t0) = start(&plan, config(3));
    admission.next(t0);
    admission.apply(Input::Cancel, t0);
    assert_eq!(admission.next(t0).withdraw, [Tier::Microvm]);
    admission.apply(Input::Withdrawn { jobs: 3 }, t0);
    assert_eq!(admission.next(t0).end, Some(End::Cancelled));
}

#[test]
fn a_silent_job_is_published_again_then_folded_as_an_infra_error() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(2));
    let (mut admission, t0) = start(&plan, config(2));
    assert_eq!(published(&admission.next(t0)), [r(0, 0), r(0, 1)]);
    let input = started(&admission, r(0, 0));
    admission.apply(input, t0);
    let input = passed(&admission, r(0, 1), 0.1);
    admission.apply(input, t0);
    let deadline = t0 + TIMEOUT + GRACE;
    let decision = admission.next(t0);
    assert_eq!(decision.wake_at, Some(deadline));
    assert_eq!(
        admission.next(deadline - Duration::from_millis(1)).publish,
        []
    );
    // Past the deadline: published once more, under a new message id.
    let decision = admission.next(deadline);
    assert_eq!(
        decision.publish,
        [Publish {
            job: r(0, 0),
            republished: 1
        }]
    );
    assert_eq!(admission.progress().republished, 1);
    assert_eq!(
        decision.wake_at, None,
        "no deadline until the new publication starts"
    );
    let t1 = deadline + Duration::from_secs(5);
    let input = started(&admission, r(0, 0));
    admission.apply(input, t1);
    let decision = admission.next(t1 + TIMEOUT + GRACE);
    let [lost] = decision.lost.as_slice() else {
        panic!("one job declared lost: {decision:?}");
    };
    assert_eq!(lost.worker_id, LOST_JOB_WORKER);
    let JobEventKind::Finished { outcome, .. } = &lost.event else {
        panic!("a finished event: {lost:?}");
    };
    assert!(matches!(
        outcome,
        JobOutcome::Error {
            category: ErrorCategory::Infra,
            ..
        }
    ));
    assert_eq!(decision.end, None, "its event has not come back yet");
    let again = admission.next(t1 + TIMEOUT * 3);
    assert!(again.lost.is_empty(), "declared once");
    admission.apply(Input::Event(lost.clone()), t1);
    let decision = admission.next(t1);
    assert_eq!(decision.end, Some(End::Decided));
    assert_eq!(admission.progress().lost, 1);
    let rollups = admission
        .finish()
        .expect("decided")
        .rollups
        .expect("repeat");
    assert_eq!(rollups[0].stopped_early, Some(StopReason::Error));
    assert!(
        !admission
            .fleet_meta(&admission.finish().expect("decided"))
            .workers
            .contains_key(LOST_JOB_WORKER),
        "the coordinator is not a worker"
    );
}

#[test]
fn a_job_the_queue_gave_up_on_is_folded_as_an_infra_error_once() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(1));
    let (mut admission, t0) = start(&plan, config(1));
    assert_eq!(published(&admission.next(t0)), [r(0, 0)]);
    let job_id = admission.job_id(r(0, 0));
    admission.apply(Input::JobLost(job_id.clone()), t0);
    admission.apply(Input::JobLost(job_id.clone()), t0);
    let decision = admission.next(t0);
    assert_eq!(decision.lost.len(), 1);
    admission.apply(Input::JobLost(job_id), t0);
    assert!(admission.next(t0).lost.is_empty());
    let input = Input::Event(decision.lost[0].clone());
    admission.apply(input, t0);
    assert_eq!(admission.next(t0).end, Some(End::Decided));
    let foreign = JobId::new(
        &BatchId::new("b1").expect("valid"),
        UnitRef::File(7),
        Some(0),
    );
    admission.apply(Input::JobLost(foreign), t0);
    assert!(matches!(
        admission.next(t0).notes[..],
        [Note::ForeignJob { .. }]
    ));
}

#[test]
fn the_speculation_bound_keeps_a_diverging_unit_close_to_its_lowest_open_index() {
    let flags = BatchFlags {
        stop_on_diverge: true,
        ..repeat(10)
    };
    let plan = plan_of(&[unit(Tier::Container)], flags);
    let (mut admission, t0) = start(&plan, config(8));
    assert_eq!(published(&admission.next(t0)), [r(0, 0), r(0, 1), r(0, 2)]);
    assert_eq!(
        admission.progress().held_by.as_deref(),
        Some("speculation limit")
    );
    // r1 finishing first moves nothing: the fold still waits for r0.
    let input = passed(&admission, r(0, 1), 0.1);
    admission.apply(input, t0);
    assert_eq!(published(&admission.next(t0)), []);
    let input = passed(&admission, r(0, 0), 0.1);
    admission.apply(input, t0);
    assert_eq!(published(&admission.next(t0)), [r(0, 3), r(0, 4)]);
    // r2 fails: the unit diverged at index 2; r3 and r4 are discarded, nothing else runs.
    let input = finished_with(&admission, r(0, 2), completed(false, Some(0.1), false));
    admission.apply(input, t0);
    assert_eq!(published(&admission.next(t0)), []);
    for index in [3, 4] {
        let input = passed(&admission, r(0, index), 0.1);
        admission.apply(input, t0);
    }
    assert_eq!(admission.next(t0).end, Some(End::Decided));
    let reduction = admission.finish().expect("decided");
    let meta = admission.fleet_meta(&reduction);
    assert_eq!(meta.discarded_total.runs, 2);
    assert!((meta.discarded_total.cost_usd - 0.2).abs() < 1e-12);
    assert_eq!(meta.admission.speculation, Some(DEFAULT_SPECULATION));
    assert_eq!(admission.progress().skipped, 5);
}

#[test]
fn history_starts_the_longest_units_first_but_never_under_a_batch_budget() {
    let units = [unit(Tier::Container); 4];
    // Unit 2 has no history: it counts as the median of the others (100) and ties with unit 3,
    // so plan order decides between them.
    let with_history = AdmissionConfig {
        expected_run_ms: vec![Some(10), Some(1_000), None, Some(100)],
        ..config(4)
    };
    let plan = plan_of(&units, repeat(1));
    let (mut admission, t0) = start(&plan, with_history.clone());
    assert_eq!(
        published(&admission.next(t0)),
        [r(1, 0), r(2, 0), r(3, 0), r(0, 0)]
    );
    let reduction_order = {
        for unit in [0, 1, 2, 3] {
            let input = passed(&admission, r(unit, 0), 0.1);
            admission.apply(input, t0);
        }
        admission.next(t0);
        admission.finish().expect("decided").results
    };
    assert_eq!(
        reduction_order,
        [(0, Some(0)), (1, Some(0)), (2, Some(0)), (3, Some(0))],
        "results keep index order"
    );
    let budgeted = plan_of(
        &units,
        BatchFlags {
            batch_budget_usd: Some(10.0),
            ..repeat(1)
        },
    );
    let (mut admission, t0) = start(&budgeted, with_history);
    assert_eq!(published(&admission.next(t0)), [r(0, 0)]);
    assert_eq!(
        admission
            .fleet_meta(&reduction_so_far(&admission))
            .admission
            .unit_order,
        "plan"
    );
}

#[test]
fn a_malformed_event_is_counted_and_skipped() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(1));
    let (mut admission, t0) = start(&plan, config(1));
    admission.next(t0);
    admission.apply(Input::MalformedEvent, t0);
    let input = passed(&admission, r(0, 0), 0.1);
    admission.apply(input, t0);
    assert_eq!(admission.next(t0).end, Some(End::Decided));
    assert_eq!(admission.progress().malformed_events, 1);
    let meta = admission.fleet_meta(&admission.finish().expect("decided"));
    assert_eq!(meta.jobs.malformed_events, 1);
}

#[test]
fn a_paid_run_whose_result_was_not_stored_counts_as_spend_not_as_a_sample() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(2));
    let (mut admission, t0) = start(&plan, config(1));
    admission.next(t0);
    let lost_after_spend = event(
        &admission,
        r(0, 0),
        JobEventKind::Finished {
            outcome: JobOutcome::Error {
                category: ErrorCategory::InfraAfterSpend,
                message: "storing the result failed after the run".into(),
            },
            artifacts: Vec::new(),
            harness_version: Some("2.0.0".into()),
            exit_code: Some(0),
            run_ms: 5,
            unstored_outcome: Some(completed(true, Some(0.25), false)),
            from_record_of_attempt: None,
        },
    );
    admission.apply(lost_after_spend, t0);
    let progress = admission.progress();
    assert_eq!(
        (progress.errored, progress.passed),
        (1, 0),
        "an error, not a sample"
    );
    assert!(
        (progress.cost_usd - 0.25).abs() < 1e-12,
        "{}",
        progress.cost_usd
    );
}

#[test]
fn catch_up_never_admits_a_finished_job_and_republishes_the_running_ones() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(4));
    let mut admission = Admission::new(&plan, config(4)).expect("reduces");
    let t0 = Instant::now();
    for input in [
        started(&admission, r(0, 0)),
        passed(&admission, r(0, 0), 0.1),
        started(&admission, r(0, 2)),
    ] {
        admission.apply(input, t0);
    }
    admission.end_catch_up();
    assert_eq!(admission.progress().admitted, 2);
    assert_eq!(
        published(&admission.next(t0)),
        [r(0, 2), r(0, 1), r(0, 3)],
        "the running job is taken in first"
    );
    assert_eq!(
        admission.progress().admitted,
        4,
        "r2 was admitted before already"
    );
}

#[test]
fn a_restart_counts_the_running_jobs_of_a_model_before_admitting_more_of_it() {
    let limits = Arc::new(ModelLimits::new(vec![
        ModelLimit::parse("sonnet=2").expect("a valid rule"),
    ]));
    let plan = plan_of(&[cell("sonnet-4"), cell("sonnet-4")], repeat(3));
    let config = AdmissionConfig {
        model_limits: Arc::clone(&limits),
        ..config(8)
    };
    let mut admission = Admission::new(&plan, config).expect("reduces");
    let t0 = Instant::now();
    // The coordinator before the restart had the second unit's first two runs running.
    for input in [started(&admission, r(1, 0)), started(&admission, r(1, 1))] {
        admission.apply(input, t0);
    }
    admission.end_catch_up();
    let decision = admission.next(t0);
    assert_eq!(
        published(&decision),
        [r(1, 0), r(1, 1)],
        "nothing new of the model while its limit is taken by the running jobs"
    );
    assert_eq!(
        admission.progress().held_by.as_deref(),
        Some("model limit sonnet=2")
    );
    let input = passed(&admission, r(1, 0), 0.1);
    admission.apply(input, t0);
    assert_eq!(published(&admission.next(t0)), [r(0, 0)]);
    let meta = admission.fleet_meta(&reduction_so_far(&admission));
    assert_eq!(meta.model_limits["sonnet=2"].max_in_flight, 2);
}

#[test]
fn a_job_an_earlier_coordinator_queued_holds_its_model_slot_when_it_starts() {
    let limits = Arc::new(ModelLimits::new(vec![
        ModelLimit::parse("sonnet=1").expect("a valid rule"),
    ]));
    let plan = plan_of(&[cell("sonnet-4"), cell("sonnet-4")], repeat(2));
    let config = AdmissionConfig {
        model_limits: Arc::clone(&limits),
        ..config(8)
    };
    let (mut admission, t0) = start(&plan, config);
    assert_eq!(published(&admission.next(t0)), [r(0, 0)]);
    // A job published before a restart, still queued then, starts now: it runs, so it counts.
    let input = started(&admission, r(1, 1));
    admission.apply(input, t0);
    let input = passed(&admission, r(0, 0), 0.1);
    admission.apply(input, t0);
    assert_eq!(
        published(&admission.next(t0)),
        [],
        "the started job holds the one slot"
    );
    let meta = admission.fleet_meta(&reduction_so_far(&admission));
    assert_eq!(
        meta.model_limits["sonnet=1"].max_in_flight, 2,
        "what happened"
    );
}

#[test]
fn eval_batches_alternate_units_run_by_run() {
    let mut plan = plan_of(&[unit(Tier::Container), unit(Tier::Container)], repeat(3));
    plan.interleave = true;
    let (mut admission, t0) = start(&plan, config(4));
    assert_eq!(
        published(&admission.next(t0)),
        [r(0, 0), r(1, 0), r(0, 1), r(1, 1)]
    );
}

#[test]
fn plain_units_publish_without_a_repeat_index_and_record_their_stats() {
    let plan = plan_of(
        &[unit(Tier::Container), unit(Tier::Container)],
        BatchFlags::default(),
    );
    let (mut admission, t0) = start(&plan, config(4));
    assert_eq!(published(&admission.next(t0)), [job(0, None), job(1, None)]);
    let input = passed(&admission, job(0, None), 0.2);
    admission.apply(input, t0);
    let input = finished_with(&admission, job(1, None), completed(false, None, false));
    admission.apply(input, t0 + Duration::from_secs(2));
    assert_eq!(admission.next(t0).end, Some(End::Decided));
    let reduction = admission.finish().expect("decided");
    let stats = admission.batch_stats(&reduction, 7, t0 + Duration::from_secs(3));
    assert_eq!(stats.wall_ms, 3000);
    let units: Vec<(u32, u32, u32, Option<f64>)> = stats
        .units
        .iter()
        .map(|u| (u.runs, u.folded, u.passes, u.median_cost_usd))
        .collect();
    assert_eq!(units, [(1, 1, 1, Some(0.2)), (1, 1, 0, None)]);
}

#[test]
fn a_units_run_time_is_the_runs_own_duration_as_the_reports_show_it() {
    // A sim run reports a simulated `durationMs` while its job takes milliseconds (`run_ms` 5
    // here): the history must say what the report says, or a dry run promises "about 0 s".
    let plan = plan_of(
        &[unit(Tier::Container), unit(Tier::Container)],
        BatchFlags::default(),
    );
    let (mut admission, t0) = start(&plan, config(4));
    assert_eq!(published(&admission.next(t0)), [job(0, None), job(1, None)]);
    let mut timed = completed(true, Some(0.2), false);
    if let JobOutcome::Completed { run } = &mut timed {
        run.duration_ms = Some(42_000.0);
    }
    let input = finished_with(&admission, job(0, None), timed);
    admission.apply(input, t0);
    // A result without a duration falls back on the time the worker measured.
    let input = finished_with(&admission, job(1, None), completed(true, None, false));
    admission.apply(input, t0);
    let reduction = admission.finish().expect("decided");
    let stats = admission.batch_stats(&reduction, 7, t0 + Duration::from_secs(3));
    let times: Vec<Option<u64>> = stats.units.iter().map(|u| u.median_run_ms).collect();
    assert_eq!(times, [Some(42_000), Some(5)]);
}

/// A `finished` event of `job` by delivery `attempt`, reporting `outcome` with `artifacts`;
/// `from_record_of_attempt` marks a delivery that did not run the job.
fn report(
    admission: &Admission,
    job: JobRef,
    attempt: u32,
    (outcome, artifacts): (JobOutcome, Vec<ArtifactRef>),
    from_record_of_attempt: Option<u32>,
) -> Input {
    Input::Event(JobEvent {
        protocol: PROTOCOL_VERSION,
        batch_id: BatchId::new("b1").expect("valid literal"),
        job_id: admission.job_id(job),
        attempt,
        generation: 0,
        worker_id: format!("w{attempt}"),
        event: JobEventKind::Finished {
            outcome,
            artifacts,
            harness_version: Some("2.0.0".into()),
            exit_code: Some(0),
            run_ms: 5,
            unstored_outcome: None,
            from_record_of_attempt,
        },
    })
}

#[test]
fn a_stored_run_reported_again_is_a_reack_and_a_second_run_or_another_result_a_duplicate() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(3));
    let (mut admission, t0) = start(&plan, config(3));
    assert_eq!(published(&admission.next(t0)), [r(0, 0), r(0, 1), r(0, 2)]);
    let job_ids: Vec<JobId> = (0..3).map(|index| admission.job_id(r(0, index))).collect();
    let artifact = |job: JobRef, attempt: u32, name: &str, sha: char| ArtifactRef {
        key: cowork_schema::layout::artifact_key(
            &job_ids[job.repeat_index.unwrap_or(0) as usize],
            0,
            attempt,
            name,
        ),
        size: 10,
        sha256: sha.to_string().repeat(64),
    };
    let counts = |admission: &Admission| {
        let progress = admission.progress();
        (progress.finished, progress.reacked, progress.duplicates)
    };

    // r0/0 completed on attempt 1; its ack was lost, attempt 2 reports the stored run.
    let run = (
        completed(true, Some(0.1), false),
        vec![artifact(r(0, 0), 1, RESULT_FILE, 'a')],
    );
    admission.apply(report(&admission, r(0, 0), 1, run.clone(), None), t0);
    admission.apply(report(&admission, r(0, 0), 2, run.clone(), Some(1)), t0);
    assert_eq!(
        counts(&admission),
        (1, 1, 0),
        "the same run again is a re-ack"
    );
    // A delivery that ran the job as well and found the record taken reports the same stored
    // run unmarked: the job ran twice.
    admission.apply(report(&admission, r(0, 0), 3, run.clone(), None), t0);
    assert_eq!(counts(&admission), (1, 1, 1), "a second run is a duplicate");
    // Marked, but another result than the folded one.
    let other = (
        completed(true, Some(0.1), false),
        vec![artifact(r(0, 0), 1, RESULT_FILE, 'b')],
    );
    admission.apply(report(&admission, r(0, 0), 4, other, Some(1)), t0);
    assert_eq!(
        counts(&admission),
        (1, 1, 2),
        "another result is a duplicate"
    );

    // r0/1 ended in an error (no result, a log): the same comparison by digest.
    let crashed = |message: &str| {
        (
            JobOutcome::Error {
                category: ErrorCategory::Crashed,
                message: message.to_owned(),
            },
            vec![artifact(r(0, 1), 1, "stderr.log", 'c')],
        )
    };
    admission.apply(report(&admission, r(0, 1), 1, crashed("killed"), None), t0);
    admission.apply(
        report(&admission, r(0, 1), 2, crashed("killed"), Some(1)),
        t0,
    );
    assert_eq!(counts(&admission), (2, 2, 2));
    admission.apply(
        report(&admission, r(0, 1), 3, crashed("other"), Some(1)),
        t0,
    );
    assert_eq!(counts(&admission), (2, 2, 3));

    // r0/2 was declared lost (an infra error the coordinator folded); the stored run a
    // worker reports later is another result than the folded one.
    let lost = (
        JobOutcome::Error {
            category: ErrorCategory::Infra,
            message: "lost".into(),
        },
        Vec::new(),
    );
    admission.apply(report(&admission, r(0, 2), 1, lost, None), t0);
    let late = (
        completed(true, Some(0.1), false),
        vec![artifact(r(0, 2), 1, RESULT_FILE, 'd')],
    );
    admission.apply(report(&admission, r(0, 2), 2, late, Some(1)), t0);
    assert_eq!(counts(&admission), (3, 2, 4));
    assert_eq!(admission.next(t0).end, Some(End::Decided));
    let fleet = admission
        .fleet_meta(&admission.finish().expect("decided"))
        .jobs;
    assert_eq!((fleet.reacked, fleet.duplicates), (2, 4));
}

mod controls;
mod whole_cost;

#[test]
fn a_job_past_its_timeout_plus_grace_is_named_with_its_worker() {
    let plan = plan_of(&[unit(Tier::Container)], repeat(2));
    let (mut admission, t0) = start(&plan, config(2));
    assert_eq!(published(&admission.next(t0)), [r(0, 0), r(0, 1)]);
    let input = started(&admission, r(0, 0));
    admission.apply(input, t0);
    let deadline = t0 + TIMEOUT + GRACE;
    assert_eq!(
        admission.overdue_jobs(deadline - Duration::from_millis(1)),
        []
    );
    admission.next(deadline);
    let later = deadline + Duration::from_secs(7);
    assert_eq!(
        admission.overdue_jobs(later),
        [(
            admission.job_id(r(0, 0)),
            "w1".to_owned(),
            Duration::from_secs(7)
        )]
    );
    // Its result ends it.
    let input = passed(&admission, r(0, 0), 0.1);
    admission.apply(input, later);
    assert_eq!(admission.overdue_jobs(later), []);
}
mod handbacks;
mod sequential;
mod share;
