//! Dispatch pauses per tier after `usage_limit` results (harness-behaviour.md#choice-c9): the first
//! pause is `base`, each further one in a row doubles it up to `max`; a completed run without a
//! usage limit ends the streak. Pausing changes when jobs start, never how they are counted (the
//! run that hit the limit is a completed failing sample, as in the CLI).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cowork_schema::job::Tier;

/// The pauses of one batch's tiers, and what they added up to.
#[derive(Clone, Debug)]
pub struct TierPauses {
    base: Duration,
    max: Duration,
    until: BTreeMap<Tier, Instant>,
    streak: BTreeMap<Tier, u32>,
    count: u64,
    total: Duration,
    by_tier: BTreeMap<Tier, u64>,
}

impl TierPauses {
    pub fn new(base: Duration, max: Duration) -> TierPauses {
        TierPauses {
            base,
            max: max.max(base),
            until: BTreeMap::new(),
            streak: BTreeMap::new(),
            count: 0,
            total: Duration::ZERO,
            by_tier: BTreeMap::new(),
        }
    }

    /// Pauses `tier` from `now` and returns the pause. A usage limit reported while the tier is
    /// paused already (by jobs admitted before the pause) extends nothing.
    pub fn pause(&mut self, tier: Tier, now: Instant) -> Duration {
        if let Some(until) = self.paused_until(tier, now) {
            return until - now;
        }
        let streak = self.streak.entry(tier).or_insert(0);
        let pause = self
            .base
            .saturating_mul(1u32 << (*streak).min(16))
            .min(self.max);
        *streak += 1;
        self.until.insert(tier, now + pause);
        self.count += 1;
        self.total += pause;
        *self.by_tier.entry(tier).or_insert(0) += 1;
        pause
    }

    /// A completed run without a usage limit: the next pause of `tier` starts from `base`.
    pub fn clear_streak(&mut self, tier: Tier) {
        self.streak.remove(&tier);
    }

    /// When `tier`'s pause ends, if it is paused at `now`.
    pub fn paused_until(&self, tier: Tier, now: Instant) -> Option<Instant> {
        self.until.get(&tier).copied().filter(|until| *until > now)
    }

    /// The tiers paused at `now`.
    pub fn paused_tiers(&self, now: Instant) -> Vec<Tier> {
        self.until
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(tier, _)| *tier)
            .collect()
    }

    /// Pauses so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The pauses' total length.
    pub fn total(&self) -> Duration {
        self.total
    }

    /// Pauses so far per tier.
    pub fn by_tier(&self) -> &BTreeMap<Tier, u64> {
        &self.by_tier
    }
}
