//! The quarantine file (`quarantine.yaml` at the bundle root): units that still run and are
//! reported but do not gate the batch's verdict until their entry expires.
//!
//! ```yaml
//! quarantine:
//!   - scenario: csv-report            # the scenario's effective name
//!     cell: {model: claude-opus-4-8}  # optional: matrix axes; absent axes match any value
//!     owner: alice@example.com
//!     reason: upload step times out
//!     expires: 2027-01-15             # at most 90 days after today
//!     link: https://example.com/12    # optional
//! ```
//!
//! Reading is pure: "today" is a [`Date`] the caller took from its clock. The types here travel
//! in the batch flags ([`QuarantineSpec`]) and come back in the envelope ([`QuarantineRecord`]).

use std::fmt;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::load::{self, LoadError, NodeValue, Reader, UnknownKeys};
use crate::unit::CellAxes;

/// The default file name, at the bundle root.
pub const QUARANTINE_FILE: &str = "quarantine.yaml";
/// The furthest an entry may expire, in days after today.
pub const MAX_EXPIRY_DAYS: i64 = 90;

const ENTRY_KEYS: &[&str] = &["scenario", "cell", "owner", "reason", "expires", "link"];
const CELL_KEYS: &[&str] = &["baseline", "model", "skill_dir"];

/// A calendar date (UTC), as days since 1970-01-01.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date(pub i64);

impl Date {
    /// Parses `YYYY-MM-DD` (a real calendar date); `None` otherwise.
    pub fn parse(text: &str) -> Option<Date> {
        let bytes = text.as_bytes();
        if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
            return None;
        }
        let digits = |range: std::ops::Range<usize>| -> Option<i64> {
            let part = &text[range];
            part.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| part.parse().ok())
                .flatten()
        };
        let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
        if !(1..=12).contains(&month) || day < 1 {
            return None;
        }
        let days = days_from_civil(year, month, day);
        // Round-tripping rejects 2027-02-30 and the like.
        let (y, m, d) = crate::ids::civil_from_days(days);
        (y == year && i64::from(m) == month && i64::from(d) == day).then_some(Date(days))
    }

    /// The date of a Unix time in seconds.
    pub fn from_unix_seconds(seconds: i64) -> Date {
        Date(seconds.div_euclid(86_400))
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (year, month, day) = crate::ids::civil_from_days(self.0);
        write!(f, "{year:04}-{month:02}-{day:02}")
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// One entry of the quarantine file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuarantineEntry {
    /// The scenario's effective name.
    pub scenario: String,
    /// Matrix axes the entry is limited to; an absent axis matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<CellAxes>,
    pub owner: String,
    pub reason: String,
    /// `YYYY-MM-DD`: the last day the entry holds.
    pub expires: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// The line of the file the entry starts on (for messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

impl QuarantineEntry {
    /// `true` when the entry names this unit: same scenario, and every axis it gives equal.
    pub fn matches(&self, scenario: &str, axes: Option<&CellAxes>) -> bool {
        if self.scenario != scenario {
            return false;
        }
        let Some(cell) = &self.cell else {
            return true;
        };
        let empty = CellAxes::default();
        let axes = axes.unwrap_or(&empty);
        let axis_ok = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|want| have.as_ref() == Some(want))
        };
        axis_ok(&cell.baseline, &axes.baseline)
            && axis_ok(&cell.model, &axes.model)
            && axis_ok(&cell.skill_dir, &axes.skill_dir)
    }

    /// `true` once `today` is after the entry's last day (an unreadable date counts as
    /// expired: it cannot hold).
    pub fn is_expired(&self, today: Date) -> bool {
        Date::parse(&self.expires).is_none_or(|expires| today > expires)
    }

    /// How the entry is named in messages: `scenario` or `scenario [axes]`.
    pub fn label(&self) -> String {
        match &self.cell {
            Some(cell) => format!("{} [{}]", self.scenario, cell.label()),
            None => self.scenario.clone(),
        }
    }
}

/// The quarantine a batch applies: carried in its flags to whoever judges it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuarantineSpec {
    /// Where the entries were read (`quarantine.yaml`, a path, or `REF:path`).
    pub source: String,
    /// The day expiry is judged on (`YYYY-MM-DD`), taken from the submitting machine's clock.
    pub today: String,
    /// sha256 (hex) of the canonical entries (their JSON, lines left out).
    pub sha256: String,
    pub entries: Vec<QuarantineEntry>,
}

/// The envelope's `quarantine` key: what was applied and what it did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuarantineRecord {
    pub source: String,
    pub today: String,
    pub sha256: String,
    pub entries: Vec<QuarantineEntry>,
    /// Labels of the units an entry in force covers (they do not gate).
    pub quarantined: Vec<String>,
    /// Labels of quarantined units that failed: failures the verdict set aside.
    pub applied: Vec<String>,
    /// Labels of units covered only by expired entries: they gate again.
    pub expired: Vec<String>,
    /// Labels of entries that match no unit of the batch.
    pub unmatched: Vec<String>,
}

/// Reads and validates a quarantine file. `file` names it in errors; `today` bounds `expires`
/// (at most [`MAX_EXPIRY_DAYS`] ahead; a past date is valid, the entry then gates again).
/// Every problem is returned at once, each with its line and what to write instead.
pub fn parse_quarantine(
    text: &str,
    file: &Path,
    today: Date,
) -> Result<Vec<QuarantineEntry>, Vec<LoadError>> {
    let root = load::parse_yaml(text, file).map_err(|e| vec![e])?;
    let mut reader = Reader::new(file);
    if root.value == NodeValue::Null {
        return Ok(Vec::new());
    }
    let Some(map) = reader.mapping(&root, "") else {
        return Err(reader.errors);
    };
    reader.check_keys(map, &["quarantine"], UnknownKeys::Reject);
    let mut entries = Vec::new();
    match map.get("quarantine").map(|node| (node, &node.value)) {
        None | Some((_, NodeValue::Null)) => {}
        Some((_, NodeValue::Sequence(items))) => {
            for (index, item) in items.iter().enumerate() {
                let path = load::index_path("quarantine", index);
                if let Some(entry) = read_entry(&mut reader, item, &path, today) {
                    entries.push(entry);
                }
            }
        }
        Some((node, _)) => reader.error(
            node.position,
            "quarantine",
            format!(
                "expected a list of entries, got {}; write `quarantine:` then one `- scenario: …` \
                 item per unit",
                node.kind_name()
            ),
        ),
    }
    if reader.errors.is_empty() {
        Ok(entries)
    } else {
        Err(reader.errors)
    }
}

fn read_entry(
    reader: &mut Reader<'_>,
    node: &load::Node,
    path: &str,
    today: Date,
) -> Option<QuarantineEntry> {
    let map = reader.mapping(node, path)?;
    reader.check_keys(map, ENTRY_KEYS, UnknownKeys::Reject);
    let before = reader.errors.len();
    let non_empty = |reader: &mut Reader<'_>, name: &str, fix: &str| {
        let key = map.child_path(name);
        let Some(node) = map.get(name) else {
            reader.error(
                map.node.position,
                &key,
                format!("missing required field; add `{name}:` and {fix}"),
            );
            return None;
        };
        let value = reader.string(node, &key)?;
        if value.trim().is_empty() {
            reader.error(node.position, &key, format!("must not be empty; {fix}"));
        }
        Some(value)
    };
    let scenario = non_empty(reader, "scenario", "give the scenario's name");
    let owner = non_empty(reader, "owner", "name who answers for the entry (an email)");
    let reason = non_empty(reader, "reason", "say why the unit is quarantined");
    let expires = non_empty(
        reader,
        "expires",
        "give the last day the entry holds as YYYY-MM-DD",
    );
    if let Some(text) = &expires {
        let position = map.get("expires").and_then(|node| node.position);
        let key = map.child_path("expires");
        let latest = Date(today.0 + MAX_EXPIRY_DAYS);
        match Date::parse(text) {
            None => reader.error(
                position,
                &key,
                format!("{text:?} is not a date; write it as YYYY-MM-DD, e.g. {latest}"),
            ),
            Some(date) if date > latest => reader.error(
                position,
                &key,
                format!(
                    "{text} is more than {MAX_EXPIRY_DAYS} days after today ({today}); \
                     write {latest} or earlier and renew the entry when it expires"
                ),
            ),
            Some(_) => {}
        }
    }
    let link = reader.nullable_string(map, "link", true);
    let cell = map
        .get("cell")
        .and_then(|cell| read_cell(reader, cell, &map.child_path("cell")));
    if reader.errors.len() != before {
        return None;
    }
    Some(QuarantineEntry {
        scenario: scenario?,
        cell,
        owner: owner?,
        reason: reason?,
        expires: expires?,
        link,
        line: node.position.map(|position| position.line),
    })
}

fn read_cell(reader: &mut Reader<'_>, node: &load::Node, path: &str) -> Option<CellAxes> {
    if node.value == NodeValue::Null {
        return None;
    }
    let map = reader.mapping(node, path)?;
    reader.check_keys(map, CELL_KEYS, UnknownKeys::Reject);
    Some(CellAxes {
        baseline: reader.nullable_string(map, "baseline", true),
        model: reader.nullable_string(map, "model", true),
        skill_dir: reader.nullable_string(map, "skill_dir", true),
    })
}

/// The canonical text the quarantine's hash is taken over: the entries as compact JSON, in
/// file order, without their line numbers.
pub fn canonical_entries(entries: &[QuarantineEntry]) -> String {
    let stripped: Vec<QuarantineEntry> = entries
        .iter()
        .map(|entry| QuarantineEntry {
            line: None,
            ..entry.clone()
        })
        .collect();
    serde_json::to_string(&stripped).expect("quarantine entries always serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn today() -> Date {
        Date::parse("2026-12-06").expect("a date")
    }

    fn errors(text: &str) -> String {
        match parse_quarantine(text, Path::new("q.yaml"), today()) {
            Ok(entries) => format!("ok {}", entries.len()),
            Err(errors) => errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    #[test]
    fn dates_round_trip_and_refuse_impossible_days() {
        assert_eq!(today().to_string(), "2026-12-06");
        assert_eq!(Date::parse("1970-01-01"), Some(Date(0)));
        assert_eq!(
            Date::parse("2024-02-29").map(|d| d.to_string()).as_deref(),
            Some("2024-02-29")
        );
        assert_eq!(Date::parse("2027-02-29"), None);
        assert_eq!(Date::parse("2027-1-15"), None);
        assert_eq!(Date::parse("2027-13-01"), None);
        assert_eq!(Date::from_unix_seconds(86_400 * 3 + 5), Date(3));
    }

    #[test]
    fn a_valid_file_reads_with_lines() {
        let text = "quarantine:\n  - scenario: csv\n    cell:\n      model: m1\n    owner: a@b\n    reason: flaky upload\n    expires: 2027-01-15\n    link: https://x/1\n";
        let entries = parse_quarantine(text, Path::new("q.yaml"), today()).expect("valid");
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].line, Some(2));
        assert_eq!(entries[0].label(), "csv [model=m1]");
        assert!(!entries[0].is_expired(today()));
        assert!(entries[0].is_expired(Date::parse("2027-01-16").expect("a date")));
        assert!(entries[0].matches(
            "csv",
            Some(&CellAxes {
                model: Some("m1".into()),
                baseline: Some("b".into()),
                skill_dir: None
            })
        ));
        assert!(!entries[0].matches("csv", None));
        assert!(!entries[0].matches("other", None));
        assert_eq!(errors(""), "ok 0");
        assert_eq!(errors("quarantine: []\n"), "ok 0");
    }

    #[test]
    fn every_problem_names_line_and_fix() {
        let text = "quarantine:\n  - scenario: csv\n    owner: ''\n    reason: r\n    expires: 2027-06-01\n  - scenario: x\n    owner: o\n    reason: r\n    expires: 15/01/2027\n    colour: red\n";
        let got = errors(text);
        assert!(
            got.contains("q.yaml:3:12: quarantine[0].owner: must not be empty; name who answers"),
            "{got}"
        );
        assert!(
            got.contains("q.yaml:5:14: quarantine[0].expires: 2027-06-01 is more than 90 days after today (2026-12-06); write 2027-03-06 or earlier"),
            "{got}"
        );
        assert!(
            got.contains("q.yaml:9:14: quarantine[1].expires: \"15/01/2027\" is not a date; write it as YYYY-MM-DD"),
            "{got}"
        );
        assert!(
            got.contains("q.yaml:10:5: quarantine[1].colour: unknown key"),
            "{got}"
        );
        let missing = errors("quarantine:\n  - scenario: csv\n    owner: o\n    reason: r\n");
        assert!(
            missing.contains(
                "q.yaml:2:5: quarantine[0].expires: missing required field; add `expires:`"
            ),
            "{missing}"
        );
        assert!(errors("quarantine: csv\n").contains("expected a list of entries"));
    }
}
