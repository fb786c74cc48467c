//! The tables under the heatmap: units (runs, cost, duration), failure reasons, stop reasons
//! and the changes people made to the controls while the batch ran.

use std::fmt::Write as _;

use super::heatmap::cell_state;
use super::page::{escape, verdict_badge};
use crate::report::input::ReportInput;
use crate::report::numbers::{cost_text, percent, seconds, usd};
use crate::report::summary::{Summary, UnitStatus};

pub(super) fn units_table(out: &mut String, summary: &Summary<'_>) {
    let _ = writeln!(
        out,
        "<section id=\"units\">\n<h2>{}: runs, cost and duration</h2>\n<div class=\"wide\">",
        if summary.is_eval() {
            "Arms".to_owned()
        } else {
            format!("{}s", capitalized(summary.unit_noun()))
        }
    );
    out.push_str(
        "<table class=\"units\">\n<thead><tr><th>unit</th><th>label</th><th class=\"num\">runs</th>\
         <th class=\"num\">passes</th><th class=\"num\">pass rate</th><th>verdict</th>\
         <th class=\"num\">cost</th><th class=\"num opt\">cost/run</th>\
         <th class=\"num opt\">mean run time</th><th class=\"num\">summed run time</th>\
         <th class=\"num opt\">tokens</th></tr></thead>\n<tbody>\n",
    );
    for unit in &summary.units {
        let rate = unit.pass_rate.map_or_else(|| "-".to_owned(), percent);
        let flaky = if unit.flaky() {
            " <span class=\"flakymark\">flaky</span>"
        } else {
            ""
        };
        let badge = match (cell_state(unit, summary), unit.stopped_early) {
            ("arm", _) => verdict_badge("arm", "arm (see A/B)"),
            (state, Some(stop)) => verdict_badge(
                state,
                &format!("{} (stopped: {})", unit.verdict_text(), stop.as_str()),
            ),
            (state, None) => verdict_badge(state, &unit.verdict_text()),
        };
        let cost_per_run = unit
            .cost_usd
            .filter(|_| unit.completed > 0)
            .map(|cost| cost / f64::from(unit.completed));
        let tokens = unit
            .tokens
            .map_or_else(|| "-".to_owned(), |tokens| format!("{tokens:.0}"));
        let mut detail = Vec::new();
        if !unit.models.is_empty() {
            detail.push(format!("models: {}", unit.models.join(", ")));
        }
        if !unit.skills.is_empty() {
            detail.push(format!("skill: {}", unit.skills.join(", ")));
        }
        if let UnitStatus::Error(error) = &unit.status {
            detail.push(format!("error: {error}"));
        }
        let badge = match summary.quarantine_mark(unit) {
            Some(mark) => format!(
                "{badge} <span class=\"qmark\" data-quarantine=\"{}\">{}</span>",
                if mark.in_force() {
                    "quarantined"
                } else {
                    "expired"
                },
                escape(&mark.text())
            ),
            None => badge,
        };
        let _ = writeln!(
            out,
            "<tr data-unit=\"{id}\"><td><a href=\"#unit-{id}\"><code>{id}</code></a></td>\
             <td class=\"label\">{label}<span class=\"small\">{detail}</span></td>\
             <td class=\"num\">{completed}/{requested}</td><td class=\"num\">{passes}</td>\
             <td class=\"num\">{rate}{flaky}</td><td>{badge}</td>\
             <td class=\"num\">{cost}</td><td class=\"num opt\">{cost_per_run}</td>\
             <td class=\"num opt\">{mean}</td><td class=\"num\">{total}</td>\
             <td class=\"num opt\">{tokens}</td></tr>",
            id = escape(&unit.id),
            label = escape(unit.label),
            detail = escape(&detail.join(" · ")),
            completed = unit.completed,
            requested = unit.requested,
            passes = unit.passes,
            cost = cost_text(unit.cost_usd, unit.recorded_cost_usd),
            cost_per_run = usd(cost_per_run),
            mean = seconds(unit.mean_duration_ms()),
            total = seconds(unit.duration_ms),
        );
    }
    out.push_str("</tbody>\n</table>\n</div>\n</section>\n");
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

pub(super) fn failures_table(out: &mut String, summary: &Summary<'_>) {
    out.push_str(
        "<section id=\"failures\">\n<h2>Failure reasons by assertion key and signal code</h2>\n",
    );
    if summary.reasons.is_empty() {
        out.push_str("<p class=\"muted\">No folded run failed an assertion or raised a signal.</p>\n</section>\n");
        return;
    }
    out.push_str(
        "<div class=\"wide\"><table class=\"reasons\">\n<thead><tr><th>kind</th><th>key / code</th><th>severity</th>\
         <th class=\"num\">occurrences</th><th class=\"num\">runs</th><th>units</th>\
         <th>messages</th></tr></thead>\n<tbody>\n",
    );
    for reason in &summary.reasons {
        let messages: Vec<String> = reason
            .messages
            .iter()
            .take(3)
            .map(|(message, count)| format!("{}× {}", count, escape(message)))
            .collect();
        let more = reason.messages.len().saturating_sub(3);
        let more = if more > 0 {
            format!("<br><span class=\"muted\">… {more} more distinct message(s)</span>")
        } else {
            String::new()
        };
        let units: Vec<String> = reason
            .units
            .iter()
            .map(|id| format!("<a href=\"#unit-{id}\">{id}</a>", id = escape(id)))
            .collect();
        let _ = writeln!(
            out,
            "<tr data-reason=\"{kind}:{key}\"><td>{kind}</td><td><code>{key}</code></td>\
             <td>{severity}</td><td class=\"num\">{occurrences}</td><td class=\"num\">{runs}</td>\
             <td>{units}</td><td>{messages}{more}</td></tr>",
            kind = reason.kind.as_str(),
            key = escape(&reason.key),
            severity = if reason.fail { "fail" } else { "warn" },
            occurrences = reason.occurrences,
            runs = reason.runs,
            units = units.join(", "),
            messages = messages.join("<br>"),
        );
    }
    out.push_str("</tbody>\n</table></div>\n</section>\n");
}

/// Jobs named in full under "Stop reasons" before the rest are counted.
const NEVER_RAN_LISTED: usize = 60;

pub(super) fn stops_section(out: &mut String, summary: &Summary<'_>) {
    out.push_str("<section id=\"stops\">\n<h2>Stop reasons</h2>\n");
    if summary.stops.is_empty() {
        out.push_str(
            "<p class=\"muted\">No early stop, cell error, truncation or discarded run.</p>\n",
        );
    } else {
        out.push_str("<ul class=\"stops\">\n");
        for note in &summary.stops {
            let _ = writeln!(
                out,
                "<li data-scope=\"{}\">{}</li>",
                escape(&note.scope),
                escape(&note.text)
            );
        }
        out.push_str("</ul>\n");
    }
    if let Some(incomplete) = &summary.input.incomplete {
        let listed: Vec<String> = incomplete
            .never_ran
            .iter()
            .take(NEVER_RAN_LISTED)
            .map(|job| format!("<code>{}</code>", escape(job)))
            .collect();
        let more = incomplete.never_ran.len().saturating_sub(NEVER_RAN_LISTED);
        let _ = writeln!(
            out,
            "<p id=\"never-ran\">Never ran: {}{}</p>",
            listed.join(" "),
            if more > 0 {
                format!(" … and {more} more")
            } else {
                String::new()
            }
        );
    }
    if let Some(error) = &summary.input.envelope.error {
        let _ = writeln!(
            out,
            "<p>envelope error ({}): {}</p>",
            escape(&error.category),
            escape(&error.message)
        );
    }
    out.push_str("</section>\n");
}

/// The changes people made to the batch's controls while it ran (pause, resume of dispatch,
/// adjusted limits): who, when, what, from and to. Nothing when there were none.
pub(super) fn control_changes_section(out: &mut String, input: &ReportInput) {
    let changes = input.envelope.fleet_view().control_changes;
    if changes.is_empty() {
        return;
    }
    out.push_str(
        "<section id=\"control-changes\"><h2>Changes of the controls while it ran</h2>\n\
         <table><thead><tr><th>when (UTC)</th><th>who</th><th>what</th><th>before</th>\
         <th>after</th></tr></thead><tbody>\n",
    );
    for change in &changes {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&cowork_schema::ids::date_time_of_ms(change.at_ms)),
            escape(&change.by),
            escape(&change.control),
            escape(&change.old),
            escape(&change.new)
        );
    }
    out.push_str("</tbody></table></section>\n");
}
