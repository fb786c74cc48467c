//! Strict YAML loading with errors that name the file, the line and the key.
//!
//! Every input file of a batch (scenario, session, matrix) goes through [`parse_yaml`]: it parses
//! one YAML document with serde-saphyr under a safety budget (size, depth, node and alias caps, so
//! an alias bomb fails fast), rejects duplicate keys and non-scalar keys, and returns a [`Node`]
//! tree that remembers where each value came from. The typed readers of [`crate::scenario`],
//! [`crate::session`] and [`crate::matrix`] walk that tree with [`Reader`], which collects every
//! problem (unknown key with a "did you mean" hint, wrong type, missing field) as a [`LoadError`]
//! instead of stopping at the first one. Scalars follow the YAML 1.2 core schema: only
//! `true`/`false` (any case) are booleans, `yes`/`on` stay strings, `1_000` stays a string.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_saphyr::{MessageFormatter, Spanned};

mod node;
mod reader;

pub use node::{KeyLocations, Node, NodeValue, Position};
use node::{RawValue, spanned_node};
pub use reader::closest_key;
use reader::unknown_key_message;
pub(crate) use reader::{MapView, Reader, UnknownKeys};

/// Largest YAML document we parse, in bytes. Scenario, session and matrix files are hand-written
/// and small; 4 MiB leaves room for generous prompts while bounding memory per file.
pub const MAX_DOCUMENT_BYTES: usize = 4 * 1024 * 1024;

/// Deepest nesting of sequences and mappings we accept. The deepest legitimate structure is an
/// `artifact_json` assertion comparing a nested value, far below this. The limit also bounds
/// the parser's recursion: a debug build uses about 35 KiB of stack per level, and 32 levels fit
/// in the 2 MiB stack of a test or tokio worker thread.
pub const MAX_DEPTH: usize = 32;

/// Most nodes (scalars, sequences, mappings) in one document, counting alias expansions.
const MAX_NODES: usize = 250_000;
/// Most alias (`*ref`) events in one document.
const MAX_ALIASES: usize = 10_000;
/// Most events replayed from aliases in one document: the cap that stops a "billion laughs"
/// document after a bounded amount of work.
const MAX_REPLAYED_EVENTS: usize = 100_000;

/// A problem with an input file: where it is (file, line, column, dotted key) and what it is.
///
/// Displays as `<file>:<line>:<col>: <key>: <message>`, leaving out the parts that are unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// 1-based column, when known.
    pub column: Option<u64>,
    /// Dotted path of the offending key, such as `assert[2].tool_called` or
    /// `plugins.local_plugins`, when known.
    pub key: Option<String>,
    pub message: String,
}

/// Writes `<file>:<line>:<col>: <key>: <message>`, leaving out the parts that are unknown: the
/// one shape of every located input error (loader and batch preparation alike).
pub fn write_located(
    f: &mut fmt::Formatter<'_>,
    file: &Path,
    position: (Option<u64>, Option<u64>),
    key: Option<&str>,
    message: &str,
) -> fmt::Result {
    write!(f, "{}", file.display())?;
    if let (Some(line), column) = position {
        write!(f, ":{line}")?;
        if let Some(column) = column {
            write!(f, ":{column}")?;
        }
    }
    if let Some(key) = key {
        write!(f, ": {key}")?;
    }
    write!(f, ": {message}")
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_located(
            f,
            &self.file,
            (self.line, self.column),
            self.key.as_deref(),
            &self.message,
        )
    }
}

impl std::error::Error for LoadError {}

/// The parser's options for every document: the safety budget (depth, nodes, aliases, size,
/// replayed alias events) and YAML 1.2 core-schema scalars (`yes`, `on`, `1_000` are strings,
/// not booleans or numbers), with `duplicate_keys` as the caller needs.
fn saphyr_options(duplicate_keys: serde_saphyr::DuplicateKeyPolicy) -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: MAX_DEPTH,
            max_nodes: MAX_NODES,
            max_aliases: MAX_ALIASES,
            max_total_scalar_bytes: MAX_DOCUMENT_BYTES,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_REPLAYED_EVENTS,
        },
        duplicate_keys: duplicate_keys,
        strict_booleans: true,
        underscored_numbers_as_strings: true,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::Reject,
    }
}

/// Parses one YAML document into a located [`Node`] tree.
///
/// Fails on malformed YAML, on more than one document, on a document over
/// [`MAX_DOCUMENT_BYTES`] or deeper than [`MAX_DEPTH`], on alias bombs, on duplicate keys and
/// on non-scalar mapping keys. An empty or comment-only document parses to a null node.
pub fn parse_yaml(text: &str, file: &Path) -> Result<Node, LoadError> {
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(LoadError {
            file: file.to_owned(),
            line: None,
            column: None,
            key: None,
            message: format!(
                "document is {} bytes, over the limit of {MAX_DOCUMENT_BYTES} bytes",
                text.len()
            ),
        });
    }
    // Duplicates are reported by `check_tree` below, which knows the dotted key path.
    let options = saphyr_options(serde_saphyr::DuplicateKeyPolicy::PassThrough);
    let parsed: Result<Spanned<RawValue>, serde_saphyr::Error> =
        serde_saphyr::from_str_with_options(text, options);
    let root = match parsed {
        Ok(spanned) => spanned_node(spanned),
        Err(error) => return Err(saphyr_error(&error, file)),
    };
    check_tree(&root, "", file)?;
    Ok(root)
}

/// Parses one YAML document to JSON: ordered maps, YAML 1.2 core-schema scalars, scalar keys as
/// their text. Used to read documents whole (the `raw` of a scenario or session) and to
/// materialize derived files.
pub fn yaml_to_json(text: &str, file: &Path) -> Result<serde_json::Value, LoadError> {
    parse_yaml(text, file).map(|node| node.to_json())
}

/// Deserializes one YAML document straight into `T` under the same safety budget as
/// [`parse_yaml`], for small files whose type already denies unknown fields (a simulation
/// profile, say). Errors carry the file, the line and, for an unknown key, a "did you mean" hint.
pub fn parse_strict<T: serde::de::DeserializeOwned>(
    text: &str,
    file: &Path,
) -> Result<T, LoadError> {
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(error_at(
            file,
            None,
            None,
            format!(
                "document is {} bytes, over the limit of {MAX_DOCUMENT_BYTES} bytes",
                text.len()
            ),
        ));
    }
    let options = saphyr_options(serde_saphyr::DuplicateKeyPolicy::Error);
    serde_saphyr::from_str_with_options(text, options).map_err(|error| {
        let mut load_error = saphyr_error(&error, file);
        if let serde_saphyr::Error::SerdeUnknownField {
            field, expected, ..
        } = innermost(&error)
        {
            load_error.key = Some(field.clone());
            load_error.message = unknown_key_message(field, expected);
        }
        load_error
    })
}

/// Reads a text file of at most `max_bytes` bytes. The size is checked before the file is read
/// whole, so a huge file costs nothing.
pub fn read_text(path: &Path, max_bytes: usize) -> Result<String, LoadError> {
    let io_error = |message: String| LoadError {
        file: path.to_owned(),
        line: None,
        column: None,
        key: None,
        message,
    };
    let file = std::fs::File::open(path).map_err(|e| io_error(format!("cannot open: {e}")))?;
    let mut bytes = Vec::new();
    // Read one byte past the cap to tell "exactly at the cap" from "over it".
    let limit = u64::try_from(max_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(format!("cannot read: {e}")))?;
    if bytes.len() > max_bytes {
        return Err(io_error(format!(
            "file is larger than the limit of {max_bytes} bytes"
        )));
    }
    String::from_utf8(bytes).map_err(|_| io_error("file is not valid UTF-8".to_owned()))
}

/// Turns a serde-saphyr error into a [`LoadError`] with a plain message (no snippet, no
/// duplicated "at line …" suffix).
fn saphyr_error(error: &serde_saphyr::Error, file: &Path) -> LoadError {
    let location = error.location().filter(|l| l.line() > 0);
    let inner = innermost(error);
    let message = match inner {
        serde_saphyr::Error::Budget { breach, .. } => format!(
            "document exceeds the yaml safety budget ({breach:?}); alias bombs and oversized \
             documents are refused"
        ),
        serde_saphyr::Error::AliasReplayLimitExceeded { .. }
        | serde_saphyr::Error::AliasExpansionLimitExceeded { .. }
        | serde_saphyr::Error::AliasReplayStackDepthExceeded { .. } => {
            "document expands too many aliases; alias bombs are refused".to_owned()
        }
        serde_saphyr::Error::MultipleDocuments { .. } => {
            "file holds more than one yaml document; expected exactly one".to_owned()
        }
        other => sanitize(&serde_saphyr::DefaultMessageFormatter.format_message(other)),
    };
    LoadError {
        file: file.to_owned(),
        line: location.map(|l| l.line()),
        column: location.map(|l| l.column()),
        key: None,
        message,
    }
}

/// Unwraps the snippet and alias wrappers around the original error.
fn innermost(error: &serde_saphyr::Error) -> &serde_saphyr::Error {
    match error {
        serde_saphyr::Error::WithSnippet { error, .. }
        | serde_saphyr::Error::AliasError { error, .. } => innermost(error),
        other => other,
    }
}

/// Replaces control characters so that a message stays on one line.
fn sanitize(message: &str) -> String {
    message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Rejects non-scalar keys and duplicate keys anywhere in the tree.
fn check_tree(node: &Node, path: &str, file: &Path) -> Result<(), LoadError> {
    match &node.value {
        NodeValue::Sequence(items) => {
            for (index, item) in items.iter().enumerate() {
                check_tree(item, &index_path(path, index), file)?;
            }
        }
        NodeValue::Mapping(entries) => {
            let mut seen: BTreeMap<String, Option<Position>> = BTreeMap::new();
            for (key, value) in entries {
                let Some(text) = key.scalar_text() else {
                    return Err(error_at(
                        file,
                        key.position,
                        (!path.is_empty()).then(|| path.to_owned()),
                        "mapping keys must be scalars".to_owned(),
                    ));
                };
                let child = key_path(path, &text);
                if let Some(first) = seen.get(&text) {
                    let first_line =
                        first.map_or(String::new(), |p| format!(" (first at line {})", p.line));
                    return Err(error_at(
                        file,
                        key.position,
                        Some(child),
                        format!("duplicate key{first_line}"),
                    ));
                }
                seen.insert(text, key.position);
                check_tree(value, &child, file)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn error_at(
    file: &Path,
    position: Option<Position>,
    key: Option<String>,
    message: String,
) -> LoadError {
    LoadError {
        file: file.to_owned(),
        line: position.map(|p| p.line),
        column: position.map(|p| p.column),
        key,
        message,
    }
}

/// `prefix.name`, or `name` at the top level.
pub fn key_path(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

/// `prefix[index]`.
pub fn index_path(prefix: &str, index: usize) -> String {
    format!("{prefix}[{index}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> &'static Path {
        Path::new("x.yaml")
    }

    /// Parses `text` and compares the rendered error (or `ok` for success) with `expect`.
    fn check(text: &str, expect: &str) {
        let got = match yaml_to_json(text, file()) {
            Ok(value) => format!("ok {value}"),
            Err(error) => error.to_string(),
        };
        assert!(
            got.starts_with(expect),
            "input {text:?}\n  got    {got}\n  expect {expect}"
        );
    }

    #[test]
    fn scalars_follow_the_core_schema() {
        check(
            "a: yes\nb: on\nc: True\nd: ~\ne: 1_000\n",
            r#"ok {"a":"yes","b":"on","c":true,"d":null,"e":"1_000"}"#,
        );
        check(
            "a: 0x1F\nb: 0o17\nc: 1.5\nd: '1.5'\ne: -3\n",
            r#"ok {"a":31,"b":15,"c":1.5,"d":"1.5","e":-3}"#,
        );
        check("", "ok null");
        check("# only a comment\n", "ok null");
        check("z: 1\na: 2\nm: 3\n", r#"ok {"z":1,"a":2,"m":3}"#);
    }

    #[test]
    fn malformed_documents_name_file_and_line() {
        check("a: [1, 2\nb: 3\n", "x.yaml:2:");
        check(
            "a: 1\nb: 2\na: 3\n",
            "x.yaml:3:1: a: duplicate key (first at line 1)",
        );
        check("p:\n  q: 1\n  q: 2\n", "x.yaml:3:3: p.q: duplicate key");
        check(
            "a: 1\n---\nb: 2\n",
            "x.yaml:3:1: file holds more than one yaml document",
        );
        check("? [a]\n: 1\n", "x.yaml:1:3: mapping keys must be scalars");
        check("a: .nan\n", "x.yaml:1:4: ");
    }

    #[test]
    fn alias_bomb_fails_fast() {
        let mut text = String::from("a: &a [x,x,x,x,x,x,x,x,x,x]\n");
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for pair in names.windows(2) {
            let (prev, next) = (pair[0], pair[1]);
            let refs = vec![format!("*{prev}"); 10].join(",");
            text.push_str(&format!("{next}: &{next} [{refs}]\n"));
        }
        let error = parse_yaml(&text, file()).expect_err("a billion-laughs document must fail");
        assert!(error.message.contains("refused"), "{error}");
    }

    #[test]
    fn oversized_and_deep_documents_fail() {
        let big = "a".repeat(MAX_DOCUMENT_BYTES + 1);
        let error = parse_yaml(&big, file()).expect_err("oversized document");
        assert!(error.message.contains("over the limit"), "{error}");
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 2), "]".repeat(MAX_DEPTH + 2));
        let error = parse_yaml(&deep, file()).expect_err("too deep");
        assert!(error.to_string().starts_with("x.yaml:1:"), "{error}");
    }

    #[test]
    fn display_omits_unknown_parts() {
        let mut error = LoadError {
            file: PathBuf::from("s.yaml"),
            line: Some(3),
            column: Some(1),
            key: Some("assert[2].tool_called".to_owned()),
            message: "m".to_owned(),
        };
        assert_eq!(error.to_string(), "s.yaml:3:1: assert[2].tool_called: m");
        error.column = None;
        error.key = None;
        assert_eq!(error.to_string(), "s.yaml:3: m");
        error.line = None;
        assert_eq!(error.to_string(), "s.yaml: m");
    }

    #[test]
    fn parse_strict_names_unknown_fields() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Probe {
            seed: u64,
            rules: Vec<String>,
        }
        let probe: Probe = parse_strict("seed: 3\nrules: [a]\n", file()).expect("valid probe");
        assert_eq!(probe.seed, 3);
        let error =
            parse_strict::<Probe>("seed: 3\nrulez: []\n", file()).expect_err("unknown field");
        assert_eq!(
            error.to_string(),
            "x.yaml:2:1: rulez: unknown key `rulez`, did you mean `rules`?"
        );
        let error = parse_strict::<Probe>("seed: x\nrules: []\n", file()).expect_err("wrong type");
        assert!(error.to_string().starts_with("x.yaml:1:7: "), "{error}");
    }

    #[test]
    fn key_locations_point_at_keys_and_items() {
        let node = parse_yaml("a:\n  b:\n    - x\n    - y\n", file()).expect("valid yaml");
        let locations = KeyLocations::of(&node);
        assert_eq!(locations.get("a"), Some(Position { line: 1, column: 1 }));
        assert_eq!(locations.get("a.b"), Some(Position { line: 2, column: 3 }));
        assert_eq!(
            locations.get("a.b[1]"),
            Some(Position { line: 4, column: 7 })
        );
        assert_eq!(locations.get("a.c"), None);
    }
}
