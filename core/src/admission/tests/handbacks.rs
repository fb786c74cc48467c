//! Deliveries handed back: a sandbox that did not start and a run a worker's stop cut short are
//! counted apart and are no attempts of the job; any other hand-back is a retry.

use cowork_schema::event::InfraClass;

use super::*;

fn handed_back(admission: &Admission, job: JobRef, attempt: u32, class: InfraClass) -> Input {
    let Input::Event(mut event) = event(
        admission,
        job,
        JobEventKind::Failed {
            class,
            message: "handed back".into(),
            will_retry: true,
        },
    ) else {
        unreachable!("event builds an event");
    };
    event.attempt = attempt;
    Input::Event(event)
}

fn passed_on(admission: &Admission, job: JobRef, attempt: u32) -> Input {
    let Input::Event(mut event) = passed(admission, job, 0.1) else {
        unreachable!("passed builds an event");
    };
    event.attempt = attempt;
    Input::Event(event)
}

/// Runs one job handed back once with `class`, then passed on delivery 2; returns
/// (retries, sandbox start retries, disrupted, redelivered).
fn counts_after(class: InfraClass) -> (u64, u64, u64, u64) {
    let plan = plan_of(&[unit(Tier::Container)], repeat(1));
    let (mut admission, t0) = start(&plan, config(1));
    assert_eq!(published(&admission.next(t0)), [r(0, 0)]);
    let inputs = [
        started(&admission, r(0, 0)),
        handed_back(&admission, r(0, 0), 1, class),
        started(&admission, r(0, 0)),
        passed_on(&admission, r(0, 0), 2),
    ];
    for input in inputs {
        admission.apply(input, t0);
    }
    let progress = admission.progress();
    assert_eq!(progress.finished, 1);
    (
        progress.retries,
        progress.sandbox_start_retries,
        progress.disrupted,
        progress.redelivered,
    )
}

#[test]
fn a_sandbox_start_failure_and_a_cut_short_run_are_no_attempts() {
    assert_eq!(counts_after(InfraClass::SandboxStart), (0, 1, 0, 0));
    assert_eq!(counts_after(InfraClass::WorkerLost), (0, 0, 1, 0));
    // Any other hand-back is a retry, and the delivery that ran the job a redelivery.
    assert_eq!(counts_after(InfraClass::Bundle), (1, 0, 0, 1));
    assert_eq!(counts_after(InfraClass::Spawn), (1, 0, 0, 1));
}

#[test]
fn a_delivery_that_never_started_the_job_is_no_redelivery() {
    // A stopping worker's puller held the job and gave it back unstarted: its next delivery,
    // the only one that started it, is attempt 2.
    let plan = plan_of(&[unit(Tier::Container)], repeat(2));
    let (mut admission, t0) = start(&plan, config(2));
    assert_eq!(published(&admission.next(t0)), [r(0, 0), r(0, 1)]);
    let inputs = [
        started(&admission, r(0, 0)),
        passed_on(&admission, r(0, 0), 2),
        // A worker lost mid-run: two deliveries started the job.
        started(&admission, r(0, 1)),
        started(&admission, r(0, 1)),
        passed_on(&admission, r(0, 1), 2),
    ];
    for input in inputs {
        admission.apply(input, t0);
    }
    assert_eq!(admission.progress().finished, 2);
    assert_eq!(admission.progress().redelivered, 1);
}
