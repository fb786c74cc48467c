//! Fuzzes `pack` → `unpack` with structured input: a tree of source files (some executable,
//! some symlinks to other files of the tree or to a file outside it) and a list of derived
//! files, all with generated paths.
//!
//! The target predicts from the input alone whether `pack` must refuse it (a symlink that
//! leaves the root, a path listed twice, a path that is both a file and another entry's
//! directory) and fails when `pack` disagrees. When `pack` succeeds it also checks that:
//! - packing the same input again gives the same bytes and sha256 (bundles are addressed by it);
//! - `unpack` of those bytes succeeds and gives exactly the expected tree: every file with its
//!   contents and executable bit (a symlink as the file it points to), every parent directory,
//!   nothing else;
//! - the counts of `PackedBundle` and `UnpackStats` match that tree.

#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use arbitrary::Arbitrary;
use cowork_fabric::bundle::{BundleError, UnpackLimits, check_entry_path, pack, unpack};
use libfuzzer_sys::fuzz_target;

/// Most source or derived files used from one input, to keep each run short.
const MAX_FILES: usize = 24;
/// Most components in a generated path.
const MAX_COMPONENTS: usize = 8;
/// Longest component the target writes (Linux's `NAME_MAX`); longer ones cannot exist on disk,
/// so they are left out rather than reported.
const MAX_COMPONENT_BYTES: usize = 255;
/// Longest generated path. Longer than a tar header's 100-byte name field (so GNU long-name
/// entries are exercised), short enough that `dest` plus the path stays under `PATH_MAX`.
const MAX_GENERATED_PATH_BYTES: usize = 2048;

/// Generous caps: the round trip must never hit them for inputs of at most `-max_len` bytes.
const LIMITS: UnpackLimits = UnpackLimits {
    max_total_bytes: 16 << 20,
    max_entries: 100_000,
    max_file_bytes: 16 << 20,
};

/// Names that reach the interesting cases quickly; [`Component::Free`] covers the rest.
const NAME_POOL: &[&str] = &[
    "a",
    "b",
    "scenarios",
    "s.yaml",
    "SKILL.md",
    "..b",
    "c..",
    ".hidden",
    "é ü",
    "name with spaces",
    "a.b.c",
    // Exactly 100 bytes: the longest name a plain tar header holds.
    "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn",
];

#[derive(Arbitrary, Debug)]
enum Component {
    Pooled(u8),
    Free(String),
    /// A long name of `n` bytes (at most `u8::MAX`), to cross the 100-byte header field.
    Long(u8),
}

#[derive(Arbitrary, Debug)]
enum SourceKind {
    Regular {
        contents: Vec<u8>,
        executable: bool,
    },
    /// A symlink to the `n`th regular file written before it (modulo their count).
    LinkInside(u8),
    /// A symlink to a file outside the bundle root: `pack` must refuse it.
    LinkOutside,
}

#[derive(Arbitrary, Debug)]
struct SourceFile {
    path: Vec<Component>,
    kind: SourceKind,
}

#[derive(Arbitrary, Debug)]
struct DerivedFile {
    path: Vec<Component>,
    contents: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    sources: Vec<SourceFile>,
    derived: Vec<DerivedFile>,
}

/// One file the unpacked tree must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ExpectedFile {
    contents: Vec<u8>,
    executable: bool,
}

fuzz_target!(|input: Input| {
    let scratch = tempfile::tempdir().expect("create scratch dir");
    let root = scratch.path().join("root");
    fs::create_dir(&root).expect("create root");
    let outside = scratch.path().join("outside.txt");
    fs::write(&outside, b"outside the root").expect("write the outside file");

    let mut files = BTreeSet::new();
    let mut expected: BTreeMap<String, ExpectedFile> = BTreeMap::new();
    let mut regular: Vec<String> = Vec::new();
    let mut must_refuse = false;
    for source in input.sources.iter().take(MAX_FILES) {
        let Some(rel) = generated_path(&source.path) else {
            continue;
        };
        if files.contains(&rel) {
            continue;
        }
        let target = root.join(&rel);
        let parent = target.parent().expect("a joined path has a parent");
        if fs::create_dir_all(parent).is_err() || fs::symlink_metadata(&target).is_ok() {
            // A component is already a file, or the path is already a directory: not a tree
            // this input can make, so the file is left out.
            continue;
        }
        let file = match &source.kind {
            SourceKind::Regular {
                contents,
                executable,
            } => {
                fs::write(&target, contents).expect("write a source file");
                let mode = if *executable { 0o755 } else { 0o644 };
                fs::set_permissions(&target, fs::Permissions::from_mode(mode))
                    .expect("chmod a source file");
                regular.push(rel.clone());
                ExpectedFile {
                    contents: contents.clone(),
                    executable: *executable,
                }
            }
            SourceKind::LinkInside(index) => {
                let Some(pointee) = pick(&regular, *index) else {
                    continue;
                };
                std::os::unix::fs::symlink(root.join(pointee), &target)
                    .expect("create an inside symlink");
                expected
                    .get(pointee)
                    .cloned()
                    .expect("a regular file is expected")
            }
            SourceKind::LinkOutside => {
                std::os::unix::fs::symlink(&outside, &target).expect("create an outside symlink");
                must_refuse = true;
                ExpectedFile {
                    contents: Vec::new(),
                    executable: false,
                }
            }
        };
        files.insert(rel.clone());
        expected.insert(rel, file);
    }

    let mut derived = Vec::new();
    for file in input.derived.iter().take(MAX_FILES) {
        let Some(rel) = generated_path(&file.path) else {
            continue;
        };
        let entry = ExpectedFile {
            contents: file.contents.clone(),
            executable: false,
        };
        if expected.insert(rel.clone(), entry).is_some() {
            must_refuse = true;
        }
        derived.push((rel, file.contents.clone()));
    }
    let dirs: BTreeSet<String> = expected.keys().flat_map(|path| parent_dirs(path)).collect();
    if dirs.iter().any(|dir| expected.contains_key(dir)) {
        must_refuse = true;
    }

    let packed = match pack(&root, &files, &derived) {
        Ok(packed) => packed,
        Err(error) => {
            assert!(
                must_refuse,
                "pack refused a valid input: {error}\nfiles {files:?}\nderived {:?}",
                derived.iter().map(|(path, _)| path).collect::<Vec<_>>()
            );
            assert!(
                matches!(
                    error,
                    BundleError::EscapesRoot { .. }
                        | BundleError::Duplicate { .. }
                        | BundleError::FileDirConflict { .. }
                ),
                "pack refused for an unexpected reason: {error:?}"
            );
            return;
        }
    };
    assert!(
        !must_refuse,
        "pack accepted an input it must refuse\nfiles {files:?}\nderived {:?}",
        derived.iter().map(|(path, _)| path).collect::<Vec<_>>()
    );
    let again = pack(&root, &files, &derived).expect("the same input packs again");
    assert_eq!(again, packed, "packing is not deterministic");
    assert_eq!(
        packed.n_entries,
        (expected.len() + dirs.len()) as u64,
        "PackedBundle::n_entries"
    );

    let dest = scratch.path().join("unpacked");
    let stats = match unpack(&packed.bytes, &dest, &LIMITS) {
        Ok(stats) => stats,
        Err(error) => panic!("unpack refused a packed bundle: {error}"),
    };
    assert_eq!(stats.n_files, expected.len() as u64, "UnpackStats::n_files");
    assert_eq!(stats.n_dirs, dirs.len() as u64, "UnpackStats::n_dirs");
    let (found_files, found_dirs) = read_tree(&dest);
    assert_eq!(found_dirs, dirs, "directories after the round trip");
    assert_eq!(found_files, expected, "files after the round trip");
});

/// Joins generated components with `/`; `None` when the path is one `pack` refuses by its
/// documented rules (those are tested by table in `fabric`) or one a disk cannot hold.
fn generated_path(components: &[Component]) -> Option<String> {
    let mut parts = Vec::new();
    for component in components.iter().take(MAX_COMPONENTS) {
        let part = match component {
            Component::Pooled(index) => pick(NAME_POOL, *index)?.to_string(),
            Component::Free(text) => text.clone(),
            Component::Long(n) => "l".repeat(usize::from(*n).max(1)),
        };
        parts.push(part);
    }
    let path = parts.join("/");
    let fits = path.len() <= MAX_GENERATED_PATH_BYTES
        && path
            .split('/')
            .all(|component| component.len() <= MAX_COMPONENT_BYTES)
        && !path.contains('\0');
    (fits && check_entry_path(&path).is_ok()).then_some(path)
}

/// The `index`th item, wrapping around; `None` for an empty slice.
fn pick<T: AsRef<str>>(items: &[T], index: u8) -> Option<&str> {
    if items.is_empty() {
        return None;
    }
    Some(items[usize::from(index) % items.len()].as_ref())
}

/// Every proper parent directory of `path` (`a/b/c` → `a`, `a/b`).
fn parent_dirs(path: &str) -> Vec<String> {
    path.match_indices('/')
        .map(|(index, _)| path[..index].to_owned())
        .collect()
}

/// The files (with contents and executable bit) and directories under `dest`, as
/// `/`-separated relative paths.
fn read_tree(dest: &Path) -> (BTreeMap<String, ExpectedFile>, BTreeSet<String>) {
    let mut files = BTreeMap::new();
    let mut dirs = BTreeSet::new();
    let mut pending = vec![dest.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).expect("list an unpacked directory") {
            let path = entry.expect("read an unpacked entry").path();
            let rel = path
                .strip_prefix(dest)
                .expect("entries lie under dest")
                .to_str()
                .expect("generated paths are UTF-8")
                .to_owned();
            let metadata = fs::symlink_metadata(&path).expect("stat an unpacked entry");
            if metadata.is_dir() {
                dirs.insert(rel);
                pending.push(path);
            } else {
                assert!(metadata.is_file(), "not a regular file: {rel}");
                let contents = fs::read(&path).expect("read an unpacked file");
                let executable = metadata.permissions().mode() & 0o111 != 0;
                files.insert(
                    rel,
                    ExpectedFile {
                        contents,
                        executable,
                    },
                );
            }
        }
    }
    (files, dirs)
}
