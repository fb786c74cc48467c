//! Durations as people write them in flags, environment variables and configuration: a number
//! and a unit, `500ms`, `90s`, `1.5m`, `2h`. This is the one parser of the workspace, so every
//! duration flag accepts the same text and refuses it with the same words.
//!
//! A unit is required: a bare `5` has meant seconds to one tool and milliseconds to another,
//! and a job timeout of 5 ms is never what anyone wanted.

use std::time::Duration;

/// Why a duration text was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{text:?} needs a unit: write it like 500ms, 90s, 45m or 2h")]
    MissingUnit { text: String },
    #[error("{text:?} is not a duration: write it like 500ms, 90s, 45m or 2h")]
    Malformed { text: String },
    #[error("{text:?} has an unknown unit {unit:?}: use ms, s, m or h")]
    UnknownUnit { text: String, unit: String },
    #[error("{text:?} is too large")]
    TooLarge { text: String },
}

/// The largest duration accepted: about 285,000 years in milliseconds (2^53 ms), so that any
/// larger text is a typo rather than an intent.
const MAX_MILLIS: f64 = 9_007_199_254_740_991.0;

/// Parses `<number><unit>` with unit `ms`, `s`, `m` or `h`; the number may have a fraction
/// (`1.5m`). Spaces around the text are ignored. Zero is allowed; callers that need a positive
/// duration check it.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let malformed = || DurationError::Malformed {
        text: trimmed.to_owned(),
    };
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(malformed());
    }
    let value: f64 = number.parse().map_err(|_| malformed())?;
    let millis_per_unit = match unit.trim() {
        "" => {
            return Err(DurationError::MissingUnit {
                text: trimmed.to_owned(),
            });
        }
        "ms" => 1.0,
        "s" => 1_000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        other => {
            return Err(DurationError::UnknownUnit {
                text: trimmed.to_owned(),
                unit: other.to_owned(),
            });
        }
    };
    let millis = value * millis_per_unit;
    if !millis.is_finite() || millis > MAX_MILLIS {
        return Err(DurationError::TooLarge {
            text: trimmed.to_owned(),
        });
    }
    Ok(Duration::from_millis(millis.round() as u64))
}

/// Writes a duration in the largest unit that represents it exactly (`1h`, `90s`, `250ms`), so
/// that [`parse_duration`] reads back the same value.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis == 0 {
        return "0s".to_owned();
    }
    for (unit, size) in [("h", 3_600_000u128), ("m", 60_000), ("s", 1000)] {
        if millis.is_multiple_of(size) {
            return format!("{}{unit}", millis / size);
        }
    }
    format!("{millis}ms")
}

/// serde `with` module for durations written as text (see [`parse_duration`]).
pub mod text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse_duration(&text).map_err(serde::de::Error::custom)
    }

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_duration(*duration))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expect: Result<u64, &str>) {
        let got = parse_duration(text).map(|d| d.as_millis() as u64);
        match expect {
            Ok(ms) => assert_eq!(got, Ok(ms), "{text:?}"),
            Err(words) => {
                let error = got.expect_err(text).to_string();
                assert!(error.contains(words), "{text:?}: {error}");
            }
        }
    }

    #[test]
    fn durations_need_a_unit_and_say_so() {
        check("500ms", Ok(500));
        check("90s", Ok(90_000));
        check(" 1.5m ", Ok(90_000));
        check("2h", Ok(7_200_000));
        check("0s", Ok(0));
        check("5", Err("needs a unit"));
        check("600000", Err("needs a unit"));
        check("-5s", Err("not a duration"));
        check("", Err("not a duration"));
        check("s", Err("not a duration"));
        check("1.s", Err("not a duration"));
        check("10 minutes", Err("unknown unit \"minutes\""));
        check("5d", Err("unknown unit \"d\""));
        check("99999999999999999999h", Err("too large"));
    }

    #[test]
    fn formatting_reads_back() {
        for ms in [0u64, 1, 250, 1000, 90_000, 3_600_000, 5_400_000] {
            let duration = Duration::from_millis(ms);
            assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
        }
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }
}
