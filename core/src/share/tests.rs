use std::collections::BTreeMap;

use cowork_schema::ids::BatchId;
use cowork_schema::job::Tier;
use cowork_schema::share::Priority;

use super::{FairShare, TierUse};

fn id(name: &str) -> BatchId {
    BatchId::new(name).expect("a valid batch id")
}

fn uses(holding: u64, running: u64, wanting: bool) -> BTreeMap<Tier, TierUse> {
    BTreeMap::from([(
        Tier::Container,
        TierUse {
            holding,
            running,
            wanting,
        },
    )])
}

fn shared(slots: u64) -> FairShare {
    let share = FairShare::new();
    share.set_slots(BTreeMap::from([(Tier::Container, slots)]));
    share
}

#[test]
fn a_tier_without_a_slot_count_is_not_shared() {
    let share = FairShare::new();
    share.join(&id("sweep"), Priority::Normal, None, &[Tier::Container]);
    let (allowances, _) = share.report(&id("sweep"), &uses(64, 8, true));
    assert!(allowances.is_empty());
}

#[test]
fn a_newcomer_is_allowed_its_half_while_the_sweep_holds_every_slot() {
    let share = shared(8);
    share.join(&id("sweep"), Priority::Normal, None, &[Tier::Container]);
    let (alone, _) = share.report(&id("sweep"), &uses(8, 8, true));
    assert_eq!(alone[&Tier::Container].allowed, 8);
    share.join(&id("laptop"), Priority::Normal, None, &[Tier::Container]);
    let (mine, _) = share.report(&id("laptop"), &uses(0, 0, true));
    assert_eq!(mine[&Tier::Container].allowed, 4);
    let (sweep, _) = share.report(&id("sweep"), &uses(8, 8, true));
    assert_eq!(sweep[&Tier::Container].allowed, 4);
    let shown = share.shares_of(&id("sweep"));
    assert_eq!(
        shown[0].waits_for.as_deref(),
        Some("sharing 8 slots of tier container with 1 batch")
    );
    assert_eq!(
        (shown[0].running, shown[0].queued, shown[0].batches),
        (8, 0, 2)
    );
}

#[test]
fn finishing_jobs_or_wanting_less_frees_slots_for_others() {
    let share = shared(8);
    share.join(&id("a"), Priority::Normal, None, &[Tier::Container]);
    let (_, freed) = share.report(&id("a"), &uses(8, 8, true));
    assert!(!freed);
    let (_, freed) = share.report(&id("a"), &uses(7, 7, true));
    assert!(freed);
    let (_, freed) = share.report(&id("a"), &uses(7, 7, false));
    assert!(freed);
    let (_, freed) = share.report(&id("a"), &uses(8, 7, true));
    assert!(!freed);
}

#[test]
fn lower_classes_wait_behind_urgent_batches_and_say_so() {
    let share = shared(8);
    share.join(&id("sweep"), Priority::Batch, None, &[Tier::Container]);
    share.report(&id("sweep"), &uses(8, 8, true));
    share.join(&id("pr"), Priority::Urgent, None, &[Tier::Container]);
    let (pr, _) = share.report(&id("pr"), &uses(0, 0, true));
    assert_eq!(pr[&Tier::Container].allowed, 7);
    assert_eq!(
        pr[&Tier::Container].reason,
        "7 of the 8 slots of tier container in use, 1 kept for lower classes, which never starve"
    );
    let (sweep, _) = share.report(&id("sweep"), &uses(8, 8, true));
    assert_eq!(sweep[&Tier::Container].allowed, 1);
    assert_eq!(sweep[&Tier::Container].reason, "behind 1 urgent batch");
}

#[test]
fn a_token_quota_caps_its_batches_together() {
    let share = shared(16);
    share.set_quotas(BTreeMap::from([("team-a".to_owned(), 4)]));
    share.join(
        &id("a1"),
        Priority::Normal,
        Some("team-a".to_owned()),
        &[Tier::Container],
    );
    share.join(
        &id("a2"),
        Priority::Normal,
        Some("team-a".to_owned()),
        &[Tier::Container],
    );
    share.join(&id("b"), Priority::Normal, None, &[Tier::Container]);
    let (a1, _) = share.report(&id("a1"), &uses(2, 2, true));
    assert_eq!(a1[&Tier::Container].allowed, 2);
    assert_eq!(
        a1[&Tier::Container].reason,
        "token quota 4 reached (team-a)"
    );
    let (b, _) = share.report(&id("b"), &uses(0, 0, true));
    assert_eq!(b[&Tier::Container].allowed, 12);
}

#[test]
fn a_batch_that_left_frees_its_claim() {
    let share = shared(8);
    share.join(&id("a"), Priority::Normal, None, &[Tier::Container]);
    share.join(&id("b"), Priority::Normal, None, &[Tier::Container]);
    share.report(&id("a"), &uses(4, 4, true));
    share.leave(&id("a"));
    let (b, _) = share.report(&id("b"), &uses(0, 0, true));
    assert_eq!(b[&Tier::Container].allowed, 8);
    let by_class = share.use_by_class();
    assert_eq!(by_class[&(Tier::Container, Priority::Normal)], (0, 0, 1));
}

#[test]
fn a_replay_slot_takes_a_whole_pack() {
    let share = FairShare::new();
    share.set_slots(BTreeMap::from([(Tier::Replay, 2)]));
    share.join(&id("corpus"), Priority::Normal, None, &[Tier::Replay]);
    let replay = BTreeMap::from([(
        Tier::Replay,
        TierUse {
            holding: 0,
            running: 0,
            wanting: true,
        },
    )]);
    let (allowances, _) = share.report(&id("corpus"), &replay);
    assert_eq!(
        allowances[&Tier::Replay].allowed,
        2 * super::REPLAY_JOBS_PER_SLOT
    );
}
