//! The live page of a running batch: a static shell whose script (`live.js`, served by the
//! coordinator) draws the live view from the coordinator's snapshot and deltas. The shell
//! holds no data but the batch id; the script writes every value as text.

use super::html::escape;

/// The live page's script, served as `/assets/live.js`.
pub const LIVE_PAGE_SCRIPT: &str = include_str!("live.js");

const LIVE_STYLE: &str = r#"
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1f2328;background:#f6f8fa}
main{max-width:1360px;margin:0 auto;padding:16px}
h1{font-size:20px;margin:0 0 4px;overflow-wrap:anywhere}
h2{font-size:15px;margin:0 0 8px}
section{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:12px;margin:0 0 12px;min-width:0}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:12px}
.grid section{margin:0}
.muted{color:#656d76}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;background:#ddf4ff;color:#0969da;font-weight:600}
body[data-state=paused] .badge{background:#fff8c5;color:#7d4e00}
body[data-state=done] .badge{background:#dafbe1;color:#1a7f37}
body[data-state=cancelled] .badge,body[data-state=cancelling] .badge{background:#ffebe9;color:#cf222e}
.banner{padding:8px 12px;border-radius:6px;margin:0 0 12px;font-weight:600}
.simulated{background:#fff8c5;border:2px solid #d4a72c;color:#6c4400}
#verdict{font-size:16px;background:#fff;border:2px solid #1f2328}
#verdict[data-verdict=PASS]{border-color:#1a7f37}
#verdict[data-verdict=FAIL]{border-color:#cf222e}
#verdict a{margin-left:12px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0}
dt{color:#656d76}
dd{margin:0;font-variant-numeric:tabular-nums}
.bar{height:10px;background:#eaeef2;border-radius:5px;overflow:hidden;margin:8px 0}
.bar span{display:block;height:100%;background:#2da44e;width:0}
#bar-cost{background:#bf8700}
.counts{display:flex;flex-wrap:wrap;gap:4px 16px}
.counts span b{font-variant-numeric:tabular-nums}
table{border-collapse:collapse}
td,th{padding:3px 6px;text-align:left}
.num{text-align:right}
.heat{overflow-x:auto;max-width:100%}
#heatmap th.col{font-weight:600;font-size:12px;max-width:160px;overflow-wrap:anywhere}
#heatmap th.row{font-weight:500;max-width:240px;overflow-wrap:anywhere}
#heatmap .cell{min-width:44px;text-align:center;border:1px solid #fff;background:#eaeef2;cursor:pointer;font-variant-numeric:tabular-nums;font-size:12px}
#heatmap h3.row{font-size:13px;font-weight:600;margin:8px 0 4px;overflow-wrap:anywhere}
#heatmap .heat-grid{display:flex;flex-wrap:wrap;gap:2px}
#heatmap .heat-grid .cell{display:inline-block;padding:2px 3px;border-radius:3px}
#strip{display:flex;flex-wrap:wrap;gap:3px;margin-top:6px}
.run{display:inline-block;min-width:26px;padding:2px 4px;text-align:center;border-radius:3px;font-size:12px;background:#eaeef2;color:#1f2328;text-decoration:none}
.run.pass{background:#aceebb}.run.fail{background:#ffcecb}.run.error{background:#ffd8b5}.run.running{background:#ddf4ff}
#failures{margin:0;padding-left:18px}
#failures li{margin:2px 0;overflow-wrap:anywhere}
#failures .file{margin-left:8px}
.controls{display:flex;flex-wrap:wrap;gap:8px;align-items:center}
button{font:inherit;padding:4px 12px;border:1px solid #d0d7de;border-radius:6px;background:#f6f8fa;cursor:pointer}
button:disabled{opacity:.5;cursor:default}
button.danger{color:#cf222e}
input{font:inherit;width:110px;padding:3px 6px;border:1px solid #d0d7de;border-radius:6px}
input:disabled{opacity:.5}
#confirm{margin-top:8px;padding:8px;border:2px solid #cf222e;border-radius:6px;background:#ffebe9}
#words,#changes{margin:0;padding-left:18px}
"#;

/// The live page of batch `batch_id`.
pub fn render_live_page(batch_id: &str) -> String {
    let id = escape(batch_id);
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>live: batch {id}</title>
<style>{LIVE_STYLE}</style>
<script src="/assets/live.js" defer></script>
</head>
<body data-state="loading" data-batch="{id}">
<main>
<header>
<h1>Batch <code>{id}</code> <span class="badge" id="state">loading</span></h1>
<p class="muted">Live view, updated a few times a second · stream: <span id="link">connecting…</span></p>
</header>
<div class="banner simulated" id="simulated" role="alert" hidden>SIMULATED: these runs come from the simulator; no model was called and no money was spent.</div>
<div class="banner" id="verdict" role="status" hidden></div>
<div class="grid">
<section aria-labelledby="h-progress"><h2 id="h-progress">Progress</h2>
<div class="bar"><span id="bar-done"></span></div>
<div class="counts">
<span>planned <b id="p-planned">0</b></span><span>queued <b id="p-queued">0</b></span>
<span>running <b id="p-running">0</b></span><span>finished <b id="p-finished">0</b></span>
<span>passed <b id="p-passed">0</b></span><span>failed <b id="p-failed">0</b></span>
<span>errored <b id="p-errored">0</b></span><span>infra-failed <b id="p-infraFailed">0</b></span>
<span>discarded <b id="p-discarded">0</b></span><span>skipped <b id="p-skipped">0</b></span>
</div>
<dl><dt>throughput</dt><dd id="rate">–</dd><dt>ETA</dt><dd id="eta">–</dd></dl>
</section>
<section aria-labelledby="h-cost"><h2 id="h-cost">Cost</h2>
<div class="bar"><span id="bar-cost"></span></div>
<dl><dt>spent</dt><dd id="c-spent">–</dd><dt>batch budget</dt><dd id="c-batch">–</dd>
<dt>--max-budget-usd</dt><dd id="c-max">–</dd><dt>per run</dt><dd id="c-per-run">–</dd>
<dt>projected total</dt><dd id="c-projected">–</dd></dl>
<p class="muted" id="c-words"></p>
</section>
<section aria-labelledby="h-controls"><h2 id="h-controls">Controls</h2>
<div class="controls">
<button id="pause" type="button" disabled>Pause dispatch</button>
<button id="resume" type="button" disabled>Resume dispatch</button>
<button id="cancel" type="button" class="danger" disabled>Cancel…</button>
<button id="cancel-kill" type="button" class="danger" disabled>Cancel and kill running…</button>
</div>
<div class="controls" style="margin-top:8px">
<label>batch budget $ <input id="budget" type="number" min="0" step="0.01" inputmode="decimal"></label>
<label>max running <input id="max-running" type="number" min="1" step="1" inputmode="numeric"></label>
<button id="apply" type="button" disabled>Adjust</button>
</div>
<div id="confirm" role="alertdialog" hidden><p id="confirm-text"></p>
<button id="confirm-yes" type="button" class="danger">Yes, cancel it</button> <button id="confirm-no" type="button">No</button></div>
<p class="muted" id="controls-ended" hidden>The batch has ended: there is nothing left to pause, cancel or adjust.</p>
<p class="muted" id="control-msg" role="status"></p>
</section>
<section aria-labelledby="h-dispatch"><h2 id="h-dispatch">Dispatch</h2><ul id="words"></ul>
<h2 style="margin-top:8px">Workers serving its tiers</h2>
<table><thead><tr><th>worker</th><th>tiers</th><th class="num">busy / slots</th></tr></thead><tbody id="workers"></tbody></table>
</section>
</div>
<section aria-labelledby="h-heat" style="margin-top:12px"><h2 id="h-heat">Heatmap <span class="muted">(passed/finished; click a cell for its runs)</span></h2>
<div class="heat"><div id="heatmap"></div></div>
<h2 id="strip-title" style="margin-top:8px">Runs</h2><div id="strip"></div>
</section>
<section aria-labelledby="h-failures"><h2 id="h-failures">Latest failures</h2><ul id="failures"></ul></section>
<section aria-labelledby="h-changes"><h2 id="h-changes">Changes of the controls</h2><ul id="changes"></ul></section>
</main>
</body>
</html>
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_page_loads_only_its_own_script_and_escapes_the_id() {
        let page = render_live_page("b<1>");
        assert!(page.contains("<script src=\"/assets/live.js\" defer></script>"));
        assert_eq!(page.matches("<script").count(), 1, "no inline script");
        assert!(page.contains("b&lt;1&gt;") && !page.contains("b<1>"));
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "nothing from elsewhere"
        );
        assert!(
            !LIVE_PAGE_SCRIPT.contains("innerHTML"),
            "values are written as text"
        );
    }
}
