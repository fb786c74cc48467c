//! What a unit of a plan (a scenario file or a matrix cell) runs on: its sandbox tier and its
//! matrix axes. Shared by the batch spec and the job message, so it depends on neither.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A sandbox tier; each has its own subject and durable consumer (decisions.md#wire-protocol).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Container,
    Hostloop,
    Microvm,
    Protocol,
    Replay,
}

impl Tier {
    /// Every tier, in subject order.
    pub const ALL: [Tier; 5] = [
        Tier::Container,
        Tier::Hostloop,
        Tier::Microvm,
        Tier::Protocol,
        Tier::Replay,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Container => "container",
            Tier::Hostloop => "hostloop",
            Tier::Microvm => "microvm",
            Tier::Protocol => "protocol",
            Tier::Replay => "replay",
        }
    }

    /// The tier that serves a scenario's declared `fidelity` (default `container`). `cowork`
    /// resolves to `hostloop` or `container` at run time inside the CLI; it needs Docker either
    /// way, so it is routed to `container` workers.
    pub fn for_fidelity(fidelity: Option<&str>) -> Option<Tier> {
        match fidelity.unwrap_or("container") {
            "container" | "cowork" => Some(Tier::Container),
            "hostloop" => Some(Tier::Hostloop),
            "microvm" => Some(Tier::Microvm),
            "protocol" => Some(Tier::Protocol),
            _ => None,
        }
    }

    pub fn parse(value: &str) -> Option<Tier> {
        Tier::ALL.into_iter().find(|tier| tier.as_str() == value)
    }
}

/// The axes of a matrix cell (harness-behaviour.md#matrix-naming): keys `baseline`, `model`,
/// `skillDir`, absent ones omitted, so a no-axes cell serialises as `{}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CellAxes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The declared string from the matrix file (for labels), not the resolved path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill_dir: Option<String>,
}

impl CellAxes {
    /// `axesLabel` of harness-behaviour.md#matrix-naming: `baseline=<v>, model=<v>, skill_dir=<v>`
    /// for the present axes, or `(no axes)`.
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if let Some(v) = &self.baseline {
            parts.push(format!("baseline={v}"));
        }
        if let Some(v) = &self.model {
            parts.push(format!("model={v}"));
        }
        if let Some(v) = &self.skill_dir {
            parts.push(format!("skill_dir={v}"));
        }
        if parts.is_empty() {
            "(no axes)".to_owned()
        } else {
            parts.join(", ")
        }
    }
}
