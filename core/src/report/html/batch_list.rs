//! The coordinator's batch list page (`GET /v1/ui`): a row per batch with its state, verdict,
//! progress and links to its reports or its live page.

use std::fmt::Write as _;

use cowork_schema::registry::{BatchRecord, BatchState};

use super::eval::ab_class;
use super::page::{escape, page_end, page_start, query_value, verdict_badge};

/// The coordinator's batch list page (`GET /v1/ui`): id, state, verdict and links to each
/// report format, newest batch first. Links are relative to `/v1/ui`; when the page was opened
/// with `?token=`, the links carry the same token so that they open in a browser too. A
/// cancelled batch has a report too (marked incomplete).
pub fn render_batch_list(records: &[BatchRecord], token: Option<&str>) -> String {
    render_batch_list_live(records, &std::collections::BTreeMap::new(), token)
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
    /// The batch is an eval (`cowork eval`): two arms compared, not judged one by one.
    pub eval: bool,
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
        let now = live.get(id);
        let eval =
            record.eval_verdict.is_some() || record.listing.eval || now.is_some_and(|now| now.eval);
        let verdict = verdict_cell(record);
        let mode = if eval { " data-mode=\"eval\"" } else { "" };
        let eval_mark = if eval {
            " <span class=\"badge eval\">eval</span>"
        } else {
            ""
        };
        let token_query = token.map_or_else(String::new, |token| {
            format!("?token={}", query_value(token))
        });
        let live_link = format!(
            "<a href=\"{}\" class=\"live\">live</a>",
            escape(&format!("batches/{id}/live.html{token_query}"))
        );
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
        // A running batch's spend is live; an ended one's was kept in its record.
        let target = now
            .and_then(|now| now.target.clone())
            .or_else(|| record.listing.target.clone())
            .unwrap_or_default();
        let cost = now
            .map(|now| now.cost_usd)
            .or(record.listing.spent_usd)
            .map_or_else(String::new, |usd| format!("${usd:.2}"));
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
            "<tr data-batch=\"{id}\" data-state=\"{state}\"{mode}>\
             <td><code>{id}</code></td><td>{state}{eval_mark}{simulated}</td><td>{verdict}</td><td class=\"num\">{jobs}</td>\
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

/// A batch's verdict and exit code. An eval is judged by its A/B comparison, never PASS or FAIL.
fn verdict_cell(record: &BatchRecord) -> String {
    let badge = match (record.state, record.ok, &record.eval_verdict) {
        (BatchState::Done, _, Some(words)) => {
            verdict_badge(ab_class(words), &format!("eval: {words}"))
        }
        (BatchState::Done, Some(true), None) => verdict_badge("pass", "PASS"),
        (BatchState::Done, Some(false), None) => verdict_badge("fail", "FAIL"),
        (BatchState::Cancelled, _, _) => verdict_badge("incomplete", "INCOMPLETE"),
        _ => "<span class=\"muted\">-</span>".to_owned(),
    };
    match record.exit_code {
        Some(code) => format!("{badge} exit {code}"),
        None => badge,
    }
}
