//! Integration tests of cowork-schema: the input-file loaders against the upstream examples and
//! against hostile or broken files; JSON numbers against the text JavaScript writes.

mod examples;
mod js_numbers;
mod keys_in_one_place;
mod negative;

/// Support code shared by the test modules.
mod support {
    use std::path::{Path, PathBuf};

    /// `schema/tests/fixtures/<rel>`.
    pub fn fixture(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(rel)
    }

    /// Reads a fixture as text, panicking with the path on failure.
    pub fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    }

    /// The `.yaml` files directly inside `dir`, sorted.
    pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
            .map(|entry| entry.expect("directory entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
            .collect();
        out.sort();
        out
    }
}
