//! The heatmap: a cell per unit, coloured by its verdict and shaded by its pass rate, with its
//! runs as a strip; laid out as a matrix grid, a list of files, or an eval's arm pairs.

use std::fmt::Write as _;

use cowork_schema::batch::PlanKindName;

use super::page::escape;
use super::runs;
use crate::report::numbers::{js_number, percent};
use crate::report::summary::{Summary, UnitReport, UnitStatus};

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

/// The state a heatmap cell shows: its verdict, or `arm` for an eval arm (arms are judged by
/// the A/B comparison, not one by one).
pub(super) fn cell_state(unit: &UnitReport<'_>, summary: &Summary<'_>) -> &'static str {
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
pub(super) fn row_label(baseline: Option<&str>, model: Option<&str>) -> String {
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

pub(super) fn heatmap(out: &mut String, summary: &Summary<'_>, runs: &runs::RunIndex) {
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
         run · <span class=\"flakymark\">flaky</span> = runs passed and failed, too few to \
         tell whether the unit meets the bar · click a \
         cell for its runs</p>\n",
    );
}

/// A matrix's units laid out as rows (baseline × model) and columns (skill dirs), both in
/// first-seen cell order, with the unit at each place: the heatmap and the overview draw the
/// same grid.
pub(super) struct MatrixGrid<'s> {
    pub(super) rows: Vec<MatrixRow<'s>>,
    pub(super) columns: Vec<Option<&'s str>>,
    cells: std::collections::HashMap<(MatrixRow<'s>, Option<&'s str>), &'s UnitReport<'s>>,
}

/// A heatmap row: the baseline and model of its cells.
pub(super) type MatrixRow<'k> = (Option<&'k str>, Option<&'k str>);

impl<'s> MatrixGrid<'s> {
    pub(super) fn of(summary: &'s Summary<'s>) -> MatrixGrid<'s> {
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

    pub(super) fn at(
        &self,
        row: MatrixRow<'s>,
        column: Option<&'s str>,
    ) -> Option<&'s UnitReport<'s>> {
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

/// An eval's heatmap: one row per scenario, its arms side by side.
fn eval_heatmap(out: &mut String, summary: &Summary<'_>, runs: &runs::RunIndex) {
    out.push_str("<table class=\"heatmap\">\n<thead><tr><th>scenario</th><th>file</th>");
    for name in summary.eval_arm_names() {
        let _ = write!(out, "<th>arm {}</th>", escape(&name));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for pair in summary.units.chunks(summary.eval_arm_count()) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
