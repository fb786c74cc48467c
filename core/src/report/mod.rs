//! Reports people read: one stored batch rendered as a self-contained HTML page, JUnit XML, a
//! Markdown summary or a compact JSON summary (`cowork report`, `GET /v1/batches/{id}/report`).
//!
//! Modules, in reading order:
//! - `input`: [`ReportInput`] (every stored run in brief, [`RunBrief`], and the runs the page
//!   details with their outcome, artifacts and job record) and the eval hook
//!   [`EvalSection`].
//! - `summary`: `summarize`, the pure step every renderer shares (units with pass rates,
//!   flakiness, cost and duration, each unit's runs in index order, failure reasons grouped by
//!   assertion key and signal code, stop reasons, discarded runs and their cost, wall time).
//! - `numbers`: the number formats every renderer shares.
//! - `json`: [`render_json`], a compact machine summary.
//! - [`html`]: [`render_html`] (one file, inline CSS, no script, no URL; a section per unit
//!   and per run, reachable from the heatmap, with links to the run's stored artifacts) and the
//!   coordinator's batch list page.
//! - [`junit`]: [`render_junit`], one `<testsuite>` per batch, one `<testcase>` per unit.
//! - [`live`]: the live page of a running batch, a static shell and its script (`live.js`).
//! - [`markdown`]: [`render_markdown`], a CI job summary or PR comment.
//!
//! Reading a stored batch into a [`ReportInput`] is the coordinator's `report` module.
//!
//! Every renderer is a pure function of its input: no IO, no clock, and the same input gives the
//! same bytes, so tests compare exact fragments. Simulated runs are never presented as real
//! (decisions.md#executors): each format says so at the top when any run of the batch was
//! simulated.
//!
//! Rollups are the source of truth for counts and verdicts (harness-behaviour.md#repeat-rollup,
//! harness-behaviour.md#matrix); results are read only for what rollups do not hold: durations,
//! per-run failure messages and signal messages. A run counts as folded when the rollup folded its
//! repeat index (index order, harness-behaviour.md#index-order-reducer) and the envelope does not
//! list it as discarded.
//!
//! A batch that never finished (interrupted, cancelled) has no stored rollup; its loader judges
//! the runs that finished with the same reducer and marks the report [`Incomplete`], naming
//! the jobs that never ran.

pub mod html;
mod input;
mod json;
pub mod junit;
pub mod live;
pub mod markdown;
mod numbers;
mod summary;

pub use html::{
    ArtifactLinks, BatchListLive, HtmlOptions, render_batch_list, render_batch_list_live,
    render_html,
};
pub use input::{
    DetailedRuns, EvalArm, EvalRow, EvalSection, Incomplete, MAX_RUN_SECTIONS, RankedArm,
    ReportInput, RunBrief, RunFindings, RunOutcome, RunRecord, RunState, SECTIONS_OF_A_BIG_BATCH,
    SingleRunFacts, StoredRun, sort_briefs,
};
pub use json::render_json;
pub use junit::render_junit;
pub use live::{LIVE_PAGE_SCRIPT, render_live_page};
pub use markdown::render_markdown;
pub use numbers::{percent, seconds, usd};
