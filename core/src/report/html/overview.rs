//! The first screen of a big batch: counts, the failing and flaky units by name (worst first),
//! and every unit as a small square linking to its section.

use std::fmt::Write as _;

use cowork_schema::batch::PlanKindName;

use super::heatmap::{MatrixGrid, heat_style, row_label};
use super::page::{escape, verdict_badge};
use crate::report::numbers::{js_number, percent};
use crate::report::summary::{Summary, UnitReport, UnitStatus};

/// Units above which the page opens with the overview: a batch this big is read cell by cell
/// no longer (the terminal summary cuts at the same size).
pub(super) const OVERVIEW_FROM_UNITS: usize = 40;

/// Failing and flaky units listed by name in the overview before the rest are counted: few enough that the squares of 1,000 cells stay on the first screen.
const OVERVIEW_LISTED: usize = 12;

/// Where a unit stands in the overview's order: failing (by how far below the bar), then
/// flaky (`crate::trend::flaky`: its pass rate is too uncertain to say it meets the bar), then
/// passing, then not run; each by pass rate, then index.
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
pub(super) fn overview(out: &mut String, summary: &Summary<'_>) {
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
         flaky but passing · {} steadily passing{}</p>",
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
