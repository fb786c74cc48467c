//! JavaScript-compatible number output (harness-behaviour.md#json-numbers).
//!
//! The harness CLI is a Node program: it writes every double with `JSON.stringify`, that is with
//! `Number.prototype.toString`. That differs from Rust's shortest round-trip text in two ways that
//! matter to byte-compatible files: an integral double prints as `1`, not `1.0`, and plain decimal
//! notation holds from 1e-7 up to 1e21 (`0.000003`, where Rust's `ryu` writes `3e-6`). The
//! `ryu-js` crate implements JavaScript's algorithm; this module is the one place that uses it.
//!
//! Two ways in, because serde_json prints a `Value`'s float with its own formatter:
//! - typed fields use [`serialize`] / [`serialize_opt`], which hand serde_json the JavaScript text
//!   itself (a raw value), so any serde_json writer prints the CLI's bytes;
//! - a `serde_json::Value` tree that holds floats (built with [`to_value`], or a CLI document read
//!   as a `Value`, such as a `result.json`) is written with this module's `to_string`, `to_vec`,
//!   `to_writer` and their `_pretty` forms, whose formatter prints floats the JavaScript way.
//!   Every document the fleet writes goes through them, so a cost read from the CLI as
//!   `0.000003` is written back as `0.000003`.

use std::io;

use serde::{Serialize, Serializer};
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};

/// Largest integer a double represents exactly (2^53).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_992.0;

/// The text `JSON.stringify` writes for `value`: `Number.prototype.toString`, and `null` for NaN
/// and the infinities (which JSON cannot hold).
pub fn stringify(value: f64) -> String {
    if value.is_finite() {
        let mut buffer = ryu_js::Buffer::new();
        buffer.format_finite(value).to_owned()
    } else {
        "null".to_owned()
    }
}

/// Serializes an `f64` as JavaScript writes it: an integer when integral and exactly
/// representable, otherwise `Number.prototype.toString`'s text.
pub fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    let value = *value;
    if let Some(integer) = safe_integer(value) {
        serializer.serialize_i64(integer)
    } else if value.is_finite() {
        let raw = serde_json::value::RawValue::from_string(stringify(value))
            .map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    } else {
        serializer.serialize_none()
    }
}

/// [`serialize`] for an optional field (used with `skip_serializing_if = "Option::is_none"`).
pub fn serialize_opt<S: Serializer>(value: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => serialize(v, serializer),
        None => serializer.serialize_none(),
    }
}

/// Converts an `f64` to a `serde_json::Value` with the integral rule of [`serialize`]. A
/// non-integral value stays a float: write the tree with [`to_string`] or [`to_string_pretty`] to
/// get JavaScript's text for it.
pub fn to_value(value: f64) -> serde_json::Value {
    if let Some(integer) = safe_integer(value) {
        serde_json::Value::from(integer)
    } else {
        serde_json::Number::from_f64(value)
            .map_or(serde_json::Value::Null, serde_json::Value::Number)
    }
}

/// `value` as an integer when it is integral and exactly representable (`-0.0` is `0`, as in
/// JavaScript).
fn safe_integer(value: f64) -> Option<i64> {
    (value.fract() == 0.0 && value.abs() <= MAX_SAFE_INTEGER).then_some(value as i64)
}

/// `serde_json::to_string` with floats written as JavaScript writes them.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    utf8(to_vec(value)?)
}

/// `serde_json::to_vec` with floats written as JavaScript writes them.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    to_vec_with(value, JsFormatter(CompactFormatter))
}

/// `serde_json::to_writer` with floats written as JavaScript writes them.
pub fn to_writer<W: io::Write, T: Serialize + ?Sized>(
    writer: W,
    value: &T,
) -> serde_json::Result<()> {
    write_with(writer, value, JsFormatter(CompactFormatter))
}

/// `serde_json::to_writer_pretty` with floats written as JavaScript writes them.
pub fn to_writer_pretty<W: io::Write, T: Serialize + ?Sized>(
    writer: W,
    value: &T,
) -> serde_json::Result<()> {
    write_with(writer, value, JsFormatter(PrettyFormatter::new()))
}

/// `serde_json::to_string_pretty` with floats written as JavaScript writes them.
pub fn to_string_pretty<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    utf8(to_vec_pretty(value)?)
}

// serde_json writes UTF-8 only; the error arm is unreachable but costs nothing to keep honest.
fn utf8(bytes: Vec<u8>) -> serde_json::Result<String> {
    String::from_utf8(bytes).map_err(serde::ser::Error::custom)
}

/// `serde_json::to_vec_pretty` with floats written as JavaScript writes them.
pub fn to_vec_pretty<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    to_vec_with(value, JsFormatter(PrettyFormatter::new()))
}

fn to_vec_with<T: Serialize + ?Sized, F: Formatter>(
    value: &T,
    formatter: F,
) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    write_with(&mut out, value, formatter)?;
    Ok(out)
}

fn write_with<W: io::Write, T: Serialize + ?Sized, F: Formatter>(
    writer: W,
    value: &T,
    formatter: F,
) -> serde_json::Result<()> {
    value.serialize(&mut serde_json::Serializer::with_formatter(
        writer, formatter,
    ))
}

/// A serde_json formatter that writes floats with `Number.prototype.toString` and leaves the
/// layout (compact or pretty) to the formatter it wraps.
struct JsFormatter<F>(F);

impl<F: Formatter> Formatter for JsFormatter<F> {
    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        // serde_json writes `null` itself for a non-finite float and never calls this with one.
        writer.write_all(ryu_js::Buffer::new().format_finite(value).as_bytes())
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f32) -> io::Result<()> {
        self.write_f64(writer, f64::from(value))
    }

    // The layout methods a pretty formatter overrides; everything else has one default.
    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_array(writer)
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object(writer)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(writer, first)
    }

    fn end_object_key<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_key(writer)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_value(writer)
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

    #[test]
    fn small_and_large_doubles_switch_notation_where_javascript_does() {
        check(3e-6, "0.000003");
        check(1e-6, "0.000001");
        check(1e-7, "1e-7");
        check(1e20, "100000000000000000000");
        check(1e21, "1e+21");
    }

    #[test]
    fn value_trees_print_floats_like_javascript_compact_and_pretty() {
        let tree = serde_json::json!({"usd": super::to_value(3e-6), "n": super::to_value(2.0)});
        assert_eq!(
            super::to_string(&tree).expect("a Value serializes"),
            r#"{"usd":0.000003,"n":2}"#
        );
        assert_eq!(
            super::to_string_pretty(&tree).expect("a Value serializes"),
            serde_json::to_string_pretty(&serde_json::json!({"usd": 1, "n": 2}))
                .expect("a Value serializes")
                .replace("\"usd\": 1", "\"usd\": 0.000003")
        );
    }
}
