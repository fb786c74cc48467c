//! The few lines under the summary table that say why runs failed: the report's failure reasons
//! (`failureReasons` of `cowork report --format json`: failing assertions and fail signals,
//! grouped by key, most frequent first), the top [`LISTED`] of them, each with one job whose
//! files show it, so that a FAIL never needs a hunt through `jobs/*/`.

use std::path::Path;

use cowork_client::CoordinatorClient;
use cowork_fabric::embedded::DirArtifactStore;
use cowork_schema::envelope::Envelope;
use cowork_schema::ids::{BatchId, JobId};
use cowork_schema::layout::{StoreRoot, job_dir, names};
use cowork_schema::rollup::RepeatRollup;
use serde_json::Value;

/// The store `--store` names by default: a command naming it needs no `--store`.
const DEFAULT_STORE: &str = ".cowork";

/// Reasons listed under the table, at most.
const LISTED: usize = 3;

/// Past this many folded runs the summary does not read every run back for its reasons (a
/// million runs take the report some twenty seconds): one line sends the user to the report.
const READ_UP_TO_RUNS: u64 = 20_000;

/// The runs an envelope folded: its rollups' `completed`, or one per cell or result.
fn folded_runs(head: &Envelope) -> u64 {
    let completed = |rollups: &mut dyn Iterator<Item = &RepeatRollup>| {
        rollups
            .map(|rollup| u64::from(rollup.completed))
            .sum::<u64>()
    };
    if let Some(rollups) = &head.rollups {
        return completed(&mut rollups.iter());
    }
    if let Some(matrix) = &head.matrix_repeat {
        return completed(&mut matrix.cells.iter().filter_map(|cell| cell.rollup.as_ref()));
    }
    match &head.matrix {
        Some(matrix) => matrix.cells.len() as u64,
        None => head.results.len() as u64,
    }
}

/// The line that stands for the reasons of a batch too big to read back here.
fn too_many_runs(head: &Envelope, report_command: &str) -> Option<String> {
    let runs = folded_runs(head);
    (runs > READ_UP_TO_RUNS).then(|| {
        format!(
            "why runs failed: `{report_command}` groups the reasons of all {runs} runs (not read \
             here, to end at once)\n"
        )
    })
}

/// One fail reason of the report's summary.
struct Reason {
    runs: u64,
    key: String,
    sample: String,
    /// The job path (`c1/r0`) of one run that shows it.
    job: String,
}

/// The fail-severity reasons of a report summary (`failureReasons`), in its order.
fn fail_reasons(summary: &Value) -> Vec<Reason> {
    let Some(entries) = summary.get("failureReasons").and_then(Value::as_array) else {
        return Vec::new();
    };
    let text = |entry: &Value, key: &str| {
        entry
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    entries
        .iter()
        .filter(|entry| entry.get("severity").and_then(Value::as_str) == Some("fail"))
        .map(|entry| Reason {
            runs: entry.get("runs").and_then(Value::as_u64).unwrap_or(0),
            key: text(entry, "key"),
            sample: text(entry, "sample"),
            job: text(entry, "job"),
        })
        .collect()
}

/// The lines: a header, one line per listed reason (`look` says where its job's files are),
/// `footer` (how to reach the jobs' files, when each line cannot say it), and a line sending
/// the rest to `report_command`. Empty without a fail reason.
fn render(
    summary: &Value,
    look: &dyn Fn(&str) -> String,
    footer: Option<String>,
    report_command: &str,
) -> String {
    let reasons = fail_reasons(summary);
    if reasons.is_empty() {
        return String::new();
    }
    let mut out = String::from("why runs failed (most frequent first):\n");
    for reason in reasons.iter().take(LISTED) {
        let first_line = reason.sample.lines().next().unwrap_or_default();
        let runs = crate::text::count(reason.runs, "run");
        let message = if first_line.is_empty() || first_line == reason.key {
            format!("[{}]", reason.key)
        } else {
            format!("[{}] {first_line}", reason.key)
        };
        out.push_str(&format!(
            "  {runs}: {message}; look in {}\n",
            look(&reason.job)
        ));
    }
    if let Some(footer) = footer {
        out.push_str(&format!("  {footer}\n"));
    }
    let more = reasons.len().saturating_sub(LISTED);
    if more > 0 {
        out.push_str(&format!(
            "  … {more} more reason(s): `{report_command}` lists every one\n"
        ));
    }
    out
}

/// The reasons of a batch stored under `store` (`cowork run`, a local resume, `cowork rollup`
/// of a stored batch), each naming one job's directory. Empty when the batch passed or its
/// report cannot be read (the table above still stands).
pub async fn local(store: &Path, batch: &BatchId, head: &Envelope) -> String {
    let store_flag = if store == Path::new(DEFAULT_STORE) {
        String::new()
    } else {
        format!(" --store {}", store.display())
    };
    let report_command = format!("cowork report {batch}{store_flag} --format markdown");
    if let Some(line) = too_many_runs(head, &report_command) {
        return line;
    }
    let reader = DirArtifactStore::new(store);
    let input = match cowork_coordinator::report_input::load_report_input(&reader, batch).await {
        Ok(input) => input,
        Err(error) => {
            tracing::debug!(%error, "no failure reasons: the batch's report is unreadable");
            return String::new();
        }
    };
    let summary: Value = match serde_json::from_str(&cowork_core::report::render_json(&input)) {
        Ok(summary) => summary,
        Err(_) => return String::new(),
    };
    let look = |job: &str| match JobId::parse(&format!("{batch}/{job}")) {
        Some((batch, unit, repeat)) => {
            let dir = StoreRoot::new(store)
                .path()
                .join(job_dir(&JobId::new(&batch, unit, repeat)));
            format!("{}/", dir.display())
        }
        None => format!("job {job}"),
    };
    render(&summary, &look, None, &report_command)
}

/// The reasons of a batch a coordinator ran (`cowork submit --watch`), each naming one job, and
/// the command that saves the jobs' files. Empty when the summary cannot be read.
pub async fn remote(client: &CoordinatorClient, batch: &BatchId, head: &Envelope) -> String {
    let coordinator = client.base_url().trim_end_matches('/');
    let report_command =
        format!("cowork report {batch} --coordinator {coordinator} --format markdown");
    if let Some(line) = too_many_runs(head, &report_command) {
        return line;
    }
    let summary = match client.report_summary(batch).await {
        Ok(summary) => summary,
        Err(error) => {
            tracing::debug!(%error, "no failure reasons: the batch's summary is unreadable");
            return String::new();
        }
    };
    render(
        &summary,
        &|job: &str| format!("job {job}"),
        Some(format!(
            "the jobs' files ({}, {}, …): \
             `cowork results {batch} --coordinator {coordinator} --out DIR` saves them under DIR/{}/",
            names::AGENT_STDERR,
            names::RESULT,
            names::JOBS_DIR,
        )),
        &report_command,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_top_fail_reasons_are_listed_with_a_job_each_and_the_rest_counted() {
        let reason = |key: &str, runs: u64, severity: &str| {
            json!({"kind": "signal", "key": key, "severity": severity, "runs": runs,
                   "sample": format!("{key} happened\nsecond line"), "job": "c1/r0"})
        };
        let summary = json!({"failureReasons": [
            reason("result_error", 3, "fail"), reason("non_deterministic", 5, "warn"),
            reason("a", 2, "fail"), reason("b", 1, "fail"), reason("c", 1, "fail"),
        ]});
        let text = render(
            &summary,
            &|job| format!("jobs/{job}/"),
            None,
            "cowork report x",
        );
        assert_eq!(
            text,
            "why runs failed (most frequent first):\n  \
             3 runs: [result_error] result_error happened; look in jobs/c1/r0/\n  \
             2 runs: [a] a happened; look in jobs/c1/r0/\n  \
             1 run: [b] b happened; look in jobs/c1/r0/\n  \
             … 1 more reason(s): `cowork report x` lists every one\n"
        );
        assert_eq!(
            render(&json!({"failureReasons": []}), &|j| j.to_owned(), None, "r"),
            ""
        );
    }

    #[test]
    fn a_huge_batch_is_sent_to_the_report_instead_of_read_back() {
        let rollup = |completed: u32| -> RepeatRollup {
            serde_json::from_value(json!({
                "scenario": "csv", "requested": completed, "completed": completed, "passes": 0,
                "passRate": 0, "signalHistogram": {}, "perAssertion": [],
                "nonDeterministicRuns": 0, "provenance": {"models": [], "skills": [], "ablatedRuns": 0}
            }))
            .expect("a rollup")
        };
        let mut head = Envelope::new("2.0.0", "run");
        head.rollups = Some(vec![rollup(20_000)]);
        assert_eq!(too_many_runs(&head, "cowork report b"), None);
        head.rollups = Some(vec![rollup(20_000), rollup(1)]);
        assert_eq!(
            too_many_runs(&head, "cowork report b").as_deref(),
            Some(
                "why runs failed: `cowork report b` groups the reasons of all 20001 runs (not \
                 read here, to end at once)\n"
            )
        );
    }
}
