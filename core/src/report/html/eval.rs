//! EVAL HOOK: the A/B section of an eval's page: the verdict, the difference with its
//! interval, the p-value and sensitivity sentences, and one table row per scenario.

use std::fmt::Write as _;

use super::page::{escape, verdict_badge};
use crate::report::input::{EvalArm, EvalSection};
use crate::report::numbers::{
    diff_and_interval, js_number, percent, share_points, signed_points, usd,
};
use crate::report::summary::Summary;

fn arm_cell(arm: &EvalArm) -> String {
    format!(
        "{} ({}/{})",
        percent(arm.pass_rate),
        arm.passes,
        arm.completed
    )
}

/// The CSS class of an A/B verdict: with several arms, worse when any candidate is worse than
/// the control (`v2 worse than base`), better when one is better and none worse.
pub(super) fn ab_class(verdict: &str) -> &'static str {
    match verdict {
        "B worse" => "b-worse",
        "B better" => "b-better",
        _ if verdict.contains(" worse than ") => "b-worse",
        _ if verdict.contains(" better than ") => "b-better",
        _ => "no-difference",
    }
}

/// The A/B verdict of an eval (see [`EvalSection::verdict_words`]).
pub(super) fn ab_verdict(eval: &EvalSection) -> String {
    eval.verdict_words.clone()
}

/// EVAL HOOK: the A/B result, the lead of an eval's report (rendered only from
/// [`ReportInput::eval`]).
pub(super) fn eval_lead(out: &mut String, summary: &Summary<'_>) {
    let Some(eval) = &summary.input.eval else {
        out.push_str(
            "<section id=\"eval\" class=\"ab\">\n<h2>A/B result</h2>\n<p class=\"muted\">The A/B \
             statistics of this eval batch were not computed for this report.</p>\n</section>\n",
        );
        return;
    };
    let verdict = ab_verdict(eval);
    let verdict = verdict.as_str();
    let _ = writeln!(
        out,
        "<section id=\"eval\" class=\"ab\">\n<h2>A/B result: {}</h2>",
        verdict_badge(ab_class(verdict), verdict)
    );
    ranking_table(out, eval);
    let _ = writeln!(
        out,
        "<p>arm A = <code>{}</code> · arm B = <code>{}</code> · alpha {} · {} intervals</p>",
        escape(&eval.arm_a),
        escape(&eval.arm_b),
        js_number(eval.alpha),
        percent(eval.confidence),
    );
    if let Some(overall) = eval.rows.last().filter(|row| row.pairs > 0) {
        let _ = writeln!(
            out,
            "<p class=\"headline\">B − A = <strong>{} points</strong> [{}, {}] over {} complete \
             pairs (A {} · B {})</p>",
            signed_points(overall.diff),
            signed_points(overall.ci_low),
            signed_points(overall.ci_high),
            overall.pairs,
            arm_cell(&overall.arm_a),
            arm_cell(&overall.arm_b),
        );
    }
    let _ = writeln!(out, "<p>{}</p>", escape(&eval.p_sentence));
    if let Some(sentence) = &eval.sensitivity_sentence {
        let _ = writeln!(out, "<p>{}</p>", escape(sentence));
    }
    if let Some(sentence) = crate::report::input::whole_cost_sentence(eval) {
        let _ = writeln!(out, "<p>{}</p>", escape(&sentence));
    }
    if let Some(sentence) = &eval.power_sentence {
        let _ = writeln!(out, "<p>{}</p>", escape(sentence));
    }
    drivers_table(out, eval);
    out.push_str("<h3>Every figure, per scenario and overall</h3>\n");
    eval_table(out, eval);
    let _ = writeln!(
        out,
        "<details><summary>How the verdict and the interval are computed</summary>\
         <p class=\"muted\">decision rule: {}</p><p class=\"muted\">interval: {}</p></details>\n\
         </section>",
        escape(&eval.decision_rule),
        escape(&eval.interval_method),
    );
}

/// Where the difference comes from: each scenario's B − A with its interval, most negative
/// first, and the points it adds to the overall B − A.
fn drivers_table(out: &mut String, eval: &EvalSection) {
    let scenarios = eval.scenarios_by_difference();
    if scenarios.is_empty() {
        return;
    }
    out.push_str(
        "<h3>Where the difference comes from</h3>\n<p class=\"muted\">Scenarios by B − A, where \
         B got worse first. Each interval is the same paired interval as the overall one, over \
         the scenario's own complete pairs. The share is the points a scenario adds to the \
         overall B − A; the shares add up to it.</p>\n<div class=\"wide\"><table class=\"eval \
         drivers\">\n<thead><tr><th>scenario</th><th class=\"num\">B − A (points)</th>\
         <th class=\"num\">interval</th><th class=\"num\">complete pairs</th>\
         <th class=\"num\">share of overall (points)</th></tr></thead>\n<tbody>\n",
    );
    for (row, share) in scenarios {
        let (diff, interval) = diff_and_interval(row)
            .unwrap_or_else(|| ("-".to_owned(), "no complete pair, no interval".to_owned()));
        let _ = writeln!(
            out,
            "<tr data-driver=\"{scope}\"><td>{scope}</td><td class=\"num\">{diff}</td>\
             <td class=\"num\">{interval}</td><td class=\"num\">{pairs}</td>\
             <td class=\"num\">{share}</td></tr>",
            scope = escape(&row.scope),
            pairs = row.pairs,
            share = share.map_or_else(|| "-".to_owned(), share_points),
        );
    }
    out.push_str("</tbody>\n</table></div>\n");
}

fn eval_table(out: &mut String, eval: &EvalSection) {
    out.push_str(
        "<div class=\"wide\"><table class=\"eval\">\n<thead><tr><th>scope</th><th class=\"num\">A pass rate</th>\
         <th class=\"num\">B pass rate</th><th class=\"num\">B − A (points)</th><th class=\"num\">interval</th>\
         <th class=\"num opt\">A-only / B-only passes</th><th class=\"num\">p</th>\
         <th class=\"num opt\">detects ≥</th><th>verdict</th><th class=\"num opt\">excluded pairs</th>\
         <th class=\"num opt\">cost A</th><th class=\"num opt\">cost B</th></tr></thead>\n<tbody>\n",
    );
    for row in &eval.rows {
        let (diff, interval) = diff_and_interval(row)
            .unwrap_or_else(|| ("-".to_owned(), "no complete pair".to_owned()));
        let detects = row
            .min_detectable_diff
            .map_or_else(|| "-".to_owned(), crate::eval::words::points);
        let _ = writeln!(
            out,
            "<tr data-scope=\"{scope}\"><td>{scope}</td><td class=\"num\">{a}</td>\
             <td class=\"num\">{b}</td><td class=\"num\">{diff}</td>\
             <td class=\"num\">{interval}</td><td class=\"num opt\">{a_only} / {b_only}</td>\
             <td class=\"num\">{p}</td><td class=\"num opt\">{detects}</td>\
             <td><strong>{verdict}</strong></td><td class=\"num opt\">{excluded}</td>\
             <td class=\"num opt\">{cost_a}</td><td class=\"num opt\">{cost_b}</td></tr>",
            scope = escape(&row.scope),
            a = arm_cell(&row.arm_a),
            b = arm_cell(&row.arm_b),
            a_only = row.a_only_passes,
            b_only = row.b_only_passes,
            p = escape(&crate::eval::words::format_p(row.p_value)),
            verdict = escape(&row.verdict),
            excluded = row.excluded_pairs,
            cost_a = usd(row.arm_a.cost_usd),
            cost_b = usd(row.arm_b.cost_usd),
        );
    }
    out.push_str("</tbody>\n</table></div>\n");
}

/// With several arms: every candidate against the control, best first, with the Holm-adjusted
/// p-value and the verdict the exit gate reads.
fn ranking_table(out: &mut String, eval: &EvalSection) {
    let Some(first) = eval.ranking.first() else {
        return;
    };
    let _ = writeln!(
        out,
        "<h3>Every candidate against the control</h3>\n<p>Against <code>{}</code>, best first; \
         p adjusted by Holm's method over {} comparisons. Below: the best candidate (arm B) \
         against the control (arm A).</p>\n<table>\n<thead><tr><th>rank</th><th>candidate</th>\
         <th>pass</th><th>B − control (points)</th><th>p</th><th>Holm p</th><th>verdict</th>\
         </tr></thead>\n<tbody>",
        escape(&first.control),
        eval.ranking.len()
    );
    for ranked in &eval.ranking {
        let diff = if ranked.diff.is_finite() {
            format!(
                "{} [{}, {}]",
                signed_points(ranked.diff),
                signed_points(ranked.ci_low),
                signed_points(ranked.ci_high)
            )
        } else {
            "no complete pair".to_owned()
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{diff}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            ranked.rank,
            escape(&ranked.candidate),
            arm_cell(&ranked.arm),
            crate::eval::words::format_p(ranked.p_value),
            crate::eval::words::format_p(ranked.holm_p),
            escape(&ranked.verdict),
        );
    }
    out.push_str("</tbody>\n</table>\n");
}
