//! The page frame every HTML page shares: the style sheet, the document's start and end, the
//! verdict badge, and the escaping that keeps quoted text from spelling a URL or an attribute.

use std::fmt::Write as _;

/// The page's style sheet. Heatmap cells get their shade per cell (see `heatmap::heat_style`).
const STYLE: &str = "\
:root{color-scheme:light}
*{box-sizing:border-box}
body{margin:0;background:#f6f8fa;color:#1f2328;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif}
main{max-width:1360px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:22px;margin:0 0 10px;overflow-wrap:anywhere}
h2{font-size:17px;margin:28px 0 10px;padding-bottom:4px;border-bottom:1px solid #d0d7de}
h3{font-size:15px;margin:0 0 6px;overflow-wrap:anywhere}
a{color:#0550ae}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;overflow-wrap:anywhere}
table{border-collapse:collapse;background:#fff;max-width:100%}
th,td{border:1px solid #d0d7de;padding:5px 9px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.muted{color:#59636e}
.small{font-size:12px}
.verdict{display:inline-block;padding:1px 10px;border-radius:11px;color:#fff;font-weight:700;font-size:13px;white-space:nowrap;vertical-align:middle}
.verdict.pass,.verdict.b-better{background:#1a7f37}
.verdict.fail,.verdict.b-worse{background:#cf222e}
.verdict.error{background:#8250df}
.verdict.not-run,.verdict.no-difference,.verdict.arm{background:#6e7781}
.verdict.incomplete,.verdict.discarded{background:#9a6700}
.banner{margin:12px 0;padding:12px 16px;border-radius:6px;font-weight:600}
.banner.simulated{background:#fff8c5;border:2px solid #d4a72c;color:#6c4400;font-size:15px}
.banner.incomplete{background:#fff1e5;border:2px solid #bc4c00;color:#762c00;font-size:15px}
.banner.quarantine{background:#ddf4ff;border:2px solid #54aeff;color:#0a3069}
.banner.quarantine.expired{background:#ffebe9;border:2px solid #cf222e;color:#82071e}
.qmark{font-size:12px;color:#57606a}
dl.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(210px,1fr));gap:6px 10px;margin:12px 0 0;padding:0}
dl.facts div{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:5px 10px;min-width:0}
dl.facts dt{font-size:11px;letter-spacing:.04em;text-transform:uppercase;color:#59636e}
dl.facts dd{margin:0;font-weight:600;overflow-wrap:anywhere}
.wide{overflow-x:auto;max-width:100%}
table.units{width:100%}
table.units td.label{overflow-wrap:anywhere}
table.units td.label .small{display:block;color:#59636e}
table.heatmap th.row{max-width:320px;overflow-wrap:anywhere}
table.heatmap td.cell{min-width:150px;max-width:260px;text-align:center;vertical-align:middle;padding:8px 10px}
td.cell.pass{box-shadow:inset 5px 0 0 #1a7f37}
td.cell.fail{box-shadow:inset 5px 0 0 #cf222e}
td.cell.incomplete{box-shadow:inset 5px 0 0 #bc4c00}
td.cell.arm{box-shadow:inset 5px 0 0 #0969da}
td.cell.error{background:#eaeef2;color:#8250df;box-shadow:inset 5px 0 0 #8250df}
td.cell.not-run,td.cell.empty{background:#f6f8fa;color:#6e7781}
a.cellink{display:block;color:inherit;text-decoration:none}
a.cellink:hover .frac{text-decoration:underline}
.cell .frac{display:block;font-size:20px;font-weight:700}
.cell .rate{display:block;font-size:14px}
.cell .mini{display:block;font-size:11px;letter-spacing:.04em;color:#3d444d;font-weight:700}
.cell .tag,.tag{display:inline-block;margin:3px 2px 0;padding:0 7px;border-radius:9px;font-size:11px;color:#fff}
.tag.flaky{background:#8250df}
.tag.stop{background:#bc4c00}
.strip{display:flex;flex-wrap:wrap;gap:2px;margin:6px 0 0;justify-content:center;line-height:0}
.strip.big{justify-content:flex-start;gap:3px;margin:8px 0}
.dot{display:inline-block;width:10px;height:10px;border-radius:2px;border:1px solid rgba(31,35,40,.25)}
.strip.big .dot{width:14px;height:14px}
.dot.pass{background:#1a7f37}
.dot.fail{background:#cf222e}
.dot.error{background:#8250df}
.dot.discarded{background:repeating-linear-gradient(45deg,#8c959f 0 2px,#eaeef2 2px 4px)}
.dot.not-run{background:#fff;border:1px dashed #8c959f}
.strip .more{font-size:11px;line-height:12px;color:#59636e}
.seg{display:inline-block;min-width:10px;height:12px;padding:0 4px;border-radius:2px;font-size:9px;line-height:12px;color:#fff;border:1px solid rgba(31,35,40,.25)}
.seg.pass{background:#1a7f37}.seg.fail{background:#cf222e}.seg.error{background:#8250df}.seg.discarded{background:#8c959f}.seg.not-run{background:#fff;color:#59636e;border:1px dashed #8c959f}
#overview .counts{margin:6px 0;font-weight:600}
.ov-grid{display:flex;flex-wrap:wrap;gap:2px;line-height:0}
a.ov{display:inline-block;width:14px;height:14px;border-radius:2px;border:1px solid rgba(31,35,40,.3)}
a.ov.fail,a.ov.error{outline:1px solid #cf222e}
a.ov.error{background:#8250df}a.ov.not-run{background:#fff;border-style:dashed}
table.ov-matrix td{padding:1px;border:0}table.ov-matrix th{font-size:11px;padding:1px 6px;font-weight:400}
ol.worst{margin:6px 0;padding-left:22px;columns:2 420px;font-size:13px}
ol.worst li{break-inside:avoid;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.legend{margin:8px 0 0;font-size:12px;color:#59636e}
.legend .swatch{display:inline-block;width:28px;height:12px;margin:0 4px 0 10px;vertical-align:middle;border:1px solid #d0d7de}
.legend .dot{margin:0 3px 0 10px;vertical-align:middle}
.flakymark{color:#8250df;font-weight:700}
ul.stops li{margin:3px 0}
section.ab{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:4px 18px 14px;margin:14px 0}
section.ab h2{border:0;margin:14px 0 6px}
section.ab .headline{font-size:16px;margin:6px 0}
section.ab table{margin-top:8px}
section.ab h3{margin:18px 0 4px}
section.unit{margin:18px 0;padding:12px 14px;background:#fff;border:1px solid #d0d7de;border-radius:8px}
article.run{margin:10px 0 0;padding:8px 12px;border:1px solid #d0d7de;border-left-width:5px;border-radius:6px;background:#fcfcfd}
article.run.pass{border-left-color:#1a7f37}
article.run.fail{border-left-color:#cf222e}
article.run.error{border-left-color:#8250df}
article.run.discarded{border-left-color:#8c959f}
article.run:target{outline:3px solid #0969da}
section.unit:target{outline:3px solid #0969da}
article.run header{display:flex;flex-wrap:wrap;gap:6px 12px;align-items:center}
article.run p{margin:6px 0}
table.assertions{width:100%;margin:6px 0}
table.assertions td{overflow-wrap:anywhere}
table.assertions tr.fail td:first-child{box-shadow:inset 3px 0 0 #cf222e}
.errorbox{background:#fff0f0;border:1px solid #ffcecb;border-radius:6px;padding:6px 10px;overflow-wrap:anywhere}
ul.signals{margin:4px 0;padding-left:20px}
ul.signals li{overflow-wrap:anywhere}
.files a,.files code{margin-right:10px}
details{margin:8px 0}
details.assertions{margin:4px 0}
details.assertions summary{cursor:pointer;color:#1a7f37;font-size:13px}
footer{margin-top:36px;font-size:12px;color:#59636e}
@media (max-width:960px){main{padding:14px 12px 30px}th,td{padding:4px 6px}.opt,table.units td.label .small{display:none}table.heatmap td.cell{min-width:110px}}
";

/// Escapes text for HTML text and attribute values. `:` and `=` are escaped too (they render
/// the same): then no text quoted from a run can spell a URL (`http://`) or an attribute
/// (`src=`) in the file, which keeps the page provably free of anything it could load.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            ':' => out.push_str("&#58;"),
            '=' => out.push_str("&#61;"),
            c => out.push(c),
        }
    }
    out
}

pub(super) fn page_start(out: &mut String, title: &str) {
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    let _ = write!(out, "<style>\n{STYLE}</style>\n</head>\n<body>\n<main>\n");
}

pub(super) fn page_end(out: &mut String) {
    out.push_str("</main>\n</body>\n</html>\n");
}

pub(crate) fn verdict_badge(class: &str, text: &str) -> String {
    format!("<span class=\"verdict {class}\">{}</span>", escape(text))
}

/// Percent-encodes a query value (everything but RFC 3986 unreserved characters).
pub(crate) fn query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_urls_and_attributes_out_of_the_file() {
        assert_eq!(
            escape("<img src='http://x/a.png'> & \"b\""),
            "&lt;img src&#61;&#39;http&#58;//x/a.png&#39;&gt; &amp; &quot;b&quot;"
        );
    }
}
