//! The Markdown summary: short enough for a CI job summary or a PR comment.
//!
//! A verdict line, the simulated warning when any run was simulated, one table row per unit
//! (runs, pass rate, flakiness, cost, verdict), the most frequent failure reasons and the stop
//! notes. Text from results is escaped so that it cannot break the tables or inject markup.

use std::fmt::Write as _;

use super::{ReportInput, UnitStatus, percent, seconds, summarize, usd};

/// Failure reasons listed; the HTML report has all of them.
const TOP_REASONS: usize = 10;
/// Longest quoted message, in characters.
const MESSAGE_CHARS: usize = 160;

/// Escapes text for a Markdown table cell: markup characters get a backslash, `<` and `>`
/// become entities (GitHub renders inline HTML), and line breaks become spaces.
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
    let verdict = summary.verdict_word();
    let mut out = String::with_capacity(4096);
    let mark = if input.rollup.ok { "✅" } else { "❌" };
    let _ = writeln!(
        out,
        "## {mark} cowork batch `{}`: {verdict} (exit {})\n",
        summary.batch_id, input.rollup.exit_code
    );
    if summary.simulated {
        let _ = writeln!(
            out,
            "> [!WARNING]\n> **{}**\n",
            escape_md(&summary.simulated_warning())
        );
    }
    let _ = writeln!(
        out,
        "command `{}` · executor `{}` · {} {}(s) × {} run(s) · min pass rate {} · {} of {} runs \
         passed · total cost {} · run time {}\n",
        input.rollup.command,
        input.stored.spec.executor.as_str(),
        summary.units.len(),
        summary.unit_noun(),
        input.stored.plan.repeat.unwrap_or(1),
        percent(summary.judging.min_pass_rate),
        summary.total_passes,
        summary.total_runs,
        usd(summary.total_cost_usd),
        seconds(summary.total_duration_ms),
    );
    out.push_str("| unit | runs | pass rate | cost | verdict |\n|---|---:|---:|---:|---|\n");
    for unit in &summary.units {
        let rate = unit.pass_rate.map_or_else(|| "-".to_owned(), percent);
        let flaky = if unit.flaky() { " (flaky)" } else { "" };
        let mut verdict = unit.verdict_text();
        if let Some(stop) = unit.stopped_early {
            let _ = write!(verdict, " (stopped: {})", stop.as_str());
        }
        if let UnitStatus::Error(error) = &unit.status {
            let _ = write!(verdict, ": {}", shortened(error));
        }
        let _ = writeln!(
            out,
            "| `{}` {} | {}/{} | {rate}{flaky} | {} | {} |",
            unit.id,
            escape_md(unit.label),
            unit.completed,
            unit.requested,
            usd(unit.cost_usd),
            escape_md(&verdict),
        );
    }
    if let Some((first, count)) = summary.truncated_cells {
        let _ = writeln!(
            out,
            "\n{count} cell(s) from index {first} were cut by `--max-cells` and never ran."
        );
    }
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
    if !summary.stops.is_empty() {
        out.push_str("\n### Stops\n\n");
        for note in &summary.stops {
            let _ = writeln!(out, "- {}", escape_md(&note.text));
        }
    }
    if let Some(eval) = &input.eval
        && let Some(overall) = eval.rows.last()
    {
        let _ = writeln!(
            out,
            "\n### Eval A/B\n\nA = {}, B = {}: {} (B − A = {:+.3}, interval [{:+.3}, {:+.3}], \
             McNemar p = {:.4}, alpha {})",
            escape_md(&eval.arm_a),
            escape_md(&eval.arm_b),
            escape_md(&overall.verdict),
            overall.diff,
            overall.ci_low,
            overall.ci_high,
            overall.p_value,
            super::js_number(eval.alpha),
        );
    }
    out
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
