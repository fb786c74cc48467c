//! JavaScript-compatible number output (harness-behaviour.md#json-numbers).
//!
//! The CLI is JavaScript: an integral double prints as `1`, not `1.0`. Fields that hold computed
//! doubles (`passRate`, `totalCostUsd`, …) use [`serialize`] so that our JSON is byte-compatible
//! with the CLI's. Non-integral values print with Rust's shortest round-trip formatting, which
//! agrees with JavaScript's `Number.prototype.toString` for every value between 1e-7 and 1e21.

use serde::Serializer;

/// Largest integer a double represents exactly (2^53).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_992.0;

/// Serializes an `f64` as an integer when it is integral and exactly representable.
pub fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    let value = *value;
    if value.fract() == 0.0 && value.abs() <= MAX_SAFE_INTEGER {
        // `-0.0` prints as `0` in JavaScript too.
        serializer.serialize_i64(value as i64)
    } else {
        serializer.serialize_f64(value)
    }
}

/// [`serialize`] for an optional field (used with `skip_serializing_if = "Option::is_none"`).
pub fn serialize_opt<S: Serializer>(value: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => serialize(v, serializer),
        None => serializer.serialize_none(),
    }
}

/// Converts an `f64` to a `serde_json::Value` with the same rule.
pub fn to_value(value: f64) -> serde_json::Value {
    if value.fract() == 0.0 && value.abs() <= MAX_SAFE_INTEGER {
        serde_json::Value::from(value as i64)
    } else {
        serde_json::Number::from_f64(value)
            .map_or(serde_json::Value::Null, serde_json::Value::Number)
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize)]
    struct Probe {
        #[serde(serialize_with = "super::serialize")]
        value: f64,
    }

    fn check(value: f64, expect: &str) {
        let text = serde_json::to_string(&Probe { value }).expect("serializing an f64 cannot fail");
        assert_eq!(text, format!("{{\"value\":{expect}}}"));
    }

    #[test]
    fn integral_doubles_print_like_javascript() {
        check(1.0, "1");
        check(0.0, "0");
        check(-0.0, "0");
        check(0.9, "0.9");
        check(2.0 / 3.0, "0.6666666666666666");
        check(0.01 + 0.02, "0.03");
        check(0.1 + 0.2, "0.30000000000000004");
    }
}
