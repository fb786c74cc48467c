//! The Markdown summary: short enough for a CI job summary or a PR comment.
//!
//! A verdict line (for an eval, the A/B result first), the simulated and incomplete warnings,
//! one table row per unit (runs, pass rate, flakiness, cost, verdict), the most frequent failure
//! reasons and the stop notes. Text from results is escaped so that it cannot break the tables
//! or inject markup.

use std::fmt::Write as _;

use super::input::{EvalSection, ReportInput};
use super::numbers::{
    cost_text, diff_and_interval, js_number, percent, seconds, share_points, signed_points, usd,
};
use super::summary::{Summary, UnitReport, UnitStatus, quarantine_lines, summarize};

/// Failure reasons listed; the HTML report has all of them.
const TOP_REASONS: usize = 10;
/// Longest quoted message, in characters.
const MESSAGE_CHARS: usize = 160;

/// Escapes text for a Markdown table cell: markup characters get a backslash, `<` and `>`
/// become entities (GitHub renders inline HTML), line breaks become spaces, and every other
/// control or bidi character ([`crate::safe_text::is_unsafe`]) is written as its visible
/// escape (`\x1b`, `\u{202e}`). Every Markdown output (the report, the batch lists of the
/// CLI) escapes outside text with this one function.
pub fn escape_md(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '#' | '~' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\n' | '\r' => out.push(' '),
            c if crate::safe_text::is_unsafe(c) => {
                // The escape's backslash is itself escaped, so it shows as typed.
                out.push('\\');
                out.push_str(&crate::safe_text::escape_char(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// `text` cut to [`MESSAGE_CHARS`] characters, with `…` when cut.
fn shortened(text: &str) -> String {
    if text.chars().count() <= MESSAGE_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MESSAGE_CHARS).collect();
    cut.push('…');
    cut
}

/// The Markdown summary of a batch.
pub fn render_markdown(input: &ReportInput) -> String {
    let summary = summarize(input);
    let mut out = String::with_capacity(4096);
    verdict_line(&mut out, &summary);
    warnings(&mut out, &summary);
    facts_line(&mut out, &summary);
    if summary.is_eval() {
        arms_table(&mut out, &summary);
    } else {
        units_table(&mut out, &summary);
    }
    reasons_table(&mut out, &summary);
    stops_list(&mut out, &summary);
    out
}

/// The heading: the A/B result of an eval, else the batch's verdict and exit code.
fn verdict_line(out: &mut String, summary: &Summary<'_>) {
    let input = summary.input;
    match &input.eval {
        Some(eval) => eval_lead(out, summary.batch_id, eval),
        None => {
            let verdict = summary.batch_word();
            let (mark, exit) = match &input.incomplete {
                Some(_) => ("⚠️", "no exit code: the batch never finished".to_owned()),
                None if input.rollup.ok => ("✅", format!("exit {}", input.rollup.exit_code)),
                None => ("❌", format!("exit {}", input.rollup.exit_code)),
            };
            let _ = writeln!(
                out,
                "## {mark} cowork batch `{}`: {verdict} ({exit})\n",
                summary.batch_id
            );
        }
    }
}

/// The simulated and incomplete warnings, when they apply.
fn warnings(out: &mut String, summary: &Summary<'_>) {
    let input = summary.input;
    if summary.simulated {
        let _ = writeln!(
            out,
            "> [!WARNING]\n> **{}**\n",
            escape_md(&summary.simulated_warning())
        );
    }
    if let Some(record) = summary.quarantine() {
        let lines = quarantine_lines(record);
        let alert = if record.expired.is_empty() {
            "NOTE"
        } else {
            "CAUTION"
        };
        let _ = writeln!(out, "> [!{alert}]");
        for line in lines {
            let _ = writeln!(out, "> {}", escape_md(&line));
        }
        out.push('\n');
    }
    if let Some(incomplete) = &input.incomplete {
        let _ = writeln!(
            out,
            "> [!CAUTION]\n> **INCOMPLETE — {}; {} job(s) never ran. The verdicts judge only \
             the runs that finished.**\n",
            escape_md(&incomplete.reason),
            incomplete.never_ran.len()
        );
    }
}

/// One line of facts: command, executor, shape, passes, cost, discarded runs and times.
fn facts_line(out: &mut String, summary: &Summary<'_>) {
    let input = summary.input;
    let wall = input
        .wall_ms
        .map_or_else(|| "unknown".to_owned(), |ms| seconds(Some(ms as f64)));
    let mut discarded = String::new();
    if summary.discarded.runs > 0 {
        discarded = format!(
            " · {} discarded run(s) (spend {})",
            summary.discarded.runs,
            usd(summary.discarded.cost_usd)
        );
    }
    let runs_per_unit = input.stored.plan.repeat.unwrap_or(1);
    // An eval's units are the arms of each scenario, judged by the A/B comparison: one
    // scenario in two arms is one scenario, and no min pass rate applies.
    let shape = if summary.is_eval() {
        format!(
            "{} scenario(s) × {} arms × {runs_per_unit} run(s)",
            summary.units.len() / summary.eval_arm_count(),
            summary.eval_arm_count()
        )
    } else {
        format!(
            "{} {}(s) × {runs_per_unit} run(s) · min pass rate {}",
            summary.units.len(),
            summary.unit_noun(),
            percent(summary.judging.min_pass_rate)
        )
    };
    // An eval's jobs are plain runs, but the batch is an eval: its mode says so.
    let command = if summary.is_eval() {
        "mode `eval`".to_owned()
    } else {
        format!("command `{}`", input.rollup.command)
    };
    let _ = writeln!(
        out,
        "{command} · executor `{}` · {shape} · {} of {} runs passed · cost of folded runs \
         {}{discarded} · wall time {wall} · summed run time {}\n",
        input.stored.spec.executor.as_str(),
        summary.total_passes,
        summary.total_runs,
        cost_text(summary.total_cost_usd, summary.recorded_cost_usd),
        seconds(summary.summed_run_ms.0),
    );
}

/// The most frequent failure reasons, with an example message each.
fn reasons_table(out: &mut String, summary: &Summary<'_>) {
    if !summary.reasons.is_empty() {
        out.push_str(
            "\n### Top failure reasons\n\n| reason | severity | occurrences | runs | units | example |\n|---|---|---:|---:|---|---|\n",
        );
        for reason in summary.reasons.iter().take(TOP_REASONS) {
            let example = reason
                .messages
                .first()
                .map_or_else(String::new, |(message, _)| escape_md(&shortened(message)));
            let _ = writeln!(
                out,
                "| {} {} | {} | {} | {} | {} | {example} |",
                reason.kind.as_str(),
                escape_md(&reason.key),
                if reason.fail { "fail" } else { "warn" },
                reason.occurrences,
                reason.runs,
                escape_md(&reason.units.join(", ")),
            );
        }
        if summary.reasons.len() > TOP_REASONS {
            let _ = writeln!(
                out,
                "\n… and {} more in the HTML report.",
                summary.reasons.len() - TOP_REASONS
            );
        }
    }
}

/// The stop notes, one per line.
fn stops_list(out: &mut String, summary: &Summary<'_>) {
    if !summary.stops.is_empty() {
        out.push_str("\n### Stops\n\n");
        for note in &summary.stops {
            let _ = writeln!(out, "- {}", escape_md(&note.text));
        }
    }
}

/// Units past which the table lists the worst first, and only as many as fit
/// [`TABLE_BYTES`]: a CI job summary is refused past 1 MiB.
const ORDERED_UNITS: usize = 200;
/// The most bytes the units table may take (a row is ~100 bytes: ~5,000 rows), leaving room
/// under the 1 MiB job-summary limit for the header, the failure reasons and the stops.
const TABLE_BYTES: usize = 512 * 1024;

/// The order of the units table: plan order, or for a big batch the units that did not pass
/// first, the furthest below the bar first, then flaky passing units, then the rest.
fn table_order<'s, 'a>(summary: &'s Summary<'a>) -> Vec<&'s UnitReport<'a>> {
    let mut units: Vec<&UnitReport<'_>> = summary.units.iter().collect();
    if units.len() > ORDERED_UNITS {
        let rank = |unit: &UnitReport<'_>| match unit.status {
            UnitStatus::Passed if unit.flaky() => 1,
            UnitStatus::Passed => 2,
            UnitStatus::NotRun => 3,
            _ => 0,
        };
        // A stable sort keeps plan order among equals.
        units.sort_by(|a, b| {
            rank(a).cmp(&rank(b)).then(
                a.pass_rate
                    .unwrap_or(0.0)
                    .total_cmp(&b.pass_rate.unwrap_or(0.0)),
            )
        });
    }
    units
}

/// One table row per unit, and the cells `--max-cells` cut.
fn units_table(out: &mut String, summary: &Summary<'_>) {
    out.push_str("| unit | runs | pass rate | cost | verdict |\n|---|---:|---:|---:|---|\n");
    let start = out.len();
    let order = table_order(summary);
    let n_units = order.len();
    for (listed, unit) in order.iter().enumerate() {
        if out.len() - start > TABLE_BYTES {
            let not_shown = n_units - listed;
            let passed = order[listed..]
                .iter()
                .filter(|unit| unit.status == UnitStatus::Passed)
                .count();
            let _ = writeln!(
                out,
                "\n{not_shown} more unit(s) not shown ({passed} of them passed): the table \
                 lists the worst first, and the HTML report lists every unit."
            );
            break;
        }
        let rate = unit.pass_rate.map_or_else(|| "-".to_owned(), percent);
        let flaky = if unit.flaky() { " (flaky)" } else { "" };
        let mut verdict = unit.verdict_text();
        if let Some(stop) = unit.stopped_early {
            let _ = write!(verdict, " (stopped: {})", stop.as_str());
        }
        if let UnitStatus::Error(error) = &unit.status {
            let _ = write!(verdict, ": {}", shortened(error));
        }
        if let Some(mark) = summary.quarantine_mark(unit) {
            let _ = write!(verdict, " — {}", mark.text());
        }
        let _ = writeln!(
            out,
            "| `{}` {} | {}/{} | {rate}{flaky} | {} | {} |",
            unit.id,
            escape_md(unit.label),
            unit.completed,
            unit.requested,
            cost_text(unit.cost_usd, unit.recorded_cost_usd),
            escape_md(&verdict),
        );
    }
    if let Some((first, count)) = summary.truncated_cells {
        let _ = writeln!(
            out,
            "\n{count} cell(s) from index {first} were cut by `--max-cells` and never ran."
        );
    }
}

/// An eval's table: one row per arm of each scenario, with its runs, pass rate and cost. The
/// arms are compared by the A/B result above, so no row is judged PASS or FAIL on its own; an
/// arm that errored or stopped early says so.
fn arms_table(out: &mut String, summary: &Summary<'_>) {
    out.push_str("| arm | runs | pass rate | cost |\n|---|---:|---:|---:|\n");
    for unit in &summary.units {
        let rate = unit.pass_rate.map_or_else(|| "-".to_owned(), percent);
        let flaky = if unit.flaky() { " (flaky)" } else { "" };
        let mut note = String::new();
        match &unit.status {
            UnitStatus::Error(error) => note = format!(" (error: {})", shortened(error)),
            UnitStatus::NotRun => note = " (not run)".to_owned(),
            UnitStatus::Incomplete => note = " (incomplete)".to_owned(),
            UnitStatus::Passed | UnitStatus::Failed => {}
        }
        if let Some(stop) = unit.stopped_early {
            let _ = write!(note, " (stopped: {})", stop.as_str());
        }
        let _ = writeln!(
            out,
            "| `{}` {}{} | {}/{} | {rate}{flaky} | {} |",
            unit.id,
            escape_md(unit.label),
            escape_md(&note),
            unit.completed,
            unit.requested,
            cost_text(unit.cost_usd, unit.recorded_cost_usd),
        );
    }
    out.push_str("\nThe arms are compared by the A/B result above, not judged one by one.\n");
}

/// An eval's lead: the A/B verdict as the heading, then the comparison in one line, what p
/// means and how small a difference the runs could detect.
fn eval_lead(out: &mut String, batch_id: &str, eval: &EvalSection) {
    let overall = eval.rows.last().filter(|row| row.pairs > 0);
    let verdict = &eval.verdict_words;
    let mark = match verdict.as_str() {
        "B worse" => "❌",
        "B better" => "✅",
        words if words.contains(" worse than ") => "❌",
        words if words.contains(" better than ") => "✅",
        _ => "➖",
    };
    let _ = writeln!(out, "## {mark} cowork eval `{batch_id}`: {verdict}\n");
    let _ = writeln!(out, "### Eval A/B\n");
    match overall {
        Some(row) => {
            let _ = writeln!(
                out,
                "A = {}, B = {}: {} (B − A = {} points, interval [{}, {}], \
                 p = {}, alpha {})\n",
                escape_md(&eval.arm_a),
                escape_md(&eval.arm_b),
                escape_md(&row.verdict),
                signed_points(row.diff),
                signed_points(row.ci_low),
                signed_points(row.ci_high),
                crate::eval::words::format_p(row.p_value),
                js_number(eval.alpha),
            );
        }
        None => {
            let _ = writeln!(
                out,
                "A = {}, B = {}: nothing to compare (no run completed in both arms)\n",
                escape_md(&eval.arm_a),
                escape_md(&eval.arm_b),
            );
        }
    }
    let _ = writeln!(out, "{}\n", escape_md(&eval.p_sentence));
    if let Some(sentence) = &eval.sensitivity_sentence {
        let _ = writeln!(out, "{}\n", escape_md(sentence));
    }
    if let Some(sentence) = crate::report::input::whole_cost_sentence(eval) {
        let _ = writeln!(out, "{}\n", escape_md(&sentence));
    }
    if let Some(sentence) = &eval.power_sentence {
        let _ = writeln!(out, "{}\n", escape_md(sentence));
    }
    ranking_table(out, eval);
    drivers_table(out, eval);
}

/// With several arms: every candidate against the control, best first, with the Holm-adjusted
/// p-value and the verdict the exit gate reads.
fn ranking_table(out: &mut String, eval: &EvalSection) {
    let Some(first) = eval.ranking.first() else {
        return;
    };
    let _ = writeln!(
        out,
        "Every candidate against the control {}, best first (p adjusted by Holm's method over \
         {} comparisons; the figures above and below are the best candidate's, as B, \
         against the control, as A):\n\n| rank | \
         candidate | passes | B − control (points) | interval | p | Holm p | verdict |\n\
         |---:|---|---:|---:|---:|---:|---:|---|",
        escape_md(&first.control),
        eval.ranking.len()
    );
    for ranked in &eval.ranking {
        let (diff, interval) = if ranked.diff.is_finite() {
            (
                signed_points(ranked.diff),
                format!(
                    "[{}, {}]",
                    signed_points(ranked.ci_low),
                    signed_points(ranked.ci_high)
                ),
            )
        } else {
            ("-".to_owned(), "no complete pair".to_owned())
        };
        let _ = writeln!(
            out,
            "| {} | {} | {}/{} | {diff} | {interval} | {} | {} | {} |",
            ranked.rank,
            escape_md(&ranked.candidate),
            ranked.arm.passes,
            ranked.arm.completed,
            crate::eval::words::format_p(ranked.p_value),
            crate::eval::words::format_p(ranked.holm_p),
            escape_md(&ranked.verdict),
        );
    }
    out.push('\n');
}

/// Where the difference comes from: each scenario's B − A with its interval, most negative
/// first, and the points it adds to the overall B − A.
fn drivers_table(out: &mut String, eval: &EvalSection) {
    let scenarios = eval.scenarios_by_difference();
    if scenarios.is_empty() {
        return;
    }
    out.push_str(
        "Where the difference comes from (scenarios by B − A, where B got worse first; the \
         shares add up to the overall B − A):\n\n| scenario | B − A (points) | interval | \
         complete pairs | share of overall (points) |\n|---|---:|---:|---:|---:|\n",
    );
    for (row, share) in scenarios {
        let (diff, interval) = diff_and_interval(row)
            .unwrap_or_else(|| ("-".to_owned(), "no complete pair, no interval".to_owned()));
        let _ = writeln!(
            out,
            "| {} | {diff} | {interval} | {} | {} |",
            escape_md(&row.scope),
            row.pairs,
            share.map_or_else(|| "-".to_owned(), share_points),
        );
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_escaping_keeps_tables_intact() {
        assert_eq!(
            escape_md("a|b <i>*x*</i>\n`c`"),
            "a\\|b &lt;i&gt;\\*x\\*&lt;/i&gt; \\`c\\`"
        );
    }
}
