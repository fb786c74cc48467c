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

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{MessageFormatter, Spanned};

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

/// A 1-based source position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub line: u64,
    pub column: u64,
}

/// A parsed YAML value with the position it came from (`None` for values that did not come from
/// YAML text, such as a frozen scenario read from a JSON cassette).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub value: NodeValue,
    pub position: Option<Position>,
}

/// The value of a [`Node`].
#[derive(Clone, Debug, PartialEq)]
pub enum NodeValue {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    String(String),
    Sequence(Vec<Node>),
    /// Entries in document order. Keys are scalars and unique (checked by [`parse_yaml`]).
    Mapping(Vec<(Node, Node)>),
}

impl Node {
    /// Describes the node's type for messages ("a string", "a mapping", …).
    pub fn kind_name(&self) -> &'static str {
        match self.value {
            NodeValue::Null => "null",
            NodeValue::Bool(_) => "a boolean",
            NodeValue::Int(_) | NodeValue::UInt(_) => "an integer",
            NodeValue::Float(_) => "a number",
            NodeValue::String(_) => "a string",
            NodeValue::Sequence(_) => "a sequence",
            NodeValue::Mapping(_) => "a mapping",
        }
    }

    /// The text of a scalar as a mapping key would be spelled in JSON; `None` for collections.
    pub fn scalar_text(&self) -> Option<String> {
        match &self.value {
            NodeValue::Null => Some("null".to_owned()),
            NodeValue::Bool(b) => Some(b.to_string()),
            NodeValue::Int(i) => Some(i.to_string()),
            NodeValue::UInt(u) => Some(u.to_string()),
            NodeValue::Float(x) => Some(json_number_text(*x)),
            NodeValue::String(s) => Some(s.clone()),
            NodeValue::Sequence(_) | NodeValue::Mapping(_) => None,
        }
    }

    /// Converts to JSON with key order preserved. Scalar keys become their text.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match &self.value {
            NodeValue::Null => Value::Null,
            NodeValue::Bool(b) => Value::Bool(*b),
            NodeValue::Int(i) => Value::from(*i),
            NodeValue::UInt(u) => Value::from(*u),
            // Non-finite floats are rejected by the parser options, so `from_f64` succeeds; null
            // is the JSON rendering JavaScript would give anyway.
            NodeValue::Float(x) => {
                serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number)
            }
            NodeValue::String(s) => Value::String(s.clone()),
            NodeValue::Sequence(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            NodeValue::Mapping(entries) => {
                let mut map = serde_json::Map::new();
                for (key, value) in entries {
                    let key = key.scalar_text().unwrap_or_default();
                    map.insert(key, value.to_json());
                }
                Value::Object(map)
            }
        }
    }

    /// Builds a position-less node from JSON (for frozen scenarios inside cassettes).
    pub fn from_json(value: &serde_json::Value) -> Node {
        use serde_json::Value;
        let value = match value {
            Value::Null => NodeValue::Null,
            Value::Bool(b) => NodeValue::Bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    NodeValue::UInt(u)
                } else if let Some(i) = n.as_i64() {
                    NodeValue::Int(i)
                } else {
                    NodeValue::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => NodeValue::String(s.clone()),
            Value::Array(items) => NodeValue::Sequence(items.iter().map(Node::from_json).collect()),
            Value::Object(map) => NodeValue::Mapping(
                map.iter()
                    .map(|(k, v)| {
                        let key = Node {
                            value: NodeValue::String(k.clone()),
                            position: None,
                        };
                        (key, Node::from_json(v))
                    })
                    .collect(),
            ),
        };
        Node {
            value,
            position: None,
        }
    }
}

/// Formats a finite double the way `JSON.stringify` would for a key.
fn json_number_text(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e21 {
        format!("{}", x as i128)
    } else {
        x.to_string()
    }
}

/// The value half of a [`Node`], deserialized through `Spanned` so that children keep their
/// positions.
struct RawValue(NodeValue);

impl<'de> Deserialize<'de> for RawValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawValue, D::Error> {
        deserializer.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

fn spanned_node(spanned: Spanned<RawValue>) -> Node {
    // The referenced location is where the value is used (an alias site for aliased values);
    // that is the line an author would look at. Unknown locations report line 0.
    let location = spanned.referenced;
    let position = (location.line() > 0).then(|| Position {
        line: location.line(),
        column: location.column(),
    });
    Node {
        value: spanned.value.0,
        position,
    }
}

impl<'de> Visitor<'de> for RawVisitor {
    type Value = RawValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<RawValue, E> {
        Ok(RawValue(NodeValue::Null))
    }
    fn visit_none<E>(self) -> Result<RawValue, E> {
        Ok(RawValue(NodeValue::Null))
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawValue, D::Error> {
        RawValue::deserialize(deserializer)
    }
    fn visit_bool<E>(self, value: bool) -> Result<RawValue, E> {
        Ok(RawValue(NodeValue::Bool(value)))
    }
    fn visit_i64<E>(self, value: i64) -> Result<RawValue, E> {
        Ok(RawValue(NodeValue::Int(value)))
    }
    fn visit_u64<E>(self, value: u64) -> Result<RawValue, E> {
        Ok(RawValue(NodeValue::UInt(value)))
    }
    fn visit_i128<E: de::Error>(self, value: i128) -> Result<RawValue, E> {
        Ok(RawValue(NodeValue::Float(value as f64)))
    }
    fn visit_u128<E: de::Error>(self, value: u128) -> Result<RawValue, E> {
        Ok(RawValue(NodeValue::Float(value as f64)))
    }
    fn visit_f64<E>(self, value: f64) -> Result<RawValue, E> {
        Ok(RawValue(NodeValue::Float(value)))
    }
    fn visit_str<E>(self, value: &str) -> Result<RawValue, E> {
        Ok(RawValue(NodeValue::String(value.to_owned())))
    }
    fn visit_string<E>(self, value: String) -> Result<RawValue, E> {
        Ok(RawValue(NodeValue::String(value)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawValue, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<RawValue>>()? {
            items.push(spanned_node(item));
        }
        Ok(RawValue(NodeValue::Sequence(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawValue, A::Error> {
        let mut entries = Vec::new();
        while let Some((key, value)) = map.next_entry::<Spanned<RawValue>, Spanned<RawValue>>()? {
            entries.push((spanned_node(key), spanned_node(value)));
        }
        Ok(RawValue(NodeValue::Mapping(entries)))
    }
}

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

/// Source positions of the keys of a loaded document, by dotted key (`plugins.local_plugins[0]`).
///
/// Mapping entries record the position of their key; sequence items the position of the item.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyLocations(BTreeMap<String, Position>);

impl KeyLocations {
    /// Records the position of every key and item under `node`.
    pub fn of(node: &Node) -> KeyLocations {
        let mut locations = KeyLocations::default();
        locations.record(node, "");
        locations
    }

    fn record(&mut self, node: &Node, path: &str) {
        match &node.value {
            NodeValue::Sequence(items) => {
                for (index, item) in items.iter().enumerate() {
                    let child = index_path(path, index);
                    if let Some(position) = item.position {
                        self.0.insert(child.clone(), position);
                    }
                    self.record(item, &child);
                }
            }
            NodeValue::Mapping(entries) => {
                for (key, value) in entries {
                    let Some(text) = key.scalar_text() else {
                        continue;
                    };
                    let child = key_path(path, &text);
                    if let Some(position) = key.position.or(value.position) {
                        self.0.insert(child.clone(), position);
                    }
                    self.record(value, &child);
                }
            }
            _ => {}
        }
    }

    /// The position of a dotted key, when it was in the document.
    pub fn get(&self, key: &str) -> Option<Position> {
        self.0.get(key).copied()
    }
}

/// How to treat keys a typed reader does not know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnknownKeys {
    /// An error, like the CLI's loader.
    Reject,
    /// Ignored, like `replay` reading a frozen scenario.
    Ignore,
}

/// Walks a [`Node`] tree into typed values, collecting every problem it finds.
pub(crate) struct Reader<'f> {
    file: &'f Path,
    pub(crate) errors: Vec<LoadError>,
}

/// The entries of a mapping node, with the dotted key it sits at.
#[derive(Clone, Copy)]
pub(crate) struct MapView<'n> {
    pub(crate) node: &'n Node,
    pub(crate) entries: &'n [(Node, Node)],
    pub(crate) path: &'n str,
}

impl<'n> MapView<'n> {
    /// The value under `name`, if present.
    pub(crate) fn get(&self, name: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(key, _)| matches!(&key.value, NodeValue::String(k) if k == name))
            .map(|(_, value)| value)
    }

    pub(crate) fn child_path(&self, name: &str) -> String {
        key_path(self.path, name)
    }
}

impl<'f> Reader<'f> {
    pub(crate) fn new(file: &'f Path) -> Reader<'f> {
        Reader {
            file,
            errors: Vec::new(),
        }
    }

    /// Records an error at `node` (or at no position).
    pub(crate) fn error(&mut self, position: Option<Position>, key: &str, message: String) {
        self.errors.push(error_at(
            self.file,
            position,
            (!key.is_empty()).then(|| key.to_owned()),
            message,
        ));
    }

    /// Expects a mapping; records a type error otherwise.
    pub(crate) fn mapping<'n>(&mut self, node: &'n Node, path: &'n str) -> Option<MapView<'n>> {
        match &node.value {
            NodeValue::Mapping(entries) => Some(MapView {
                node,
                entries,
                path,
            }),
            _ => {
                self.error(
                    node.position,
                    path,
                    format!("expected a mapping, got {}", node.kind_name()),
                );
                None
            }
        }
    }

    /// Reports every key of `map` that is not in `allowed`, with a "did you mean" hint when a
    /// valid key is within edit distance 2.
    pub(crate) fn check_keys(&mut self, map: MapView<'_>, allowed: &[&str], unknown: UnknownKeys) {
        if unknown == UnknownKeys::Ignore {
            return;
        }
        for (key, _) in map.entries {
            let text = key.scalar_text().unwrap_or_default();
            if allowed.contains(&text.as_str()) {
                continue;
            }
            let message = unknown_key_message(&text, allowed);
            self.error(key.position, &map.child_path(&text), message);
        }
    }

    /// A required string field.
    pub(crate) fn required_string(&mut self, map: MapView<'_>, name: &str) -> Option<String> {
        match map.get(name) {
            Some(node) => self.string(node, &map.child_path(name)),
            None => {
                self.error(
                    map.node.position,
                    &map.child_path(name),
                    "missing required field".to_owned(),
                );
                None
            }
        }
    }

    /// An optional string field; `null` is a type error.
    pub(crate) fn opt_string(&mut self, map: MapView<'_>, name: &str) -> Option<String> {
        map.get(name)
            .and_then(|node| self.string(node, &map.child_path(name)))
    }

    /// An optional string field that may also be `null` (both read as `None`).
    pub(crate) fn nullable_string(
        &mut self,
        map: MapView<'_>,
        name: &str,
        non_empty: bool,
    ) -> Option<String> {
        let node = map.get(name)?;
        if node.value == NodeValue::Null {
            return None;
        }
        let path = map.child_path(name);
        let value = self.string(node, &path)?;
        if non_empty && value.is_empty() {
            self.error(node.position, &path, "must not be empty".to_owned());
        }
        Some(value)
    }

    /// An optional string field whose value must be one of `allowed`.
    pub(crate) fn opt_enum(
        &mut self,
        map: MapView<'_>,
        name: &str,
        allowed: &[&str],
    ) -> Option<String> {
        let node = map.get(name)?;
        let path = map.child_path(name);
        let value = self.string(node, &path)?;
        if allowed.contains(&value.as_str()) {
            Some(value)
        } else {
            self.error(
                node.position,
                &path,
                format!(
                    "invalid value {value:?}; expected one of: {}",
                    allowed.join(", ")
                ),
            );
            None
        }
    }

    /// A string node.
    pub(crate) fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.value {
            NodeValue::String(s) => Some(s.clone()),
            _ => {
                self.error(
                    node.position,
                    path,
                    format!("expected a string, got {}", node.kind_name()),
                );
                None
            }
        }
    }

    /// An optional boolean field.
    pub(crate) fn opt_bool(&mut self, map: MapView<'_>, name: &str) -> Option<bool> {
        let node = map.get(name)?;
        match node.value {
            NodeValue::Bool(b) => Some(b),
            _ => {
                self.error(
                    node.position,
                    &map.child_path(name),
                    format!("expected a boolean, got {}", node.kind_name()),
                );
                None
            }
        }
    }

    /// An optional integer field in `min..=max` (integral floats such as `1e3` count, as in
    /// JavaScript).
    pub(crate) fn opt_integer(
        &mut self,
        map: MapView<'_>,
        name: &str,
        min: u64,
        max: u64,
    ) -> Option<u64> {
        let node = map.get(name)?;
        let path = map.child_path(name);
        let value = match node.value {
            NodeValue::UInt(u) => Some(u),
            NodeValue::Int(i) => u64::try_from(i).ok(),
            NodeValue::Float(x) if x.fract() == 0.0 && x >= 0.0 && x <= u64::MAX as f64 => {
                Some(x as u64)
            }
            _ => None,
        };
        let in_range = value.filter(|v| (min..=max).contains(v));
        if in_range.is_none() {
            self.error(
                node.position,
                &path,
                format!(
                    "expected an integer from {min} to {max}, got {}",
                    describe(node)
                ),
            );
        }
        in_range
    }

    /// An optional sequence of strings; absent reads as empty. With `non_empty`, every item must
    /// be a non-empty string (`minLength: 1` in the schema).
    pub(crate) fn string_list(
        &mut self,
        map: MapView<'_>,
        name: &str,
        non_empty: bool,
    ) -> Vec<String> {
        let Some(node) = map.get(name) else {
            return Vec::new();
        };
        self.opt_string_list_node(node, &map.child_path(name), non_empty)
            .unwrap_or_default()
    }

    /// A sequence of strings at `node`; `None` (with an error) when it is not one.
    pub(crate) fn opt_string_list_node(
        &mut self,
        node: &Node,
        path: &str,
        non_empty: bool,
    ) -> Option<Vec<String>> {
        let NodeValue::Sequence(items) = &node.value else {
            self.error(
                node.position,
                path,
                format!("expected a sequence of strings, got {}", node.kind_name()),
            );
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (index, item) in items.iter().enumerate() {
            let item_path = index_path(path, index);
            match self.string(item, &item_path) {
                Some(s) if non_empty && s.is_empty() => {
                    self.error(item.position, &item_path, "must not be empty".to_owned());
                    ok = false;
                }
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }
}

/// Describes a scalar for messages: its text for scalars, its kind otherwise.
fn describe(node: &Node) -> String {
    match &node.value {
        NodeValue::String(s) => format!("{s:?}"),
        NodeValue::Sequence(_) | NodeValue::Mapping(_) | NodeValue::Null => {
            node.kind_name().to_owned()
        }
        _ => node.scalar_text().unwrap_or_default(),
    }
}

/// Most valid keys listed in an "unknown key" message; longer lists (the assertion keys) only
/// get the "did you mean" hint.
const MAX_LISTED_KEYS: usize = 24;

fn unknown_key_message(key: &str, allowed: &[&str]) -> String {
    match closest_key(key, allowed) {
        Some(best) => format!("unknown key `{key}`, did you mean `{best}`?"),
        None if allowed.len() <= MAX_LISTED_KEYS => {
            format!("unknown key `{key}`; valid keys: {}", allowed.join(", "))
        }
        None => format!("unknown key `{key}`"),
    }
}

/// The valid key closest to `key` within edit distance 2 (the first one on a tie).
pub fn closest_key<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    for candidate in allowed {
        let distance = edit_distance(key, candidate);
        if distance <= 2 && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
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
    fn closest_key_within_two_edits() {
        let keys = ["baseline", "session", "prompt"];
        assert_eq!(closest_key("baselne", &keys), Some("baseline"));
        assert_eq!(closest_key("sesion", &keys), Some("session"));
        assert_eq!(closest_key("profile", &keys), None);
        assert_eq!(edit_distance("", "ab"), 2);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
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
