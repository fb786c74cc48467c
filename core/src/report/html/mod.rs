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

mod batch_list;
mod eval;
mod header;
mod heatmap;
mod overview;
mod page;
mod runs;
mod tables;

use std::fmt::Write as _;

use eval::{ab_verdict, eval_lead};
use header::{facts, header};
use heatmap::heatmap;
use overview::{OVERVIEW_FROM_UNITS, overview};
use page::{page_end, page_start};
use tables::{control_changes_section, failures_table, stops_section, units_table};

use super::input::ReportInput;
use super::summary::summarize;

pub use batch_list::{BatchListLive, render_batch_list, render_batch_list_live};
pub(crate) use page::escape;
pub use runs::ArtifactLinks;

/// How the HTML report is rendered for the place it is read from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HtmlOptions {
    /// Where the links to each run's stored files point.
    pub links: ArtifactLinks,
}

/// The HTML report of a batch: one self-contained page (see the module documentation).
pub fn render_html(input: &ReportInput, options: &HtmlOptions) -> String {
    let summary = summarize(input);
    let runs = runs::RunIndex::new(&summary);
    let mut out = String::with_capacity(32 * 1024 + input.runs.len() * 2048);
    let title_word = if summary.is_eval() {
        input
            .eval
            .as_ref()
            .map_or_else(|| "no A/B result".to_owned(), ab_verdict)
    } else {
        summary.batch_word().to_owned()
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
