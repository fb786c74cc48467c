//! The fair share as admission obeys it: a batch admits on a tier only up to what the share
//! allows it, waits for it (saying so), and gives its slots back as its jobs finish.

use std::collections::BTreeMap;

use cowork_schema::share::Priority;

use super::*;
use crate::share::FairShare;

fn sharing(share: &Arc<FairShare>) -> AdmissionConfig {
    AdmissionConfig {
        fair_share: Some(ShareClaim {
            share: Arc::clone(share),
            token: None,
        }),
        ..config(64)
    }
}

fn batch(name: &str, runs: u32, priority: Priority) -> Plan {
    let mut plan = plan_of(
        &[unit(Tier::Container)],
        BatchFlags {
            priority,
            ..repeat(runs)
        },
    );
    plan.batch_id = BatchId::new(name).expect("valid literal");
    plan
}

fn four_slots() -> Arc<FairShare> {
    let share = Arc::new(FairShare::new());
    share.set_slots(BTreeMap::from([(Tier::Container, 4)]));
    share
}

#[test]
fn a_batch_beside_a_sweep_gets_its_share_and_the_sweep_waits_for_it() {
    let share = four_slots();
    let sweep_plan = batch("sweep", 20, Priority::Normal);
    let (mut sweep, t0) = start(&sweep_plan, sharing(&share));
    assert_eq!(
        published(&sweep.next(t0)).len(),
        4,
        "alone, it takes every slot"
    );
    let held = sweep.next(t0);
    assert!(published(&held).is_empty());
    assert!(held.wait_for_share);
    assert_eq!(
        sweep.progress().held_by.as_deref(),
        Some("fair share (container): all 4 live slots of tier container in use")
    );

    let laptop_plan = batch("laptop", 2, Priority::Normal);
    let (mut laptop, _) = start(&laptop_plan, sharing(&share));
    assert_eq!(
        published(&laptop.next(t0)),
        [r(0, 0), r(0, 1)],
        "half the slots at once"
    );

    // The sweep holds 4 of its 2: it admits nothing until its jobs finish below that.
    let input = passed(&sweep, r(0, 0), 0.1);
    sweep.apply(input, t0);
    let after_one = sweep.next(t0);
    assert!(published(&after_one).is_empty());
    assert!(
        after_one.share_freed,
        "holding less, it wakes the batches that wait"
    );
    for index in [1, 2] {
        let input = passed(&sweep, r(0, index), 0.1);
        sweep.apply(input, t0);
    }
    assert_eq!(published(&sweep.next(t0)), [r(0, 4)]);

    // The laptop's batch ends and leaves: the sweep has every slot again.
    drop(laptop);
    assert_eq!(published(&sweep.next(t0)), [r(0, 5), r(0, 6)]);
}

#[test]
fn an_urgent_batch_takes_the_slots_the_batch_class_gives_up() {
    let share = four_slots();
    let sweep_plan = batch("sweep", 20, Priority::Batch);
    let (mut sweep, t0) = start(&sweep_plan, sharing(&share));
    assert_eq!(published(&sweep.next(t0)).len(), 4);
    let urgent_plan = batch("pr", 8, Priority::Urgent);
    let (mut urgent, _) = start(&urgent_plan, sharing(&share));
    // Three of four slots: the batch class keeps one so it never starves.
    assert_eq!(published(&urgent.next(t0)).len(), 3);
    for index in 0..4 {
        let input = passed(&sweep, r(0, index), 0.1);
        sweep.apply(input, t0);
    }
    assert_eq!(published(&sweep.next(t0)).len(), 1, "its one-slot floor");
    let shown = share.shares_of(&sweep_plan.batch_id);
    assert_eq!(shown[0].waits_for.as_deref(), Some("behind 1 urgent batch"));
}

#[test]
fn a_paused_batch_wants_nothing_and_its_slots_go_to_the_others() {
    let share = four_slots();
    let first_plan = batch("first", 20, Priority::Normal);
    let (mut first, t0) = start(&first_plan, sharing(&share));
    let second_plan = batch("second", 20, Priority::Normal);
    let (mut second, _) = start(&second_plan, sharing(&share));
    assert_eq!(published(&first.next(t0)).len(), 2);
    assert_eq!(published(&second.next(t0)).len(), 2);
    first.apply(
        Input::Controls(cowork_schema::registry::BatchControls {
            paused: true,
            ..Default::default()
        }),
        t0,
    );
    let paused = first.next(t0);
    first.apply(Input::Withdrawn { jobs: 2 }, t0);
    let _ = (paused, first.next(t0));
    assert_eq!(
        published(&second.next(t0)).len(),
        2,
        "the paused batch's half"
    );
}
