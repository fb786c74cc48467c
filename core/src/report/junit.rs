//! JUnit XML: one `<testsuite>` per batch, one `<testcase>` per scenario file or matrix cell,
//! so CI systems show a batch's failures natively.
//!
//! A unit whose verdict failed gets a `<failure>` whose `message` carries the distinct failing
//! assertion messages of its runs and whose body lists every failing run's reasons; a cell
//! error (or the file a plain batch aborted at) gets an `<error>`, and so does a unit an
//! interrupted batch never decided; a unit never run, and each cell cut by `--max-cells`, is
//! `<skipped>`. A testcase's time is its runs' summed durations; the suite's time is the
//! batch's wall time when it was recorded (a batch of parallel runs takes far less than their
//! sum), else the sum, and both are given as properties. The arms of an eval are not judged
//! one by one: they pass as testcases, and one more testcase carries the A/B verdict (failing
//! when B is worse). A simulated batch says so in the suite name and in a property. A unit a
//! quarantine entry in force covers is `<skipped>` with the entry's reason and its own verdict;
//! one whose entry expired fails as usual, the expiry said first in the message.

use std::fmt::Write as _;

use super::input::{EvalSection, ReportInput};
use super::numbers::percent;
use super::summary::{Summary, UnitReport, UnitStatus, summarize};

/// Distinct messages quoted in a `<failure message=…>` before the rest is summarized; the body
/// always has all of them.
const MESSAGE_QUOTES: usize = 8;

/// Escapes text for an XML attribute value. Newlines and tabs become character references,
/// which attribute normalization keeps (a literal newline would turn into a space).
pub(crate) fn escape_xml(text: &str) -> String {
    escape_with(text, |c, out| match c {
        '\n' => out.push_str("&#10;"),
        '\r' => out.push_str("&#13;"),
        '\t' => out.push_str("&#9;"),
        c => out.push(c),
    })
}

/// Escapes text for XML character data; newlines stay as they are.
pub(crate) fn escape_xml_text(text: &str) -> String {
    escape_with(text, |c, out| out.push(c))
}

/// The escaping both share: markup characters become entities, and characters XML 1.0 cannot
/// hold at all (C0 controls other than tab, newline and return) become U+FFFD, so a stray
/// escape sequence in an agent's message cannot make the file unreadable. `whitespace` writes
/// tab, newline and return.
fn escape_with(text: &str, whitespace: impl Fn(char, &mut String)) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\r' | '\t' => whitespace(c, &mut out),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Seconds with millisecond precision, as JUnit's `time` attributes hold them.
fn junit_seconds(ms: Option<f64>) -> String {
    format!("{:.3}", ms.unwrap_or(0.0) / 1000.0)
}

/// The `<failure>` of a failing unit: message (distinct failing messages) and body (every
/// failing run, one reason per line).
fn failure_of(unit: &UnitReport<'_>, summary: &Summary<'_>) -> (String, String) {
    let mut distinct: Vec<String> = Vec::new();
    let mut body = String::new();
    for run in unit.runs() {
        let Some(findings) = run.findings() else {
            continue;
        };
        let lines = &findings.failure_lines;
        if lines.is_empty() {
            continue;
        }
        let run_name = run
            .repeat_index()
            .map_or_else(|| "run".to_owned(), |index| format!("run r{index}"));
        for line in lines {
            let _ = writeln!(body, "{run_name}: {line}");
            if !distinct.contains(line) {
                distinct.push(line.clone());
            }
        }
    }
    let rate = unit.pass_rate.map_or_else(|| "-".to_owned(), percent);
    let mut message = format!(
        "{}/{} run(s) passed ({rate}, min {})",
        unit.passes,
        unit.completed,
        percent(summary.judging.min_pass_rate)
    );
    if let Some(stop) = unit.stopped_early {
        let _ = write!(message, "; stopped early: {}", stop.as_str());
    }
    if !distinct.is_empty() {
        let quoted: Vec<&str> = distinct
            .iter()
            .take(MESSAGE_QUOTES)
            .map(String::as_str)
            .collect();
        let _ = write!(message, ": {}", quoted.join("; "));
        if distinct.len() > MESSAGE_QUOTES {
            let _ = write!(message, "; … {} more", distinct.len() - MESSAGE_QUOTES);
        }
    }
    (message, body)
}

/// The JUnit XML of a batch.
pub fn render_junit(input: &ReportInput) -> String {
    let summary = summarize(input);
    let mut cases = String::new();
    let mut n_tests = 0u64;
    let mut n_failures = 0u64;
    let mut n_errors = 0u64;
    let mut n_skipped = 0u64;
    for unit in &summary.units {
        n_tests += 1;
        match unit_testcase(&mut cases, unit, &summary) {
            Case::Passed => {}
            Case::Failure => n_failures += 1,
            Case::Error => n_errors += 1,
            Case::Skipped => n_skipped += 1,
        }
    }
    if let Some((first, count)) = summary.truncated_cells {
        for index in first..first.saturating_add(count) {
            n_tests += 1;
            n_skipped += 1;
            let _ = write!(
                cases,
                "    <testcase name=\"cell {index} (not run)\" classname=\"cowork.truncated\" time=\"0.000\">\n      \
                 <skipped message=\"matrix truncated by --max-cells\"/>\n    </testcase>\n"
            );
        }
    }
    if let Some(eval) = &input.eval {
        n_tests += 1;
        match ab_testcase(&mut cases, eval) {
            Case::Failure => n_failures += 1,
            Case::Error => n_errors += 1,
            Case::Passed | Case::Skipped => {}
        }
    }
    let suite_name = format!(
        "cowork batch {}{}",
        summary.batch_id,
        if summary.simulated {
            " [SIMULATED]"
        } else {
            ""
        }
    );
    let summed_ms = summary.summed_run_ms.0;
    let time = junit_seconds(input.wall_ms.map(|ms| ms as f64).or(summed_ms));
    let counts = format!(
        "tests=\"{n_tests}\" failures=\"{n_failures}\" errors=\"{n_errors}\" skipped=\"{n_skipped}\" time=\"{time}\""
    );
    let mut out = String::with_capacity(cases.len() + 1024);
    out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(out, "<testsuites name=\"cowork\" {counts}>");
    let _ = writeln!(
        out,
        "  <testsuite name=\"{}\" id=\"{}\" {counts}>",
        escape_xml(&suite_name),
        escape_xml(summary.batch_id)
    );
    out.push_str("    <properties>\n");
    let properties = [
        ("batch_id", summary.batch_id.to_owned()),
        ("command", input.rollup.command.clone()),
        ("executor", input.stored.spec.executor.as_str().to_owned()),
        ("harness_version", summary.harness_version().to_owned()),
        ("simulated", summary.simulated.to_string()),
        ("simulated_runs", summary.simulated_runs.to_string()),
        ("verdict", summary.verdict_word().to_owned()),
        ("exit_code", input.rollup.exit_code.to_string()),
        ("min_pass_rate", percent(summary.judging.min_pass_rate)),
        (
            "wall_time_s",
            input
                .wall_ms
                .map_or_else(|| "unknown".to_owned(), |ms| junit_seconds(Some(ms as f64))),
        ),
        ("summed_run_time_s", junit_seconds(summed_ms)),
        ("discarded_runs", summary.discarded.runs.to_string()),
        ("incomplete", input.incomplete.is_some().to_string()),
    ];
    let properties = properties
        .into_iter()
        .chain(quarantine_properties(&summary));
    for (name, value) in properties {
        let _ = writeln!(
            out,
            "      <property name=\"{name}\" value=\"{}\"/>",
            escape_xml(&value)
        );
    }
    out.push_str("    </properties>\n");
    out.push_str(&cases);
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

/// The suite's properties about its quarantine: the file, its hash and the units it covered,
/// set aside, found expired or could not match (none without a quarantine).
fn quarantine_properties(summary: &Summary<'_>) -> Vec<(&'static str, String)> {
    let Some(record) = summary.quarantine() else {
        return Vec::new();
    };
    vec![
        ("quarantine", record.source.clone()),
        ("quarantine_sha256", record.sha256.clone()),
        ("quarantined_units", record.quarantined.join(", ")),
        ("quarantine_set_aside", record.applied.join(", ")),
        ("quarantine_expired", record.expired.join(", ")),
        ("quarantine_unmatched", record.unmatched.join(", ")),
    ]
}

/// How a unit's testcase ended.
enum Case {
    Passed,
    Failure,
    Error,
    Skipped,
}

/// Appends the testcase of `unit` to `cases`.
fn unit_testcase(cases: &mut String, unit: &UnitReport<'_>, summary: &Summary<'_>) -> Case {
    let _ = write!(
        cases,
        "    <testcase name=\"{}\" classname=\"cowork.{}\" time=\"{}\"",
        escape_xml(unit.label),
        escape_xml(unit.scenario_name),
        junit_seconds(unit.duration_ms)
    );
    if let Some(mark) = summary.quarantine_mark(unit)
        && mark.in_force()
        && !summary.is_eval()
    {
        return quarantined_testcase(cases, unit, summary, &mark.text());
    }
    match &unit.status {
        UnitStatus::Passed => {
            cases.push_str("/>\n");
            Case::Passed
        }
        UnitStatus::Failed if summary.is_eval() => {
            // An arm is judged by the A/B testcase below, not by the minimum pass rate.
            let _ = write!(
                cases,
                ">\n      <system-out>arm: {}/{} run(s) passed</system-out>\n    </testcase>\n",
                unit.passes, unit.completed
            );
            Case::Passed
        }
        UnitStatus::Incomplete => {
            let _ = write!(
                cases,
                ">\n      <error message=\"incomplete: the batch ended before this unit was \
                 decided ({}/{} run(s) folded)\" type=\"incomplete\"/>\n    </testcase>\n",
                unit.completed, unit.requested
            );
            Case::Error
        }
        UnitStatus::Failed => {
            let (mut message, body) = failure_of(unit, summary);
            if let Some(mark) = summary.quarantine_mark(unit) {
                message = format!("{}; {message}", mark.text());
            }
            let _ = write!(
                cases,
                ">\n      <failure message=\"{}\" type=\"verdict\">{}</failure>\n    </testcase>\n",
                escape_xml(&message),
                escape_xml_text(&body)
            );
            Case::Failure
        }
        UnitStatus::Error(error) => {
            let _ = write!(
                cases,
                ">\n      <error message=\"{}\" type=\"cell-error\"/>\n    </testcase>\n",
                escape_xml(error)
            );
            Case::Error
        }
        UnitStatus::NotRun => {
            cases.push_str(
                ">\n      <skipped message=\"not run: the batch stopped at an earlier scenario\"/>\n    </testcase>\n",
            );
            Case::Skipped
        }
    }
}

/// A quarantined unit: `<skipped>` with the entry's reason, whatever its own verdict (said in
/// the message, with the failing runs' reasons in `<system-out>`), so CI does not count it
/// against the batch.
fn quarantined_testcase(
    cases: &mut String,
    unit: &UnitReport<'_>,
    summary: &Summary<'_>,
    mark: &str,
) -> Case {
    let (verdict, body) = match &unit.status {
        UnitStatus::Failed => ("FAIL".to_owned(), failure_of(unit, summary).1),
        UnitStatus::Error(error) => (format!("ERROR: {error}"), String::new()),
        _ => (unit.verdict_text(), String::new()),
    };
    let _ = write!(
        cases,
        ">\n      <skipped message=\"{}\"/>\n",
        escape_xml(&format!("{mark}; its own verdict: {verdict}"))
    );
    if !body.is_empty() {
        let _ = writeln!(
            cases,
            "      <system-out>{}</system-out>",
            escape_xml_text(&body)
        );
    }
    cases.push_str("    </testcase>\n");
    Case::Skipped
}

/// Appends the A/B testcase of an eval to `case`: failing when B is worse, an error when
/// nothing was compared.
fn ab_testcase(case: &mut String, eval: &EvalSection) -> Case {
    let name = format!("A/B: {} vs {}", eval.arm_b, eval.arm_a);
    let _ = write!(
        case,
        "    <testcase name=\"{}\" classname=\"cowork.eval\" time=\"0.000\"",
        escape_xml(&name)
    );
    let Some(overall) = eval.rows.last().filter(|row| row.pairs > 0) else {
        case.push_str(
            ">\n      <error message=\"nothing to compare: no run completed in both arms\" \
             type=\"eval\"/>\n    </testcase>\n",
        );
        return Case::Error;
    };
    let detail = format!(
        "{}: B − A = {:+.0} points [{:+.0}, {:+.0}], {}",
        overall.verdict,
        (overall.diff * 100.0).round(),
        (overall.ci_low * 100.0).round(),
        (overall.ci_high * 100.0).round(),
        eval.p_sentence
    );
    if overall.verdict == "B worse" {
        let _ = write!(
            case,
            ">\n      <failure message=\"{}\" type=\"eval\"/>\n    </testcase>\n",
            escape_xml(&detail)
        );
        Case::Failure
    } else {
        let _ = write!(
            case,
            ">\n      <system-out>{}</system-out>\n    </testcase>\n",
            escape_xml_text(&detail)
        );
        Case::Passed
    }
}
