//! `cowork trend --suggest-quarantine`: the flaky units of a trend as entries of a
//! `quarantine.yaml`, ready to paste (the format of docs/operations/unattended.md). The owner is
//! left blank for a person to fill in; the entry expires 14 days after today. Pure: today comes
//! from the caller.

use std::fmt::Write as _;

use cowork_schema::quarantine::Date;

use super::{FlakyReason, TrendRow};

/// Days a suggested entry stays in force.
pub const SUGGESTED_DAYS: i64 = 14;

/// A YAML scalar for `text`: as is when it cannot be read as anything but that string,
/// else double-quoted (a JSON string is a valid YAML double-quoted scalar).
fn scalar(text: &str) -> String {
    let plain = !text.is_empty()
        && text.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '@' | '+' | ' ')
        })
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && !text.ends_with(' ')
        && !matches!(
            text.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "~"
        )
        && text.parse::<f64>().is_err();
    if plain {
        text.to_owned()
    } else {
        serde_json::Value::from(text).to_string()
    }
}

/// Why `row` is suggested, in words, over `batches` batches.
fn reason(row: &TrendRow, batches: usize) -> String {
    let flakiness = &row.flakiness;
    match flakiness.reason {
        Some(FlakyReason::Flipped) => format!(
            "flaky: verdict flipped {} over the last {batches} batches",
            flakiness.path()
        ),
        _ => {
            let (low, high) = flakiness.interval.unwrap_or((0.0, 1.0));
            format!(
                "flaky: {} of {} runs passed over the last {batches} batches, {:.0}-{:.0}% \
                 at 95% confidence, straddling the {:.0}% bar",
                row.passes,
                row.runs,
                low * 100.0,
                high * 100.0,
                flakiness.bar.unwrap_or(1.0) * 100.0
            )
        }
    }
}

/// Entries for the flaky rows of a trend over `batches` batches, as a `quarantine.yaml`
/// document, written `today`. Empty when no row is flaky.
pub fn quarantine_suggestions(rows: &[TrendRow], batches: usize, today: Date) -> String {
    let flaky: Vec<&TrendRow> = rows.iter().filter(|row| row.flaky()).collect();
    if flaky.is_empty() {
        return String::new();
    }
    let expires = Date(today.0 + SUGGESTED_DAYS);
    let mut out = format!(
        "# Suggested by `cowork trend --suggest-quarantine` on {}: the {} flaky unit(s) of the \
         last {batches} batches.\n# Review each entry and fill in its owner before committing \
         it.\nquarantine:\n",
        today,
        flaky.len()
    );
    for row in flaky {
        let unit = row.cells.iter().rev().flatten().next();
        let scenario = unit.map_or(row.label.as_str(), |unit| unit.scenario.as_str());
        let _ = writeln!(out, "  - scenario: {}", scalar(scenario));
        if let Some(axes) = unit.and_then(|unit| unit.axes.as_ref()) {
            let present = [
                ("baseline", &axes.baseline),
                ("model", &axes.model),
                ("skill_dir", &axes.skill_dir),
            ];
            if present.iter().any(|(_, value)| value.is_some()) {
                out.push_str("    cell:\n");
            }
            for (key, value) in present {
                if let Some(value) = value {
                    let _ = writeln!(out, "      {key}: {}", scalar(value));
                }
            }
        }
        out.push_str("    owner: \"\"                       # fill in: who fixes it (required)\n");
        let _ = writeln!(out, "    reason: {}", scalar(&reason(row, batches)));
        let _ = writeln!(out, "    expires: {expires}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trend::{BatchCounts, UnitCounts, trend};
    use cowork_schema::BatchId;
    use cowork_schema::unit::CellAxes;

    fn unit(label: &str, model: Option<&str>, runs: u32, passes: u32) -> UnitCounts {
        UnitCounts {
            label: label.to_owned(),
            scenario: "csv-report".to_owned(),
            axes: model.map(|model| CellAxes {
                baseline: None,
                model: Some(model.to_owned()),
                skill_dir: Some("skills/v2/csv-report".to_owned()),
            }),
            runs,
            passes,
            cost_usd: 0.0,
            priced_runs: 0,
        }
    }

    fn batch(id: &str, units: Vec<UnitCounts>) -> BatchCounts {
        BatchCounts {
            batch_id: BatchId::new(id).expect("valid id"),
            min_pass_rate: 0.8,
            units,
        }
    }

    #[test]
    fn suggestions_list_only_flaky_units_in_the_quarantine_format() {
        let batches = [
            batch(
                "b1",
                vec![
                    unit("csv-report [m=a]", Some("a"), 5, 5),
                    unit("csv-report [m=b]", Some("b"), 5, 0),
                    unit("csv-report", None, 5, 4),
                ],
            ),
            batch(
                "b2",
                vec![
                    unit("csv-report [m=a]", Some("a"), 5, 1),
                    unit("csv-report [m=b]", Some("b"), 5, 0),
                    unit("csv-report", None, 5, 4),
                ],
            ),
        ];
        let rows = trend(&batches, &|_| true);
        // 2026-12-06 is day 20,793.
        let text = quarantine_suggestions(&rows, 2, Date(20_793));
        assert_eq!(
            text,
            "# Suggested by `cowork trend --suggest-quarantine` on 2026-12-06: the 2 flaky \
             unit(s) of the last 2 batches.\n# Review each entry and fill in its owner before \
             committing it.\nquarantine:\n  - scenario: csv-report\n    cell:\n      model: a\n      \
             skill_dir: skills/v2/csv-report\n    owner: \"\"                       # fill in: \
             who fixes it (required)\n    reason: \"flaky: verdict flipped PASS→FAIL over the \
             last 2 batches\"\n    expires: 2026-12-20\n  - scenario: csv-report\n    owner: \
             \"\"                       # fill in: who fixes it (required)\n    reason: \
             \"flaky: 8 of 10 runs passed over the last 2 batches, 49-94% at 95% confidence, \
             straddling the 80% bar\"\n    expires: 2026-12-20\n"
        );
        cowork_schema::load::parse_yaml(&text, std::path::Path::new("quarantine.yaml"))
            .expect("the suggestions are YAML");
        assert_eq!(quarantine_suggestions(&rows[1..2], 2, Date(20_793)), "");
    }

    #[test]
    fn scalars_are_quoted_when_yaml_would_read_them_otherwise() {
        assert_eq!(scalar("claude-opus-4-8"), "claude-opus-4-8");
        assert_eq!(scalar("yes"), "\"yes\"");
        assert_eq!(scalar("1.5"), "\"1.5\"");
        assert_eq!(scalar("a: b"), "\"a: b\"");
        assert_eq!(Date(0).to_string(), "1970-01-01");
    }
}
