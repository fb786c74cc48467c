//! The whole cost of a batch's finished runs (decisions.md#whole-cost): model spend plus
//! sandbox minutes at their tier's price. The batch budget admits and stops on it; the
//! envelope's `fleet.spend` shows it split. The per-unit `--max-budget-usd` stays the harness
//! CLI's (model spend only): it is part of each unit's verdict, which must read as the CLI's.

use std::collections::BTreeSet;

use cowork_schema::event::JobOutcome;
use cowork_schema::pricing::{Pricing, SpendMeta};
use cowork_schema::unit::Tier;

use crate::pricing::{RunCost, run_cost};

use super::Admission;
use super::events::Finished;

/// Spend of the finished runs, split, under the batch's prices.
#[derive(Clone, Debug, Default)]
pub(super) struct WholeCost {
    pricing: Pricing,
    model_usd: f64,
    estimated_model_usd: f64,
    sandbox_usd: f64,
    sandbox_minutes: f64,
    unpriced_tiers: BTreeSet<Tier>,
    unpriced_models: BTreeSet<String>,
}

impl WholeCost {
    pub(super) fn new(pricing: &Pricing) -> WholeCost {
        WholeCost {
            pricing: pricing.clone(),
            ..WholeCost::default()
        }
    }

    /// Counts one finished run; returns what it cost.
    pub(super) fn observe(
        &mut self,
        (tier, model): (Tier, &str),
        reported_usd: Option<f64>,
        sandbox_ms: u64,
    ) -> RunCost {
        let cost = run_cost(&self.pricing, (tier, model), reported_usd, sandbox_ms);
        match cost.model_usd {
            Some(usd) => {
                self.model_usd += usd;
                if cost.estimated {
                    self.estimated_model_usd += usd;
                }
            }
            None => {
                self.unpriced_models.insert(model.to_owned());
            }
        }
        match cost.sandbox_usd {
            Some(usd) => self.sandbox_usd += usd,
            None => {
                self.unpriced_tiers.insert(tier);
            }
        }
        self.sandbox_minutes += cost.sandbox_minutes;
        cost
    }

    /// Model plus sandbox spend so far.
    pub(super) fn spent(&self) -> f64 {
        self.model_usd + self.sandbox_usd
    }

    /// The split for the envelope.
    pub(super) fn meta(&self) -> SpendMeta {
        SpendMeta {
            model_usd: self.model_usd,
            estimated_model_usd: self.estimated_model_usd,
            sandbox_usd: self.sandbox_usd,
            sandbox_minutes: self.sandbox_minutes,
            total_usd: self.spent(),
            unpriced_tiers: self
                .unpriced_tiers
                .iter()
                .map(|tier| tier.as_str().to_owned())
                .collect(),
            unpriced_models: self.unpriced_models.iter().cloned().collect(),
        }
    }
}

impl Admission {
    /// The fleet's own prices (the coordinator's `--sandbox-price` and `--model-price`) under
    /// the batch's: the batch's price of a tier or model wins. Call before the first event.
    pub fn use_fleet_prices(&mut self, fleet: &Pricing) {
        self.whole = WholeCost::new(&self.flags.pricing.over(fleet));
    }

    /// The prices this batch is charged at (its own over the fleet's).
    pub fn prices(&self) -> &Pricing {
        &self.whole.pricing
    }

    /// The envelope's `fleet.spend`: with a batch budget or any price set.
    pub(super) fn spend_meta(&self) -> Option<SpendMeta> {
        (self.flags.batch_budget_usd.is_some() || !self.whole.pricing.is_empty())
            .then(|| self.whole.meta())
    }

    /// Charges a first `finished` run its whole cost; the batch budget's estimate learns it.
    pub(super) fn charge(&mut self, finished: &Finished, model_cost: Option<f64>) {
        let unit = &self.units[finished.unit as usize];
        let (tier, model) = (unit.tier, unit.model.clone());
        let cost = self
            .whole
            .observe((tier, &model), model_cost, sandbox_ms(finished));
        if let Some(whole) = cost.whole_usd() {
            self.batch_price.observe(whole);
        }
        if self.flags.batch_budget_usd.is_some() {
            self.progress.budget_spent_usd = Some(self.whole.spent());
        }
    }
}

/// How long the run held its sandbox: the time its worker measured around the job. A simulated
/// run simulates its sandbox too, so its simulated `durationMs` stands in for the worker's few
/// milliseconds.
fn sandbox_ms(finished: &Finished) -> u64 {
    match &finished.outcome {
        JobOutcome::Completed { run } if run.simulated => run
            .duration_ms
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            // `as` saturates for a finite non-negative f64 beyond u64::MAX.
            .map_or(finished.run_ms, |ms| ms.round() as u64),
        _ => finished.run_ms,
    }
}
