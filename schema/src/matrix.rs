//! The matrix file of `--matrix` (harness-behaviour.md#matrix-validation): up to three axes of
//! strings.
//!
//! Validation is the CLI's: the document must be a mapping with only the optional keys
//! `baselines`, `models` and `skill_dirs`; each present axis must be a sequence of strings. An
//! empty or comment-only file (null), a null axis (`baselines:` with no value) and a non-string
//! element (an unquoted `1.5`) are all invalid. Duplicate values are allowed and give duplicate
//! cells. Whether `skill_dirs` was present matters even when it is empty
//! (harness-behaviour.md#default-compare), so every axis is an `Option`.

use std::path::Path;

use crate::load::{self, KeyLocations, LoadError, NodeValue, Reader, UnknownKeys};

/// The keys of a matrix file, in axis order (harness-behaviour.md#matrix-expansion).
pub const MATRIX_KEYS: &[&str] = &["baselines", "models", "skill_dirs"];

/// A validated matrix file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatrixFile {
    pub baselines: Option<Vec<String>>,
    pub models: Option<Vec<String>>,
    /// Skill-dir candidates as declared, relative to the matrix file (rule R3 of
    /// harness-behaviour.md#path-resolution).
    pub skill_dirs: Option<Vec<String>>,
    /// Where each key and element was written.
    pub locations: KeyLocations,
}

impl MatrixFile {
    /// Parses and validates a matrix document. `file` is used in error messages only.
    pub fn from_yaml(text: &str, file: &Path) -> Result<MatrixFile, Vec<LoadError>> {
        let root = load::parse_yaml(text, file).map_err(|e| vec![e])?;
        let mut reader = Reader::new(file);
        if root.value == NodeValue::Null {
            reader.error(
                None,
                "",
                "matrix file is empty; expected a mapping with baselines, models or skill_dirs"
                    .to_owned(),
            );
            return Err(reader.errors);
        }
        let Some(map) = reader.mapping(&root, "") else {
            return Err(reader.errors);
        };
        reader.check_keys(map, MATRIX_KEYS, UnknownKeys::Reject);
        let mut axis = |name: &str| {
            let node = map.get(name)?;
            reader.opt_string_list_node(node, name, false)
        };
        let baselines = axis("baselines");
        let models = axis("models");
        let skill_dirs = axis("skill_dirs");
        if !reader.errors.is_empty() {
            return Err(reader.errors);
        }
        Ok(MatrixFile {
            baselines,
            models,
            skill_dirs,
            locations: KeyLocations::of(&root),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads `text` as `m.yaml` and compares the result (axes or rendered errors) with `expect`.
    fn check(text: &str, expect: &str) {
        let got = match MatrixFile::from_yaml(text, Path::new("m.yaml")) {
            Ok(m) => format!("ok {:?} {:?} {:?}", m.baselines, m.models, m.skill_dirs),
            Err(errors) => errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        };
        assert_eq!(got, expect, "input {text:?}");
    }

    #[test]
    fn tc_35_matrix_file_validation() {
        check(
            "baseline: [a]\n",
            "m.yaml:1:1: baseline: unknown key `baseline`, did you mean `baselines`?",
        );
        check(
            "",
            "m.yaml: matrix file is empty; expected a mapping with baselines, models or skill_dirs",
        );
        check(
            "# nothing\n",
            "m.yaml: matrix file is empty; expected a mapping with baselines, models or skill_dirs",
        );
        check(
            "baselines:\n",
            "m.yaml:1:10: baselines: expected a sequence of strings, got null",
        );
        check(
            "baselines: [1.5]\n",
            "m.yaml:1:13: baselines[0]: expected a string, got a number",
        );
        check("- a\n", "m.yaml:1:1: expected a mapping, got a sequence");
        check("models: [a, a]\n", "ok None Some([\"a\", \"a\"]) None");
        check(
            "baselines: ['1.5']\nskill_dirs: []\n",
            "ok Some([\"1.5\"]) None Some([])",
        );
        check("{}\n", "ok None None None");
    }
}
