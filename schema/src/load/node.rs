//! The located YAML tree: [`Node`] values that remember the line and column they came from,
//! built through `Spanned` deserialization, and [`KeyLocations`], the positions by dotted key.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use super::{index_path, key_path};

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
    /// Entries in document order. Keys are scalars and unique (checked by [`parse_yaml`](super::parse_yaml)).
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
pub(super) struct RawValue(NodeValue);

impl<'de> Deserialize<'de> for RawValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawValue, D::Error> {
        deserializer.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

pub(super) fn spanned_node(spanned: Spanned<RawValue>) -> Node {
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
