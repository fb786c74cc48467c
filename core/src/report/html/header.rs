//! The page's header: the verdict (an eval's A/B verdict), the SIMULATED and INCOMPLETE
//! banners, and the batch's facts (mode, target, units, flags, runs, deliveries, cost, times).

use std::fmt::Write as _;

use cowork_schema::batch::BatchMode;
use cowork_schema::fleet_key::FleetView;

use super::eval::{ab_class, ab_verdict};
use super::page::{escape, verdict_badge};
use crate::report::input::ReportInput;
use crate::report::numbers::{cost_text, percent, seconds, usd};
use crate::report::summary::{Summary, quarantine_lines};

/// The page's title and header: the batch's verdict (an eval's A/B verdict), then the
/// SIMULATED and INCOMPLETE banners.
pub(super) fn header(out: &mut String, summary: &Summary<'_>) {
    let (noun, class, word) = if summary.is_eval() {
        let verdict = summary
            .input
            .eval
            .as_ref()
            .map_or_else(|| "no A/B result".to_owned(), ab_verdict);
        ("eval", ab_class(&verdict), verdict)
    } else {
        let word = summary.batch_word();
        ("batch", "", word.to_owned())
    };
    let class = if class.is_empty() {
        word.to_ascii_lowercase()
    } else {
        class.to_owned()
    };
    let _ = writeln!(
        out,
        "<header>\n<h1>cowork {noun} <code>{}</code> {}</h1>",
        escape(summary.batch_id),
        verdict_badge(&class, &word)
    );
    if summary.simulated {
        let _ = writeln!(
            out,
            "<div class=\"banner simulated\" id=\"simulated\" role=\"alert\">{}</div>",
            escape(&summary.simulated_warning())
        );
    }
    if let Some(record) = summary.quarantine() {
        let lines: Vec<String> = quarantine_lines(record)
            .iter()
            .map(|line| escape(line))
            .collect();
        let (class, role) = if record.expired.is_empty() {
            ("quarantine", "note")
        } else {
            ("quarantine expired", "alert")
        };
        let _ = writeln!(
            out,
            "<div class=\"banner {class}\" id=\"quarantine\" role=\"{role}\">{}</div>",
            lines.join("<br>")
        );
    }
    if let Some(incomplete) = &summary.input.incomplete {
        let _ = writeln!(
            out,
            "<div class=\"banner incomplete\" id=\"incomplete\" role=\"alert\">INCOMPLETE — {}. \
             The verdicts below judge only the {} run(s) that finished; {} job(s) never ran \
             (<a href=\"#never-ran\">listed below</a>).</div>",
            escape(&incomplete.reason),
            summary.stored_runs,
            incomplete.never_ran.len()
        );
    }
}

/// What the wall time fact says.
fn wall_time(input: &ReportInput) -> String {
    match input.wall_ms {
        Some(ms) => seconds(Some(ms as f64)),
        None => "unknown (not recorded for this batch)".to_owned(),
    }
}

/// What delivering the batch's jobs took, from the envelope's `fleet` key: redeliveries (a
/// worker lost, an ack wait passed), retries, jobs lost for good, jobs a cancel took back, and
/// resumes. Always shown, so "nothing of the kind" is said too.
fn deliveries(fleet: &FleetView) -> String {
    let mut text = format!(
        "{} redelivered, {} retried, {} lost, {} withdrawn by a cancel, resumed {} time(s)",
        fleet.redelivered, fleet.retries, fleet.lost, fleet.withdrawn, fleet.generation,
    );
    if fleet.sandbox_start_retries > 0 {
        text.push_str(&format!(
            "; {} sandbox start failure(s) retried as infrastructure",
            fleet.sandbox_start_retries
        ));
    }
    if fleet.disrupted > 0 {
        text.push_str(&format!(
            "; {} run(s) cut short by a worker's stop and run again",
            fleet.disrupted
        ));
    }
    text
}

pub(super) fn facts(out: &mut String, summary: &Summary<'_>) {
    let input = summary.input;
    let spec = &input.stored.spec;
    let flags = &spec.flags;
    let runs_per_unit = input.stored.plan.repeat.unwrap_or(1);
    let mut rows: Vec<(&str, String)> = vec![
        ("batch", summary.batch_id.to_owned()),
        ("mode", mode_name(spec.mode).to_owned()),
        ("target", spec.target_display.clone()),
        ("executor", spec.executor.as_str().to_owned()),
        ("harness version", summary.harness_version().to_owned()),
    ];
    if summary.is_eval() {
        rows.push((
            "arms",
            format!(
                "{} scenario(s) × {} arms × {runs_per_unit} run(s)",
                summary.units.len() / summary.eval_arm_count(),
                summary.eval_arm_count()
            ),
        ));
    } else {
        rows.push((
            "units",
            format!(
                "{} {}(s) × {runs_per_unit} run(s) each",
                summary.units.len(),
                summary.unit_noun(),
            ),
        ));
        rows.push(("min pass rate", percent(summary.judging.min_pass_rate)));
    }
    if let Some(matrix) = &spec.matrix_file {
        rows.push(("matrix file", matrix.clone()));
    }
    let switches = switches(flags);
    if !switches.is_empty() {
        rows.push(("flags", switches.join(" ")));
    }
    rows.push((
        "runs",
        format!(
            "{} folded, {} passed ({})",
            summary.total_runs,
            summary.total_passes,
            if summary.total_runs == 0 {
                "-".to_owned()
            } else {
                percent(summary.total_passes as f64 / summary.total_runs as f64)
            }
        ),
    ));
    rows.push(("deliveries", deliveries(&input.envelope.fleet_view())));
    if summary.discarded.runs > 0 {
        rows.push((
            "discarded runs",
            format!(
                "{} (spend {}, not in any verdict)",
                summary.discarded.runs,
                usd(summary.discarded.cost_usd)
            ),
        ));
    }
    rows.push((
        "cost of folded runs",
        cost_text(summary.total_cost_usd, summary.recorded_cost_usd),
    ));
    rows.push(("wall time", wall_time(input)));
    let (summed, n_timed) = summary.summed_run_ms;
    rows.push((
        "summed run time",
        match summed {
            Some(ms) => format!("{} over {n_timed} run(s)", seconds(Some(ms))),
            None => "-".to_owned(),
        },
    ));
    if !summary.is_eval() {
        rows.push((
            "exit code",
            match &input.incomplete {
                Some(_) => "none (the batch never finished)".to_owned(),
                None => format!("{} ({})", input.rollup.exit_code, summary.verdict_word()),
            },
        ));
    }
    out.push_str("<dl class=\"facts\">\n");
    for (name, value) in rows {
        let _ = writeln!(out, "<div><dt>{name}</dt><dd>{}</dd></div>", escape(&value));
    }
    out.push_str("</dl>\n");
}

/// The stop and budget switches a batch ran with.
fn switches(flags: &cowork_schema::batch::BatchFlags) -> Vec<String> {
    let mut switches = Vec::new();
    if flags.stop_on_diverge {
        switches.push("--stop-on-diverge".to_owned());
    }
    if let Some(budget) = flags.max_budget_usd {
        switches.push(format!("--max-budget-usd {budget} (per unit)"));
    }
    if flags.allow_budget_stop {
        switches.push("--allow-budget-stop".to_owned());
    }
    if flags.allow_truncated_matrix {
        switches.push("--allow-truncated-matrix".to_owned());
    }
    if flags.ablate_skill {
        switches.push("--ablate-skill".to_owned());
    }
    switches
}

fn mode_name(mode: BatchMode) -> &'static str {
    match mode {
        BatchMode::Run => "run",
        BatchMode::Record => "record",
        BatchMode::Replay => "replay",
        BatchMode::Eval => "eval",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_says_redeliveries_retries_losses_cancels_and_resumes() {
        let fleet: cowork_schema::fleet_key::FleetKey = serde_json::from_value(serde_json::json!({
            "generation": 1,
            "jobs": {"redelivered": 4, "retries": 1, "lost": 0, "withdrawn": 3},
        }))
        .expect("any object is a fleet key");
        assert_eq!(
            deliveries(&fleet.view()),
            "4 redelivered, 1 retried, 0 lost, 3 withdrawn by a cancel, resumed 1 time(s)"
        );
        // An envelope without a fleet key (a re-judged batch) says nothing happened.
        assert_eq!(
            deliveries(&FleetView::default()),
            "0 redelivered, 0 retried, 0 lost, 0 withdrawn by a cancel, resumed 0 time(s)"
        );
    }
}
