//! Sharing the fleet between batches (decisions.md#fair-share): a batch's priority class and
//! what it holds of each tier's slots, as status readers see it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::unit::Tier;

/// A batch's priority class (`--priority`). Higher classes go first; a lower class keeps a
/// minimum share so it never starves; a started job is never preempted.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// PR checks and people waiting at a terminal.
    Urgent,
    /// The default.
    #[default]
    Normal,
    /// Nightly sweeps and anything that can wait.
    Batch,
}

impl Priority {
    /// Every class, highest first.
    pub const ALL: [Priority; 3] = [Priority::Urgent, Priority::Normal, Priority::Batch];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Urgent => "urgent",
            Priority::Normal => "normal",
            Priority::Batch => "batch",
        }
    }

    /// The class named `name` (`urgent`, `normal`, `batch`).
    pub fn parse(name: &str) -> Option<Priority> {
        Priority::ALL
            .into_iter()
            .find(|class| class.as_str() == name)
    }

    pub fn is_normal(&self) -> bool {
        *self == Priority::Normal
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a running batch holds of one tier's slots, and why it waits when it does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TierShare {
    pub tier: Tier,
    pub priority: Priority,
    /// Jobs of the batch running on the tier.
    pub running: u64,
    /// Jobs of the batch handed to the queue and not started.
    pub queued: u64,
    /// Jobs of the batch the scheduler lets be outstanding (queued or running) on the tier
    /// now: its share.
    pub allowed: u64,
    /// The tier's slots on live workers (`0`: no live worker serves it).
    pub slots: u64,
    /// Batches with jobs of the tier, this one included.
    pub batches: u64,
    /// Why the batch has no more jobs out on the tier, when it wants more: "behind 2 urgent
    /// batches", "token quota 16 reached", "sharing 8 slots with 1 batch". `None` while it is
    /// not held back by the share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<String>,
}

/// `GET /v1/shares`: how each tier's live slots are divided between the running batches
/// (`cowork workers`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetShares {
    pub tiers: Vec<TierShares>,
}

/// One tier's slots and the batches holding or wanting them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TierShares {
    pub tier: Tier,
    /// Slots of live workers; `None` while no worker count was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u64>,
    pub batches: Vec<BatchSlots>,
}

/// What one batch holds of a tier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchSlots {
    pub batch_id: crate::ids::BatchId,
    pub priority: Priority,
    pub running: u64,
    pub queued: u64,
    /// Its share now; `None` on a tier that is not shared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<String>,
}
