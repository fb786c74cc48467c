//! The whole cost of a run (decisions.md#whole-cost): model spend plus sandbox minutes at their
//! tier's price, the flags that set the prices, and the submit-time rule that a batch budget
//! only runs what is priced.
//!
//! - `plan::flags` reads `--sandbox-price TIER=USD_PER_MIN`, `--model-price
//!   MODEL=USD_PER_RUN` and `--allow-unpriced` into [`Pricing`].
//! - [`run_cost`] prices one finished run.
//! - [`unpriced`] and [`refusal`] decide, before anything is stored, whether a batch with
//!   `--batch-budget-usd` runs a tier or model nothing prices.

use std::collections::BTreeSet;

use cowork_schema::history::BatchStats;
use cowork_schema::pricing::Pricing;
use cowork_schema::unit::Tier;

use crate::limits::DEFAULT_MODEL_KEY;
use crate::plan::PlanUnit;

/// The key a unit's runs are priced (and model-limited) by: its model axis, else `default`.
pub fn model_key(unit: &PlanUnit) -> String {
    unit.axes
        .as_ref()
        .and_then(|axes| axes.model.clone())
        .unwrap_or_else(|| DEFAULT_MODEL_KEY.to_owned())
}

/// The `--model-price` of `model`: the longest key it starts with.
pub fn model_price(pricing: &Pricing, model: &str) -> Option<f64> {
    pricing
        .model_usd_per_run
        .iter()
        .filter(|(key, _)| model.starts_with(key.as_str()))
        .max_by_key(|(key, _)| key.len())
        .map(|(_, usd)| *usd)
}

/// The `--sandbox-price` of `tier`.
pub fn sandbox_price(pricing: &Pricing, tier: Tier) -> Option<f64> {
    pricing.sandbox_usd_per_min.get(tier.as_str()).copied()
}

/// What one finished run cost, split.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunCost {
    /// `cost.usd`, else the model's `--model-price`; `None` when neither is known.
    pub model_usd: Option<f64>,
    /// `true` when `model_usd` is the `--model-price` estimate.
    pub estimated: bool,
    /// Minutes × the tier's price; `None` without a price for the tier.
    pub sandbox_usd: Option<f64>,
    pub sandbox_minutes: f64,
}

impl RunCost {
    /// Model plus sandbox spend, unpriced parts counted 0; `None` when neither part is known.
    pub fn whole_usd(&self) -> Option<f64> {
        match (self.model_usd, self.sandbox_usd) {
            (None, None) => None,
            (model, sandbox) => Some(model.unwrap_or(0.0) + sandbox.unwrap_or(0.0)),
        }
    }
}

/// Prices one finished run of `model` on `tier` that reported `reported_usd` and held its
/// sandbox for `sandbox_ms`.
pub fn run_cost(
    pricing: &Pricing,
    (tier, model): (Tier, &str),
    reported_usd: Option<f64>,
    sandbox_ms: u64,
) -> RunCost {
    let reported = reported_usd.filter(|usd| usd.is_finite() && *usd >= 0.0);
    let estimate = model_price(pricing, model).filter(|_| reported.is_none());
    // Milliseconds to minutes; exact enough for any run time a u64 holds.
    let sandbox_minutes = sandbox_ms as f64 / 60_000.0;
    RunCost {
        model_usd: reported.or(estimate),
        estimated: estimate.is_some(),
        sandbox_usd: sandbox_price(pricing, tier).map(|per_min| per_min * sandbox_minutes),
        sandbox_minutes,
    }
}

/// Models whose runs reported a cost in earlier batches (their history prices them).
pub fn priced_models(history: &[BatchStats]) -> BTreeSet<String> {
    history
        .iter()
        .flat_map(|stats| &stats.units)
        .filter(|unit| unit.priced_runs > 0)
        .map(|unit| {
            unit.axes
                .as_ref()
                .and_then(|axes| axes.model.clone())
                .unwrap_or_else(|| DEFAULT_MODEL_KEY.to_owned())
        })
        .collect()
}

/// The tiers and models of a batch that nothing prices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unpriced {
    pub tiers: BTreeSet<Tier>,
    pub models: BTreeSet<String>,
}

impl Unpriced {
    pub fn is_empty(&self) -> bool {
        self.tiers.is_empty() && self.models.is_empty()
    }
}

/// Which tiers and models of `units` (those with jobs) have no price in `pricing`, and, for a
/// model, no priced run in `history_priced` either.
pub fn unpriced(
    units: &[PlanUnit],
    pricing: &Pricing,
    history_priced: &BTreeSet<String>,
) -> Unpriced {
    let mut found = Unpriced::default();
    for unit in units.iter().filter(|unit| unit.cell_error.is_none()) {
        if sandbox_price(pricing, unit.tier).is_none() {
            found.tiers.insert(unit.tier);
        }
        let model = model_key(unit);
        if model_price(pricing, &model).is_none() && !history_priced.contains(&model) {
            found.models.insert(model);
        }
    }
    found
}

/// The submit refusal of a batch budget over unpriced tiers or models, one problem each;
/// `None` when the batch has no batch budget, everything is priced or `--allow-unpriced`.
pub fn refusal(
    batch_budget_usd: Option<f64>,
    pricing: &Pricing,
    unpriced: &Unpriced,
) -> Option<Vec<String>> {
    if batch_budget_usd.is_none() || pricing.allow_unpriced || unpriced.is_empty() {
        return None;
    }
    let mut problems: Vec<String> = unpriced
        .tiers
        .iter()
        .map(|tier| {
            format!(
                "--batch-budget-usd: tier {tier} has no sandbox price, so its minutes would count $0; give one with --sandbox-price {tier}=USD_PER_MIN (e.g. --sandbox-price {tier}=0.02, or {tier}=0 for a host that costs nothing), set it on the coordinator (COWORK_SANDBOX_PRICES), or pass --allow-unpriced",
                tier = tier.as_str()
            )
        })
        .collect();
    problems.extend(unpriced.models.iter().map(|model| {
        format!(
            "--batch-budget-usd: model {model:?} has no price (no earlier run of it reported cost.usd), so a run without a cost would count $0; give one with --model-price {model}=USD_PER_RUN, set it on the coordinator (COWORK_MODEL_PRICES), or pass --allow-unpriced"
        )
    }));
    Some(problems)
}

#[cfg(test)]
mod tests;
