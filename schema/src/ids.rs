//! Identifiers: batch ids and job ids.
//!
//! Ids are newtypes so a job id can never be passed where a batch id is expected. Both are
//! restricted to characters that are safe in a NATS subject token, an S3 key and a file name,
//! because the design uses the same id in all three places (decisions.md#job-identity).

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The id of one batch (one `cowork run` or one `submit`).
///
/// Characters: ASCII lowercase letters, digits and `-`, 1..=64 of them. No `.` (it would split a
/// NATS subject token) and no `/` (it separates the parts of a job id).
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct BatchId(String);

/// An id that failed validation.
#[derive(Debug, thiserror::Error)]
#[error("invalid {what} {value:?}: {reason}")]
pub struct InvalidId {
    pub what: &'static str,
    pub value: String,
    pub reason: &'static str,
}

impl BatchId {
    /// Validates and wraps a batch id.
    pub fn new(value: &str) -> Result<BatchId, InvalidId> {
        let bad = |reason| InvalidId {
            what: "batch id",
            value: value.to_owned(),
            reason,
        };
        if value.is_empty() || value.len() > 64 {
            return Err(bad("must be 1 to 64 characters"));
        }
        if !value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(bad("may hold only a-z, 0-9 and '-'"));
        }
        Ok(BatchId(value.to_owned()))
    }

    /// Builds the id `<yyyymmdd>-<hhmmss>-<suffix>` from a unix time in seconds and a random
    /// suffix. The caller supplies both so that this stays a pure function.
    pub fn from_time(unix_seconds: u64, random_suffix: u32) -> BatchId {
        let days = (unix_seconds / 86_400) as i64;
        let secs_of_day = unix_seconds % 86_400;
        let (year, month, day) = civil_from_days(days);
        BatchId(format!(
            "{year:04}{month:02}{day:02}-{:02}{:02}{:02}-{:06x}",
            secs_of_day / 3600,
            (secs_of_day / 60) % 60,
            secs_of_day % 60,
            random_suffix & 0x00ff_ffff
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `YYYY-MM-DD HH:MM:SS` of a time in milliseconds since the Unix epoch (UTC).
pub fn date_time_of_ms(ms: u64) -> String {
    let seconds = ms / 1000;
    let (hh, mm, ss) = ((seconds / 3600) % 24, (seconds / 60) % 60, seconds % 60);
    let (year, month, day) = civil_from_days((seconds / 86_400) as i64);
    format!("{year:04}-{month:02}-{day:02} {hh:02}:{mm:02}:{ss:02}")
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day); Howard Hinnant's algorithm.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl TryFrom<String> for BatchId {
    type Error = InvalidId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        BatchId::new(&value)
    }
}

impl From<BatchId> for String {
    fn from(value: BatchId) -> String {
        value.0
    }
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which unit of a batch a job belongs to: a scenario file (non-matrix batches) or a matrix cell.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(tag = "kind", content = "index", rename_all = "camelCase")]
pub enum UnitRef {
    /// The k-th scenario file of the sorted target listing (harness-behaviour.md#job-expansion).
    File(u32),
    /// The cell with this index in the kept cell list (harness-behaviour.md#matrix-expansion).
    Cell(u32),
}

impl UnitRef {
    pub fn index(self) -> u32 {
        match self {
            UnitRef::File(index) | UnitRef::Cell(index) => index,
        }
    }
}

/// The id of one job: `<batch>/f<k>[/r<r>]` or `<batch>/c<cell>[/r<r>]`
/// (harness-behaviour.md#job-expansion).
///
/// Used as the JetStream `Nats-Msg-Id`, the S3 key prefix and the reducer's dedupe key.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(transparent)]
pub struct JobId(String);

impl JobId {
    /// Builds the deterministic id of the job at `unit` and `repeat_index` of `batch`.
    pub fn new(batch: &BatchId, unit: UnitRef, repeat_index: Option<u32>) -> JobId {
        let unit_part = match unit {
            UnitRef::File(k) => format!("f{k}"),
            UnitRef::Cell(c) => format!("c{c}"),
        };
        match repeat_index {
            Some(r) => JobId(format!("{batch}/{unit_part}/r{r}")),
            None => JobId(format!("{batch}/{unit_part}")),
        }
    }

    /// Parses an id back into its parts; `None` if it is not of the documented shape.
    pub fn parse(value: &str) -> Option<(BatchId, UnitRef, Option<u32>)> {
        let mut parts = value.split('/');
        let batch = BatchId::new(parts.next()?).ok()?;
        let unit_part = parts.next()?;
        let unit = if let Some(k) = unit_part.strip_prefix('f') {
            UnitRef::File(k.parse().ok()?)
        } else if let Some(c) = unit_part.strip_prefix('c') {
            UnitRef::Cell(c.parse().ok()?)
        } else {
            return None;
        };
        let repeat_index = match parts.next() {
            Some(r) => Some(r.strip_prefix('r')?.parse().ok()?),
            None => None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some((batch, unit, repeat_index))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id without its batch prefix (`c3/r7`), used under `batches/<batch>/jobs/` in the
    /// storage layout of decisions.md#storage.
    pub fn local_part(&self) -> &str {
        match self.0.split_once('/') {
            Some((_, rest)) => rest,
            None => &self.0,
        }
    }

    /// The batch id part (`<batch>` of `<batch>/c3/r7`).
    pub fn batch_part(&self) -> &str {
        match self.0.split_once('/') {
            Some((batch, _)) => batch,
            None => "",
        }
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_id_from_time_is_valid_and_readable() {
        // 2026-11-30T04:36:24Z
        let id = BatchId::from_time(1_796_013_384, 0xabcdef);
        assert_eq!(id.as_str(), "20261130-043624-abcdef");
        assert!(BatchId::new(id.as_str()).is_ok());
    }

    #[test]
    fn batch_id_rejects_subject_and_path_separators() {
        assert!(BatchId::new("a.b").is_err());
        assert!(BatchId::new("a/b").is_err());
        assert!(BatchId::new("").is_err());
        assert!(BatchId::new("UPPER").is_err());
    }

    #[test]
    fn job_id_round_trips() {
        let batch = BatchId::new("b1").expect("valid literal");
        let id = JobId::new(&batch, UnitRef::Cell(3), Some(7));
        assert_eq!(id.as_str(), "b1/c3/r7");
        assert_eq!(
            JobId::parse(id.as_str()),
            Some((batch.clone(), UnitRef::Cell(3), Some(7)))
        );
        let id = JobId::new(&batch, UnitRef::File(0), None);
        assert_eq!(id.as_str(), "b1/f0");
        assert_eq!(JobId::parse("b1/f0"), Some((batch, UnitRef::File(0), None)));
        assert_eq!(JobId::parse("b1/x0"), None);
        assert_eq!(JobId::parse("b1/f0/r1/extra"), None);
    }
}
