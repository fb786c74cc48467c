//! The HTML report: one self-contained file that opens in any browser without a network.
//!
//! The page has inline CSS only: no script, no image, no font, no link to anything outside the
//! file. Text taken from results is escaped, and so are `:` and `=`, so that no message quoted
//! from a run can spell a URL or an attribute in the file. Each heatmap cell carries
//! `data-cell` (`c<k>`/`f<k>`), `data-state`, `data-pass-rate` (as JavaScript prints the
//! number), `data-passes` and `data-completed`, so tests and scripts can read the page's numbers
//! without scraping its text.
//!
//! The same module renders the coordinator's batch list (`GET /v1/ui`).

use std::fmt::Write as _;

use cowork_schema::batch::{BatchMode, PlanKindName};
use cowork_schema::registry::{BatchRecord, BatchState};

use super::{
    EvalArm, EvalSection, ReportInput, Summary, UnitReport, UnitStatus, js_number, percent,
    seconds, summarize, usd,
};

/// The page's style sheet. Colors of heatmap cells are set per cell from the pass rate.
const STYLE: &str = "\
:root{color-scheme:light}
*{box-sizing:border-box}
body{margin:0;background:#f6f8fa;color:#1f2328;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif}
main{max-width:1360px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:22px;margin:0 0 10px}
h2{font-size:17px;margin:28px 0 10px;padding-bottom:4px;border-bottom:1px solid #d0d7de}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
table{border-collapse:collapse;background:#fff}
th,td{border:1px solid #d0d7de;padding:5px 9px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.muted{color:#59636e}
.verdict{display:inline-block;padding:1px 10px;border-radius:11px;color:#fff;font-weight:700;font-size:13px}
.verdict.pass{background:#1a7f37}
.verdict.fail{background:#cf222e}
.verdict.error{background:#8250df}
.verdict.not-run{background:#6e7781}
.banner{margin:12px 0;padding:12px 16px;border-radius:6px;font-weight:600}
.banner.simulated{background:#fff8c5;border:2px solid #d4a72c;color:#6c4400;font-size:15px}
dl.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(240px,1fr));gap:6px 10px;margin:12px 0 0;padding:0}
dl.facts div{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:5px 10px}
dl.facts dt{font-size:11px;letter-spacing:.04em;text-transform:uppercase;color:#59636e}
dl.facts dd{margin:0;font-weight:600;overflow-wrap:anywhere}
.wide{overflow-x:auto}
table.units td.nowrap{white-space:nowrap}
table.units td.label{min-width:300px;font-size:13px}
table.heatmap th.row{max-width:320px}
table.heatmap td.cell{min-width:170px;text-align:center;vertical-align:middle;padding:8px 10px}
.cell .frac{display:block;font-size:20px;font-weight:700}
.cell .rate{display:block;font-size:14px}
.cell .mini{display:block;font-size:11px;letter-spacing:.04em;color:#3d444d}
.cell .tag{display:inline-block;margin:3px 2px 0;padding:0 7px;border-radius:9px;font-size:11px;color:#fff}
.tag.flaky{background:#8250df}
.tag.stop{background:#bc4c00}
td.cell.error{background:#eaeef2;color:#8250df}
td.cell.not-run,td.cell.empty{background:#f6f8fa;color:#6e7781}
.legend{margin:8px 0 0;font-size:12px;color:#59636e}
.legend .bar{display:inline-block;width:220px;height:12px;margin:0 6px;vertical-align:middle;border:1px solid #d0d7de;background:linear-gradient(90deg,hsl(0,72%,80%),hsl(60,72%,80%),hsl(120,72%,80%))}
.flakymark{color:#8250df;font-weight:700}
ul.stops li{margin:3px 0}
footer{margin-top:36px;font-size:12px;color:#59636e}
";

/// Escapes text for HTML text and attribute values. `:` and `=` are escaped too (they render
/// the same): then no text quoted from a run can spell a URL (`http://`) or an attribute
/// (`src=`) in the file, which keeps the page provably free of anything it could load.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            ':' => out.push_str("&#58;"),
            '=' => out.push_str("&#61;"),
            c => out.push(c),
        }
    }
    out
}

fn page_start(out: &mut String, title: &str) {
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    let _ = write!(out, "<style>\n{STYLE}</style>\n</head>\n<body>\n<main>\n");
}

fn page_end(out: &mut String) {
    out.push_str("</main>\n</body>\n</html>\n");
}

/// The background of a heatmap cell: red (0%) through yellow to green (100%).
fn heat_color(rate: f64) -> String {
    let hue = (rate.clamp(0.0, 1.0) * 120.0).round() as u32;
    format!("hsl({hue},72%,80%)")
}

fn verdict_badge(class: &str, text: &str) -> String {
    format!("<span class=\"verdict {class}\">{}</span>", escape(text))
}

/// One heatmap cell.
fn heat_cell(unit: &UnitReport<'_>) -> String {
    let state = unit.status.as_str();
    let mut cell = format!(
        "<td class=\"cell {state}\" data-cell=\"{}\" data-state=\"{state}\"",
        escape(&unit.id)
    );
    match (&unit.status, unit.pass_rate) {
        (UnitStatus::Error(error), _) => {
            let _ = write!(
                cell,
                " title=\"{}\"><span class=\"frac\">error</span><span class=\"mini\">{}</span></td>",
                escape(unit.label),
                escape(error)
            );
        }
        (_, Some(rate)) => {
            let _ = write!(
                cell,
                " data-pass-rate=\"{}\" data-passes=\"{}\" data-completed=\"{}\" data-flaky=\"{}\" \
                 style=\"background-color:{}\" title=\"{}\">\
                 <span class=\"frac\">{}/{}</span><span class=\"rate\">{}</span>\
                 <span class=\"mini\">{}</span>",
                js_number(rate),
                unit.passes,
                unit.completed,
                unit.flaky(),
                heat_color(rate),
                escape(unit.label),
                unit.passes,
                unit.completed,
                percent(rate),
                escape(&unit.verdict_text())
            );
            if unit.flaky() {
                cell.push_str("<span class=\"tag flaky\">flaky</span>");
            }
            if let Some(stop) = unit.stopped_early {
                let _ = write!(
                    cell,
                    "<span class=\"tag stop\">stopped: {}</span>",
                    stop.as_str()
                );
            }
            cell.push_str("</td>");
        }
        (_, None) => {
            let _ = write!(
                cell,
                " title=\"{}\"><span class=\"frac\">not run</span></td>",
                escape(unit.label)
            );
        }
    }
    cell
}

/// `baseline=…, model=…` of a matrix row, or a placeholder when the matrix has neither axis.
fn row_label(baseline: Option<&str>, model: Option<&str>) -> String {
    let mut parts = Vec::new();
    if let Some(baseline) = baseline {
        parts.push(format!("baseline={baseline}"));
    }
    if let Some(model) = model {
        parts.push(format!("model={model}"));
    }
    if parts.is_empty() {
        "(no baseline or model axis)".to_owned()
    } else {
        parts.join(", ")
    }
}

fn heatmap(out: &mut String, summary: &Summary<'_>) {
    let _ = writeln!(
        out,
        "<section id=\"heatmap\">\n<h2>Pass rate per {}</h2>",
        summary.unit_noun()
    );
    match summary.kind {
        PlanKindName::Matrix => matrix_heatmap(out, summary),
        PlanKindName::Files => files_heatmap(out, summary),
    }
    let _ = writeln!(
        out,
        "<p class=\"legend\">0%<span class=\"bar\"></span>100% pass rate · each cell shows \
         passes/completed runs and the {noun}'s verdict (min pass rate {}) · \
         <span class=\"flakymark\">flaky</span> = runs both passed and failed</p>\n</section>",
        percent(summary.judging.min_pass_rate),
        noun = summary.unit_noun()
    );
}

fn matrix_heatmap(out: &mut String, summary: &Summary<'_>) {
    // Rows are baseline × model, columns skill dirs, both in first-seen cell order.
    type RowKey<'k> = (Option<&'k str>, Option<&'k str>);
    let mut rows: Vec<RowKey<'_>> = Vec::new();
    let mut columns: Vec<Option<&str>> = Vec::new();
    for unit in &summary.units {
        let axes = unit.axes;
        let row = (
            axes.and_then(|a| a.baseline.as_deref()),
            axes.and_then(|a| a.model.as_deref()),
        );
        let column = axes.and_then(|a| a.skill_dir.as_deref());
        if !rows.contains(&row) {
            rows.push(row);
        }
        if !columns.contains(&column) {
            columns.push(column);
        }
    }
    out.push_str("<table class=\"heatmap\">\n<thead><tr><th>baseline × model \\ skill</th>");
    for column in &columns {
        let label = match column {
            Some(skill_dir) => format!("skill_dir={skill_dir}"),
            None => "(no skill axis)".to_owned(),
        };
        let _ = write!(out, "<th>{}</th>", escape(&label));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &rows {
        let _ = write!(
            out,
            "<tr><th class=\"row\">{}</th>",
            escape(&row_label(row.0, row.1))
        );
        for column in &columns {
            let found = summary.units.iter().find(|unit| {
                let axes = unit.axes;
                (
                    axes.and_then(|a| a.baseline.as_deref()),
                    axes.and_then(|a| a.model.as_deref()),
                ) == *row
                    && axes.and_then(|a| a.skill_dir.as_deref()) == *column
            });
            match found {
                Some(unit) => out.push_str(&heat_cell(unit)),
                None => out.push_str(
                    "<td class=\"cell empty\" data-state=\"empty\"><span class=\"frac\">—</span></td>",
                ),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    if let Some((first, count)) = summary.truncated_cells {
        let _ = writeln!(
            out,
            "<p class=\"muted\">{count} more cell(s) (index {first} and up) were cut by \
             --max-cells and never ran; their axes are not on record.</p>"
        );
    }
}

fn files_heatmap(out: &mut String, summary: &Summary<'_>) {
    out.push_str(
        "<table class=\"heatmap\">\n<thead><tr><th>scenario</th><th>file</th><th>pass rate</th></tr></thead>\n<tbody>\n",
    );
    let files = &summary.input.stored.spec.scenario_files;
    for unit in &summary.units {
        let file = files.get(unit.index as usize).map_or("", String::as_str);
        let _ = writeln!(
            out,
            "<tr><th class=\"row\">{}</th><td><code>{}</code></td>{}</tr>",
            escape(unit.label),
            escape(file),
            heat_cell(unit)
        );
    }
    out.push_str("</tbody>\n</table>\n");
}

fn facts(out: &mut String, summary: &Summary<'_>) {
    let input = summary.input;
    let spec = &input.stored.spec;
    let flags = &spec.flags;
    let mut rows: Vec<(&str, String)> = vec![
        ("batch", summary.batch_id.to_owned()),
        ("command", input.rollup.command.clone()),
        ("mode", mode_name(spec.mode).to_owned()),
        ("target", spec.target_display.clone()),
        ("executor", spec.executor.as_str().to_owned()),
        ("harness version", summary.harness_version().to_owned()),
        (
            "units",
            format!(
                "{} {}(s) × {} run(s) each",
                summary.units.len(),
                summary.unit_noun(),
                input.stored.plan.repeat.unwrap_or(1)
            ),
        ),
        ("min pass rate", percent(summary.judging.min_pass_rate)),
    ];
    if let Some(matrix) = &spec.matrix_file {
        rows.push(("matrix file", matrix.clone()));
    }
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
    rows.push(("total cost", usd(summary.total_cost_usd)));
    rows.push(("total run time", seconds(summary.total_duration_ms)));
    rows.push((
        "exit code",
        format!("{} ({})", input.rollup.exit_code, summary.verdict_word()),
    ));
    out.push_str("<dl class=\"facts\">\n");
    for (name, value) in rows {
        let _ = writeln!(out, "<div><dt>{name}</dt><dd>{}</dd></div>", escape(&value));
    }
    out.push_str("</dl>\n");
}

fn mode_name(mode: BatchMode) -> &'static str {
    match mode {
        BatchMode::Run => "run",
        BatchMode::Record => "record",
        BatchMode::Replay => "replay",
        BatchMode::Eval => "eval",
    }
}

fn units_table(out: &mut String, summary: &Summary<'_>) {
    let _ = writeln!(
        out,
        "<section id=\"units\">\n<h2>{}s: runs, cost and duration</h2>",
        capitalized(summary.unit_noun())
    );
    out.push_str(
        "<div class=\"wide\">\n<table class=\"units\">\n<thead><tr><th>unit</th><th>label</th><th class=\"num\">runs</th>\
         <th class=\"num\">passes</th><th class=\"num\">pass rate</th><th>verdict</th>\
         <th>stop</th><th class=\"num\">cost</th><th class=\"num\">cost/run</th>\
         <th class=\"num\">mean run time</th><th class=\"num\">total run time</th>\
         <th class=\"num\">tokens</th><th>models</th><th>skills</th></tr></thead>\n<tbody>\n",
    );
    for unit in &summary.units {
        let rate = unit.pass_rate.map_or_else(|| "-".to_owned(), percent);
        let flaky = if unit.flaky() {
            " <span class=\"flakymark\">flaky</span>"
        } else {
            ""
        };
        let stop = match (&unit.status, unit.stopped_early) {
            (_, Some(stop)) => stop.as_str().to_owned(),
            (UnitStatus::Error(error), None) => format!("error: {error}"),
            _ => String::new(),
        };
        let cost_per_run = unit
            .cost_usd
            .filter(|_| unit.completed > 0)
            .map(|cost| cost / f64::from(unit.completed));
        let tokens = unit
            .tokens
            .map_or_else(|| "-".to_owned(), |tokens| format!("{tokens:.0}"));
        let _ = writeln!(
            out,
            "<tr data-unit=\"{id}\"><td><code>{id}</code></td><td class=\"label\">{label}</td>\
             <td class=\"num\">{completed}/{requested}</td><td class=\"num\">{passes}</td>\
             <td class=\"num\">{rate}{flaky}</td><td>{badge}</td><td>{stop}</td>\
             <td class=\"num\">{cost}</td><td class=\"num\">{cost_per_run}</td>\
             <td class=\"num\">{mean}</td><td class=\"num\">{total}</td>\
             <td class=\"num\">{tokens}</td><td class=\"nowrap\">{models}</td>\
             <td>{skills}</td></tr>",
            id = escape(&unit.id),
            label = escape(unit.label),
            completed = unit.completed,
            requested = unit.requested,
            passes = unit.passes,
            badge = verdict_badge(unit.status.as_str(), &unit.verdict_text()),
            stop = escape(&stop),
            cost = usd(unit.cost_usd),
            cost_per_run = usd(cost_per_run),
            mean = seconds(unit.mean_duration_ms()),
            total = seconds(unit.duration_ms),
            models = escape(&unit.models.join(", ")),
            skills = escape(&unit.skills.join(", ")),
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

fn failures_table(out: &mut String, summary: &Summary<'_>) {
    out.push_str(
        "<section id=\"failures\">\n<h2>Failure reasons by assertion key and signal code</h2>\n",
    );
    if summary.reasons.is_empty() {
        out.push_str("<p class=\"muted\">No folded run failed an assertion or raised a signal.</p>\n</section>\n");
        return;
    }
    out.push_str(
        "<table class=\"reasons\">\n<thead><tr><th>kind</th><th>key / code</th><th>severity</th>\
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
            units = escape(&reason.units.join(", ")),
            messages = messages.join("<br>"),
        );
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}

fn stops_section(out: &mut String, summary: &Summary<'_>) {
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

fn arm_cell(arm: &EvalArm) -> String {
    format!(
        "{} ({}/{})",
        percent(arm.pass_rate),
        arm.passes,
        arm.completed
    )
}

/// EVAL HOOK: the "Eval A/B" section, rendered only from [`ReportInput::eval`].
fn eval_section(out: &mut String, summary: &Summary<'_>) {
    let is_eval = summary.input.stored.spec.mode == BatchMode::Eval;
    let Some(eval) = &summary.input.eval else {
        if is_eval {
            out.push_str(
                "<section id=\"eval\">\n<h2>Eval A/B</h2>\n<p class=\"muted\">The A/B statistics \
                 of this eval batch were not computed for this report.</p>\n</section>\n",
            );
        }
        return;
    };
    render_eval(out, eval);
}

fn render_eval(out: &mut String, eval: &EvalSection) {
    let _ = writeln!(
        out,
        "<section id=\"eval\">\n<h2>Eval A/B</h2>\n<p>arm A = <code>{}</code> · arm B = \
         <code>{}</code> · alpha {} · {} intervals</p>\n<p class=\"muted\">decision rule: {}</p>",
        escape(&eval.arm_a),
        escape(&eval.arm_b),
        js_number(eval.alpha),
        percent(eval.confidence),
        escape(&eval.decision_rule)
    );
    out.push_str(
        "<table class=\"eval\">\n<thead><tr><th>scope</th><th class=\"num\">A pass rate</th>\
         <th class=\"num\">B pass rate</th><th class=\"num\">B − A</th><th class=\"num\">interval</th>\
         <th class=\"num\">A-only / B-only passes</th><th class=\"num\">McNemar p</th>\
         <th>verdict</th><th class=\"num\">excluded pairs</th><th class=\"num\">cost A</th>\
         <th class=\"num\">cost B</th></tr></thead>\n<tbody>\n",
    );
    for row in &eval.rows {
        let _ = writeln!(
            out,
            "<tr data-scope=\"{scope}\"><td>{scope}</td><td class=\"num\">{a}</td>\
             <td class=\"num\">{b}</td><td class=\"num\">{diff:+.3}</td>\
             <td class=\"num\">[{low:+.3}, {high:+.3}]</td><td class=\"num\">{a_only} / {b_only}</td>\
             <td class=\"num\">{p:.4}</td><td><strong>{verdict}</strong></td>\
             <td class=\"num\">{excluded}</td><td class=\"num\">{cost_a}</td>\
             <td class=\"num\">{cost_b}</td></tr>",
            scope = escape(&row.scope),
            a = arm_cell(&row.arm_a),
            b = arm_cell(&row.arm_b),
            diff = row.diff,
            low = row.ci_low,
            high = row.ci_high,
            a_only = row.a_only_passes,
            b_only = row.b_only_passes,
            p = row.p_value,
            verdict = escape(&row.verdict),
            excluded = row.excluded_pairs,
            cost_a = usd(row.arm_a.cost_usd),
            cost_b = usd(row.arm_b.cost_usd),
        );
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}

/// The HTML report of a batch: one self-contained page (see the module documentation).
pub fn render_html(input: &ReportInput) -> String {
    let summary = summarize(input);
    let verdict = summary.verdict_word();
    let mut out = String::with_capacity(16 * 1024);
    page_start(
        &mut out,
        &format!(
            "cowork report {} {verdict}{}",
            summary.batch_id,
            if summary.simulated { " SIMULATED" } else { "" }
        ),
    );
    let _ = writeln!(
        out,
        "<header>\n<h1>cowork batch <code>{}</code> {}</h1>",
        escape(summary.batch_id),
        verdict_badge(&verdict.to_ascii_lowercase(), verdict)
    );
    if summary.simulated {
        let _ = writeln!(
            out,
            "<div class=\"banner simulated\" id=\"simulated\" role=\"alert\">{}</div>",
            escape(&summary.simulated_warning())
        );
    }
    facts(&mut out, &summary);
    out.push_str("</header>\n");
    heatmap(&mut out, &summary);
    units_table(&mut out, &summary);
    failures_table(&mut out, &summary);
    stops_section(&mut out, &summary);
    eval_section(&mut out, &summary);
    let _ = writeln!(
        out,
        "<footer>Rendered by <code>cowork report</code> from the stored batch (spec.json, \
         rollup.json, envelope.json and {} result.json). Self-contained: no script and nothing \
         loaded from anywhere else.</footer>",
        input.runs.len()
    );
    page_end(&mut out);
    out
}

/// Percent-encodes a query value (everything but RFC 3986 unreserved characters).
fn query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// The coordinator's batch list page (`GET /v1/ui`): id, state, verdict and links to each
/// report format, newest batch first. Links are relative to `/v1/ui`; when the page was opened
/// with `?token=`, the links carry the same token so that they open in a browser too.
pub fn render_batch_list(records: &[BatchRecord], token: Option<&str>) -> String {
    let mut out = String::with_capacity(4096);
    page_start(&mut out, "cowork coordinator batches");
    let _ = writeln!(
        out,
        "<header>\n<h1>cowork coordinator: batches</h1>\n<p class=\"muted\">{} batch(es), newest \
         first. Reports exist once a batch is done.</p>\n</header>",
        records.len()
    );
    out.push_str(
        "<table class=\"batches\">\n<thead><tr><th>batch</th><th>state</th><th>verdict</th>\
         <th class=\"num\">jobs</th><th>reports</th></tr></thead>\n<tbody>\n",
    );
    let token_suffix = token.map_or_else(String::new, |token| {
        format!("&token={}", query_value(token))
    });
    for record in records.iter().rev() {
        let id = record.batch_id.as_str();
        let state = record.state.as_str();
        let verdict = match (record.state, record.ok) {
            (BatchState::Done, Some(true)) => verdict_badge("pass", "PASS"),
            (BatchState::Done, Some(false)) => verdict_badge("fail", "FAIL"),
            _ => "<span class=\"muted\">-</span>".to_owned(),
        };
        let exit = record
            .exit_code
            .map_or_else(String::new, |code| format!(" exit {code}"));
        let reports = if record.state == BatchState::Done {
            ["html", "junit", "markdown", "json"]
                .iter()
                .map(|format| {
                    let href = format!("batches/{id}/report?format={format}{token_suffix}");
                    format!(
                        "<a href=\"{}\" data-format=\"{format}\">{format}</a>",
                        escape(&href)
                    )
                })
                .collect::<Vec<_>>()
                .join(" · ")
        } else {
            "<span class=\"muted\">not done</span>".to_owned()
        };
        let _ = writeln!(
            out,
            "<tr data-batch=\"{id}\" data-state=\"{state}\"><td><code>{id}</code></td>\
             <td>{state}</td><td>{verdict}{exit}</td><td class=\"num\">{jobs}</td>\
             <td>{reports}</td></tr>",
            id = escape(id),
            state = escape(state),
            jobs = record.n_jobs,
        );
    }
    out.push_str("</tbody>\n</table>\n");
    page_end(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_urls_and_attributes_out_of_the_file() {
        assert_eq!(
            escape("<img src='http://x/a.png'> & \"b\""),
            "&lt;img src&#61;&#39;http&#58;//x/a.png&#39;&gt; &amp; &quot;b&quot;"
        );
    }
}
