//! [`Reader`]: walks a located [`Node`] tree into typed values, collecting every problem as a
//! [`LoadError`] (unknown keys with a "did you mean" hint, wrong types, missing fields).

use std::path::Path;

use super::node::{Node, NodeValue, Position};
use super::{LoadError, error_at, index_path, key_path};

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

pub(super) fn unknown_key_message(key: &str, allowed: &[&str]) -> String {
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

    #[test]
    fn closest_key_within_two_edits() {
        let keys = ["baseline", "session", "prompt"];
        assert_eq!(closest_key("baselne", &keys), Some("baseline"));
        assert_eq!(closest_key("sesion", &keys), Some("session"));
        assert_eq!(closest_key("profile", &keys), None);
        assert_eq!(edit_distance("", "ab"), 2);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
