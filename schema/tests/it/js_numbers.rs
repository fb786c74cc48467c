//! Doubles written byte for byte as the harness CLI writes them. The vectors
//! (`fixtures/js-numbers/vectors.tsv`) were produced by Node's `JSON.stringify`, the function the
//! CLI writes `result.json` with (`fixtures/js-numbers/generate.mjs` regenerates them); they sit
//! around the notation edges 1e-7, 1e-6, 1e-5 and 1e21 and spread over costs and rates.

use cowork_schema::json_number;

use crate::support::{fixture, read};

#[derive(serde::Serialize)]
struct Field {
    #[serde(serialize_with = "json_number::serialize")]
    value: f64,
}

/// (line number, the double, the text JavaScript writes) for every vector.
fn vectors() -> Vec<(usize, f64, String)> {
    let path = fixture("js-numbers/vectors.tsv");
    let text = read(&path);
    let mut vectors = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (bits, javascript) = line.split_once('\t').unwrap_or_else(|| {
            panic!("{}:{}: expected <bits>\\t<text>", path.display(), index + 1)
        });
        let bits = u64::from_str_radix(bits, 16)
            .unwrap_or_else(|e| panic!("{}:{}: bits {bits:?}: {e}", path.display(), index + 1));
        vectors.push((index + 1, f64::from_bits(bits), javascript.to_owned()));
    }
    vectors
}

#[test]
fn the_vectors_cover_every_notation_edge() {
    let vectors = vectors();
    assert!(vectors.len() > 400, "{} vectors", vectors.len());
    for edge in [1e-7, 1e-6, 1e-5, 1e21] {
        let below = vectors
            .iter()
            .any(|(_, x, _)| *x < edge && *x > edge * 0.999_999);
        let above = vectors
            .iter()
            .any(|(_, x, _)| *x > edge && *x < edge * 1.000_001);
        assert!(below && above, "no vector just below and above {edge:e}");
    }
}

#[test]
fn typed_fields_write_the_bytes_the_cli_writes() {
    for (line, value, javascript) in vectors() {
        let written = serde_json::to_string(&Field { value }).expect("a double serializes");
        assert_eq!(
            written,
            format!("{{\"value\":{javascript}}}"),
            "vectors.tsv:{line}"
        );
        assert_eq!(
            json_number::stringify(value),
            javascript,
            "vectors.tsv:{line}"
        );
    }
}

#[test]
fn value_trees_write_the_bytes_the_cli_writes() {
    for (line, value, javascript) in vectors() {
        let tree = serde_json::json!({ "value": json_number::to_value(value) });
        let written = json_number::to_string(&tree).expect("a Value serializes");
        assert_eq!(
            written,
            format!("{{\"value\":{javascript}}}"),
            "vectors.tsv:{line}"
        );
    }
}

#[test]
fn written_text_reads_back_as_the_same_double() {
    for (line, value, _) in vectors() {
        let written = serde_json::to_string(&Field { value }).expect("a double serializes");
        let read: serde_json::Value = serde_json::from_str(&written).expect("valid JSON");
        assert_eq!(read["value"].as_f64(), Some(value), "vectors.tsv:{line}");
    }
}
