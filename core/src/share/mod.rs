//! Sharing the fleet between batches (decisions.md#fair-share): every batch the coordinator
//! supervises claims slots of the tiers its jobs run on; [`FairShare`] divides each tier's
//! live slots between the claims ([`allocate`]) and tells each batch's admission how many of
//! its jobs may be outstanding there. Jobs handed to the queue are so bounded by the slots of
//! live workers, not by a per-batch constant: a batch admitted beside a huge sweep has its
//! first jobs next in line for the next free slots.
//!
//! A batch's admission reports what it holds after each of its rounds, and whether a job of
//! the tier was ready that only the share held back (it *wants* more); the division reads those
//! reports, so it changes only when some batch's round, a batch's arrival or end, or the live
//! slots change it. Nothing started is preempted. Like the model limits, one value is shared by
//! the batches of a process; a tier whose slots are not known yet (no worker count read) is
//! not shared, and each batch keeps to its own window there.

mod allocate;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use cowork_schema::ids::BatchId;
use cowork_schema::job::Tier;
use cowork_schema::share::{BatchSlots, FleetShares, Priority, TierShare, TierShares};

pub use allocate::{Claim, MIN_CLASS_SHARE_PERCENT, allocate, class_floor_of};

/// What one batch holds of one tier, as its admission last reported it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierUse {
    /// Jobs outstanding (queued or running).
    pub holding: u64,
    /// Of them, jobs a worker started.
    pub running: u64,
    /// A job of the tier was ready and only the share held it back.
    pub wanting: bool,
}

impl TierUse {
    /// Jobs handed to the queue and not started.
    pub fn queued(&self) -> u64 {
        self.holding.saturating_sub(self.running)
    }

    /// `true` when the batch has a claim on the tier: it holds jobs there or wants some.
    fn claims(&self) -> bool {
        self.holding > 0 || self.wanting
    }
}

/// One batch's standing with the scheduler.
#[derive(Clone, Debug)]
struct Member {
    priority: Priority,
    /// The token policy it was submitted under, whose quota it shares.
    token: Option<String>,
    /// Arrival order: ties go to the earlier batch.
    order: u64,
    tiers: BTreeMap<Tier, TierUse>,
}

#[derive(Debug, Default)]
struct State {
    /// Slots of live workers per tier; a tier absent here is not shared.
    slots: BTreeMap<Tier, u64>,
    /// Running slots at most per token policy name.
    quotas: BTreeMap<String, u64>,
    members: BTreeMap<BatchId, Member>,
    next_order: u64,
}

/// The division of the fleet's slots between the batches of one coordinator.
#[derive(Debug, Default)]
pub struct FairShare {
    state: Mutex<State>,
}

/// What a batch's round may admit on one tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowance {
    /// Jobs of the batch outstanding on the tier at most.
    pub allowed: u64,
    /// Why it may not have more, in words for people (only meaningful when it holds
    /// `allowed` or more and wants more).
    pub reason: String,
}

impl FairShare {
    pub fn new() -> FairShare {
        FairShare::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change is a plain assignment: a poisoned lock still holds a valid state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A batch starts claiming `tiers`; until its first report it wants every slot of them.
    pub fn join(&self, batch: &BatchId, priority: Priority, token: Option<String>, tiers: &[Tier]) {
        let mut state = self.lock();
        let order = state.next_order;
        state.next_order += 1;
        let tiers = tiers
            .iter()
            .map(|tier| {
                let wanting = TierUse {
                    wanting: true,
                    ..TierUse::default()
                };
                (*tier, wanting)
            })
            .collect();
        state.members.insert(
            batch.clone(),
            Member {
                priority,
                token,
                order,
                tiers,
            },
        );
    }

    /// The batch ended (or its supervision stopped): its slots go to the others.
    pub fn leave(&self, batch: &BatchId) {
        self.lock().members.remove(batch);
    }

    /// The slots of live workers per tier, from their heartbeats. Returns `true` when they
    /// changed (batches waiting for their share should look again).
    pub fn set_slots(&self, slots: BTreeMap<Tier, u64>) -> bool {
        let mut state = self.lock();
        if state.slots == slots {
            return false;
        }
        state.slots = slots;
        true
    }

    /// The running-slot quota of each token policy.
    pub fn set_quotas(&self, quotas: BTreeMap<String, u64>) {
        self.lock().quotas = quotas;
    }

    /// Records what `batch` holds now and what each shared tier allows it; `None` for a tier
    /// that is not shared (no slot count known). Returns, with the allowances, `true` when the
    /// report lets other batches admit more (it holds less than before, or wants less).
    pub fn report(
        &self,
        batch: &BatchId,
        uses: &BTreeMap<Tier, TierUse>,
    ) -> (BTreeMap<Tier, Allowance>, bool) {
        let mut state = self.lock();
        let Some(member) = state.members.get_mut(batch) else {
            return (BTreeMap::new(), false);
        };
        let mut freed = false;
        for (tier, used) in uses {
            let before = member.tiers.insert(*tier, *used).unwrap_or_default();
            freed |= used.holding < before.holding || (before.wanting && !used.wanting);
        }
        let allowances = uses
            .keys()
            .filter_map(|tier| Some((*tier, state.allowance(batch, *tier)?)))
            .collect();
        (allowances, freed)
    }

    /// What each batch holding or claiming `tier` holds, for status pages.
    pub fn shares_of(&self, batch: &BatchId) -> Vec<TierShare> {
        let state = self.lock();
        let Some(member) = state.members.get(batch) else {
            return Vec::new();
        };
        member
            .tiers
            .iter()
            // A tier the batch neither holds nor wants is not shared with it.
            .filter(|(_, used)| used.claims())
            .filter_map(|(tier, used)| {
                let allowance = state.allowance(batch, *tier)?;
                let held_back = used.wanting && used.holding >= allowance.allowed;
                Some(TierShare {
                    tier: *tier,
                    priority: member.priority,
                    running: used.running,
                    queued: used.queued(),
                    allowed: allowance.allowed,
                    slots: state.slots.get(tier).copied().unwrap_or(0),
                    batches: state.claimants(*tier).len() as u64,
                    waits_for: held_back.then_some(allowance.reason),
                })
            })
            .collect()
    }

    /// Every tier's slots and what each batch holds of them (`GET /v1/shares`).
    pub fn fleet(&self) -> FleetShares {
        let state = self.lock();
        let mut tiers: BTreeMap<Tier, Vec<BatchSlots>> = BTreeMap::new();
        for (batch_id, member) in &state.members {
            for (tier, used) in &member.tiers {
                let allowance = state.allowance(batch_id, *tier);
                let held_back = allowance
                    .as_ref()
                    .is_some_and(|a| used.wanting && used.holding >= a.allowed);
                tiers.entry(*tier).or_default().push(BatchSlots {
                    batch_id: batch_id.clone(),
                    priority: member.priority,
                    running: used.running,
                    queued: used.queued(),
                    allowed: allowance.as_ref().map(|a| a.allowed),
                    waits_for: allowance.filter(|_| held_back).map(|a| a.reason),
                });
            }
        }
        for tier in state.slots.keys() {
            tiers.entry(*tier).or_default();
        }
        FleetShares {
            tiers: tiers
                .into_iter()
                .map(|(tier, mut batches)| {
                    batches
                        .sort_by(|a, b| (a.priority, &a.batch_id).cmp(&(b.priority, &b.batch_id)));
                    TierShares {
                        tier,
                        slots: state.slots.get(&tier).copied(),
                        batches,
                    }
                })
                .collect(),
        }
    }

    /// Slots in use per tier and priority class, for metrics: (running, queued, batches).
    pub fn use_by_class(&self) -> BTreeMap<(Tier, Priority), (u64, u64, u64)> {
        let state = self.lock();
        let mut out: BTreeMap<(Tier, Priority), (u64, u64, u64)> = BTreeMap::new();
        for member in state.members.values() {
            for (tier, used) in &member.tiers {
                let entry = out.entry((*tier, member.priority)).or_default();
                entry.0 += used.running;
                entry.1 += used.queued();
                entry.2 += 1;
            }
        }
        out
    }
}

impl State {
    /// Batches with a claim on `tier` (holding jobs there or wanting some), by arrival.
    fn claimants(&self, tier: Tier) -> Vec<(&BatchId, &Member, TierUse)> {
        let mut claimants: Vec<_> = self
            .members
            .iter()
            .filter_map(|(id, member)| {
                let used = *member.tiers.get(&tier)?;
                used.claims().then_some((id, member, used))
            })
            .collect();
        claimants.sort_by_key(|(_, member, _)| member.order);
        claimants
    }

    /// Jobs a token's batches hold on every tier but `tier`.
    fn token_holding_elsewhere(&self, token: &str, tier: Tier) -> u64 {
        self.members
            .values()
            .filter(|member| member.token.as_deref() == Some(token))
            .flat_map(|member| member.tiers.iter())
            .filter(|(other, _)| **other != tier)
            .map(|(_, used)| used.holding)
            .sum()
    }

    fn allowance(&self, batch: &BatchId, tier: Tier) -> Option<Allowance> {
        let live_slots = *self.slots.get(&tier)?;
        // The division is of jobs the queue may hold, a replay pack per replay slot.
        let slots = live_slots.saturating_mul(jobs_per_slot(tier));
        let claimants = self.claimants(tier);
        let me = claimants.iter().position(|(id, _, _)| *id == batch);
        let caps = self.token_caps(&claimants, tier);
        let claims: Vec<Claim> = claimants
            .iter()
            .zip(&caps)
            .map(|((_, member, used), cap)| Claim {
                priority: member.priority,
                holding: used.holding,
                wanting: used.wanting,
                cap: *cap,
            })
            .collect();
        let Some(me) = me else {
            // Not claiming the tier now: it may have what a newcomer would get.
            let mut with_me = claims.clone();
            let member = self.members.get(batch)?;
            with_me.push(Claim {
                priority: member.priority,
                holding: 0,
                wanting: true,
                cap: None,
            });
            let allowed = allocate(slots, &with_me).last().copied().unwrap_or(0);
            return Some(Allowance {
                allowed,
                reason: String::new(),
            });
        };
        let allowed = allocate(slots, &claims)[me];
        let reason = self.reason(&claimants, &caps, me, live_slots, tier);
        Some(Allowance { allowed, reason })
    }

    /// The quota left to each claimant's token on `tier`, split evenly between the token's
    /// batches there.
    fn token_caps(
        &self,
        claimants: &[(&BatchId, &Member, TierUse)],
        tier: Tier,
    ) -> Vec<Option<u64>> {
        claimants
            .iter()
            .map(|(_, member, _)| {
                let token = member.token.as_deref()?;
                let quota = *self.quotas.get(token)?;
                let room = quota.saturating_sub(self.token_holding_elsewhere(token, tier));
                let sharing = claimants
                    .iter()
                    .filter(|(_, other, _)| other.token.as_deref() == Some(token))
                    .count() as u64;
                Some(room.div_ceil(sharing.max(1)))
            })
            .collect()
    }

    /// Why the claimant at `me` may not have more of `tier`, whose live slots are `slots`
    /// (in slots, not in the jobs a replay slot takes).
    fn reason(
        &self,
        claimants: &[(&BatchId, &Member, TierUse)],
        caps: &[Option<u64>],
        me: usize,
        slots: u64,
        tier: Tier,
    ) -> String {
        let (_, member, used) = &claimants[me];
        if slots == 0 {
            return format!("no live worker serves tier {}", tier.as_str());
        }
        if let (Some(cap), Some(token)) = (caps[me], member.token.as_deref())
            && used.holding >= cap
        {
            let quota = self.quotas.get(token).copied().unwrap_or(cap);
            return format!("token quota {quota} reached ({token})");
        }
        let higher = claimants
            .iter()
            .filter(|(_, other, _)| other.priority < member.priority)
            .collect::<Vec<_>>();
        if let Some((_, first, _)) = higher.first() {
            let class = first.priority;
            let same = higher
                .iter()
                .filter(|(_, o, _)| o.priority == class)
                .count();
            return format!("behind {same} {class} {}", batches_word(same));
        }
        let same = claimants
            .iter()
            .filter(|(_, other, _)| other.priority == member.priority)
            .count()
            - 1;
        let kept: u64 = Priority::ALL
            .into_iter()
            .filter(|class| *class > member.priority)
            .filter(|class| {
                claimants
                    .iter()
                    .any(|(_, other, _)| other.priority == *class)
            })
            .map(|_| class_floor_of(slots))
            .sum();
        let tier = tier.as_str();
        let kept_words = format!("{kept} kept for lower classes, which never starve");
        match (same, kept) {
            (0, 0) => format!("all {slots} live slots of tier {tier} in use"),
            (0, _) => format!(
                "{} of the {slots} slots of tier {tier} in use, {kept_words}",
                slots.saturating_sub(kept)
            ),
            (_, 0) => format!(
                "sharing {slots} slots of tier {tier} with {same} {}",
                batches_word(same)
            ),
            _ => format!(
                "sharing {slots} slots of tier {tier} with {same} {}, {kept_words}",
                batches_word(same)
            ),
        }
    }
}

/// "batch" or "batches", for `n` of them.
fn batches_word(n: usize) -> &'static str {
    if n == 1 { "batch" } else { "batches" }
}

/// Jobs one free slot of a replay worker takes at once: the workers' default replay pack
/// (`cowork_worker::executor::harness::replay_pack::DEFAULT_REPLAY_PACK`). A replay pays one
/// harness start per pack, so its slots need whole packs queued, and a replay spends nothing
/// a deep queue could waste.
pub const REPLAY_JOBS_PER_SLOT: u64 = 256;

/// Jobs the queue may hold per live slot of `tier`: one (a job starts when a slot frees),
/// or a replay pack.
fn jobs_per_slot(tier: Tier) -> u64 {
    if tier == Tier::Replay {
        REPLAY_JOBS_PER_SLOT
    } else {
        1
    }
}

/// The tiers a set of units runs on, once each.
pub fn tiers_of(tiers: impl IntoIterator<Item = Tier>) -> Vec<Tier> {
    tiers
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests;
