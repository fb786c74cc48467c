//! The live page's script in a real browser on a crafted view: headless Chromium ([`crate::cdp`])
//! loads the page's shell and script with the event stream replaced by one that delivers a
//! snapshot the test writes, and the test judges what the rendered page shows — the words of
//! the dispatch section, the controls once the batch is decided, the colour of a cell against
//! the batch's bar, and a 1,000-cell heatmap that stays readable. No fleet runs: what a batch
//! does is the business of `live_browser`.

use cowork_core::report::live::{LIVE_PAGE_SCRIPT, render_live_page};
use cowork_schema::live::{LiveCell, LiveSnapshot, LiveVerdict};
use serde_json::Value;

use crate::browser::output_dir;
use crate::cdp::Browser;

/// A running batch of `cells` cells, none finished.
fn running(cells: Vec<LiveCell>) -> LiveSnapshot {
    let mut snap = LiveSnapshot {
        batch_id: "b1".to_owned(),
        state: "running".to_owned(),
        units_per_cell: 1,
        cells,
        ..LiveSnapshot::default()
    };
    snap.dispatch.max_running = 8;
    snap.dispatch.epoch = 3;
    snap
}

fn cell(unit: u32, row: &str, col: &str) -> LiveCell {
    LiveCell {
        unit,
        row: row.to_owned(),
        col: col.to_owned(),
        runs: 1,
        ..LiveCell::default()
    }
}

/// A browser showing the live page drawn from `snap`.
async fn page_of(snap: &LiveSnapshot) -> Browser {
    let mut browser = Browser::launch().await;
    browser.set_width(1400).await;
    let shell =
        render_live_page("b1").replace(r#"<script src="/assets/live.js" defer></script>"#, "");
    let shell = serde_json::to_string(&shell).expect("the shell as a string");
    browser
        .eval(&format!(
            "document.open(); document.write({shell}); document.close(); true"
        ))
        .await;
    // The stream: hands the page the test's snapshot once the script listens.
    browser
        .eval(
            "window.EventSource = class { constructor() { window.liveStream = this; this.on = {}; }
  addEventListener(kind, listener) { this.on[kind] = listener; } close() {} }; true",
        )
        .await;
    let script = serde_json::to_string(LIVE_PAGE_SCRIPT).expect("the script as a string");
    browser.eval(&format!("(0, eval)({script}); true")).await;
    let data = serde_json::to_string(&serde_json::to_string(snap).expect("a snapshot"))
        .expect("the snapshot as a string");
    browser
        .eval(&format!(
            "window.liveStream.on.snapshot({{ data: {data} }}); true"
        ))
        .await;
    browser
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_dispatch_section_says_the_limit_in_plain_words() {
    let mut browser = page_of(&running(vec![cell(0, "s.yaml", "-")])).await;
    let words = text(
        &browser
            .eval("document.getElementById('words').textContent")
            .await,
    );
    assert!(
        words.contains("At most 8 jobs of this batch run at once."),
        "the limit in plain words: {words}"
    );
    assert!(!words.contains("epoch"), "no jargon: {words}");
}

#[tokio::test]
async fn the_controls_of_a_decided_batch_are_disabled_and_say_why() {
    let mut snap = running(vec![cell(0, "s.yaml", "-")]);
    snap.state = "done".to_owned();
    snap.verdict = Some(LiveVerdict {
        ok: Some(true),
        exit_code: Some(0),
        ..LiveVerdict::default()
    });
    let mut browser = page_of(&snap).await;
    let enabled = browser
        .eval(
            "['pause', 'resume', 'cancel', 'cancel-kill', 'apply', 'budget', 'max-running']
  .filter((id) => !document.getElementById(id).disabled)",
        )
        .await;
    assert_eq!(enabled, serde_json::json!([]), "every control is disabled");
    let note = text(
        &browser
            .eval("document.getElementById('controls-ended').textContent")
            .await,
    );
    assert!(
        note.contains("batch has ended"),
        "the page says why: {note}"
    );
}

/// The background of cell `index` as `[red, green, blue]`.
async fn colour_of(browser: &mut Browser, index: usize) -> Vec<u64> {
    let rgb = browser
        .eval(&format!(
            "getComputedStyle(document.getElementById('cell-{index}')).backgroundColor.match(/\\d+/g).slice(0, 3).map(Number)"
        ))
        .await;
    rgb.as_array()
        .map(|parts| parts.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_cell_is_coloured_by_its_verdict_against_the_batch_bar() {
    let mut cells = vec![cell(0, "a.yaml", "-"), cell(1, "b.yaml", "-")];
    // 96% against a bar of 95%: passing. 80%: failing.
    for (cell, passed) in cells.iter_mut().zip([24, 20]) {
        cell.runs = 25;
        cell.finished = 25;
        cell.passed = passed;
        cell.failed = 25 - passed;
    }
    let mut snap = running(cells);
    snap.min_pass_rate = Some(0.95);
    let mut browser = page_of(&snap).await;
    let passing = colour_of(&mut browser, 0).await;
    let failing = colour_of(&mut browser, 1).await;
    assert!(
        passing.len() == 3 && passing[1] > passing[0],
        "96% against a 95% bar is green: rgb {passing:?}"
    );
    assert!(
        failing.len() == 3 && failing[0] > failing[1],
        "80% against a 95% bar is red: rgb {failing:?}"
    );
}

#[tokio::test]
async fn a_1000_cell_heatmap_wraps_within_the_page_and_names_every_cell() {
    // One scenario swept over 1,000 models: 1,000 columns of one row.
    let cells = (0..1000)
        .map(|unit| {
            let mut cell = cell(
                unit,
                "review.yaml",
                &format!("model=claude-sonnet-m{unit:04}"),
            );
            cell.finished = 1;
            cell.passed = u32::from(unit % 7 != 0);
            cell.failed = 1 - cell.passed;
            cell
        })
        .collect();
    let mut browser = page_of(&running(cells)).await;
    let dir = output_dir();
    for width in [1400, 800] {
        browser.screenshot(&dir, "live-1000-cells", width).await;
        let fits = browser
            .eval(
                "(() => { const box = document.getElementById('heatmap').parentElement;
  return [box.scrollWidth, box.clientWidth, document.documentElement.scrollWidth, innerWidth]; })()",
            )
            .await;
        assert!(
            fits[0].as_u64() <= fits[1].as_u64() && fits[2].as_u64() <= fits[3].as_u64(),
            "the heatmap wraps at {width} px instead of scrolling sideways: {fits}"
        );
    }
    let named = browser
        .eval(
            "[...Array(1000).keys()].filter((i) => { const node = document.getElementById('cell-' + i);
  return node && node.title.includes('review.yaml') && node.title.includes('m' + String(i).padStart(4, '0'))
    && node.getBoundingClientRect().width >= 24; }).length",
        )
        .await;
    assert_eq!(
        named, 1000,
        "every cell is drawn readable and named in its tooltip"
    );
}
