//! The eval hook: the A/B statistics of an eval batch as the report renders them, computed
//! elsewhere and handed over in plain structs.

/// EVAL HOOK: the A/B statistics of an eval batch, rendered as the report's lead section.
///
/// The report only renders these values; the statistics themselves (exact interval, exact
/// McNemar test, sensitivity, verdict) are computed elsewhere and converted into this plain
/// struct by the caller that builds the [`ReportInput`](super::ReportInput).
#[derive(Clone, Debug, PartialEq)]
pub struct EvalSection {
    /// Label of arm A's source (skill dir or plugin), as the user gave it.
    pub arm_a: String,
    /// Label of arm B's source.
    pub arm_b: String,
    /// Significance level of the verdicts (e.g. 0.05).
    pub alpha: f64,
    /// Confidence level of the intervals (e.g. 0.95).
    pub confidence: f64,
    /// How the verdict is decided, shown verbatim (the rule is ours, not upstream's).
    pub decision_rule: String,
    /// How the intervals are computed, shown verbatim.
    pub interval_method: String,
    /// What the overall p-value means, in one plain line.
    pub p_sentence: String,
    /// How small a difference the runs could detect, in one plain line; `None` for reports
    /// stored before these figures existed.
    pub sensitivity_sentence: Option<String>,
    /// The test's power at arm A's observed pass rate, in one plain line; `None` for reports
    /// stored before the figure existed.
    pub power_sentence: Option<String>,
    /// The verdict the report leads with, as the eval document words it
    /// ([`crate::eval::document_verdict_words`]): `B worse`, `B better`, `no detectable
    /// difference` or `nothing to compare`; with several arms each candidate that differs from
    /// the control (`v2 worse than base`), or `no detectable difference from base`.
    pub verdict_words: String,
    /// One row per scenario, then the overall row.
    pub rows: Vec<EvalRow>,
    /// With three or more arms: every candidate against the control, best first; `rows` are
    /// then the best candidate's. Empty in the two-arm form.
    pub ranking: Vec<RankedArm>,
}

/// One candidate of an eval with several arms, against the control.
#[derive(Clone, Debug, PartialEq)]
pub struct RankedArm {
    pub rank: u32,
    /// `NAME (source)` of the candidate.
    pub candidate: String,
    /// `NAME (source)` of the control.
    pub control: String,
    pub arm: EvalArm,
    /// The overall B − control and its interval; NaN without a complete pair.
    pub diff: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    /// The unadjusted and the Holm-adjusted overall p-value.
    pub p_value: f64,
    pub holm_p: f64,
    /// `better`, `worse` or `no difference`, on the Holm-adjusted p-value.
    pub verdict: String,
}

/// One row of the eval table: a scenario, or the overall pool.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalRow {
    /// Scenario name, or `overall`.
    pub scope: String,
    pub arm_a: EvalArm,
    pub arm_b: EvalArm,
    /// pass rate(B) − pass rate(A) over the paired outcomes.
    pub diff: f64,
    /// Lower end of the interval of `diff`.
    pub ci_low: f64,
    /// Upper end of the interval of `diff`.
    pub ci_high: f64,
    /// Pairs where A passed and B failed (McNemar's b).
    pub a_only_passes: u64,
    /// Pairs where A failed and B passed (McNemar's c).
    pub b_only_passes: u64,
    /// Exact two-sided McNemar p-value.
    pub p_value: f64,
    /// `B better`, `B worse` or `no detectable difference`.
    pub verdict: String,
    /// Pairs left out because one side did not complete.
    pub excluded_pairs: u64,
    /// Complete pairs the row's statistics use.
    pub pairs: u64,
    /// The smallest difference the test could detect with these pairs; `None` when it could
    /// detect none (or the report predates the figure).
    pub min_detectable_diff: Option<f64>,
}

/// One arm's tally within an [`EvalRow`].
#[derive(Clone, Debug, PartialEq)]
pub struct EvalArm {
    pub passes: u64,
    pub completed: u64,
    pub pass_rate: f64,
    /// Sum of `cost.usd` over the arm's runs that had it.
    pub cost_usd: Option<f64>,
    /// Model plus sandbox spend (`wholeCostUsd`), when the eval set prices.
    pub whole_cost_usd: Option<f64>,
}

/// The overall row's whole cost per arm in words, when the eval set prices:
/// `whole cost (model + sandbox): A $0.1234, B $0.2345`.
pub fn whole_cost_sentence(eval: &EvalSection) -> Option<String> {
    let overall = eval.rows.last()?;
    let (a, b) = (overall.arm_a.whole_cost_usd?, overall.arm_b.whole_cost_usd?);
    Some(format!(
        "whole cost (model + sandbox): A ${a:.4}, B ${b:.4}"
    ))
}

impl EvalSection {
    /// The scenario rows (every row but the overall one) listed by their B − A difference, most
    /// negative first (where B got worse leads), rows without a complete pair last; each with its
    /// share of the overall difference (see [`crate::eval::drivers`]).
    pub fn scenarios_by_difference(&self) -> Vec<(&EvalRow, Option<f64>)> {
        let Some((overall, scenarios)) = self.rows.split_last() else {
            return Vec::new();
        };
        let diffs: Vec<(&str, Option<f64>)> = scenarios
            .iter()
            .map(|row| (row.scope.as_str(), (row.pairs > 0).then_some(row.diff)))
            .collect();
        crate::eval::drivers::order_by_difference(&diffs)
            .into_iter()
            .map(|index| {
                let row = &scenarios[index];
                let share = (row.pairs > 0)
                    .then(|| {
                        crate::eval::drivers::share_of_overall(
                            row.a_only_passes,
                            row.b_only_passes,
                            overall.pairs,
                        )
                    })
                    .flatten();
                (row, share)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scope: &str, pairs: u64, (a_only, b_only): (u64, u64)) -> EvalRow {
        let arm = EvalArm {
            passes: 0,
            completed: pairs,
            pass_rate: 0.0,
            cost_usd: None,
            whole_cost_usd: None,
        };
        let diff = if pairs == 0 {
            f64::NAN
        } else {
            (b_only as f64 - a_only as f64) / pairs as f64
        };
        EvalRow {
            scope: scope.to_owned(),
            arm_a: arm.clone(),
            arm_b: arm,
            diff,
            ci_low: diff,
            ci_high: diff,
            a_only_passes: a_only,
            b_only_passes: b_only,
            p_value: 1.0,
            verdict: "no detectable difference".to_owned(),
            excluded_pairs: 0,
            pairs,
            min_detectable_diff: None,
        }
    }

    #[test]
    fn scenarios_are_listed_worst_first_with_their_share_and_without_the_overall_row() {
        // 20 complete pairs overall: "gained" (b, c) = (0, 2) adds +2/20, "lost" (5, 1) adds
        // −4/20, "unpaired" has no complete pair and comes last with no share.
        let section = EvalSection {
            arm_a: "a".to_owned(),
            arm_b: "b".to_owned(),
            alpha: 0.05,
            confidence: 0.95,
            decision_rule: String::new(),
            interval_method: String::new(),
            p_sentence: String::new(),
            sensitivity_sentence: None,
            power_sentence: None,
            verdict_words: "no detectable difference".to_owned(),
            rows: vec![
                row("gained", 10, (0, 2)),
                row("lost", 10, (5, 1)),
                row("unpaired", 0, (0, 0)),
                row("overall", 20, (5, 3)),
            ],
            ranking: Vec::new(),
        };
        let listed: Vec<(&str, Option<f64>)> = section
            .scenarios_by_difference()
            .into_iter()
            .map(|(row, share)| (row.scope.as_str(), share))
            .collect();
        assert_eq!(
            listed,
            [
                ("lost", Some(-0.2)),
                ("gained", Some(0.1)),
                ("unpaired", None)
            ]
        );
        let no_rows = EvalSection {
            rows: Vec::new(),
            ..section
        };
        assert!(no_rows.scenarios_by_difference().is_empty());
    }
    #[test]
    fn the_whole_cost_is_said_only_when_the_eval_set_prices() {
        let mut overall = row("overall", 4, (0, 0));
        let mut section = EvalSection {
            arm_a: "a".to_owned(),
            arm_b: "b".to_owned(),
            alpha: 0.05,
            confidence: 0.95,
            decision_rule: String::new(),
            interval_method: String::new(),
            p_sentence: String::new(),
            sensitivity_sentence: None,
            power_sentence: None,
            verdict_words: "no detectable difference".to_owned(),
            rows: vec![overall.clone()],
            ranking: Vec::new(),
        };
        assert_eq!(whole_cost_sentence(&section), None);
        overall.arm_a.whole_cost_usd = Some(0.3);
        overall.arm_b.whole_cost_usd = Some(0.45);
        section.rows = vec![overall];
        assert_eq!(
            whole_cost_sentence(&section).as_deref(),
            Some("whole cost (model + sandbox): A $0.3000, B $0.4500")
        );
    }
}
