//! The submit-time rule of the whole cost (decisions.md#whole-cost): a batch with a batch
//! budget runs only tiers with a sandbox price and models with a price, from the batch's own
//! flags, the coordinator's settings, or (for a model) earlier batches whose runs of it
//! reported `cost.usd`. Shared by the coordinator's submit and the embedded `run` and `eval`.

use std::collections::BTreeSet;

use cowork_core::plan::Plan;
use cowork_core::pricing::{priced_models, refusal, unpriced};
use cowork_fabric::ArtifactStore;
use cowork_schema::pricing::Pricing;

/// Earlier batches read for models that reported a cost.
const PRICE_HISTORY_BATCHES: usize = 50;

/// `Err` with one problem per unpriced tier or model when `plan` has a batch budget over
/// them and no `--allow-unpriced`; `fleet` holds the coordinator's prices (the batch's win).
/// History is read only when a model is unpriced otherwise; unreadable history prices nothing.
pub async fn check_priced(
    store: &dyn ArtifactStore,
    plan: &Plan,
    fleet: &Pricing,
) -> Result<(), Vec<String>> {
    let pricing = plan.flags.pricing.over(fleet);
    let budget = plan.flags.batch_budget_usd;
    if budget.is_none() || pricing.allow_unpriced {
        return Ok(());
    }
    let mut found = unpriced(&plan.units, &pricing, &BTreeSet::new());
    if !found.models.is_empty() {
        let history =
            crate::history::recent_stats(store, PRICE_HISTORY_BATCHES, Some(&plan.batch_id))
                .await
                .unwrap_or_default();
        found = unpriced(&plan.units, &pricing, &priced_models(&history));
    }
    match refusal(budget, &pricing, &found) {
        Some(problems) => Err(problems),
        None => Ok(()),
    }
}
