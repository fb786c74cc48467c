//! The drill-down of the HTML report: a section per unit (its runs as a strip, in index order)
//! and one per run (verdict, signals, every assertion with its evidence, error, cost, tokens,
//! duration, model, the job record and links to the stored files).
//! A run's result.json is read by key: its shape is the CLI's, open across CLI versions (see
//! `cowork_schema::run_result`), and a field it lacks is shown as unknown.

use std::collections::HashSet;
use std::fmt::Write as _;

use serde_json::Value;

use super::page::{escape, query_value, verdict_badge};
use crate::report::input::{
    DetailedRuns, MAX_RUN_SECTIONS, RunOutcome, RunState, SECTIONS_OF_A_BIG_BATCH, StoredRun,
};
use crate::report::numbers::{cost_text, percent, seconds};
use crate::report::summary::{Summary, UnitReport, UnitStatus};

/// Squares of a strip inside a heatmap cell before the rest are counted.
pub(crate) const STRIP_IN_CELL: usize = 60;

/// Squares of the strip in a unit's section before the rest are counted: enough for any run
/// count a person reads square by square.
const STRIP_IN_SECTION: usize = 2000;

/// Longest assertion value or message shown, in characters; the stored files have all of it.
const TEXT_CHARS: usize = 600;

/// Where the links to a run's stored files point.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ArtifactLinks {
    /// No links: the files are named by their store keys (the reader cannot reach the store,
    /// e.g. a report fetched from a coordinator and saved elsewhere).
    #[default]
    None,
    /// Links relative to where the report file is: `prefix` + store key. `prefix` is the path
    /// from the report's directory to the store's root, ending in `/` (or empty).
    StoreRelative { prefix: String },
    /// The coordinator's report page (`/v1/batches/{id}/report`): links to
    /// `artifacts/<path within the batch>`, which resolve to the API's
    /// `/v1/batches/{id}/artifacts/…`, with the page's `?token=` when it was opened with one.
    Coordinator { token: Option<String> },
}

impl ArtifactLinks {
    /// The link to the stored file `key` of batch `batch_id`; `None` when files are not linked.
    fn href(&self, batch_id: &str, key: &str) -> Option<String> {
        match self {
            ArtifactLinks::None => None,
            ArtifactLinks::StoreRelative { prefix } => Some(format!("{prefix}{}", path_of(key))),
            ArtifactLinks::Coordinator { token } => {
                let in_batch = key.strip_prefix(&format!("batches/{batch_id}/"))?;
                let query = token.as_deref().map_or_else(String::new, |token| {
                    format!("?token={}", query_value(token))
                });
                Some(format!("artifacts/{}{query}", path_of(in_batch)))
            }
        }
    }
}

/// A store key as a URL path: each segment percent-encoded (keys are validated, so this only
/// matters for unusual characters in file names).
fn path_of(key: &str) -> String {
    key.split('/')
        .map(query_value)
        .collect::<Vec<_>>()
        .join("/")
}

/// The anchors of the runs that have a section.
pub(crate) struct RunIndex {
    with_section: HashSet<String>,
    /// Runs that have no section (over [`MAX_RUN_SECTIONS`]).
    left_out: usize,
}

impl RunIndex {
    /// Every run gets a section up to [`MAX_RUN_SECTIONS`]; above, failing, errored and
    /// discarded runs first, then passing ones, each in unit and index order
    /// ([`DetailedRuns`], which a loader of a big batch has applied already:
    /// only those runs are whole).
    pub(crate) fn new(summary: &Summary<'_>) -> Self {
        let detailed: Vec<&StoredRun> = summary
            .units
            .iter()
            .flat_map(|unit| unit.detailed.iter().copied())
            .collect();
        let mut picker = DetailedRuns::default();
        for run in &detailed {
            picker.offer(RunState::of(run), run.anchor());
        }
        let with_section: HashSet<String> = picker.finish().into_iter().collect();
        let all = summary
            .units
            .iter()
            .map(|unit| unit.all_runs.len())
            .sum::<usize>();
        Self {
            left_out: all.saturating_sub(with_section.len()),
            with_section,
        }
    }

    fn has_section(&self, anchor: &str) -> bool {
        self.with_section.contains(anchor)
    }
}

/// The runs of a unit in index order as coloured squares, each linking to its run's section;
/// at most `limit` squares, then a count.
pub(crate) fn strip(unit: &UnitReport<'_>, index: &RunIndex, limit: usize) -> String {
    let runs = unit.strip();
    let big = if limit == STRIP_IN_SECTION {
        " big"
    } else {
        ""
    };
    let mut out = format!(
        "<span class=\"strip{big}\" data-strip=\"{}\">",
        escape(&unit.id)
    );
    if index.left_out > 0 {
        compact_strip(&mut out, unit, &runs, index, limit);
        out.push_str("</span>");
        return out;
    }
    for (repeat_index, state, run) in runs.iter().take(limit) {
        let name = repeat_index.map_or_else(|| "run".to_owned(), |index| format!("r{index}"));
        let title = format!("{name}: {}", state_words(*state));
        match run.filter(|run| index.has_section(&run.anchor())) {
            Some(run) => {
                let _ = write!(
                    out,
                    "<a class=\"dot {}\" href=\"#{}\" title=\"{}\" data-run=\"{}\"></a>",
                    state.as_str(),
                    run.anchor(),
                    escape(&title),
                    escape(&run.job_path())
                );
            }
            None => {
                let _ = write!(
                    out,
                    "<span class=\"dot {}\" title=\"{}\"></span>",
                    state.as_str(),
                    escape(&title)
                );
            }
        }
    }
    if runs.len() > limit {
        let _ = write!(
            out,
            "<a class=\"more\" href=\"#unit-{}\">+{} more</a>",
            escape(&unit.id),
            runs.len() - limit
        );
    }
    out.push_str("</span>");
    out
}

/// The strip of a batch too big to detail every run: consecutive runs in the same state and
/// without a section of their own are one segment with their count (`r0–r99: 100 pass`), so
/// that the page grows with the runs that failed, not with every run. At most `limit` squares
/// and segments, then a count of the runs left.
fn compact_strip(
    out: &mut String,
    unit: &UnitReport<'_>,
    runs: &[(Option<u32>, RunState, Option<&crate::report::RunBrief>)],
    index: &RunIndex,
    limit: usize,
) {
    let name = |repeat_index: Option<u32>| {
        repeat_index.map_or_else(|| "run".to_owned(), |index| format!("r{index}"))
    };
    let mut shown = 0;
    let mut position = 0;
    while position < runs.len() && shown < limit {
        let (repeat_index, state, run) = runs[position];
        shown += 1;
        if let Some(run) = run.filter(|run| index.has_section(&run.anchor())) {
            let _ = write!(
                out,
                "<a class=\"dot {}\" href=\"#{}\" title=\"{}\" data-run=\"{}\"></a>",
                state.as_str(),
                run.anchor(),
                escape(&format!("{}: {}", name(repeat_index), state_words(state))),
                escape(&run.job_path())
            );
            position += 1;
            continue;
        }
        let mut end = position + 1;
        while end < runs.len() {
            let (_, next_state, next_run) = runs[end];
            let detailed = next_run.is_some_and(|run| index.has_section(&run.anchor()));
            if next_state != state || detailed {
                break;
            }
            end += 1;
        }
        let count = end - position;
        let title = if count == 1 {
            format!("{}: {}", name(repeat_index), state_words(state))
        } else {
            format!(
                "{}–{}: {count} {}",
                name(repeat_index),
                name(runs[end - 1].0),
                state_words(state)
            )
        };
        let _ = write!(
            out,
            "<span class=\"seg {}\" title=\"{}\">{}</span>",
            state.as_str(),
            escape(&title),
            if count == 1 {
                String::new()
            } else {
                count.to_string()
            }
        );
        position = end;
    }
    if position < runs.len() {
        let _ = write!(
            out,
            "<a class=\"more\" href=\"#unit-{}\">+{} more</a>",
            escape(&unit.id),
            runs.len() - position
        );
    }
}

fn state_words(state: RunState) -> &'static str {
    match state {
        RunState::Pass => "pass",
        RunState::Fail => "fail",
        RunState::Error => "error (no result)",
        RunState::Discarded => "discarded (finished after the unit was decided)",
        RunState::NotRun => "not run",
    }
}

/// One section per unit, each with its runs.
pub(crate) fn unit_sections(
    out: &mut String,
    summary: &Summary<'_>,
    index: &RunIndex,
    links: &ArtifactLinks,
) {
    out.push_str("<section id=\"runs\">\n<h2>Runs</h2>\n");
    if index.left_out > 0 {
        let _ = writeln!(
            out,
            "<p class=\"muted\">{} passing run(s) have no section of their own (the page \
             details at most {SECTIONS_OF_A_BIG_BATCH} runs of a batch of more than \
             {MAX_RUN_SECTIONS}, failing ones first); their files are in the store.</p>",
            index.left_out
        );
    }
    for unit in &summary.units {
        unit_section(out, summary, unit, index, links);
    }
    out.push_str("</section>\n");
}

fn unit_section(
    out: &mut String,
    summary: &Summary<'_>,
    unit: &UnitReport<'_>,
    index: &RunIndex,
    links: &ArtifactLinks,
) {
    let state =
        if summary.is_eval() && matches!(unit.status, UnitStatus::Passed | UnitStatus::Failed) {
            "arm"
        } else {
            unit.status.as_str()
        };
    let badge = if state == "arm" {
        verdict_badge("arm", "arm")
    } else {
        verdict_badge(state, &unit.verdict_text())
    };
    let _ = writeln!(
        out,
        "<section class=\"unit\" id=\"unit-{id}\" data-unit=\"{id}\">\n<h3><code>{id}</code> {} {badge}</h3>",
        escape(unit.label),
        id = escape(&unit.id),
    );
    let rate = unit.pass_rate.map_or_else(|| "-".to_owned(), percent);
    let mut facts = vec![
        format!("file {}", summary.scenario_file(unit)),
        format!(
            "{} of {} run(s) folded, {} passed ({rate})",
            unit.completed, unit.requested, unit.passes
        ),
        format!("cost {}", cost_text(unit.cost_usd, unit.recorded_cost_usd)),
    ];
    if let Some(stop) = unit.stopped_early {
        facts.push(format!("stopped early: {}", stop.as_str()));
    }
    if let UnitStatus::Error(error) = &unit.status {
        facts.push(format!("error: {error}"));
    }
    let _ = writeln!(out, "<p class=\"muted\">{}</p>", escape(&facts.join(" · ")));
    out.push_str(&strip(unit, index, STRIP_IN_SECTION));
    out.push('\n');
    let undetailed = unit.all_runs.len().saturating_sub(
        unit.detailed
            .iter()
            .filter(|run| index.has_section(&run.anchor()))
            .count(),
    );
    if index.left_out > 0 && undetailed > 0 {
        // The drill-down of a run without a section: its stored files, one directory per run.
        let key = format!("batches/{}/jobs/{}/", summary.batch_id, unit.id);
        // Only a local store lists a directory (the coordinator serves files, not folders).
        let href = match links {
            ArtifactLinks::StoreRelative { .. } => links.href(summary.batch_id, &key),
            _ => None,
        };
        let place = match href {
            Some(href) => format!(
                "<a href=\"{}\" data-runs-dir=\"{}\"><code>{}</code></a>",
                escape(&href),
                escape(&unit.id),
                escape(&key)
            ),
            None => format!("<code>{}</code>", escape(&key)),
        };
        let _ = writeln!(
            out,
            "<p class=\"muted small\">{undetailed} run(s) of this unit have no section here; \
             each run's files (<code>result.json</code>, its log) are in the store under {place}\
             <code>r&lt;k&gt;/</code>.</p>"
        );
    }
    for run in &unit.detailed {
        if index.has_section(&run.anchor()) {
            run_card(out, summary, unit, run, links);
        }
    }
    out.push_str(
        "<p class=\"small\"><a href=\"#heatmap\">back to the heatmap</a></p>\n</section>\n",
    );
}

/// `text` cut to [`TEXT_CHARS`] characters, with `…` when cut.
fn shortened(text: &str) -> String {
    if text.chars().count() <= TEXT_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(TEXT_CHARS).collect();
    cut.push('…');
    cut
}

/// The facts line of a run: model, cost, tokens, duration, result, fidelity.
fn run_facts(result: &Value, replay: bool) -> Vec<String> {
    let mut facts = Vec::new();
    if result.is_null() {
        return facts;
    }
    facts.push(format!(
        "model {}",
        cowork_schema::run_result::provenance_model(result)
    ));
    // A replay spent nothing; the cost its result carries is the recorded run's.
    let cost = cowork_schema::run_result::cost_usd(result);
    let (spent, recorded) = if replay {
        (Some(0.0), cost)
    } else {
        (cost, None)
    };
    facts.push(format!("cost {}", cost_text(spent, recorded)));
    let usage = result.get("usage");
    let tokens_in = usage
        .and_then(|u| u.get("input_tokens"))
        .and_then(Value::as_f64);
    let tokens_out = usage
        .and_then(|u| u.get("output_tokens"))
        .and_then(Value::as_f64);
    match (tokens_in, tokens_out) {
        (Some(tokens_in), Some(tokens_out)) => facts.push(format!(
            "{:.0} tokens ({tokens_in:.0} in, {tokens_out:.0} out)",
            tokens_in + tokens_out
        )),
        _ => facts.push("tokens unknown".to_owned()),
    }
    facts.push(format!(
        "duration {}",
        seconds(cowork_schema::run_result::duration_ms(result))
    ));
    let outcome = [
        result.get("result").and_then(Value::as_str),
        result.get("resultSubtype").and_then(Value::as_str),
    ];
    match outcome {
        [Some(kind), Some(subtype)] if kind != subtype => {
            facts.push(format!("result {kind} ({subtype})"));
        }
        [Some(kind), _] => facts.push(format!("result {kind}")),
        _ => {}
    }
    if let Some(kind) = result.get("resultErrorKind").and_then(Value::as_str) {
        facts.push(format!("error kind {kind}"));
    }
    if let Some(fidelity) = result.get("effectiveFidelity").and_then(Value::as_str) {
        facts.push(format!("fidelity {fidelity}"));
    }
    facts
}

fn run_card(
    out: &mut String,
    summary: &Summary<'_>,
    unit: &UnitReport<'_>,
    run: &StoredRun,
    links: &ArtifactLinks,
) {
    let state = RunState::of(run);
    let name = run
        .repeat_index
        .map_or_else(|| "run".to_owned(), |index| format!("r{index}"));
    let word = match state {
        RunState::Pass => "PASS",
        RunState::Fail => "FAIL",
        RunState::Error => "ERROR",
        RunState::Discarded => "DISCARDED",
        RunState::NotRun => "NOT RUN",
    };
    let _ = writeln!(
        out,
        "<article class=\"run {state}\" id=\"{anchor}\" data-run=\"{job}\">\n<header><strong>\
         <a href=\"#unit-{unit_id}\">{unit_id}</a> / {name}</strong> {badge} <span class=\"muted\">{facts}</span></header>",
        state = state.as_str(),
        anchor = run.anchor(),
        job = escape(&run.job_path()),
        unit_id = escape(&unit.id),
        badge = verdict_badge(state.as_str(), word),
        facts = escape(
            &run_facts(&run.result, summary.input.stored.spec.mode.spends_nothing()).join(" · ")
        ),
    );
    if run.discarded {
        out.push_str(
            "<p class=\"muted\">Finished after its unit was decided: stored and paid for, but not \
             part of any verdict.</p>\n",
        );
    }
    match &run.outcome {
        RunOutcome::Completed => {}
        RunOutcome::Unanswered { message } => {
            let _ = writeln!(
                out,
                "<p class=\"errorbox\"><strong>unanswered</strong>: {}</p>",
                escape(&shortened(message))
            );
        }
        RunOutcome::Error { category, message } => {
            let _ = writeln!(
                out,
                "<p class=\"errorbox\"><strong>error ({})</strong>: {}</p>",
                escape(category),
                escape(&shortened(message))
            );
        }
    }
    signals(out, &run.result);
    assertions(out, &run.result);
    files(out, summary, run, links);
    out.push_str("</article>\n");
}

/// The run's verdict signals, except `assertion` ones: those repeat the failing assertions the
/// table below shows.
fn signals(out: &mut String, result: &Value) {
    let signals: Vec<&Value> = cowork_schema::run_result::verdict_signals(result)
        .map(|signals| {
            signals
                .iter()
                .filter(|signal| signal.get("code").and_then(Value::as_str) != Some("assertion"))
                .collect()
        })
        .unwrap_or_default();
    if signals.is_empty() {
        return;
    }
    out.push_str("<p class=\"small\">signals:</p><ul class=\"signals\">");
    for signal in signals {
        let code = signal.get("code").and_then(Value::as_str).unwrap_or("?");
        let severity = signal.get("severity").and_then(Value::as_str).unwrap_or("");
        let message = signal.get("message").and_then(Value::as_str).unwrap_or("");
        let _ = write!(
            out,
            "<li><code>{}</code> {} — {}</li>",
            escape(code),
            escape(severity),
            escape(&shortened(message))
        );
    }
    out.push_str("</ul>\n");
}

/// An assertion as written in the scenario: `key: value` (objects as compact JSON).
fn assertion_text(assertion: Option<&Value>) -> String {
    let Some(Value::Object(object)) = assertion else {
        return "(empty assertion)".to_owned();
    };
    let parts: Vec<String> = object
        .iter()
        .map(|(key, value)| match value {
            Value::String(text) => format!("{key}: {text}"),
            other => format!("{key}: {other}"),
        })
        .collect();
    shortened(&parts.join(", "))
}

/// Every assertion of the run with its evidence or message. A run whose assertions all held
/// folds them away under a summary line (still in the page, opened with a click).
fn assertions(out: &mut String, result: &Value) {
    let Some(entries) = result
        .get("assertions")
        .and_then(Value::as_array)
        .filter(|entries| !entries.is_empty())
    else {
        return;
    };
    let n_failing = entries
        .iter()
        .filter(|entry| entry.get("pass").and_then(Value::as_bool) != Some(true))
        .count();
    let all_held = n_failing == 0;
    if all_held {
        let _ = write!(
            out,
            "<details class=\"assertions\"><summary>all {} assertion(s) held</summary>",
            entries.len()
        );
    } else {
        let _ = write!(
            out,
            "<p class=\"small\">{n_failing} of {} assertion(s) failed:</p>",
            entries.len()
        );
    }
    out.push_str(
        "<table class=\"assertions\"><thead><tr><th>assertion</th><th>result</th>\
         <th>evidence / message</th></tr></thead><tbody>",
    );
    for entry in entries {
        let pass = entry.get("pass").and_then(Value::as_bool) == Some(true);
        let text: Vec<&str> = ["evidence", "message"]
            .iter()
            .filter_map(|field| entry.get(*field).and_then(Value::as_str))
            .collect();
        let _ = write!(
            out,
            "<tr class=\"{class}\"><td><code>{assertion}</code></td><td>{class}</td><td>{text}</td></tr>",
            class = if pass { "pass" } else { "fail" },
            assertion = escape(&assertion_text(entry.get("assertion"))),
            text = escape(&shortened(&text.join(" — "))),
        );
    }
    out.push_str("</tbody></table>");
    if all_held {
        out.push_str("</details>");
    }
    out.push('\n');
}

/// The run's stored files, linked as the report's place allows, and its job record.
fn files(out: &mut String, summary: &Summary<'_>, run: &StoredRun, links: &ArtifactLinks) {
    if !run.artifacts.is_empty() {
        let job_dir = format!("batches/{}/jobs/{}/", summary.batch_id, run.job_path());
        out.push_str("<p class=\"files small\">files: ");
        for key in &run.artifacts {
            let name = key.strip_prefix(&job_dir).unwrap_or(key);
            match links.href(summary.batch_id, key) {
                Some(href) => {
                    let _ = write!(
                        out,
                        "<a href=\"{}\" data-artifact=\"{}\">{}</a>",
                        escape(&href),
                        escape(key),
                        escape(name)
                    );
                }
                None => {
                    let _ = write!(
                        out,
                        "<code title=\"{}\">{}</code>",
                        escape(key),
                        escape(name)
                    );
                }
            }
        }
        out.push_str("</p>\n");
    }
    if let Some(record) = &run.record {
        let mut parts = vec![
            format!("attempt {}", record.attempt),
            format!("worker {}", record.worker_id),
        ];
        if record.generation > 0 {
            parts.push(format!("generation {}", record.generation));
        }
        if let Some(version) = &record.harness_version {
            parts.push(format!("harness {version}"));
        }
        if let Some(code) = record.exit_code {
            parts.push(format!("exit {code}"));
        }
        parts.push(format!(
            "executor time {}",
            seconds(Some(record.run_ms as f64))
        ));
        let _ = writeln!(
            out,
            "<p class=\"muted small\">{}</p>",
            escape(&parts.join(" · "))
        );
    }
}
