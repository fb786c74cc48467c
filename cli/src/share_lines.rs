//! The fair share in words for a terminal: how each tier's live slots are divided between
//! the running batches (`cowork workers`).

use cowork_schema::share::FleetShares;

/// One block per tier: its slots, then a line per batch holding or wanting them.
pub fn shares_table(shares: &FleetShares) -> String {
    let mut text = String::new();
    for tier in &shares.tiers {
        let slots = tier.slots.map_or_else(
            || "slots not known yet".to_owned(),
            |n| format!("{n} live slots"),
        );
        let running: u64 = tier.batches.iter().map(|batch| batch.running).sum();
        let queued: u64 = tier.batches.iter().map(|batch| batch.queued).sum();
        text.push_str(&format!(
            "tier {}: {slots}, {running} running, {queued} queued\n",
            tier.tier.as_str()
        ));
        for batch in &tier.batches {
            let share = batch
                .allowed
                .map_or_else(String::new, |allowed| format!(", share {allowed}"));
            let waits = batch
                .waits_for
                .as_ref()
                .map_or_else(String::new, |why| format!("  waits: {why}"));
            text.push_str(&format!(
                "  {:<28} {:<7} {:>4} running {:>4} queued{share}{waits}\n",
                batch.batch_id.as_str(),
                batch.priority.as_str(),
                batch.running,
                batch.queued
            ));
        }
    }
    text
}

/// What a batch holds of one tier, and why it waits for more: `cowork status`.
pub fn share_line(share: &cowork_schema::share::TierShare) -> String {
    let others = share.batches.saturating_sub(1);
    let mut line = format!(
        "{} on tier {}: {} running, {} queued of {} live slots",
        share.priority,
        share.tier.as_str(),
        share.running,
        share.queued,
        share.slots
    );
    if others > 0 {
        line.push_str(&format!(
            ", shared with {others} other batch{} (its share now {})",
            if others == 1 { "" } else { "es" },
            share.allowed
        ));
    }
    if let Some(why) = &share.waits_for {
        line.push_str(&format!("; waits: {why}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tier_lists_its_batches_with_their_share_and_why_they_wait() {
        let shares: FleetShares = serde_json::from_value(serde_json::json!({
            "tiers": [{
                "tier": "container", "slots": 8,
                "batches": [
                    { "batchId": "pr-check", "priority": "urgent", "running": 5, "queued": 2, "allowed": 7 },
                    { "batchId": "nightly", "priority": "batch", "running": 1, "queued": 0, "allowed": 1,
                      "waitsFor": "behind 1 urgent batch" }
                ]
            }, { "tier": "microvm", "batches": [] }]
        }))
        .expect("fleet shares");
        let text = shares_table(&shares);
        assert!(
            text.contains("tier container: 8 live slots, 6 running, 2 queued"),
            "{text}"
        );
        assert!(text.contains("nightly"), "{text}");
        assert!(
            text.contains("share 1  waits: behind 1 urgent batch"),
            "{text}"
        );
        assert!(
            text.contains("tier microvm: slots not known yet, 0 running, 0 queued"),
            "{text}"
        );
    }
}
