//! Number formatting shared by the renderers: percents, dollars, seconds, and numbers as
//! JavaScript prints them, so that every format shows the same figure the same way.

use cowork_schema::json_number;

use crate::reduce::js_to_fixed;

/// A rate as a whole percent, rounded like JavaScript's `toFixed(0)` (as the CLI prints it).
pub fn percent(rate: f64) -> String {
    format!("{}%", js_to_fixed(rate * 100.0, 0))
}

/// Dollars with four decimals, or `-`.
/// A cost as every format shows it: `$0.0000 (recorded $0.2154)` for a replay, else [`usd`].
pub(crate) fn cost_text(spent: Option<f64>, recorded: Option<f64>) -> String {
    match recorded {
        Some(_) => format!("{} (recorded {})", usd(spent), usd(recorded)),
        None => usd(spent),
    }
}

pub fn usd(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |usd| format!("${usd:.4}"))
}

/// Milliseconds as seconds with one decimal, or `-`.
pub fn seconds(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".to_owned(), |ms| format!("{:.1} s", ms / 1000.0))
}

/// A number as JavaScript's `String(n)` prints it (harness-behaviour.md#json-numbers): `0.8`, `1`.
pub(crate) fn js_number(value: f64) -> String {
    json_number::stringify(value)
}

/// A difference in signed whole points (`-55`, `+2`).
pub(crate) fn signed_points(value: f64) -> String {
    format!("{:+.0}", (value * 100.0).round())
}

/// An eval row's B − A and its interval in signed whole points (`-55`, `[-76, -23]`); `None`
/// when the row has no complete pair, so there is nothing to show.
pub(crate) fn diff_and_interval(row: &crate::report::input::EvalRow) -> Option<(String, String)> {
    (row.pairs > 0 && row.diff.is_finite()).then(|| {
        (
            signed_points(row.diff),
            format!(
                "[{}, {}]",
                signed_points(row.ci_low),
                signed_points(row.ci_high)
            ),
        )
    })
}

/// A share of an eval's overall difference in signed points with one decimal (`-28.6`, `+0.0`).
pub(crate) fn share_points(value: f64) -> String {
    format!("{:+.1}", value * 100.0)
}
