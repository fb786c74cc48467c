//! Fuzzes `cowork_fabric::bundle::unpack` with hostile archives.
//!
//! The first byte selects how the rest is used:
//! - even: the rest is a tar stream, which the target compresses with zstd before unpacking, so
//!   that the fuzzer mutates tar headers directly (mutating compressed bytes rarely gives a
//!   valid frame);
//! - odd: the rest is passed to `unpack` as is, which exercises the zstd decoder too.
//!
//! Each input is unpacked into `<scratch>/outer/inner/dest` of a fresh scratch directory, with
//! small [`LIMITS`]. Errors are expected and fine. Afterwards, whatever `unpack` returned, the
//! target walks the whole scratch directory and fails when:
//! - anything exists outside `dest`'s tree (an entry escaped);
//! - any symlink exists (`unpack` must never create one);
//! - anything is neither a regular file nor a directory (device, fifo, socket);
//! - a file is larger than `max_file_bytes`, the files add up to more than `max_total_bytes`,
//!   or there are more files than `max_entries`;
//! - a file has a setuid, setgid or sticky bit, or is writable by group or others;
//! - on success, the counts in `UnpackStats` disagree with the tree on disk.

#![no_main]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cowork_fabric::bundle::{UnpackLimits, UnpackStats, unpack};
use libfuzzer_sys::fuzz_target;

/// Small caps, so that every input finishes quickly and writes little.
const LIMITS: UnpackLimits = UnpackLimits {
    max_total_bytes: 64 * 1024,
    max_entries: 64,
    max_file_bytes: 16 * 1024,
};

/// What the walk of the scratch directory found.
#[derive(Debug, Default)]
struct Tree {
    n_files: u64,
    n_dirs: u64,
    total_bytes: u64,
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let compressed;
    let bundle = if mode % 2 == 0 {
        // Level 1: the level does not matter to `unpack`, and it is the fastest.
        compressed = zstd::stream::encode_all(rest, 1).expect("zstd compresses in memory");
        compressed.as_slice()
    } else {
        rest
    };
    let scratch = tempfile::tempdir().expect("create scratch dir");
    let dest = scratch.path().join("outer/inner/dest");
    fs::create_dir_all(dest.parent().expect("dest has a parent")).expect("create dest parent");

    let result = unpack(bundle, &dest, &LIMITS);

    let tree = walk(scratch.path(), &dest);
    assert!(
        tree.total_bytes <= LIMITS.max_total_bytes,
        "{} bytes on disk, over max_total_bytes (result {result:?})",
        tree.total_bytes
    );
    // Directories are not bounded by the entry cap: `create_dir_all` makes every parent a file
    // entry implies. Files are: each accepted file entry makes exactly one.
    assert!(
        tree.n_files <= LIMITS.max_entries,
        "more files on disk than max_entries: {tree:?} (result {result:?})"
    );
    if let Ok(stats) = result {
        check_stats(&stats, &tree);
    }
});

/// On success, the stats must describe the tree on disk.
fn check_stats(stats: &UnpackStats, tree: &Tree) {
    assert_eq!(
        stats.n_files, tree.n_files,
        "n_files vs disk: {stats:?} {tree:?}"
    );
    assert_eq!(
        stats.total_bytes, tree.total_bytes,
        "total_bytes vs disk: {stats:?} {tree:?}"
    );
    assert!(
        stats.n_entries <= LIMITS.max_entries,
        "more entries than the cap: {stats:?}"
    );
    assert_eq!(
        stats.n_entries,
        stats.n_files + stats.n_dirs,
        "entries are files plus dirs: {stats:?}"
    );
}

/// Walks everything under `scratch` without following links, checking that it all lies in
/// `dest`'s tree (or is one of `dest`'s ancestors the target made) and is a plain file or
/// directory. Counts the files, directories and bytes under `dest`.
fn walk(scratch: &Path, dest: &Path) -> Tree {
    let mut tree = Tree::default();
    let mut pending = vec![scratch.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let listing = fs::read_dir(&dir).expect("list a scratch directory");
        for entry in listing {
            let entry = entry.expect("read a scratch directory entry");
            let path = entry.path();
            let metadata = fs::symlink_metadata(&path).expect("stat a scratch entry");
            let inside_dest = path.starts_with(dest);
            assert!(
                inside_dest || dest.starts_with(&path),
                "entry outside the destination: {}",
                path.display()
            );
            let file_type = metadata.file_type();
            assert!(
                !file_type.is_symlink(),
                "unpack created a symlink: {}",
                path.display()
            );
            let mode = metadata.permissions().mode();
            if file_type.is_dir() {
                if inside_dest && path != dest {
                    tree.n_dirs += 1;
                }
                pending.push(path);
            } else if file_type.is_file() {
                assert!(inside_dest, "file outside the destination");
                assert_eq!(
                    mode & 0o7022,
                    0,
                    "file mode {mode:o} has special or group/other write bits: {}",
                    path.display()
                );
                assert!(
                    metadata.len() <= LIMITS.max_file_bytes,
                    "file over max_file_bytes: {} is {} bytes",
                    path.display(),
                    metadata.len()
                );
                tree.n_files += 1;
                tree.total_bytes += metadata.len();
            } else {
                panic!("unpack created a special file: {}", path.display());
            }
        }
    }
    tree
}
