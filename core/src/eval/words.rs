//! The eval's numbers in plain words, for the human report on stderr and the HTML report: what
//! a p-value means, and how small a difference the runs could have shown.

use super::{Comparison, EvalReport};

/// A p-value as people read it: three significant digits from 0.1 up (`0.125`), two below
/// (`0.031`, `0.0034`), and `< 0.0001` for anything smaller.
pub fn format_p(p: f64) -> String {
    if p < 0.0001 {
        return "< 0.0001".to_owned();
    }
    let significant = if p >= 0.1 { 3 } else { 2 };
    // Decimals that show `significant` digits: 0.125 needs 3, 0.0034 needs 4.
    let decimals = (significant - 1 - p.log10().floor() as i32).max(0) as usize;
    let text = format!("{p:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// A probability as a share of the time: `12.5%`, `0.3%`, `less than 0.01%`.
fn share_of_time(p: f64) -> String {
    let percent = p * 100.0;
    if percent >= 10.0 {
        let text = format!("{percent:.1}");
        format!("{}%", text.trim_end_matches(".0"))
    } else if percent >= 0.1 {
        format!("{percent:.1}%")
    } else if percent >= 0.01 {
        format!("{percent:.2}%")
    } else {
        "less than 0.01%".to_owned()
    }
}

/// One plain line on what the p-value of `comparison` means.
pub fn p_value_sentence(comparison: &Comparison) -> String {
    let p = comparison.mcnemar_p;
    let discordant = comparison.discordant;
    if comparison.pairs == 0 {
        return "no pair of runs completed in both arms, so there is nothing to test".to_owned();
    }
    if discordant.a_pass_b_fail + discordant.a_fail_b_pass == 0 {
        return format!(
            "p = {}: A and B gave the same result in every one of the {} pairs",
            format_p(p),
            comparison.pairs
        );
    }
    format!(
        "p = {}: a difference at least this large would appear by chance {} of the time if A \
         and B passed equally often",
        format_p(p),
        share_of_time(p)
    )
}

/// A difference of pass rates in points: `60 points`.
pub fn points(difference: f64) -> String {
    format!("{:.0} points", (difference * 100.0).round())
}

/// One plain line on how small a difference the comparisons could detect, and how many runs
/// would detect 20 points. `runs_per_arm` is the runs per arm and scenario. `None` when the
/// report predates these figures or nothing was compared.
pub fn sensitivity_sentence(report: &EvalReport, runs_per_arm: u32) -> Option<String> {
    let sensitivity = report.sensitivity.as_ref()?;
    if report.overall.pairs == 0 {
        return None;
    }
    let n_scenarios = report.scenarios.len().max(1);
    let per_scenario = super::min_detectable_difference(u64::from(runs_per_arm), report.alpha);
    let floor = match per_scenario {
        Some(difference) => format!(
            "with {runs_per_arm} runs per arm a difference under {} cannot be told from noise \
             in one scenario",
            points(difference)
        ),
        None => format!(
            "with {runs_per_arm} runs per arm no difference can be told from noise in one \
             scenario (that takes at least {} runs)",
            sensitivity.min_discordant_pairs
        ),
    };
    let pooled = match (report.overall.min_detectable_diff, n_scenarios > 1) {
        (Some(difference), true) => format!(
            ", nor one under {} over all {} pairs",
            points(difference),
            report.overall.pairs
        ),
        _ => String::new(),
    };
    let runs_for_target = sensitivity.pairs_for_target;
    let target = points(sensitivity.target_diff);
    let needed = if n_scenarios > 1 {
        format!(
            "; at least ~{runs_for_target} runs per arm would detect {target} in one scenario 4 \
             times in 5 (~{} per scenario when pooled over the {n_scenarios} scenarios)",
            runs_for_target.div_ceil(n_scenarios as u64)
        )
    } else {
        format!("; at least ~{runs_for_target} runs per arm would detect {target} 4 times in 5")
    };
    Some(format!("{floor}{pooled}{needed}"))
}

/// A difference on the half-point grid of the power figures: `23.5 points`, `5 points`.
pub fn half_points(difference: f64) -> String {
    let halves = (difference * 200.0).round();
    if halves == 2.0 {
        "1 point".to_owned()
    } else if halves % 2.0 == 0.0 {
        format!("{:.0} points", halves / 2.0)
    } else {
        format!("{:.1} points", halves / 2.0)
    }
}

/// One plain line on the test's power with these pairs at arm A's observed pass rate: the rise
/// of B it detects 4 times in 5, overall and per scenario, and with `--mde` the runs that
/// difference needs. `None` when the report has no power figures.
pub fn power_sentence(report: &EvalReport) -> Option<String> {
    let overall = report.overall.power.as_ref()?;
    let mut sentence = match overall.detectable_diff {
        Some(difference) => format!(
            "power: 4 times in 5 these {} pairs detect B passing {} more than A's {:.0}%",
            report.overall.pairs,
            half_points(difference),
            overall.arm_a_pass_rate * 100.0
        ),
        None => format!(
            "power: these {} pairs are too few to detect B passing more than A's {:.0}% 4 times \
             in 5",
            report.overall.pairs,
            overall.arm_a_pass_rate * 100.0
        ),
    };
    let per_scenario: Vec<Option<f64>> = report
        .scenarios
        .iter()
        .filter_map(|scenario| scenario.comparison.power.as_ref())
        .map(|figures| figures.detectable_diff)
        .collect();
    if per_scenario.len() > 1 {
        let known: Vec<f64> = per_scenario.iter().flatten().copied().collect();
        let least = known.iter().copied().fold(f64::INFINITY, f64::min);
        let most = known.iter().copied().fold(0.0, f64::max);
        let range = match known.len() {
            0 => "none".to_owned(),
            _ if least == most => half_points(least),
            _ => format!(
                "{} to {}",
                half_points(least).replace(" points", ""),
                half_points(most)
            ),
        };
        let missing = per_scenario.len() - known.len();
        let none = if missing > 0 && !known.is_empty() {
            format!(", none in {missing}")
        } else {
            String::new()
        };
        sentence.push_str(&format!(" ({range} within a scenario{none})"));
    }
    if let Some(mde) = overall.mde {
        let everywhere: Option<Vec<u64>> = report
            .scenarios
            .iter()
            .map(|scenario| scenario.comparison.power.as_ref()?.pairs_for_mde)
            .collect();
        let needed = match everywhere.and_then(|runs| runs.into_iter().max()) {
            Some(runs) => format!("~{runs} runs per arm detect it in every scenario"),
            None => "some scenario cannot reach it".to_owned(),
        };
        let pooled = match overall.pairs_for_mde {
            Some(pairs) => format!(
                ", ~{} per scenario pooled",
                pairs.div_ceil(report.scenarios.len().max(1) as u64)
            ),
            None => String::new(),
        };
        sentence.push_str(&format!(
            "; for --mde {}: {needed}{pooled}",
            half_points(mde).replace(" points", "")
        ));
    }
    Some(sentence)
}
