//! The summary's lines about a batch's whole cost (decisions.md#whole-cost): model spend,
//! sandbox spend and what ran unpriced.

use cowork_schema::pricing::SpendMeta;

/// `spend $0.4200 = model $0.3000 + sandbox $0.1200 (6.0 sandbox min)`, then, when something
/// ran without a price, a line naming it.
pub fn spend_lines(spend: &SpendMeta) -> String {
    let mut out = format!(
        "spend ${:.4} = model ${:.4} + sandbox ${:.4} ({:.1} sandbox min)",
        spend.total_usd + 0.0,
        spend.model_usd + 0.0,
        spend.sandbox_usd + 0.0,
        spend.sandbox_minutes
    );
    if spend.estimated_model_usd > 0.0 {
        out.push_str(&format!(
            "; ${:.4} of the model spend is --model-price for runs without cost.usd",
            spend.estimated_model_usd
        ));
    }
    out.push('\n');
    let mut unpriced = Vec::new();
    if !spend.unpriced_tiers.is_empty() {
        unpriced.push(format!("tier {}", spend.unpriced_tiers.join(", ")));
    }
    if !spend.unpriced_models.is_empty() {
        unpriced.push(format!("model {}", spend.unpriced_models.join(", ")));
    }
    if !unpriced.is_empty() {
        out.push_str(&format!(
            "ran unpriced (counted $0 against any budget): {}\n",
            unpriced.join("; ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_and_what_ran_unpriced_are_said() {
        let spend = SpendMeta {
            model_usd: 0.3,
            estimated_model_usd: 0.0,
            sandbox_usd: 0.12,
            sandbox_minutes: 6.0,
            total_usd: 0.42,
            unpriced_tiers: vec!["microvm".into()],
            unpriced_models: vec!["default".into()],
        };
        let text = spend_lines(&spend);
        assert!(
            text.starts_with("spend $0.4200 = model $0.3000 + sandbox $0.1200 (6.0 sandbox min)\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "ran unpriced (counted $0 against any budget): tier microvm; model default"
            ),
            "{text}"
        );
    }
}
