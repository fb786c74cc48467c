//! `cowork report` on the demo batch: the HTML, JUnit, Markdown and JSON outputs of a stored
//! batch (by dir and by id), an unknown batch (exit 2), and the same reports read through a
//! coordinator — by `cowork report --coordinator` and by the coordinator's own report route,
//! with its bearer-or-`?token=` auth. Expected numbers come from the stored `rollup.json`.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;

use serde_json::Value;

use crate::fleet::{Fleet, TOKEN, batch_of};
use crate::run::run_demo_with;
use crate::support::{
    Output, Sandbox, array, cowork, number, only_batch_dir, read_json, rollup_passes,
    workspace_root,
};

/// The demo's simulation profile (one skill version made worse), as the README runs it.
const SIM_PROFILE: &[&str] = &["--sim-profile", "examples/demo/sim-profile.yaml"];

/// One heatmap cell as a page shows it.
#[derive(Debug, PartialEq)]
pub struct HeatCell {
    /// `data-cell`: `c<k>` or `f<k>`.
    pub id: String,
    /// `data-state`: `pass`, `fail`, `error` or `not-run`.
    pub state: String,
    /// `data-pass-rate`, as JavaScript prints the number.
    pub pass_rate: Option<String>,
    /// The cell's text, tags removed.
    pub text: String,
}

fn attribute(tag: &str, name: &str) -> Option<String> {
    let needle = format!(" {name}=\"");
    let start = tag.find(&needle)? + needle.len();
    let end = tag[start..].find('"')? + start;
    Some(tag[start..end].to_owned())
}

fn strip_tags(html: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => {
                in_tag = true;
                text.push(' ');
            }
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every `<td … data-cell="…">` of a page (a file or a browser's serialized DOM).
pub fn heatmap_cells(html: &str) -> Vec<HeatCell> {
    let mut cells = Vec::new();
    let mut rest = html;
    while let Some(position) = rest.find("<td ") {
        rest = &rest[position..];
        let tag_end = rest.find('>').expect("a complete start tag");
        let tag = &rest[..tag_end];
        let content_end = rest.find("</td>").expect("a closed cell");
        if let Some(id) = attribute(tag, "data-cell") {
            cells.push(HeatCell {
                id,
                state: attribute(tag, "data-state").expect("every cell has a state"),
                pass_rate: attribute(tag, "data-pass-rate"),
                text: strip_tags(&rest[tag_end + 1..content_end]),
            });
        }
        rest = &rest[content_end..];
    }
    cells
}

/// The heatmap cells a matrix + repeat batch's stored `rollup.json` calls for.
pub fn expected_cells(rollup: &Value) -> Vec<(String, String, String)> {
    let min_pass_rate = number(&rollup["fleet"], "minPassRate");
    array(&rollup["matrixRepeat"], "cells")
        .iter()
        .map(|cell| {
            let unit = &cell["rollup"];
            let state = if rollup_passes(unit, min_pass_rate, false) {
                "pass"
            } else {
                "fail"
            };
            let text = format!(
                "{}/{} {}%",
                unit["passes"],
                unit["completed"],
                (number(unit, "passRate") * 100.0).round()
            );
            (
                format!("c{}", cell["index"]),
                state.to_owned(),
                format!("{}|{text}", unit["passRate"]),
            )
        })
        .collect()
}

/// Checks a page's heatmap against the rollup: one cell per matrix cell, each with the
/// rollup's state, pass rate, `passes/completed` and percent.
#[track_caller]
pub fn check_heatmap(html: &str, rollup: &Value, what: &str) {
    let cells = heatmap_cells(html);
    let expected = expected_cells(rollup);
    assert_eq!(cells.len(), expected.len(), "{what}: cells {cells:?}");
    for (cell, (id, state, rate_and_text)) in cells.iter().zip(&expected) {
        let (rate, text) = rate_and_text
            .split_once('|')
            .expect("rate and text are joined by |");
        assert_eq!(&cell.id, id, "{what}");
        assert_eq!(&cell.state, state, "{what}: {cell:?}");
        assert_eq!(cell.pass_rate.as_deref(), Some(rate), "{what}: {cell:?}");
        assert!(
            cell.text.starts_with(text),
            "{what}: {cell:?} should show {text:?}"
        );
    }
}

/// Runs the demo into `sandbox`'s store; returns its batch dir.
pub fn demo_batch(sandbox: &Sandbox) -> std::path::PathBuf {
    let run = run_demo_with(&sandbox.store(), SIM_PROFILE);
    assert!(matches!(run.code(), 0 | 1), "{}", run.context());
    only_batch_dir(&sandbox.store())
}

fn report(cwd: &Path, args: &[&str]) -> Output {
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    cowork(cwd, &all)
}

#[test]
fn report_renders_the_demo_matrix_as_html_junit_markdown_and_json() {
    let sandbox = Sandbox::empty();
    let batch_dir = demo_batch(&sandbox);
    let batch_id = batch_dir
        .file_name()
        .and_then(|name| name.to_str())
        .expect("a batch dir name")
        .to_owned();
    let rollup = read_json(&batch_dir.join("rollup.json"));
    let store = sandbox.store().display().to_string();
    let dir_arg = batch_dir.display().to_string();

    // HTML, by dir, to a file.
    let html_file = sandbox.path().join("report.html");
    let out = report(
        sandbox.path(),
        &[&dir_arg, "-o", &html_file.display().to_string()],
    );
    out.expect_code(0)
        .expect_stderr(&format!("wrote the html report of batch {batch_id} to"));
    assert!(out.stdout.is_empty(), "{}", out.context());
    let html = std::fs::read_to_string(&html_file).expect("the report file");
    check_heatmap(&html, &rollup, "report.html");
    assert!(html.contains("id=\"simulated\""), "the SIMULATED banner");
    for forbidden in ["http://", "https://", "src="] {
        assert!(!html.contains(forbidden), "report.html holds {forbidden:?}");
    }
    // By id in --store, to stdout: the same bytes.
    let by_id = report(sandbox.path(), &[&batch_id, "--store", &store]);
    by_id.expect_code(0);
    assert_eq!(by_id.stdout, html, "by id and by dir give the same report");

    // JUnit: one testcase per cell, a failure per failing cell.
    let junit = report(
        sandbox.path(),
        &[&batch_id, "--store", &store, "--format", "junit"],
    );
    junit.expect_code(0);
    let xml = &junit.stdout;
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites "));
    assert!(xml.ends_with("</testsuite>\n</testsuites>\n"), "{xml}");
    assert_eq!(xml.matches("<testsuite ").count(), 1);
    let cells = array(&rollup["matrixRepeat"], "cells");
    assert_eq!(xml.matches("<testcase ").count(), cells.len());
    let min_pass_rate = number(&rollup["fleet"], "minPassRate");
    let n_failing = cells
        .iter()
        .filter(|cell| !rollup_passes(&cell["rollup"], min_pass_rate, false))
        .count();
    assert_eq!(xml.matches("<failure message=\"").count(), n_failing);
    assert!(xml.contains(&format!(
        "<testsuite name=\"cowork batch {batch_id} [SIMULATED]\" id=\"{batch_id}\" tests=\"{}\" failures=\"{n_failing}\"",
        cells.len()
    )));
    for cell in cells {
        let label = cell["rollup"]["scenario"].as_str().expect("a label");
        assert!(
            xml.contains(&format!("<testcase name=\"{label}\"")),
            "{label}"
        );
    }

    // Markdown, to a file.
    let md_file = sandbox.path().join("summary.md");
    report(
        sandbox.path(),
        &[
            &dir_arg,
            "--format",
            "markdown",
            "-o",
            &md_file.display().to_string(),
        ],
    )
    .expect_code(0);
    let markdown = std::fs::read_to_string(&md_file).expect("the markdown file");
    let verdict = if rollup["ok"] == true { "PASS" } else { "FAIL" };
    assert!(
        markdown.starts_with(&format!(
            "## {} cowork batch `{batch_id}`: {verdict} (exit {})\n",
            if verdict == "PASS" { "✅" } else { "❌" },
            rollup["exitCode"]
        )),
        "{markdown}"
    );
    assert!(markdown.contains(
        "> **SIMULATED — 20 of 20 run(s) came from the sim executor, not from cowork-harness \
         (20 folded into the verdicts)"
    ));
    for cell in cells {
        let row_start = format!("| `c{}` ", cell["index"]);
        let row = markdown
            .lines()
            .find(|line| line.starts_with(&row_start))
            .unwrap_or_else(|| panic!("no row {row_start:?} in\n{markdown}"));
        let unit = &cell["rollup"];
        assert!(
            row.contains(&format!(
                "| {}/{} | {}%",
                unit["completed"],
                unit["requested"],
                (number(unit, "passRate") * 100.0).round()
            )),
            "{row}"
        );
    }

    // JSON summary.
    let json = report(
        sandbox.path(),
        &[&batch_id, "--store", &store, "--format", "json"],
    );
    json.expect_code(0);
    let summary = json.envelope();
    assert_eq!(summary["batchId"], batch_id.as_str());
    assert_eq!(summary["ok"], rollup["ok"]);
    assert_eq!(summary["simulated"], true);
    let units = array(&summary, "units");
    assert_eq!(units.len(), cells.len());
    for (unit, cell) in units.iter().zip(cells) {
        assert_eq!(unit["passRate"], cell["rollup"]["passRate"]);
        assert_eq!(unit["passes"], cell["rollup"]["passes"]);
        assert_eq!(unit["costUsd"], cell["rollup"]["totalCostUsd"]);
    }
}

#[test]
fn report_of_an_unknown_batch_exits_2_with_a_clear_message() {
    let sandbox = Sandbox::empty();
    let store = sandbox.store().display().to_string();
    report(
        sandbox.path(),
        &["20000101-000000-000000", "--store", &store],
    )
    .expect_code(2)
    .expect_stderr("error: batch 20000101-000000-000000 not found in store")
    .expect_stderr("--coordinator URL (or COWORK_COORDINATOR)");
    report(sandbox.path(), &["no/such/dir"])
        .expect_code(2)
        .expect_stderr("\"no/such/dir\" is neither a stored batch dir nor a batch id");
    // A dir that is not a stored batch.
    report(sandbox.path(), &["."])
        .expect_code(2)
        .expect_stderr("not a stored batch dir");
}

/// One HTTP/1.1 GET on the coordinator: (status, lower-cased headers, body), for a response
/// sent with its length (every rendered page and stored document is).
pub fn http_get(port: u16, target: &str, bearer: Option<&str>) -> (u16, String, String) {
    let (status, head, body) = http_get_raw(port, target, bearer);
    assert!(
        !head.contains("transfer-encoding: chunked"),
        "a rendered page has a length: {head}"
    );
    (status, head, body)
}

/// [`http_get`] of a response written out as it is made (chunked, like the whole key
/// listing), its body put back together.
fn http_get_streamed(port: u16, target: &str, bearer: Option<&str>) -> (u16, String, String) {
    let (status, head, raw) = http_get_raw(port, target, bearer);
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let mut body = String::new();
    let mut rest = raw.as_str();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
        if size == 0 {
            return (status, head, body);
        }
        body.push_str(&after[..size]);
        rest = after[size..].strip_prefix("\r\n").expect("a chunk's end");
    }
}

pub fn http_get_raw(port: u16, target: &str, bearer: Option<&str>) -> (u16, String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connecting to the api");
    let mut request = format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    if let Some(token) = bearer {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .expect("sending the request");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("reading the answer");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {answer:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// A coordinator report page with its file links turned back into named keys, as a report
/// read through the API shows them: `<a href="…" data-artifact="K">N</a>` becomes
/// `<code title="K">N</code>`.
fn unlink_artifacts(page: &str) -> String {
    let mut out = String::with_capacity(page.len());
    let mut rest = page;
    while let Some(start) = rest.find("<a href=\"artifacts/") {
        out.push_str(&rest[..start]);
        let link = &rest[start..];
        let key_start = link.find(" data-artifact=\"").expect("a data-artifact") + 16;
        let key_end = link[key_start..].find('"').expect("a closed key") + key_start;
        let name_start = link[key_end..].find('>').expect("a closed tag") + key_end + 1;
        let name_end = link[name_start..].find("</a>").expect("a closed link") + name_start;
        out.push_str(&format!(
            "<code title=\"{}\">{}</code>",
            &link[key_start..key_end],
            &link[name_start..name_end]
        ));
        rest = &link[name_end + 4..];
    }
    out.push_str(rest);
    out
}

#[test]
fn report_of_an_interrupted_batch_judges_what_ran_and_names_what_never_ran() {
    let sandbox = Sandbox::empty();
    let batch_dir = demo_batch(&sandbox);
    // What a Ctrl-C'd `cowork run` leaves: no rollup or envelope, and jobs that never ran.
    for file in ["rollup.json", "envelope.json"] {
        std::fs::remove_file(batch_dir.join(file)).expect("removing a decided document");
    }
    for job in ["c3/r3", "c3/r4"] {
        std::fs::remove_dir_all(batch_dir.join("jobs").join(job)).expect("removing a job");
    }
    let dir = batch_dir.display().to_string();
    let json = report(sandbox.path(), &[&dir, "--format", "json"]);
    json.expect_code(0)
        .expect_stderr("never finished")
        .expect_stderr("2 job(s) never ran");
    let summary = json.envelope();
    assert_eq!(
        summary["incomplete"]["neverRan"],
        serde_json::json!(["c3/r3", "c3/r4"])
    );
    assert_eq!(summary["units"][3]["status"], "incomplete");
    assert_eq!(summary["units"][3]["completed"], 3);
    let html = report(sandbox.path(), &[&dir]);
    html.expect_code(0);
    for fragment in [
        "<span class=\"verdict incomplete\">INCOMPLETE</span>",
        "<p id=\"never-ran\">Never ran: <code>c3/r3</code> <code>c3/r4</code></p>",
        "data-cell=\"c3\" data-state=\"incomplete\"",
    ] {
        if !html.stdout.contains(fragment) {
            html.fail(&format!("the report lacks {fragment:?}"));
        }
    }
    // JUnit still parses and says which unit was not decided.
    let junit = report(sandbox.path(), &[&dir, "--format", "junit"]);
    junit.expect_code(0);
    assert!(
        junit.stdout.contains("type=\"incomplete\""),
        "{}",
        junit.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_through_the_coordinator_matches_its_report_route() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w0", "container", "4");
    let mut args = vec![
        "examples/demo/scenarios/csv-report.yaml",
        "--repeat",
        "5",
        "--matrix",
        "examples/demo/matrix.yaml",
        "--executor",
        "sim",
    ];
    args.extend_from_slice(SIM_PROFILE);
    let out = fleet.submit(&workspace_root(), &args);
    let envelope = out.envelope();
    let batch = batch_of(&envelope);
    let rollup: Value =
        serde_json::from_slice(&fleet.object(&format!("batches/{batch}/rollup.json")))
            .expect("the stored rollup is JSON");
    let sandbox = Sandbox::empty();

    // `cowork report --coordinator` reads the batch through the API.
    let remote = fleet.cowork(sandbox.path(), &["report", batch.as_str()]);
    remote.expect_code(0);
    check_heatmap(&remote.stdout, &rollup, "cowork report --coordinator");
    let remote_md = fleet.cowork(
        sandbox.path(),
        &["report", batch.as_str(), "--format", "markdown"],
    );
    remote_md.expect_code(0);

    // The coordinator renders the same bytes (the same loader and renderer).
    let port = fleet.api_port;
    let target = format!("/v1/batches/{batch}/report?format=html");
    let (status, head, body) = http_get(port, &target, Some(TOKEN));
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(
        head.contains("content-type: text/html; charset=utf-8"),
        "{head}"
    );
    assert!(
        head.contains("content-security-policy: default-src 'none'"),
        "{head}"
    );
    assert!(head.contains("cache-control: no-store"), "{head}");
    // The same page up to the runs' file links: the route links them to its artifact route,
    // a report read through the API names them.
    assert!(
        body.contains("<a href=\"artifacts/jobs/c0/r0/result.json\""),
        "{body}"
    );
    assert_eq!(
        unlink_artifacts(&body),
        remote.stdout,
        "route and cowork report agree"
    );
    let (status, _, body) = http_get(
        port,
        &format!("/v1/batches/{batch}/report?format=markdown"),
        Some(TOKEN),
    );
    assert_eq!(status, 200);
    assert_eq!(body, remote_md.stdout);
    // No format: today's envelope, unchanged.
    let (status, head, body) = http_get(port, &format!("/v1/batches/{batch}/report"), Some(TOKEN));
    assert_eq!(status, 200);
    assert!(head.contains("content-type: application/json"), "{head}");
    let stored: Value =
        serde_json::from_slice(&fleet.object(&format!("batches/{batch}/envelope.json")))
            .expect("the stored envelope is JSON");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("the envelope"),
        stored
    );
    // Streamed from a verified spool, byte for byte, its size said up front.
    let stored_bytes = fleet.object(&format!("batches/{batch}/envelope.json"));
    assert!(
        body.as_bytes() == stored_bytes,
        "the stored envelope's bytes"
    );
    assert!(
        head.contains(&format!("content-length: {}", stored_bytes.len())),
        "{head}"
    );
    // The key listing under a prefix names only what is under it; a prefix that would leave
    // the batch is refused.
    let (status, _, body) = http_get_streamed(
        port,
        &format!("/v1/batches/{batch}/artifacts?prefix=jobs/c1/r2/"),
        Some(TOKEN),
    );
    assert_eq!(status, 200, "{body}");
    let under: Vec<String> = serde_json::from_str(&body).expect("a list of keys");
    assert!(
        under.contains(&"jobs/c1/r2/result.json".to_owned())
            && under.iter().all(|key| key.starts_with("jobs/c1/r2/")),
        "{under:?}"
    );
    let (status, _, body) = http_get(
        port,
        &format!("/v1/batches/{batch}/artifacts?prefix=../other/"),
        Some(TOKEN),
    );
    assert_eq!(status, 400, "{body}");
    // The whole listing (written out a store page at a time) is the pages of `limit` put
    // end to end, and holds the spec, every job's result and the envelope.
    let (status, _, body) =
        http_get_streamed(port, &format!("/v1/batches/{batch}/artifacts"), Some(TOKEN));
    assert_eq!(status, 200, "{body}");
    let whole: Vec<String> = serde_json::from_str(&body).expect("a list of keys");
    for key in ["spec.json", "jobs/c1/r2/result.json", "envelope.json"] {
        assert!(whole.contains(&key.to_owned()), "{key} in {whole:?}");
    }
    assert!(
        whole.windows(2).all(|pair| pair[0] < pair[1]),
        "sorted, once each"
    );
    let mut paged: Vec<String> = Vec::new();
    loop {
        let after = paged
            .last()
            .map(|last| format!("&after={last}"))
            .unwrap_or_default();
        let (status, _, body) = http_get(
            port,
            &format!("/v1/batches/{batch}/artifacts?limit=3{after}"),
            Some(TOKEN),
        );
        assert_eq!(status, 200, "{body}");
        let page: Vec<String> = serde_json::from_str(&body).expect("a page of keys");
        assert!(page.len() <= 3, "{page:?}");
        let last_page = page.len() < 3;
        paged.extend(page);
        if last_page {
            break;
        }
    }
    assert_eq!(paged, whole, "the pages of 3 keys put end to end");

    // The token: a bearer header or `?token=`, nothing else; only on the page routes.
    assert_eq!(http_get(port, &target, None).0, 401);
    assert_eq!(http_get(port, &target, Some("wrong")).0, 401);
    assert_eq!(
        http_get(port, &format!("{target}&token={TOKEN}"), None).0,
        200
    );
    assert_eq!(
        http_get(port, &format!("{target}&token=wrong"), None).0,
        401
    );
    assert_eq!(
        http_get(port, &format!("/v1/ui?token={TOKEN}"), None).0,
        200
    );
    assert_eq!(http_get(port, "/v1/ui", None).0, 401);
    assert_eq!(
        http_get(port, &format!("/v1/batches/{batch}?token={TOKEN}"), None).0,
        401,
        "?token= is accepted on the page routes only"
    );
    let (status, _, body) = http_get(
        port,
        &format!("/v1/batches/{batch}/report?format=pdf"),
        Some(TOKEN),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("expected html, junit, markdown or json"),
        "{body}"
    );

    // An unknown batch through the coordinator: exit 2.
    fleet
        .cowork(sandbox.path(), &["report", "20000101-000000-000000"])
        .expect_code(2)
        .expect_stderr("batch 20000101-000000-000000 not found");
}
