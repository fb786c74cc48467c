//! Store keys and store file names are made in one place, `schema/src/layout/`: no other
//! non-test code of the workspace formats a key (`"batches/…"`, `"bundles/…"`, `"…/jobs/…"`)
//! or spells a stored file's name (`"spec.json"`, `"result.json"`, …). A key built by hand
//! drifts from the layout the coordinator, the workers and `cowork run` must agree on; this
//! test names the file and line of each one.

use std::path::{Path, PathBuf};

use cowork_schema::layout::names;

/// The crates whose sources are checked (testkit and tools hold no store code).
const CRATES: [&str; 7] = [
    "schema",
    "core",
    "fabric",
    "client",
    "coordinator",
    "worker",
    "cli",
];

/// Where the one typed module lives.
const LAYOUT_DIR: &str = "schema/src/layout";

/// Files whose matches are not store keys, each with the reason.
const NOT_STORE_KEYS: [(&str, &str); 2] = [
    (
        "core/src/report/html/batch_list.rs",
        "links to the coordinator's HTTP routes (`batches/<id>/live.html`, relative to /v1/)",
    ),
    (
        "cli/src/args/examples.rs",
        "example command lines in --help, written for people",
    ),
];

/// Literal fragments that only a store key or a stored file name contains.
fn forbidden() -> Vec<String> {
    let mut fragments: Vec<String> = [
        names::SPEC,
        names::ROLLUP,
        names::ENVELOPE,
        names::EVAL,
        names::STATS,
        names::GENERATION,
        names::JOB_RECORD,
        names::RESULT,
        names::PARTIAL_RESULT,
        names::CASSETTE,
        names::CASSETTE_SUFFIX,
        names::BUNDLE_EXTENSION,
    ]
    .iter()
    .flat_map(|name| [format!("\"{name}\""), format!("/{name}\"")])
    .collect();
    fragments.push(format!("\"{}/", names::BATCHES_DIR));
    fragments.push(format!("\"{}/", names::BUNDLES_DIR));
    fragments.push(format!("/{}/", names::JOBS_DIR));
    fragments
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the schema crate sits in the workspace")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The non-test lines of a source file: a `#[cfg(test)]` module and everything after it are
/// tests (the workspace keeps them last), as are files named `tests.rs`; comments are skipped.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut code = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines[index + 1..]
                .iter()
                .find(|next| !next.trim().is_empty())
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        code.push((index + 1, *line));
    }
    code
}

#[test]
fn no_store_key_or_store_file_name_is_spelled_outside_the_layout_module() {
    let root = workspace_root();
    let forbidden = forbidden();
    let mut files = Vec::new();
    for krate in CRATES {
        rust_files(&root.join(krate).join("src"), &mut files);
        rust_files(&root.join(krate).join("examples"), &mut files);
    }
    assert!(files.len() > 100, "found only {} source files", files.len());
    let mut found = Vec::new();
    for path in files {
        let relative = path.strip_prefix(&root).unwrap_or(&path);
        let shown = relative.display().to_string();
        if shown.starts_with(LAYOUT_DIR)
            || path.file_name().is_some_and(|n| n == "tests.rs")
            || NOT_STORE_KEYS.iter().any(|(file, _)| shown == *file)
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{shown}: {e}"));
        for (line_number, line) in code_lines(&text) {
            if let Some(fragment) = forbidden.iter().find(|f| line.contains(f.as_str())) {
                found.push(format!(
                    "{shown}:{line_number}: {fragment} in `{}`",
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "store keys or file names spelled outside {LAYOUT_DIR}/ (use its BatchKey, JobKey, \
         StoreKey, StoreRoot or names):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_key_built_by_hand() {
    let text = "fn key(id: &str) -> String {\n    format!(\"batches/{id}/spec.json\")\n}\n\
                #[cfg(test)]\nmod tests {\n    const K: &str = \"batches/b/spec.json\";\n}\n";
    let forbidden = forbidden();
    let hits: Vec<usize> = code_lines(text)
        .into_iter()
        .filter(|(_, line)| forbidden.iter().any(|f| line.contains(f.as_str())))
        .map(|(number, _)| number)
        .collect();
    assert_eq!(
        hits,
        vec![2],
        "the code line is caught, the test module's is not"
    );
}
