//! Human renderings of rollups for stderr (harness-behaviour.md#repeat-human,
//! harness-behaviour.md#matrix-repeat).
//!
//! Not a contract, but useful for parity with the CLI: the layout and the rounding follow the
//! CLI where harness-behaviour.md#repeat-human states them. Where it does not (the wording of the
//! non-determinism warning, a cost line with only one of its two parts, the per-cell lines of the
//! matrix table), the text here is ours.

use std::fmt::Write as _;

use cowork_schema::json_number;
use cowork_schema::rollup::{MatrixRepeatRollup, RepeatRollup};

use super::{Judging, arm_label, rollup_passes};

/// JavaScript's `Number.prototype.toFixed(digits)` for finite values below 1e21.
///
/// JavaScript rounds the exact binary value to the nearest multiple of 10^-digits and picks the
/// larger candidate on a tie, so `0.5` gives `"1"`, `2.5` gives `"3"` and `1.005` (stored as
/// 1.00499999999999989…) gives `"1.00"` with two digits. Rust's own `{:.N}` breaks ties to
/// even, so the exact decimal expansion is rounded by hand here. Non-finite values print as
/// JavaScript prints them; values of 1e21 and more (where JavaScript switches to exponent
/// notation) never occur in rollups and print in plain decimal. `digits` is capped at 100, the
/// largest JavaScript accepts.
pub fn js_to_fixed(value: f64, digits: usize) -> String {
    let digits = digits.min(100);
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    // 1100 fractional digits exceed the 1074 a double can have, so this is the exact value.
    let exact = format!("{:.1100}", value.abs());
    let (int_part, frac_part) = exact
        .split_once('.')
        .expect("a float formatted with a precision always has a decimal point");
    let mut kept: Vec<u8> = int_part
        .bytes()
        .chain(frac_part.bytes().take(digits))
        .collect();
    let round_up = frac_part.as_bytes()[digits] >= b'5';
    if round_up {
        let mut position = kept.len();
        loop {
            if position == 0 {
                kept.insert(0, b'1');
                break;
            }
            position -= 1;
            if kept[position] == b'9' {
                kept[position] = b'0';
            } else {
                kept[position] += 1;
                break;
            }
        }
    }
    let split = kept.len() - digits;
    let mut text = String::with_capacity(kept.len() + 2);
    // JavaScript keeps the sign of a negative input even when it rounds to zero ("-0").
    if value < 0.0 {
        text.push('-');
    }
    text.push_str(std::str::from_utf8(&kept[..split]).expect("digits are ASCII"));
    if digits > 0 {
        text.push('.');
        text.push_str(std::str::from_utf8(&kept[split..]).expect("digits are ASCII"));
    }
    text
}

/// A number as JavaScript's `String(n)` prints it (harness-behaviour.md#json-numbers).
fn js_number(value: f64) -> String {
    json_number::stringify(value)
}

fn joined_or_unknown(items: &[String]) -> String {
    if items.is_empty() {
        "unknown".to_owned()
    } else {
        items.join(",")
    }
}

fn histogram_text(rollup: &RepeatRollup) -> String {
    rollup
        .signal_histogram
        .iter()
        .map(|(code, count)| format!("{code}×{count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The human summary of one repeat rollup (harness-behaviour.md#repeat-human), one `\n`-terminated
/// line each.
pub fn render_repeat_human(rollup: &RepeatRollup, judging: &Judging) -> String {
    let mut out = String::new();
    let verdict = if rollup_passes(rollup, judging) {
        "PASS"
    } else {
        "FAIL"
    };
    let _ = write!(
        out,
        "repeat \"{}\": {verdict}{} — {}/{} passed ({}%)",
        rollup.scenario,
        arm_label(rollup),
        rollup.passes,
        rollup.completed,
        js_to_fixed(rollup.pass_rate * 100.0, 0),
    );
    if let Some(reason) = rollup.stopped_early {
        let _ = write!(
            out,
            " (stopped early: {}, {}/{} completed)",
            reason.as_str(),
            rollup.completed,
            rollup.requested
        );
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "  provenance: model={}  skill={}  ablated={}/{}",
        joined_or_unknown(&rollup.provenance.models),
        joined_or_unknown(&rollup.provenance.skills),
        rollup.provenance.ablated_runs,
        rollup.completed
    );
    if !rollup.signal_histogram.is_empty() {
        let _ = writeln!(out, "  signals: {}", histogram_text(rollup));
    }
    for row in rollup.per_assertion.iter().filter(|row| row.fails > 0) {
        let _ = write!(
            out,
            "  assertion[{}] ({}): {} fail / {} pass",
            row.index, row.key, row.fails, row.passes
        );
        if let Some(sample) = &row.sample_failure {
            let _ = write!(out, " — e.g. \"{sample}\"");
        }
        out.push('\n');
    }
    let mut cost_parts = Vec::new();
    if let Some(cost) = rollup.total_cost_usd {
        cost_parts.push(format!("${} total", js_to_fixed(cost, 4)));
    }
    if let Some(tokens) = rollup.total_tokens {
        cost_parts.push(format!("{} tokens total", js_number(tokens)));
    }
    if !cost_parts.is_empty() {
        let _ = writeln!(out, "  cost: {}", cost_parts.join(", "));
    }
    if rollup.non_deterministic_runs > 0 {
        let _ = writeln!(
            out,
            "  ⚠ {}/{} run(s) had a non-deterministic (llm, external, human or first) decision; \
             the pass rate measures those decisions too",
            rollup.non_deterministic_runs, rollup.completed
        );
    }
    out
}

/// The human table of a matrix + repeat batch (harness-behaviour.md#matrix-repeat): the header
/// `matrix: <k>/<ranCells> cells passed[ — FAIL]`, where k counts cells whose rollup passes,
/// then one line per cell; failing cells list their signal histogram.
pub fn render_matrix_repeat_human(matrix: &MatrixRepeatRollup, judging: &Judging) -> String {
    let n_passed = matrix
        .cells
        .iter()
        .filter(|cell| {
            cell.rollup
                .as_ref()
                .is_some_and(|rollup| rollup_passes(rollup, judging))
        })
        .count();
    let mut out = format!("matrix: {n_passed}/{} cells passed", matrix.ran_cells);
    if matrix.any_fail {
        out.push_str(" — FAIL");
    }
    out.push('\n');
    for cell in &matrix.cells {
        let axes = cell.axes.label();
        match (&cell.rollup, &cell.error) {
            (Some(rollup), _) => {
                let passes = rollup_passes(rollup, judging);
                let _ = write!(
                    out,
                    "  [{}] {axes}: {}{} — {}/{} ({}%)",
                    cell.index,
                    if passes { "PASS" } else { "FAIL" },
                    arm_label(rollup),
                    rollup.passes,
                    rollup.completed,
                    js_to_fixed(rollup.pass_rate * 100.0, 0),
                );
                if let Some(reason) = rollup.stopped_early {
                    let _ = write!(out, " (stopped early: {})", reason.as_str());
                }
                out.push('\n');
                if !passes && !rollup.signal_histogram.is_empty() {
                    let _ = writeln!(out, "      signals: {}", histogram_text(rollup));
                }
            }
            (None, error) => {
                let _ = writeln!(
                    out,
                    "  [{}] {axes}: ERROR — {}",
                    cell.index,
                    error.as_deref().unwrap_or("no rollup")
                );
            }
        }
    }
    out
}
