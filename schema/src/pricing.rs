//! What a batch's runs cost as a whole (decisions.md#whole-cost): the model spend the SDK
//! reports, plus the sandbox minutes a run held on its tier's host at a price per minute.
//!
//! [`Pricing`] is what a batch (or a coordinator, for every batch) says things cost;
//! [`SpendMeta`] is what a batch spent, split, in the envelope's `fleet` key.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Prices of a batch: `--sandbox-price TIER=USD_PER_MIN`, `--model-price MODEL=USD_PER_RUN`
/// and `--allow-unpriced`. A batch's own prices override the coordinator's, tier by tier and
/// model by model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pricing {
    /// USD per minute a run holds a sandbox, by tier (`docker`, `container`, `microvm`, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sandbox_usd_per_min: BTreeMap<String, f64>,
    /// USD charged for a run of a model that reports no `cost.usd`, by model (a key prices
    /// every model that starts with it; the longest key wins; `default` names runs without a
    /// model axis).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub model_usd_per_run: BTreeMap<String, f64>,
    /// `--allow-unpriced`: a batch budget may run tiers and models without a price (they
    /// count 0, and the envelope names them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_unpriced: bool,
}

impl Pricing {
    /// `true` when nothing is priced and nothing allowed (the flags' default).
    pub fn is_empty(&self) -> bool {
        self.sandbox_usd_per_min.is_empty()
            && self.model_usd_per_run.is_empty()
            && !self.allow_unpriced
    }

    /// These prices over `base`'s: every tier and model priced here replaces `base`'s price.
    pub fn over(&self, base: &Pricing) -> Pricing {
        let mut merged = base.clone();
        merged
            .sandbox_usd_per_min
            .extend(self.sandbox_usd_per_min.clone());
        merged
            .model_usd_per_run
            .extend(self.model_usd_per_run.clone());
        merged.allow_unpriced |= self.allow_unpriced;
        merged
    }
}

/// What the batch spent, split: model spend plus sandbox spend is what the batch budget counts.
/// The rollups' `totalCostUsd` stays the harness CLI's own sum of `cost.usd`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpendMeta {
    /// Model spend: the runs' `cost.usd`, and `--model-price` for runs that reported none.
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub model_usd: f64,
    /// Of `modelUsd`, what `--model-price` estimated for runs without `cost.usd`.
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub estimated_model_usd: f64,
    /// Sandbox spend: each run's minutes on its worker × its tier's `--sandbox-price`.
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub sandbox_usd: f64,
    /// Sandbox minutes of every finished run, priced or not.
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub sandbox_minutes: f64,
    /// `modelUsd + sandboxUsd`: the whole cost.
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub total_usd: f64,
    /// Tiers that ran without a sandbox price (counted 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unpriced_tiers: Vec<String>,
    /// Models whose runs reported no cost and had no `--model-price` (counted 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unpriced_models: Vec<String>,
}
