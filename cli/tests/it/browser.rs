//! A real browser on the reports: headless Chromium (Debian's `chromium`) loads a generated HTML
//! report file and the coordinator's pages, the test reads the heatmap's cells and numbers from
//! the RENDERED DOM (`--dump-dom`), and saves screenshots under
//! `$CARGO_TARGET_TMPDIR/test-output/browser/` for a person (or CI artifact upload) to look at.
//!
//! Chromium is required: when it is missing the tests fail with the install hint
//! (`apt-get install -y chromium`), they never skip. As root it needs `--no-sandbox`; every run
//! gets its own profile dir so parallel tests do not share Chromium's profile lock.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::fleet::{Fleet, TOKEN, batch_of};
use crate::report::{check_heatmap, demo_batch, heatmap_cells};
use crate::support::{Sandbox, cowork, read_json, workspace_root};

/// Wall-clock cap of one Chromium run, enforced by coreutils `timeout` so that a wedged browser
/// fails the test instead of hanging it; a page of this size renders in about a second.
const CHROMIUM_TIMEOUT_S: &str = "120";

/// The Chromium binary on PATH; panics with the install hint when there is none.
fn chromium() -> PathBuf {
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

/// Where this test's screenshots go.
fn output_dir() -> PathBuf {
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
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--hide-scrollbars",
        ])
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

/// A 1400×1000 screenshot of `url` saved as `<output dir>/<name>`; checks it is a PNG of at
/// least `min_bytes` and returns its path. An empty page of the reports' background color
/// compresses to about 6 kB, so a floor well above that shows the page rendered content.
fn screenshot(url: &str, name: &str, min_bytes: usize) -> PathBuf {
    let path = output_dir().join(name);
    let _ = std::fs::remove_file(&path);
    headless(
        url,
        &[
            &format!("--screenshot={}", path.display()),
            "--window-size=1400,1000",
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

#[test]
fn browser_renders_the_generated_html_report_with_its_heatmap() {
    let sandbox = Sandbox::empty();
    let batch_dir = demo_batch(&sandbox);
    let rollup = read_json(&batch_dir.join("rollup.json"));
    let html_file = sandbox.path().join("report.html");
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
        dom.contains("SIMULATED — 20 of 20 folded run(s) came from the sim executor"),
        "the banner is rendered"
    );
    // Attributes escaped in the file read back as plain text in the DOM.
    assert!(
        dom.contains("<th>skill_dir=skills/v1/csv-report</th>"),
        "{dom}"
    );

    // A report with its heatmap, tables and banner is well over 100 kB.
    let png = screenshot(&file_url(&html_file), "report.png", 60_000);
    eprintln!("screenshot of the report: {}", png.display());
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
    screenshot(&ui, "coordinator-ui.png", 15_000);

    // The batch's report page, opened the way the list links it.
    let page = format!("{base}/v1/batches/{batch}/report?format=html&token={TOKEN}");
    let dom = rendered_dom(&page);
    check_heatmap(&dom, &rollup, "coordinator report page");
    let png = screenshot(&page, "coordinator-report.png", 60_000);
    eprintln!(
        "screenshot of the coordinator's report page: {}",
        png.display()
    );

    // Without the token the browser gets the refusal, not the page.
    let refused = rendered_dom(&format!("{base}/v1/batches/{batch}/report?format=html"));
    assert!(refused.contains("missing or wrong token"), "{refused}");
    assert!(heatmap_cells(&refused).is_empty());
}
