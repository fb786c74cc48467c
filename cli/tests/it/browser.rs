//! A real browser on the reports: headless Chromium (Debian's `chromium`) loads a generated HTML
//! report file and the coordinator's pages, the test reads the heatmap's cells and numbers from
//! the RENDERED DOM (`--dump-dom`), follows the drill-down (every cell to its unit's section,
//! every strip square to its run's section, every run's files to files that exist), checks the
//! verdict colours, measures the page's width in the browser at 1,400 and 800 px (a copy of the
//! page with a measuring script: the report itself has none), and saves screenshots at both
//! widths under `$CARGO_TARGET_TMPDIR/test-output/browser/` for a person (or CI artifact upload)
//! to look at.
//!
//! Chromium is required: when it is missing the tests fail with the install hint
//! (`apt-get install -y chromium`), they never skip. As root it needs `--no-sandbox`; every run
//! gets its own profile dir so parallel tests do not share Chromium's profile lock.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::fleet::{Fleet, TOKEN, batch_of};
use crate::report::{check_heatmap, demo_batch, heatmap_cells, http_get};
use crate::support::{Sandbox, cowork, only_batch_dir, read_json, run_batch_from, workspace_root};

/// Wall-clock cap of one Chromium run, enforced by coreutils `timeout` so that a wedged browser
/// fails the test instead of hanging it; a page of this size renders in about a second.
const CHROMIUM_TIMEOUT_S: &str = "120";

/// The Chromium binary on PATH; panics with the install hint when there is none.
pub(crate) fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "chromium is not installed, and the browser test needs it: install Debian's chromium \
         with `apt-get install -y chromium` (PATH searched: {})",
        path.to_string_lossy()
    );
}

/// Chromium's flags for every test: headless, as root (no sandbox), in a small container (no
/// GPU, no /dev/shm), with no first-run prompts and no scrollbars in the screenshots.
pub(crate) const HEADLESS_FLAGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
];

/// Where this test's screenshots go.
pub(crate) fn output_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-output/browser");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

/// Runs headless Chromium on `url` with `extra` flags; returns its stdout.
fn headless(url: &str, extra: &[&str]) -> String {
    let profile = tempfile::Builder::new()
        .prefix("cowork-chromium-")
        .tempdir()
        .expect("a profile dir");
    let chromium = chromium();
    let mut command = Command::new("timeout");
    command
        .args(["--kill-after=10", CHROMIUM_TIMEOUT_S])
        .arg(&chromium)
        .args(HEADLESS_FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url);
    let shown = format!("{command:?}");
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("starting {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed with {:?}\n--- stderr ---\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The page's DOM after Chromium parsed and rendered it.
fn rendered_dom(url: &str) -> String {
    headless(url, &["--dump-dom"])
}

/// A screenshot of `url`, `width` pixels wide and 1000 high, saved as `<output dir>/<name>`;
/// checks it is a PNG of at least `min_bytes` and returns its path. An empty page of the
/// reports' background color compresses to about 6 kB, so a floor well above that shows the
/// page rendered content.
fn screenshot(url: &str, name: &str, width: u32, min_bytes: usize) -> PathBuf {
    let path = output_dir().join(name);
    let _ = std::fs::remove_file(&path);
    headless(
        url,
        &[
            &format!("--screenshot={}", path.display()),
            &format!("--window-size={width},1000"),
        ],
    );
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("chromium wrote no screenshot at {}: {e}", path.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        path.display()
    );
    assert!(
        bytes.len() >= min_bytes,
        "{} is only {} bytes: the page did not render",
        path.display(),
        bytes.len()
    );
    path
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// The script appended to a COPY of a page to measure it in the browser: the page's scroll
/// width against the viewport, and how far each scrolling table container overflows.
const MEASURE_SCRIPT: &str = "<script>\
var d=document.documentElement;\
d.setAttribute('data-scroll-width',d.scrollWidth);\
d.setAttribute('data-client-width',d.clientWidth);\
document.querySelectorAll('.wide').forEach(function(w,i){\
w.setAttribute('data-overflow',w.scrollWidth-w.clientWidth);});\
</script>";

/// The page's widths as Chromium lays it out `width` pixels wide: (scroll width, viewport
/// width, overflow of each `.wide` table container).
fn measured_widths(html: &str, width: u32) -> (u32, u32, Vec<i64>) {
    let copy = tempfile::Builder::new()
        .prefix("cowork-measure-")
        .suffix(".html")
        .tempfile()
        .expect("a temp file");
    std::fs::write(
        copy.path(),
        html.replace("</body>", &format!("{MEASURE_SCRIPT}</body>")),
    )
    .expect("writing the measured copy");
    let dom = headless(
        &file_url(copy.path()),
        &["--dump-dom", &format!("--window-size={width},1000")],
    );
    let number = |name: &str| -> u32 {
        attribute_values(&dom, name)
            .first()
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("the measured page has no {name}: {dom}"))
    };
    let overflows = attribute_values(&dom, "data-overflow")
        .iter()
        .map(|value| value.parse().expect("a number"))
        .collect();
    (
        number("data-scroll-width"),
        number("data-client-width"),
        overflows,
    )
}

/// Checks that the page does not overflow the viewport at 800 px, and that at 1,400 px no
/// table needs its scroll container either.
#[track_caller]
fn check_widths(html: &str, what: &str) {
    for width in [1400, 800] {
        let (scroll, client, overflows) = measured_widths(html, width);
        assert_eq!(client, width, "{what}: the viewport is {width} px");
        assert!(
            scroll <= client,
            "{what}: the page is {scroll} px wide in a {client} px window"
        );
        if width == 1400 {
            assert!(
                overflows.iter().all(|overflow| *overflow <= 0),
                "{what}: a table overflows at 1400 px: {overflows:?}"
            );
        }
    }
}

/// Every value of attribute `name` in `html`, in order.
fn attribute_values(html: &str, name: &str) -> Vec<String> {
    let needle = format!(" {name}=\"");
    let mut values = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find(&needle) {
        rest = &rest[start + needle.len()..];
        let end = rest.find('"').expect("a closed attribute");
        values.push(rest[..end].to_owned());
        rest = &rest[end..];
    }
    values
}

/// Every in-page link of the DOM leads to an element that exists, every heatmap cell links to
/// its unit's section, and every run has a section reachable from its unit's strip. Returns
/// the number of run sections.
#[track_caller]
fn check_drill_down(dom: &str, what: &str) -> usize {
    let ids: std::collections::HashSet<String> = attribute_values(dom, "id").into_iter().collect();
    for href in attribute_values(dom, "href") {
        if let Some(target) = href.strip_prefix('#') {
            assert!(ids.contains(target), "{what}: link {href} leads nowhere");
        }
    }
    let cells = heatmap_cells(dom);
    assert!(!cells.is_empty(), "{what}: no heatmap");
    for cell in &cells {
        assert!(
            dom.contains(&format!("data-cell=\"{}\"", cell.id))
                && dom.contains(&format!("href=\"#unit-{}\"", cell.id)),
            "{what}: cell {} links to its unit",
            cell.id
        );
        assert!(
            ids.contains(&format!("unit-{}", cell.id)),
            "{what}: unit section {}",
            cell.id
        );
    }
    let run_links = attribute_values(dom, "data-run");
    let sections = dom.matches("<article class=\"run ").count();
    assert!(sections > 0, "{what}: no run section");
    for run in run_links {
        let anchor = format!("run-{}", run.replace('/', "-"));
        assert!(ids.contains(&anchor), "{what}: run {run} has no section");
    }
    sections
}

/// The hue of a cell's background, from its `style` attribute (`hsl(<hue>,…)`).
fn hue_of_cell(dom: &str, cell: &str) -> u32 {
    let start = dom
        .find(&format!("data-cell=\"{cell}\""))
        .unwrap_or_else(|| panic!("cell {cell}"));
    let style = &dom[start..];
    let hue_start = style.find("hsl(").expect("a coloured cell") + 4;
    let hue_end = style[hue_start..].find(',').expect("a hue") + hue_start;
    style[hue_start..hue_end].parse().expect("a numeric hue")
}

#[test]
fn browser_renders_the_generated_html_report_with_its_heatmap() {
    let sandbox = Sandbox::empty();
    let batch_dir = demo_batch(&sandbox);
    let rollup = read_json(&batch_dir.join("rollup.json"));
    // Written beside the store, one level down: its links to the runs' files climb into it.
    let report_dir = sandbox.path().join("reports");
    std::fs::create_dir_all(&report_dir).expect("a reports dir");
    let html_file = report_dir.join("report.html");
    cowork(
        sandbox.path(),
        &[
            "report",
            &batch_dir.display().to_string(),
            "-o",
            &html_file.display().to_string(),
        ],
    )
    .expect_code(0);

    let dom = rendered_dom(&file_url(&html_file));
    // The serialized DOM is the browser's, not our file: it has the parsed structure.
    assert!(dom.contains("<html lang=\"en\"><head>"), "{dom}");
    check_heatmap(&dom, &rollup, "rendered report.html");
    assert!(
        dom.contains("SIMULATED — 20 of 20 run(s) came from the sim executor"),
        "the banner is rendered"
    );
    // Attributes escaped in the file read back as plain text in the DOM.
    assert!(
        dom.contains("<th>skill_dir=skills/v1/csv-report</th>"),
        "{dom}"
    );
    // A section per run, each reachable from its cell's strip.
    assert_eq!(check_drill_down(&dom, "report.html"), 20);
    // Verdict colours: every demo cell fails at min pass rate 100%, so every cell is red,
    // whatever its pass rate (4/5 included).
    for cell in heatmap_cells(&dom) {
        let hue = hue_of_cell(&dom, &cell.id);
        match cell.state.as_str() {
            "fail" => assert_eq!(hue, 356, "{cell:?}"),
            "pass" => assert_eq!(hue, 137, "{cell:?}"),
            other => panic!("unexpected state {other}"),
        }
    }
    // The runs' files: every link resolves, from the report's directory, to a stored file.
    let artifacts: Vec<String> = attribute_values(&dom, "href")
        .into_iter()
        .filter(|href| !href.starts_with('#'))
        .collect();
    assert!(artifacts.len() >= 20, "{artifacts:?}");
    for href in &artifacts {
        let target = report_dir.join(href);
        assert!(target.is_file(), "{href} resolves to {}", target.display());
    }
    // And Chromium opens one: the stored result, as JSON.
    let result_link = artifacts
        .iter()
        .find(|href| href.ends_with("c0/r0/result.json"))
        .expect("the first run's result is linked");
    let opened = rendered_dom(&file_url(&report_dir.join(result_link)));
    assert!(
        opened.contains("&quot;verdict&quot;") || opened.contains("\"verdict\""),
        "{opened}"
    );

    let html = std::fs::read_to_string(&html_file).expect("the report");
    check_widths(&html, "report.html");
    // A report with its heatmap, tables and banner is well over 100 kB at full size.
    for width in [1400, 800] {
        let png = screenshot(
            &file_url(&html_file),
            &format!("report-{width}.png"),
            width,
            40_000,
        );
        eprintln!("screenshot of the report at {width} px: {}", png.display());
    }
}

#[test]
fn browser_renders_an_eval_report_led_by_its_ab_result() {
    let sandbox = Sandbox::empty();
    let store = sandbox.store().display().to_string();
    let out = cowork(
        &workspace_root(),
        &[
            "eval",
            "--a",
            "examples/demo/skills/v1/csv-report",
            "--b",
            "examples/demo/eval/skills/csv-report-worse/csv-report",
            "examples/demo/scenarios",
            "--executor",
            "sim",
            "--sim-profile",
            "examples/demo/eval/sim-profile.yaml",
            "--quiet",
            "--store",
            &store,
        ],
    );
    out.expect_code(1);
    let batch_dir = only_batch_dir(&sandbox.store());
    let eval = read_json(&batch_dir.join("eval.json"));
    let html_file = sandbox.path().join("eval.html");
    cowork(
        sandbox.path(),
        &[
            "report",
            &batch_dir.display().to_string(),
            "-o",
            &html_file.display().to_string(),
        ],
    )
    .expect_code(0);
    let dom = rendered_dom(&file_url(&html_file));
    // The A/B result comes first, with the verdict the interval agrees with.
    let lead = dom.find("<section id=\"eval\"").expect("the A/B section");
    assert!(lead < dom.find("<section id=\"heatmap\">").expect("the heatmap"));
    assert_eq!(eval["overall"]["verdict"], "bWorse");
    assert!(dom.contains("<h1>cowork eval <code>"), "{dom}");
    assert!(dom.contains("<span class=\"verdict b-worse\">B worse</span>"));
    assert!(dom.contains("would appear by chance"), "p in words");
    // Arms are arms: blue cells without a verdict of their own.
    let cells = heatmap_cells(&dom);
    assert_eq!(cells.len(), 4);
    for cell in &cells {
        assert_eq!(cell.state, "arm", "{cell:?}");
        assert_eq!(hue_of_cell(&dom, &cell.id), 212, "{cell:?}");
    }
    assert_eq!(check_drill_down(&dom, "eval.html"), 40);
    let html = std::fs::read_to_string(&html_file).expect("the report");
    check_widths(&html, "eval.html");
    for width in [1400, 800] {
        screenshot(
            &file_url(&html_file),
            &format!("eval-report-{width}.png"),
            width,
            40_000,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_renders_the_coordinator_pages() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w0", "container", "4");
    let out = fleet.submit(
        &workspace_root(),
        &[
            "examples/demo/scenarios/csv-report.yaml",
            "--repeat",
            "5",
            "--matrix",
            "examples/demo/matrix.yaml",
            "--executor",
            "sim",
            "--sim-profile",
            "examples/demo/sim-profile.yaml",
        ],
    );
    let batch = batch_of(&out.envelope());
    let rollup: Value =
        serde_json::from_slice(&fleet.object(&format!("batches/{batch}/rollup.json")))
            .expect("the stored rollup is JSON");
    let base = fleet.coordinator_url();

    // The batch list: the batch, its state and verdict, links to its reports.
    let ui = format!("{base}/v1/ui?token={TOKEN}");
    let dom = rendered_dom(&ui);
    assert!(
        dom.contains(&format!(
            "<tr data-batch=\"{batch}\" data-state=\"done\"><td><code>{batch}</code></td><td>done</td>"
        )),
        "{dom}"
    );
    let verdict = if rollup["ok"] == true { "PASS" } else { "FAIL" };
    assert!(
        dom.contains(&format!(">{verdict}</span> exit {}", rollup["exitCode"])),
        "{dom}"
    );
    assert!(
        dom.contains(&format!(
            "<a href=\"batches/{batch}/report?format=html&amp;token={TOKEN}\" data-format=\"html\">html</a>"
        )),
        "{dom}"
    );
    // One row of the batch list: about 28 kB.
    screenshot(&ui, "coordinator-ui.png", 1400, 15_000);

    // The batch's report page, opened the way the list links it.
    let page = format!("{base}/v1/batches/{batch}/report?format=html&token={TOKEN}");
    let dom = rendered_dom(&page);
    check_heatmap(&dom, &rollup, "coordinator report page");
    assert_eq!(check_drill_down(&dom, "coordinator report page"), 20);
    // The runs' files link to the artifact route, with the page's token, and open.
    let artifacts: Vec<String> = attribute_values(&dom, "href")
        .into_iter()
        .filter(|href| href.starts_with("artifacts/"))
        .collect();
    assert!(artifacts.len() >= 20, "{artifacts:?}");
    let port: u16 = base
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .expect("the coordinator's port");
    for href in artifacts
        .iter()
        .filter(|href| href.contains("/result.json"))
    {
        let href = href.replace("&amp;", "&");
        assert!(href.ends_with(&format!("?token={TOKEN}")), "{href}");
        let (status, headers, body) = http_get(port, &format!("/v1/batches/{batch}/{href}"), None);
        assert_eq!(status, 200, "{href}: {body}");
        assert!(
            headers.contains("content-type: application/json"),
            "{headers}"
        );
        assert!(
            headers.contains("x-content-type-options: nosniff"),
            "{headers}"
        );
        let key = format!("batches/{batch}/{}", href.trim_start_matches("artifacts/"));
        let key = key.split('?').next().expect("a path");
        assert_eq!(body.as_bytes(), fleet.object(key), "{href}");
    }
    let (status, _, _) = http_get(
        port,
        &format!(
            "/v1/batches/{batch}/{}",
            artifacts[0].split('?').next().expect("a path")
        ),
        None,
    );
    assert_eq!(status, 401, "an artifact without a token is refused");
    for width in [1400, 800] {
        let png = screenshot(
            &page,
            &format!("coordinator-report-{width}.png"),
            width,
            40_000,
        );
        eprintln!(
            "screenshot of the coordinator's report page at {width} px: {}",
            png.display()
        );
    }

    // Without the token the browser gets the refusal, not the page.
    let refused = rendered_dom(&format!("{base}/v1/batches/{batch}/report?format=html"));
    assert!(refused.contains("missing or wrong token"), "{refused}");
    assert!(heatmap_cells(&refused).is_empty());
}

/// The script appended to a copy of the 1,000-cell page: where the overview's squares end,
/// in pixels from the top of the page.
const OVERVIEW_SCRIPT: &str = "<script>\
var g=document.getElementById('overview-grid');\
document.documentElement.setAttribute('data-overview-bottom',\
Math.round(g.getBoundingClientRect().bottom+window.scrollY));\
</script>";

/// A 1,000-cell sweep (1,000 models × one skill dir × `--repeat 3` on the
/// simulator: 3,000 runs, more than the page details one by one). Its first screen is the
/// overview: every cell as a square, failing ones first (worst first), then flaky, then the
/// rest, all within the first 1,000 px at 1,400 px wide; every square links to its cell's
/// section, and the page stays small.
#[test]
fn browser_opens_a_1000_cell_report_with_every_cell_in_the_overview_worst_first() {
    let sandbox = Sandbox::empty();
    let demo = sandbox.path().join("demo");
    crate::support::copy_dir(&workspace_root().join("examples/demo"), &demo);
    let models: Vec<String> = (0..1000).map(|i| format!("m{i:04}")).collect();
    std::fs::write(
        demo.join("matrix-1000.yaml"),
        format!(
            "models: [{}]\nskill_dirs:\n  - skills/v1/csv-report\n",
            models.join(", ")
        ),
    )
    .expect("the matrix");
    // 10 cells never pass, 30 pass half their runs (failing or flaky), the rest always pass.
    let mut rules = String::from("rules:\n");
    for i in (7..1000).step_by(100) {
        rules.push_str(&format!("  - model: {}\n    pass_rate: 0.0\n", models[i]));
    }
    for i in (13..1000).step_by(33) {
        rules.push_str(&format!("  - model: {}\n    pass_rate: 0.5\n", models[i]));
    }
    rules.push_str("  - pass_rate: 1.0\n    cost_usd: 0.01\n    duration_ms: 1000\n");
    std::fs::write(demo.join("profile.yaml"), rules).expect("the profile");
    let store = sandbox.store();
    let run = run_batch_from(
        &demo,
        &store,
        &[
            "scenarios/csv-report.yaml",
            "--matrix",
            "matrix-1000.yaml",
            "--max-cells",
            "1000",
            "--repeat",
            "3",
            "--executor",
            "sim",
            "--sim-profile",
            "profile.yaml",
            "--min-pass-rate",
            "0.8",
        ],
    );
    assert_eq!(run.code(), 1, "{}", run.context());
    let html_file = sandbox.path().join("report-1000.html");
    cowork(
        sandbox.path(),
        &[
            "report",
            "latest",
            "--store",
            &store.display().to_string(),
            "-o",
            &html_file.display().to_string(),
        ],
    )
    .expect_code(0);
    let html = std::fs::read_to_string(&html_file).expect("the report");
    assert!(html.len() < 5_000_000, "the page is {} bytes", html.len());

    let dom = rendered_dom(&file_url(&html_file));
    let start = dom.find("<section id=\"overview\">").expect("an overview");
    let end = start + dom[start..].find("</section>").expect("a closed overview");
    let overview = &dom[start..end];
    let grid = &overview[overview.find("id=\"overview-grid\"").expect("the grid")..];
    // Every cell of the heatmap is a square of the overview, once.
    let squares = attribute_values(grid, "data-cell");
    let mut in_overview = squares.clone();
    in_overview.sort();
    in_overview.dedup();
    let mut in_heatmap: Vec<String> = heatmap_cells(&dom).into_iter().map(|c| c.id).collect();
    in_heatmap.sort();
    assert_eq!(in_heatmap.len(), 1000);
    assert_eq!(in_overview, in_heatmap, "every cell once in the overview");
    assert_eq!(squares.len(), 1000);
    // Worst first: failing squares (lowest pass rate first), then flaky, then passing.
    let states = attribute_values(grid, "data-state");
    let flaky = attribute_values(grid, "data-flaky");
    let rates: Vec<f64> = attribute_values(grid, "data-pass-rate")
        .iter()
        .map(|rate| rate.parse().expect("a rate"))
        .collect();
    assert_eq!((states.len(), rates.len()), (1000, 1000));
    let rank = |i: usize| match (states[i].as_str(), flaky[i].as_str()) {
        ("fail", _) => 0,
        ("pass", "true") => 1,
        ("pass", _) => 2,
        (other, _) => panic!("square {} is {other}", squares[i]),
    };
    let failing = (0..1000).filter(|i| rank(*i) == 0).count();
    assert!(
        failing >= 10,
        "the 10 cells that never pass fail: {failing}"
    );
    for i in 1..1000 {
        assert!(
            (rank(i - 1), rates[i - 1]) <= (rank(i), rates[i]),
            "square {i} ({}) is out of order: {:?} then {:?}",
            squares[i],
            (&states[i - 1], rates[i - 1]),
            (&states[i], rates[i])
        );
    }
    let never_passed = rates.iter().take_while(|rate| **rate == 0.0).count();
    for i in (7..1000).step_by(100) {
        let id = format!("c{i}");
        assert!(
            squares[..never_passed].contains(&id),
            "{id} (never passes) is among the first squares: {:?}",
            &squares[..never_passed]
        );
    }
    // The count line agrees with the squares.
    assert!(
        overview.contains(&format!("data-failing=\"{failing}\"")),
        "{overview}"
    );
    // Each square leads to its cell's section, and the page keeps its drill-down.
    let ids: std::collections::HashSet<String> = attribute_values(&dom, "id").into_iter().collect();
    for square in &squares {
        assert!(ids.contains(&format!("unit-{square}")), "{square}");
    }
    check_drill_down(&dom, "report-1000.html");
    // The whole overview is on the first screen (1,000 px high at 1,400 px wide).
    let copy = sandbox.path().join("report-1000-measured.html");
    std::fs::write(
        &copy,
        html.replace("</body>", &format!("{OVERVIEW_SCRIPT}</body>")),
    )
    .expect("the measured copy");
    let measured = headless(&file_url(&copy), &["--dump-dom", "--window-size=1400,1000"]);
    let bottom: f64 = attribute_values(&measured, "data-overview-bottom")
        .first()
        .and_then(|value| value.parse().ok())
        .expect("the overview was measured");
    assert!(bottom <= 1000.0, "the overview ends at {bottom} px");
    let png = screenshot(&file_url(&html_file), "report-1000-cells.png", 1400, 40_000);
    eprintln!("screenshot of the 1,000-cell report: {}", png.display());
}
