//! Admission's side of the fair share ([`crate::share`]): before each round the batch says
//! what it holds of each tier and takes its allowances; a job of a tier where it holds its
//! allowance waits; after the round it says which tiers it wanted more of.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cowork_schema::job::Tier;

use cowork_schema::ids::BatchId;
use cowork_schema::share::Priority;

use super::{Admission, Wait};
use crate::share::{FairShare, TierUse};

/// How a batch takes part in the fair share.
#[derive(Clone, Debug)]
pub struct ShareClaim {
    /// The division the batches of the process share.
    pub share: Arc<FairShare>,
    /// The token policy the batch was submitted under, whose quota it counts against.
    pub token: Option<String>,
}

/// A batch's seat at the fair share: taken when its admission is made, given up when it is
/// dropped (the batch ended, or its supervision stopped), so its slots go to the others.
#[derive(Debug)]
pub(super) struct ShareSeat {
    share: Arc<FairShare>,
    batch_id: BatchId,
    /// Jobs outstanding per tier, counted at the round's start and as it admits.
    holding: BTreeMap<Tier, u64>,
    /// What each shared tier allows the batch this round.
    allowed: BTreeMap<Tier, u64>,
    /// Tiers where a ready job waited for the share this round (or the last one).
    wanting: BTreeSet<Tier>,
    /// Every tier the batch's jobs run on.
    tiers: Vec<Tier>,
}

impl ShareSeat {
    pub(super) fn take(
        claim: ShareClaim,
        batch_id: &BatchId,
        priority: Priority,
        tiers: Vec<Tier>,
    ) -> ShareSeat {
        claim.share.join(batch_id, priority, claim.token, &tiers);
        ShareSeat {
            share: claim.share,
            batch_id: batch_id.clone(),
            holding: BTreeMap::new(),
            allowed: BTreeMap::new(),
            // Until its first round, a batch wants every slot it can get.
            wanting: tiers.iter().copied().collect(),
            tiers,
        }
    }
}

impl Drop for ShareSeat {
    fn drop(&mut self) {
        self.share.leave(&self.batch_id);
    }
}

impl Admission {
    /// What the batch holds of each of its tiers, and whether it wants more there.
    fn share_uses(&self, seat: &ShareSeat) -> BTreeMap<Tier, TierUse> {
        let mut uses: BTreeMap<Tier, TierUse> = seat
            .tiers
            .iter()
            .map(|tier| (*tier, TierUse::default()))
            .collect();
        for job in self.outstanding.values() {
            let used = uses.entry(self.units[job.unit as usize].tier).or_default();
            used.holding += 1;
            used.running += u64::from(job.starts > 0);
        }
        for tier in &seat.wanting {
            uses.entry(*tier).or_default().wanting = true;
        }
        uses
    }

    /// Before a round: reports what the batch holds and takes this round's allowances.
    /// `true` when the report frees slots for other batches.
    pub(super) fn share_round_begins(&mut self) -> bool {
        let Some(mut seat) = self.share.take() else {
            return false;
        };
        let uses = self.share_uses(&seat);
        let (allowances, freed) = seat.share.report(&self.batch_id, &uses);
        seat.holding = uses
            .iter()
            .map(|(tier, used)| (*tier, used.holding))
            .collect();
        seat.allowed = allowances
            .into_iter()
            .map(|(tier, allowance)| (tier, allowance.allowed))
            .collect();
        seat.wanting.clear();
        self.share = Some(seat);
        freed
    }

    /// Why the next job of `unit` waits for the share, if it does.
    pub(super) fn share_holds(&mut self, unit: u32) -> Option<Wait> {
        let tier = self.units[unit as usize].tier;
        let seat = self.share.as_mut()?;
        let allowed = *seat.allowed.get(&tier)?;
        let holding = seat.holding.get(&tier).copied().unwrap_or(0);
        if holding < allowed {
            return None;
        }
        seat.wanting.insert(tier);
        Some(Wait::Share(tier))
    }

    /// A job of `unit` was admitted this round.
    pub(super) fn share_admitted(&mut self, unit: u32) {
        let tier = self.units[unit as usize].tier;
        if let Some(seat) = self.share.as_mut() {
            *seat.holding.entry(tier).or_default() += 1;
        }
    }

    /// After a round: reports what the batch holds now and where it wanted more. Returns
    /// whether the share holds a ready job back (wait for others to free slots) and whether
    /// the report frees slots for others.
    pub(super) fn share_round_ends(&mut self) -> (bool, bool) {
        let Some(seat) = self.share.take() else {
            return (false, false);
        };
        let uses = self.share_uses(&seat);
        let (_, freed) = seat.share.report(&self.batch_id, &uses);
        let waits = !seat.wanting.is_empty();
        self.share = Some(seat);
        (waits, freed)
    }
}

impl Admission {
    /// Puts what the batch holds of each tier in its progress, and says why the share holds
    /// it back where it does.
    pub(super) fn show_shares(&mut self) {
        let Some(seat) = &self.share else {
            return;
        };
        let shares = seat.share.shares_of(&self.batch_id);
        if let Some(held_by) = &self.progress.held_by
            && let Some((tier, reason)) = shares.iter().find_map(|share| {
                let reason = share.waits_for.as_ref()?;
                Some((share.tier, reason))
            })
            && held_by == &Wait::Share(tier).held_by()
        {
            self.progress.held_by = Some(format!("{held_by}: {reason}"));
        }
        self.progress.shares = shares;
    }
}
