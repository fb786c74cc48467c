//! The HTML report: one self-contained file that opens in any browser without a network.
//!
//! The page has inline CSS only: no script, no image, no font, no link to anything outside the
//! file except the run artifacts it names ([`ArtifactLinks`]), and those are relative links.
//! Text taken from results is escaped, and so are `:` and `=`, so that no message quoted from a
//! run can spell a URL or an attribute in the file.
//!
//! The page reads top-down: the verdict (for an eval, the A/B result first), the batch's facts,
//! the heatmap (each cell coloured by its unit's verdict and shaded by its pass rate, with the
//! unit's runs as a strip in index order), the units table, failure reasons, stop reasons, then
//! one section per unit and one per run (`#unit-c0`, `#run-c0-r3`): verdict, signals, every
//! assertion with its evidence, error, cost, tokens, duration, model and links to the stored
//! files. Every heatmap cell links to its unit's section and every strip square to its run.
//!
//! Each heatmap cell carries `data-cell` (`c<k>`/`f<k>`), `data-state`, `data-pass-rate` (as
//! JavaScript prints the number), `data-passes` and `data-completed`, so tests and scripts can
//! read the page's numbers without scraping its text.
//!
//! The same module renders the coordinator's batch list (`GET /v1/ui`).

mod runs;

use std::fmt::Write as _;

use cowork_schema::batch::{BatchMode, PlanKindName};
use cowork_schema::registry::{BatchRecord, BatchState};

use super::input::{EvalArm, EvalSection, ReportInput};
use super::numbers::{cost_text, js_number, percent, seconds, usd};
use super::summary::{Summary, UnitReport, UnitStatus, summarize};

pub use runs::ArtifactLinks;

/// How the HTML report is rendered for the place it is read from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HtmlOptions {
    /// Where the links to each run's stored files point.
    pub links: ArtifactLinks,
}

/// The page's style sheet. Heatmap cells get their shade per cell (see [`heat_style`]).
const STYLE: &str = "\
:root{color-scheme:light}
*{box-sizing:border-box}
body{margin:0;background:#f6f8fa;color:#1f2328;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif}
main{max-width:1360px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:22px;margin:0 0 10px;overflow-wrap:anywhere}
h2{font-size:17px;margin:28px 0 10px;padding-bottom:4px;border-bottom:1px solid #d0d7de}
h3{font-size:15px;margin:0 0 6px;overflow-wrap:anywhere}
a{color:#0550ae}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;overflow-wrap:anywhere}
table{border-collapse:collapse;background:#fff;max-width:100%}
th,td{border:1px solid #d0d7de;padding:5px 9px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.muted{color:#59636e}
.small{font-size:12px}
.verdict{display:inline-block;padding:1px 10px;border-radius:11px;color:#fff;font-weight:700;font-size:13px;white-space:nowrap;vertical-align:middle}
.verdict.pass,.verdict.b-better{background:#1a7f37}
.verdict.fail,.verdict.b-worse{background:#cf222e}
.verdict.error{background:#8250df}
.verdict.not-run,.verdict.no-difference,.verdict.arm{background:#6e7781}
.verdict.incomplete,.verdict.discarded{background:#9a6700}
.banner{margin:12px 0;padding:12px 16px;border-radius:6px;font-weight:600}
.banner.simulated{background:#fff8c5;border:2px solid #d4a72c;color:#6c4400;font-size:15px}
.banner.incomplete{background:#fff1e5;border:2px solid #bc4c00;color:#762c00;font-size:15px}
dl.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(210px,1fr));gap:6px 10px;margin:12px 0 0;padding:0}
dl.facts div{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:5px 10px;min-width:0}
dl.facts dt{font-size:11px;letter-spacing:.04em;text-transform:uppercase;color:#59636e}
dl.facts dd{margin:0;font-weight:600;overflow-wrap:anywhere}
.wide{overflow-x:auto;max-width:100%}
table.units{width:100%}
table.units td.label{overflow-wrap:anywhere}
table.units td.label .small{display:block;color:#59636e}
table.heatmap th.row{max-width:320px;overflow-wrap:anywhere}
table.heatmap td.cell{min-width:150px;max-width:260px;text-align:center;vertical-align:middle;padding:8px 10px}
td.cell.pass{box-shadow:inset 5px 0 0 #1a7f37}
td.cell.fail{box-shadow:inset 5px 0 0 #cf222e}
td.cell.incomplete{box-shadow:inset 5px 0 0 #bc4c00}
td.cell.arm{box-shadow:inset 5px 0 0 #0969da}
td.cell.error{background:#eaeef2;color:#8250df;box-shadow:inset 5px 0 0 #8250df}
td.cell.not-run,td.cell.empty{background:#f6f8fa;color:#6e7781}
a.cellink{display:block;color:inherit;text-decoration:none}
a.cellink:hover .frac{text-decoration:underline}
.cell .frac{display:block;font-size:20px;font-weight:700}
.cell .rate{display:block;font-size:14px}
.cell .mini{display:block;font-size:11px;letter-spacing:.04em;color:#3d444d;font-weight:700}
.cell .tag,.tag{display:inline-block;margin:3px 2px 0;padding:0 7px;border-radius:9px;font-size:11px;color:#fff}
.tag.flaky{background:#8250df}
.tag.stop{background:#bc4c00}
.strip{display:flex;flex-wrap:wrap;gap:2px;margin:6px 0 0;justify-content:center;line-height:0}
.strip.big{justify-content:flex-start;gap:3px;margin:8px 0}
.dot{display:inline-block;width:10px;height:10px;border-radius:2px;border:1px solid rgba(31,35,40,.25)}
.strip.big .dot{width:14px;height:14px}
.dot.pass{background:#1a7f37}
.dot.fail{background:#cf222e}
.dot.error{background:#8250df}
.dot.discarded{background:repeating-linear-gradient(45deg,#8c959f 0 2px,#eaeef2 2px 4px)}
.dot.not-run{background:#fff;border:1px dashed #8c959f}
.strip .more{font-size:11px;line-height:12px;color:#59636e}
.seg{display:inline-block;min-width:10px;height:12px;padding:0 4px;border-radius:2px;font-size:9px;line-height:12px;color:#fff;border:1px solid rgba(31,35,40,.25)}
.seg.pass{background:#1a7f37}.seg.fail{background:#cf222e}.seg.error{background:#8250df}.seg.discarded{background:#8c959f}.seg.not-run{background:#fff;color:#59636e;border:1px dashed #8c959f}
#overview .counts{margin:6px 0;font-weight:600}
.ov-grid{display:flex;flex-wrap:wrap;gap:2px;line-height:0}
a.ov{display:inline-block;width:14px;height:14px;border-radius:2px;border:1px solid rgba(31,35,40,.3)}
a.ov.fail,a.ov.error{outline:1px solid #cf222e}
a.ov.error{background:#8250df}a.ov.not-run{background:#fff;border-style:dashed}
table.ov-matrix td{padding:1px;border:0}table.ov-matrix th{font-size:11px;padding:1px 6px;font-weight:400}
ol.worst{margin:6px 0;padding-left:22px;columns:2 420px;font-size:13px}
ol.worst li{break-inside:avoid;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.legend{margin:8px 0 0;font-size:12px;color:#59636e}
.legend .swatch{display:inline-block;width:28px;height:12px;margin:0 4px 0 10px;vertical-align:middle;border:1px solid #d0d7de}
.legend .dot{margin:0 3px 0 10px;vertical-align:middle}
.flakymark{color:#8250df;font-weight:700}
ul.stops li{margin:3px 0}
section.ab{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:4px 18px 14px;margin:14px 0}
section.ab h2{border:0;margin:14px 0 6px}
section.ab .headline{font-size:16px;margin:6px 0}
section.ab table{margin-top:8px}
section.unit{margin:18px 0;padding:12px 14px;background:#fff;border:1px solid #d0d7de;border-radius:8px}
article.run{margin:10px 0 0;padding:8px 12px;border:1px solid #d0d7de;border-left-width:5px;border-radius:6px;background:#fcfcfd}
article.run.pass{border-left-color:#1a7f37}
article.run.fail{border-left-color:#cf222e}
article.run.error{border-left-color:#8250df}
article.run.discarded{border-left-color:#8c959f}
article.run:target{outline:3px solid #0969da}
section.unit:target{outline:3px solid #0969da}
article.run header{display:flex;flex-wrap:wrap;gap:6px 12px;align-items:center}
article.run p{margin:6px 0}
table.assertions{width:100%;margin:6px 0}
table.assertions td{overflow-wrap:anywhere}
table.assertions tr.fail td:first-child{box-shadow:inset 3px 0 0 #cf222e}
.errorbox{background:#fff0f0;border:1px solid #ffcecb;border-radius:6px;padding:6px 10px;overflow-wrap:anywhere}
ul.signals{margin:4px 0;padding-left:20px}
ul.signals li{overflow-wrap:anywhere}
.files a,.files code{margin-right:10px}
details{margin:8px 0}
details.assertions{margin:4px 0}
details.assertions summary{cursor:pointer;color:#1a7f37;font-size:13px}
footer{margin-top:36px;font-size:12px;color:#59636e}
@media (max-width:960px){main{padding:14px 12px 30px}th,td{padding:4px 6px}.opt,table.units td.label .small{display:none}table.heatmap td.cell{min-width:110px}}
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
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    let _ = write!(out, "<style>\n{STYLE}</style>\n</head>\n<body>\n<main>\n");
}

fn page_end(out: &mut String) {
    out.push_str("</main>\n</body>\n</html>\n");
}

/// The background of a heatmap cell: the hue of its verdict, shaded by its pass rate. A pass
/// is darker green the more runs passed; a fail is deeper red the fewer did, so `4/5` failing
/// at a 100% minimum reads as a light red, never as green. Eval arms are not judged alone:
/// blue, darker the more runs passed.
pub(crate) fn heat_style(state: &str, rate: f64) -> String {
    let rate = rate.clamp(0.0, 1.0);
    let (hue, saturation, lightness) = match state {
        "pass" => (137.0, 50.0, 90.0 - 16.0 * rate),
        "fail" => (356.0, 78.0, 72.0 + 18.0 * rate),
        "incomplete" => (36.0, 90.0, 90.0 - 14.0 * rate),
        _ => (212.0, 75.0, 94.0 - 20.0 * rate),
    };
    format!(
        "background-color:hsl({},{}%,{}%)",
        hue,
        saturation,
        f64::round(lightness)
    )
}

pub(crate) fn verdict_badge(class: &str, text: &str) -> String {
    format!("<span class=\"verdict {class}\">{}</span>", escape(text))
}

/// The state a heatmap cell shows: its verdict, or `arm` for an eval arm (arms are judged by
/// the A/B comparison, not one by one).
fn cell_state(unit: &UnitReport<'_>, summary: &Summary<'_>) -> &'static str {
    if summary.is_eval() && matches!(unit.status, UnitStatus::Passed | UnitStatus::Failed) {
        "arm"
    } else {
        unit.status.as_str()
    }
}

/// One heatmap cell: the unit's numbers and verdict linking to its section, its tags, and its
/// runs as a strip.
fn heat_cell(unit: &UnitReport<'_>, summary: &Summary<'_>, runs: &runs::RunIndex) -> String {
    let state = cell_state(unit, summary);
    let mut cell = format!(
        "<td class=\"cell {state}\" data-cell=\"{}\" data-state=\"{state}\"",
        escape(&unit.id)
    );
    let unit_link = format!("#unit-{}", escape(&unit.id));
    match (&unit.status, unit.pass_rate) {
        (UnitStatus::Error(error), _) => {
            let _ = write!(
                cell,
                " title=\"{}\"><a class=\"cellink\" href=\"{unit_link}\"><span class=\"frac\">error</span>\
                 <span class=\"mini\">{}</span></a></td>",
                escape(unit.label),
                escape(error)
            );
            return cell;
        }
        (_, Some(rate)) => {
            let word = if state == "arm" {
                "ARM".to_owned()
            } else {
                unit.verdict_text()
            };
            let _ = write!(
                cell,
                " data-pass-rate=\"{}\" data-passes=\"{}\" data-completed=\"{}\" data-flaky=\"{}\" \
                 style=\"{}\" title=\"{}\"><a class=\"cellink\" href=\"{unit_link}\">\
                 <span class=\"frac\">{}/{}</span><span class=\"rate\">{}</span>\
                 <span class=\"mini\">{}</span></a>",
                js_number(rate),
                unit.passes,
                unit.completed,
                unit.flaky(),
                heat_style(state, rate),
                escape(unit.label),
                unit.passes,
                unit.completed,
                percent(rate),
                escape(&word)
            );
        }
        (_, None) => {
            let _ = write!(
                cell,
                " title=\"{}\"><a class=\"cellink\" href=\"{unit_link}\"><span class=\"frac\">{}</span></a>",
                escape(unit.label),
                if unit.status == UnitStatus::Incomplete {
                    "incomplete"
                } else {
                    "not run"
                }
            );
        }
    }
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
    cell.push_str(&runs::strip(unit, runs, runs::STRIP_IN_CELL));
    cell.push_str("</td>");
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

fn heatmap(out: &mut String, summary: &Summary<'_>, runs: &runs::RunIndex) {
    let _ = writeln!(
        out,
        "<section id=\"heatmap\">\n<h2>Pass rate per {}</h2>\n<div class=\"wide\">",
        if summary.is_eval() {
            "scenario and arm"
        } else {
            summary.unit_noun()
        }
    );
    match (summary.is_eval(), summary.kind) {
        (true, _) => eval_heatmap(out, summary, runs),
        (false, PlanKindName::Matrix) => matrix_heatmap(out, summary, runs),
        (false, PlanKindName::Files) => files_heatmap(out, summary, runs),
    }
    out.push_str("</div>\n");
    legend(out, summary);
    out.push_str("</section>\n");
}

fn legend(out: &mut String, summary: &Summary<'_>) {
    out.push_str("<p class=\"legend\">");
    if summary.is_eval() {
        let _ = write!(
            out,
            "<span class=\"swatch\" style=\"{}\"></span>arm pass rate (darker = more runs \
             passed; arms are compared above, not judged alone)",
            heat_style("arm", 0.8)
        );
    } else {
        let _ = write!(
            out,
            "cell colour = the {noun}'s verdict at min pass rate {min}: \
             <span class=\"swatch\" style=\"{}\"></span>PASS (darker = more runs passed)\
             <span class=\"swatch\" style=\"{}\"></span>FAIL (deeper = fewer runs passed)",
            heat_style("pass", 1.0),
            heat_style("fail", 0.3),
            noun = summary.unit_noun(),
            min = percent(summary.judging.min_pass_rate),
        );
    }
    out.push_str(
        " · runs in index order: <span class=\"dot pass\"></span>pass\
         <span class=\"dot fail\"></span>fail<span class=\"dot error\"></span>error\
         <span class=\"dot discarded\"></span>discarded<span class=\"dot not-run\"></span>not \
         run · <span class=\"flakymark\">flaky</span> = runs both passed and failed · click a \
         cell for its runs</p>\n",
    );
}

/// A matrix's units laid out as rows (baseline × model) and columns (skill dirs), both in
/// first-seen cell order, with the unit at each place: the heatmap and the overview draw the
/// same grid.
struct MatrixGrid<'s> {
    rows: Vec<MatrixRow<'s>>,
    columns: Vec<Option<&'s str>>,
    cells: std::collections::HashMap<(MatrixRow<'s>, Option<&'s str>), &'s UnitReport<'s>>,
}

/// A heatmap row: the baseline and model of its cells.
type MatrixRow<'k> = (Option<&'k str>, Option<&'k str>);

impl<'s> MatrixGrid<'s> {
    fn of(summary: &'s Summary<'s>) -> MatrixGrid<'s> {
        let mut grid = MatrixGrid {
            rows: Vec::new(),
            columns: Vec::new(),
            cells: std::collections::HashMap::new(),
        };
        for unit in &summary.units {
            let axes = unit.axes;
            let row = (
                axes.and_then(|a| a.baseline.as_deref()),
                axes.and_then(|a| a.model.as_deref()),
            );
            let column = axes.and_then(|a| a.skill_dir.as_deref());
            if !grid.rows.contains(&row) {
                grid.rows.push(row);
            }
            if !grid.columns.contains(&column) {
                grid.columns.push(column);
            }
            // The first unit at a place is the one shown, should two ever share it.
            grid.cells.entry((row, column)).or_insert(unit);
        }
        grid
    }

    fn at(&self, row: MatrixRow<'s>, column: Option<&'s str>) -> Option<&'s UnitReport<'s>> {
        self.cells.get(&(row, column)).copied()
    }
}

fn matrix_heatmap(out: &mut String, summary: &Summary<'_>, runs: &runs::RunIndex) {
    let grid = MatrixGrid::of(summary);
    let (rows, columns) = (&grid.rows, &grid.columns);
    out.push_str("<table class=\"heatmap\">\n<thead><tr><th>baseline × model \\ skill</th>");
    for column in columns {
        let label = match column {
            Some(skill_dir) => format!("skill_dir={skill_dir}"),
            None => "(no skill axis)".to_owned(),
        };
        let _ = write!(out, "<th>{}</th>", escape(&label));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in rows {
        let _ = write!(
            out,
            "<tr><th class=\"row\">{}</th>",
            escape(&row_label(row.0, row.1))
        );
        for column in columns {
            match grid.at(*row, *column) {
                Some(unit) => out.push_str(&heat_cell(unit, summary, runs)),
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

fn files_heatmap(out: &mut String, summary: &Summary<'_>, runs: &runs::RunIndex) {
    out.push_str(
        "<table class=\"heatmap\">\n<thead><tr><th>scenario</th><th>file</th><th>pass rate</th></tr></thead>\n<tbody>\n",
    );
    for unit in &summary.units {
        let _ = writeln!(
            out,
            "<tr><th class=\"row\">{}</th><td><code>{}</code></td>{}</tr>",
            escape(unit.label),
            escape(summary.scenario_file(unit)),
            heat_cell(unit, summary, runs)
        );
    }
    out.push_str("</tbody>\n</table>\n");
}

/// An eval's heatmap: one row per scenario, arm A and arm B side by side.
fn eval_heatmap(out: &mut String, summary: &Summary<'_>, runs: &runs::RunIndex) {
    out.push_str(
        "<table class=\"heatmap\">\n<thead><tr><th>scenario</th><th>file</th><th>arm A</th>\
         <th>arm B</th></tr></thead>\n<tbody>\n",
    );
    for pair in summary.units.chunks(2) {
        let Some(first) = pair.first() else { continue };
        let _ = write!(
            out,
            "<tr><th class=\"row\">{}</th><td><code>{}</code></td>",
            escape(first.scenario_name),
            escape(summary.scenario_file(first)),
        );
        for unit in pair {
            out.push_str(&heat_cell(unit, summary, runs));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
}

/// Units above which the page opens with the overview: a batch this big is read cell by cell
/// no longer (the terminal summary cuts at the same size).
const OVERVIEW_FROM_UNITS: usize = 40;

/// Failing and flaky units listed by name in the overview before the rest are counted: few enough that the squares of 1,000 cells stay on the first screen.
const OVERVIEW_LISTED: usize = 12;

/// Where a unit stands in the overview's order: failing (by how far below the bar), then
/// flaky, then passing, then not run; each by pass rate, then index.
fn overview_rank(unit: &UnitReport<'_>) -> (u8, u64, u32) {
    let group = match unit.status {
        UnitStatus::Failed | UnitStatus::Error(_) | UnitStatus::Incomplete => 0,
        UnitStatus::Passed if unit.flaky() => 1,
        UnitStatus::Passed => 2,
        UnitStatus::NotRun => 3,
    };
    // Pass rates are in [0, 1]: as millionths they sort as integers.
    let rate = (unit.pass_rate.unwrap_or(0.0).clamp(0.0, 1.0) * 1e6) as u64;
    (group, rate, unit.index)
}

/// One square of the overview: the unit's state and shade, linking to its section.
fn overview_tile(out: &mut String, unit: &UnitReport<'_>) {
    let state = unit.status.as_str();
    let rate = unit.pass_rate.map_or_else(|| "-".to_owned(), percent);
    let style = unit.pass_rate.map_or_else(String::new, |rate| {
        format!(
            " data-pass-rate=\"{}\" style=\"{}\"",
            js_number(rate),
            heat_style(state, rate)
        )
    });
    let _ = write!(
        out,
        "<a class=\"ov {state}\" href=\"#unit-{id}\" data-cell=\"{id}\" data-state=\"{state}\" \
         data-flaky=\"{}\"{style} title=\"{}\"></a>",
        unit.flaky(),
        escape(&format!(
            "{}: {}/{} passed ({rate}) {}",
            unit.label,
            unit.passes,
            unit.completed,
            unit.verdict_text()
        )),
        id = escape(&unit.id),
    );
}

/// The first screen of a big batch: what failed, how badly and where. A count line, the
/// failing and flaky units by name (worst first, how far below the bar), then every unit as
/// a small square: a grid of rows × columns when the matrix has two axes to lay out, else
/// one block in the same worst-first order. Every square links to its unit's section.
fn overview(out: &mut String, summary: &Summary<'_>) {
    let mut ranked: Vec<&UnitReport<'_>> = summary.units.iter().collect();
    ranked.sort_by_key(|unit| overview_rank(unit));
    let count = |group: u8| {
        ranked
            .iter()
            .filter(|unit| overview_rank(unit).0 == group)
            .count()
    };
    let (failing, flaky, passing, not_run) = (count(0), count(1), count(2), count(3));
    let noun = summary.unit_noun();
    let _ = writeln!(
        out,
        "<section id=\"overview\">\n<h2>Overview: {} {noun}s, worst first</h2>\n\
         <p class=\"counts\" data-failing=\"{failing}\" data-flaky=\"{flaky}\" \
         data-passing=\"{passing}\">{failing} failing (below the {} bar or no run) · {flaky} \
         flaky but passing · {} passing every run{}</p>",
        summary.units.len(),
        percent(summary.judging.min_pass_rate),
        passing,
        if not_run > 0 {
            format!(" · {not_run} not run")
        } else {
            String::new()
        }
    );
    let listed: Vec<&&UnitReport<'_>> = ranked
        .iter()
        .take_while(|unit| overview_rank(unit).0 < 2)
        .collect();
    if !listed.is_empty() {
        out.push_str("<ol class=\"worst\">");
        for unit in listed.iter().take(OVERVIEW_LISTED) {
            let rate = unit.pass_rate.map_or_else(|| "-".to_owned(), percent);
            let gap = unit
                .pass_rate
                .filter(|rate| *rate < summary.judging.min_pass_rate)
                .map_or_else(String::new, |rate| {
                    format!(
                        ", {} points below",
                        js_to_points(summary.judging.min_pass_rate - rate)
                    )
                });
            // One line an entry, the badge first: a long label is cut short (the title
            // keeps it whole) rather than wrapping, so twelve entries take six lines and
            // the squares of 1,000 cells stay on the first screen.
            let _ = write!(
                out,
                "<li data-unit=\"{id}\" title=\"{}\">{} <a href=\"#unit-{id}\"><code>{id}</code> \
                 {}</a> {}/{} ({rate}{gap})</li>",
                escape(unit.label),
                verdict_badge(
                    if overview_rank(unit).0 == 0 {
                        unit.status.as_str()
                    } else {
                        "pass"
                    },
                    &if overview_rank(unit).0 == 0 {
                        unit.verdict_text()
                    } else {
                        "FLAKY".to_owned()
                    }
                ),
                escape(unit.label),
                unit.passes,
                unit.completed,
                id = escape(&unit.id),
            );
        }
        out.push_str("</ol>\n");
        if listed.len() > OVERVIEW_LISTED {
            let _ = writeln!(
                out,
                "<p class=\"muted\">… and {} more failing or flaky {noun}(s), first in the \
                 squares below.</p>",
                listed.len() - OVERVIEW_LISTED
            );
        }
    }
    if !matrix_overview(out, summary) {
        out.push_str("<div class=\"ov-grid\" id=\"overview-grid\">");
        for unit in &ranked {
            overview_tile(out, unit);
        }
        out.push_str("</div>\n");
    }
    let _ = writeln!(
        out,
        "<p class=\"legend\">one square per {noun}, coloured as in the heatmap below; click \
         one for its runs</p>\n</section>"
    );
}

/// A pass-rate difference in percentage points, whole.
fn js_to_points(difference: f64) -> String {
    crate::reduce::js_to_fixed(difference * 100.0, 0)
}

/// The overview of a matrix with rows (baseline × model) and columns (skill dirs) to lay
/// out: a table of squares. `false` (nothing written) when the matrix has one row or one
/// column, where one block of squares in worst-first order reads better.
fn matrix_overview(out: &mut String, summary: &Summary<'_>) -> bool {
    if summary.kind != PlanKindName::Matrix {
        return false;
    }
    let grid = MatrixGrid::of(summary);
    let (rows, columns) = (&grid.rows, &grid.columns);
    if rows.len() < 2 || columns.len() < 2 {
        return false;
    }
    out.push_str(
        "<div class=\"wide\"><table class=\"ov-matrix\" id=\"overview-grid\"><thead><tr><th></th>",
    );
    for column in columns {
        let _ = write!(out, "<th>{}</th>", escape(column.unwrap_or("-")));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        let _ = write!(out, "<tr><th>{}</th>", escape(&row_label(row.0, row.1)));
        for column in columns {
            out.push_str("<td>");
            if let Some(unit) = grid.at(*row, *column) {
                overview_tile(out, unit);
            }
            out.push_str("</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>\n");
    true
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
fn deliveries(fleet: &serde_json::Value) -> String {
    let jobs = |key: &str| {
        fleet
            .pointer(&format!("/jobs/{key}"))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    let resumes = fleet
        .get("generation")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    format!(
        "{} redelivered, {} retried, {} lost, {} withdrawn by a cancel, resumed {resumes} time(s)",
        jobs("redelivered"),
        jobs("retries"),
        jobs("lost"),
        jobs("withdrawn"),
    )
}

fn facts(out: &mut String, summary: &Summary<'_>) {
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
                "{} scenario(s) × 2 arms × {runs_per_unit} run(s)",
                summary.units.len() / 2
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
    rows.push(("deliveries", deliveries(&input.envelope.fleet)));
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

fn units_table(out: &mut String, summary: &Summary<'_>) {
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

fn failures_table(out: &mut String, summary: &Summary<'_>) {
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

fn arm_cell(arm: &EvalArm) -> String {
    format!(
        "{} ({}/{})",
        percent(arm.pass_rate),
        arm.passes,
        arm.completed
    )
}

/// A difference of pass rates in signed whole points (`-55`, `+11`, `+0`).
fn signed_points(value: f64) -> String {
    format!("{:+.0}", (value * 100.0).round())
}

/// The CSS class of an A/B verdict.
fn ab_class(verdict: &str) -> &'static str {
    match verdict {
        "B worse" => "b-worse",
        "B better" => "b-better",
        _ => "no-difference",
    }
}

/// The A/B verdict of an eval's overall row, or `nothing to compare` with no complete pair.
fn ab_verdict(eval: &EvalSection) -> &str {
    match eval.rows.last() {
        Some(overall) if overall.pairs > 0 => &overall.verdict,
        _ => "nothing to compare",
    }
}

/// EVAL HOOK: the A/B result, the lead of an eval's report (rendered only from
/// [`ReportInput::eval`]).
fn eval_lead(out: &mut String, summary: &Summary<'_>) {
    let Some(eval) = &summary.input.eval else {
        out.push_str(
            "<section id=\"eval\" class=\"ab\">\n<h2>A/B result</h2>\n<p class=\"muted\">The A/B \
             statistics of this eval batch were not computed for this report.</p>\n</section>\n",
        );
        return;
    };
    let verdict = ab_verdict(eval);
    let _ = writeln!(
        out,
        "<section id=\"eval\" class=\"ab\">\n<h2>A/B result: {}</h2>\n<p>arm A = <code>{}</code> \
         · arm B = <code>{}</code> · alpha {} · {} intervals</p>",
        verdict_badge(ab_class(verdict), verdict),
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

fn eval_table(out: &mut String, eval: &EvalSection) {
    out.push_str(
        "<div class=\"wide\"><table class=\"eval\">\n<thead><tr><th>scope</th><th class=\"num\">A pass rate</th>\
         <th class=\"num\">B pass rate</th><th class=\"num\">B − A (points)</th><th class=\"num\">interval</th>\
         <th class=\"num opt\">A-only / B-only passes</th><th class=\"num\">p</th>\
         <th class=\"num opt\">detects ≥</th><th>verdict</th><th class=\"num opt\">excluded pairs</th>\
         <th class=\"num opt\">cost A</th><th class=\"num opt\">cost B</th></tr></thead>\n<tbody>\n",
    );
    for row in &eval.rows {
        let (diff, interval) = if row.pairs > 0 && row.diff.is_finite() {
            (
                signed_points(row.diff),
                format!(
                    "[{}, {}]",
                    signed_points(row.ci_low),
                    signed_points(row.ci_high)
                ),
            )
        } else {
            ("-".to_owned(), "no complete pair".to_owned())
        };
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

/// The page's title and header: the batch's verdict (an eval's A/B verdict), then the
/// SIMULATED and INCOMPLETE banners.
fn header(out: &mut String, summary: &Summary<'_>) {
    let (noun, class, word) = if summary.is_eval() {
        let verdict = summary
            .input
            .eval
            .as_ref()
            .map_or("no A/B result", ab_verdict);
        ("eval", ab_class(verdict), verdict.to_owned())
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

/// The HTML report of a batch: one self-contained page (see the module documentation).
pub fn render_html(input: &ReportInput, options: &HtmlOptions) -> String {
    let summary = summarize(input);
    let runs = runs::RunIndex::new(&summary);
    let mut out = String::with_capacity(32 * 1024 + input.runs.len() * 2048);
    let title_word = if summary.is_eval() {
        input.eval.as_ref().map_or("no A/B result", ab_verdict)
    } else {
        summary.batch_word()
    };
    page_start(
        &mut out,
        &format!(
            "cowork report {} {title_word}{}",
            summary.batch_id,
            if summary.simulated { " SIMULATED" } else { "" }
        ),
    );
    header(&mut out, &summary);
    if summary.is_eval() || input.eval.is_some() {
        eval_lead(&mut out, &summary);
    }
    facts(&mut out, &summary);
    out.push_str("</header>\n");
    if summary.units.len() > OVERVIEW_FROM_UNITS && !summary.is_eval() {
        overview(&mut out, &summary);
    }
    heatmap(&mut out, &summary, &runs);
    units_table(&mut out, &summary);
    failures_table(&mut out, &summary);
    stops_section(&mut out, &summary);
    control_changes_section(&mut out, input);
    runs::unit_sections(&mut out, &summary, &runs, &options.links);
    let _ = writeln!(
        out,
        "<footer>Rendered by <code>cowork report</code> from the stored batch ({}, {} stored \
         run(s)). Self-contained: no script and nothing loaded from anywhere else; the file \
         links point into the batch's store.</footer>",
        if input.incomplete.is_some() {
            "spec.json and the job records; no rollup was stored"
        } else {
            "spec.json, rollup.json, envelope.json and the job records"
        },
        input.run_briefs().len()
    );
    page_end(&mut out);
    out
}

/// Percent-encodes a query value (everything but RFC 3986 unreserved characters).
pub(crate) fn query_value(value: &str) -> String {
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
/// with `?token=`, the links carry the same token so that they open in a browser too. A
/// cancelled batch has a report too (marked incomplete).
pub fn render_batch_list(records: &[BatchRecord], token: Option<&str>) -> String {
    render_batch_list_live(records, &std::collections::BTreeMap::new(), token)
}

/// The changes people made to the batch's controls while it ran (pause, resume of dispatch,
/// adjusted limits): who, when, what, from and to. Nothing when there were none.
fn control_changes_section(out: &mut String, input: &ReportInput) {
    let Some(changes) = input
        .envelope
        .fleet
        .get("controlChanges")
        .and_then(|changes| changes.as_array())
        .filter(|changes| !changes.is_empty())
    else {
        return;
    };
    out.push_str(
        "<section id=\"control-changes\"><h2>Changes of the controls while it ran</h2>\n\
         <table><thead><tr><th>when (UTC)</th><th>who</th><th>what</th><th>before</th>\
         <th>after</th></tr></thead><tbody>\n",
    );
    for change in changes {
        let text = |key: &str| {
            change
                .get(key)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_owned()
        };
        let at_ms = change.get("atMs").and_then(|v| v.as_u64()).unwrap_or(0);
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&utc_time(at_ms)),
            escape(&text("by")),
            escape(&text("control")),
            escape(&text("old")),
            escape(&text("new"))
        );
    }
    out.push_str("</tbody></table></section>\n");
}

/// `YYYY-MM-DD HH:MM:SS` of a time in milliseconds since the Unix epoch (UTC).
fn utc_time(ms: u64) -> String {
    let seconds = ms / 1000;
    let days = (seconds / 86_400) as i64;
    let (hh, mm, ss) = ((seconds / 3600) % 24, (seconds / 60) % 60, seconds % 60);
    let (year, month, day) = cowork_schema::ids::civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02} {hh:02}:{mm:02}:{ss:02}")
}

/// What the batch list shows of a batch that runs now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchListLive {
    pub finished: u64,
    pub planned: u64,
    pub cost_usd: f64,
    pub simulated: bool,
    pub paused: bool,
    /// The batch's target as the user named it.
    pub target: Option<String>,
}

/// The batch list, with the progress, target, cost and SIMULATED mark of the batches in
/// `live` (by batch id) and a link to every unfinished batch's live page.
pub fn render_batch_list_live(
    records: &[BatchRecord],
    live: &std::collections::BTreeMap<String, BatchListLive>,
    token: Option<&str>,
) -> String {
    let mut out = String::with_capacity(4096);
    page_start(&mut out, "cowork coordinator batches");
    let _ = writeln!(
        out,
        "<header>\n<h1>cowork coordinator: batches</h1>\n<p class=\"muted\">{} batch(es), newest \
         first. Reports exist once a batch is done or cancelled.</p>\n</header>",
        records.len()
    );
    out.push_str(
        "<table class=\"batches\">\n<thead><tr><th>batch</th><th>state</th><th>verdict</th>\
         <th class=\"num\">jobs</th><th>progress</th><th>target</th><th class=\"num\">cost</th>\
         <th>reports</th></tr></thead>\n<tbody>\n",
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
            (BatchState::Cancelled, _) => verdict_badge("incomplete", "INCOMPLETE"),
            _ => "<span class=\"muted\">-</span>".to_owned(),
        };
        let exit = record
            .exit_code
            .map_or_else(String::new, |code| format!(" exit {code}"));
        let token_query = token.map_or_else(String::new, |token| {
            format!("?token={}", query_value(token))
        });
        let live_link = format!(
            "<a href=\"{}\" class=\"live\">live</a>",
            escape(&format!("batches/{id}/live.html{token_query}"))
        );
        let now = live.get(id);
        let progress = match now {
            Some(now) => format!(
                "{}/{}{}",
                now.finished,
                now.planned,
                if now.paused { " (paused)" } else { "" }
            ),
            None if record.state.is_final() => String::new(),
            None => format!("0/{}", record.n_jobs),
        };
        let target = now.and_then(|now| now.target.clone()).unwrap_or_default();
        let cost = now.map_or_else(String::new, |now| format!("${:.2}", now.cost_usd));
        let simulated = if now.is_some_and(|now| now.simulated) {
            " <span class=\"badge simulated\">SIMULATED</span>"
        } else {
            ""
        };
        let reports = if matches!(record.state, BatchState::Done | BatchState::Cancelled) {
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
            format!("{live_link} <span class=\"muted\">· reports once done</span>")
        };
        let _ = writeln!(
            out,
            "<tr data-batch=\"{id}\" data-state=\"{state}\"><td><code>{id}</code></td>\
             <td>{state}{simulated}</td><td>{verdict}{exit}</td><td class=\"num\">{jobs}</td>\
             <td class=\"progress\">{progress}</td><td>{target}</td><td class=\"num\">{cost}</td>\
             <td>{reports}</td></tr>",
            id = escape(id),
            state = escape(state),
            jobs = record.n_jobs,
            progress = escape(&progress),
            target = escape(&target),
            cost = escape(&cost),
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

    #[test]
    fn the_header_says_redeliveries_retries_losses_cancels_and_resumes() {
        let fleet = serde_json::json!({
            "generation": 1,
            "jobs": {"redelivered": 4, "retries": 1, "lost": 0, "withdrawn": 3},
        });
        assert_eq!(
            deliveries(&fleet),
            "4 redelivered, 1 retried, 0 lost, 3 withdrawn by a cancel, resumed 1 time(s)"
        );
        // An envelope without a fleet key (a re-judged batch) says nothing happened.
        assert_eq!(
            deliveries(&serde_json::Value::Null),
            "0 redelivered, 0 retried, 0 lost, 0 withdrawn by a cancel, resumed 0 time(s)"
        );
    }

    #[test]
    fn cells_are_coloured_by_verdict_and_shaded_by_pass_rate() {
        // A failing unit is red whatever its pass rate; more passes make it lighter.
        assert_eq!(heat_style("fail", 0.8), "background-color:hsl(356,78%,86%)");
        assert_eq!(heat_style("fail", 0.0), "background-color:hsl(356,78%,72%)");
        // A passing unit is green, darker the more runs passed.
        assert_eq!(heat_style("pass", 1.0), "background-color:hsl(137,50%,74%)");
        assert_eq!(heat_style("pass", 0.8), "background-color:hsl(137,50%,77%)");
        // Eval arms are blue: they are not judged one by one.
        assert_eq!(heat_style("arm", 0.5), "background-color:hsl(212,75%,84%)");
    }
}
