//! Tests of bundle packing and unpacking: path checks, round trip, determinism and hostile
//! archives built header by header.

use super::*;

fn check_path(path: &str, expect: Result<(), EntryPathError>) {
    assert_eq!(check_entry_path(path), expect, "path {path:?}");
}

#[test]
fn entry_path_checks() {
    use EntryPathError::*;
    check_path("a", Ok(()));
    check_path("a/b.yaml", Ok(()));
    check_path(".cowork-cell-0-x.yaml", Ok(()));
    check_path("a/..b/c..", Ok(()));
    check_path("", Err(Empty));
    check_path("/etc/x", Err(Absolute));
    check_path("../x", Err(ParentComponent));
    check_path("a/../../x", Err(ParentComponent));
    check_path("a/..", Err(ParentComponent));
    check_path("./a", Err(CurrentComponent));
    check_path("a//b", Err(EmptyComponent));
    check_path("a/", Err(EmptyComponent));
    check_path("a\\..\\b", Err(Backslash));
    check_path("a\nb", Err(ControlCharacter));
    check_path(&"x".repeat(4097), Err(TooLong));
}

#[test]
fn parent_dirs_lists_every_prefix() {
    let dirs: Vec<&str> = parent_dirs("a/b/c.txt").collect();
    assert_eq!(dirs, ["a", "a/b"]);
    assert_eq!(parent_dirs("top").count(), 0);
}

fn write(root: &Path, rel: &str, contents: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("fixture paths have a parent"))
        .expect("create fixture dir");
    fs::write(&path, contents).expect("write fixture file");
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod fixture");
}

/// A small input tree: a scenario, a session, a skill with an executable script, a symlink to
/// a file inside the root.
fn sample_tree(root: &Path) -> BTreeSet<String> {
    write(
        root,
        "scenarios/s.yaml",
        "prompt: hi\nsession: ../sessions/x.yaml\n",
    );
    write(root, "sessions/x.yaml", "model: m\n");
    write(root, "skills/k/SKILL.md", "# skill\n");
    write(root, "skills/k/scripts/run.sh", "#!/bin/sh\necho hi\n");
    set_mode(&root.join("skills/k/scripts/run.sh"), 0o755);
    std::os::unix::fs::symlink("../sessions/x.yaml", root.join("skills/link.yaml"))
        .expect("symlink");
    [
        "scenarios/s.yaml",
        "sessions/x.yaml",
        "skills/k/SKILL.md",
        "skills/k/scripts/run.sh",
        "skills/link.yaml",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}

fn limits() -> UnpackLimits {
    UnpackLimits {
        max_total_bytes: 1 << 20,
        max_entries: 100,
        max_file_bytes: 1 << 20,
    }
}

#[test]
fn round_trip_keeps_contents_modes_and_derived_files() {
    let src = tempfile::tempdir().expect("tempdir");
    let files = sample_tree(src.path());
    let derived = vec![(
        "scenarios/.cowork-cell-0-s.yaml".to_owned(),
        b"{\"prompt\": \"hi\"}\n".to_vec(),
    )];
    let packed = pack(src.path(), &files, &derived).expect("pack");
    // 6 files + dirs scenarios, sessions, skills, skills/k, skills/k/scripts.
    assert_eq!(packed.n_entries, 11);
    assert_eq!(packed.sha256.len(), 64);

    let out = tempfile::tempdir().expect("tempdir");
    let dest = out.path().join("bundle");
    let stats = unpack(&packed.bytes, &dest, &limits()).expect("unpack");
    assert_eq!(stats.n_files, 6);
    assert_eq!(stats.n_dirs, 5);
    assert_eq!(stats.n_entries, 11);
    for rel in &files {
        let original = fs::read(src.path().join(rel)).expect("read original");
        let copy = fs::read(dest.join(rel)).expect("read copy");
        assert_eq!(original, copy, "{rel}");
    }
    assert_eq!(
        fs::read_to_string(dest.join("scenarios/.cowork-cell-0-s.yaml")).expect("derived"),
        "{\"prompt\": \"hi\"}\n"
    );
    let link = fs::symlink_metadata(dest.join("skills/link.yaml")).expect("link copy");
    assert!(
        link.is_file(),
        "a symlink is stored as the file it points to"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |rel: &str| {
        fs::metadata(dest.join(rel))
            .expect("metadata")
            .permissions()
            .mode()
            & 0o111
    };
    assert_ne!(mode("skills/k/scripts/run.sh"), 0);
    assert_eq!(mode("skills/k/SKILL.md"), 0);
}

#[test]
fn identical_inputs_give_identical_bytes() {
    let first = tempfile::tempdir().expect("tempdir");
    let second = tempfile::tempdir().expect("tempdir");
    let files = sample_tree(first.path());
    sample_tree(second.path());
    // Rewriting a file changes its mtime but not the bundle.
    write(second.path(), "skills/k/SKILL.md", "# skill\n");
    let a = pack(first.path(), &files, &[]).expect("pack a");
    let b = pack(second.path(), &files, &[]).expect("pack b");
    assert_eq!(a, b);
    write(second.path(), "skills/k/SKILL.md", "# changed\n");
    let c = pack(second.path(), &files, &[]).expect("pack c");
    assert_ne!(a.sha256, c.sha256);
}

#[test]
fn pack_refuses_escapes_duplicates_and_conflicts() {
    let outer = tempfile::tempdir().expect("tempdir");
    let root = outer.path().join("root");
    write(&root, "a.txt", "a");
    write(outer.path(), "secret.txt", "s");
    std::os::unix::fs::symlink("../secret.txt", root.join("escape.txt")).expect("symlink");
    write(&root, "d/x.txt", "x");
    let set = |paths: &[&str]| {
        paths
            .iter()
            .map(|p| (*p).to_owned())
            .collect::<BTreeSet<String>>()
    };

    let error = pack(&root, &set(&["escape.txt"]), &[]).expect_err("escaping symlink");
    assert!(
        matches!(error, BundleError::EscapesRoot { ref path } if path == "escape.txt"),
        "{error}"
    );
    let error = pack(&root, &set(&["d"]), &[]).expect_err("a directory is not a file");
    assert!(matches!(error, BundleError::NotAFile { .. }), "{error}");
    let error = pack(&root, &set(&["../secret.txt"]), &[]).expect_err("dotdot");
    assert!(
        matches!(
            error,
            BundleError::BadPath {
                reason: EntryPathError::ParentComponent,
                ..
            }
        ),
        "{error}"
    );
    let error =
        pack(&root, &set(&["a.txt"]), &[("a.txt".to_owned(), Vec::new())]).expect_err("duplicate");
    assert!(
        matches!(error, BundleError::Duplicate { ref path } if path == "a.txt"),
        "{error}"
    );
    let error = pack(
        &root,
        &set(&["a.txt"]),
        &[("a.txt/b".to_owned(), Vec::new())],
    )
    .expect_err("conflict");
    assert!(
        matches!(error, BundleError::FileDirConflict { ref path } if path == "a.txt"),
        "{error}"
    );
}

/// One raw tar entry of a hostile archive.
struct RawEntry<'a> {
    name: &'a [u8],
    kind: tar::EntryType,
    data: &'a [u8],
    link: &'a [u8],
    /// Declared size, when it should differ from `data.len()`.
    size: Option<u64>,
    /// A GNU header (needed for long-name entries) instead of an old-style one.
    gnu: bool,
}

fn raw(name: &'static [u8], kind: tar::EntryType, data: &'static [u8]) -> RawEntry<'static> {
    RawEntry {
        name,
        kind,
        data,
        link: b"",
        size: None,
        gnu: false,
    }
}

/// Builds a `tar.zst` entry by entry with the low-level header API, bypassing the path checks
/// that `Header::set_path` would apply.
fn hostile_archive(entries: &[RawEntry<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = if entry.gnu {
            tar::Header::new_gnu()
        } else {
            tar::Header::new_old()
        };
        let old = header.as_old_mut();
        old.name[..entry.name.len()].copy_from_slice(entry.name);
        old.linkname[..entry.link.len()].copy_from_slice(entry.link);
        header.set_entry_type(entry.kind);
        header.set_mode(0o644);
        header.set_size(entry.size.unwrap_or(entry.data.len() as u64));
        header.set_cksum();
        builder
            .append(&header, entry.data)
            .expect("append raw entry");
    }
    let tar_bytes = builder.into_inner().expect("finish tar");
    zstd::stream::encode_all(tar_bytes.as_slice(), 3).expect("compress")
}

/// Unpacks `archive` with `limits` into a fresh dir and returns the error text.
fn refuse(archive: &[u8], limits: &UnpackLimits) -> String {
    let out = tempfile::tempdir().expect("tempdir");
    let error = unpack(archive, &out.path().join("d"), limits)
        .expect_err("hostile archive must be refused");
    error.to_string()
}

#[test]
fn hostile_archives_are_refused() {
    use tar::EntryType;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            hostile_archive(&[raw(b"../x", EntryType::Regular, b"x")]),
            "bundle entry \"../x\": `..` component",
        ),
        (
            hostile_archive(&[raw(b"/etc/x", EntryType::Regular, b"x")]),
            "bundle entry \"/etc/x\": absolute path",
        ),
        (
            hostile_archive(&[RawEntry {
                link: b"../../x",
                ..raw(b"l", EntryType::Symlink, b"")
            }]),
            "bundle entry \"l\": symlink entries are refused",
        ),
        (
            hostile_archive(&[RawEntry {
                link: b"/etc/passwd",
                ..raw(b"h", EntryType::Link, b"")
            }]),
            "bundle entry \"h\": hard link entries are refused",
        ),
        (
            hostile_archive(&[raw(b"dev", EntryType::Char, b"")]),
            "bundle entry \"dev\": character device entries are refused",
        ),
        (
            hostile_archive(&[raw(b"blk", EntryType::Block, b"")]),
            "bundle entry \"blk\": block device entries are refused",
        ),
        (
            hostile_archive(&[raw(b"p", EntryType::Fifo, b"")]),
            "bundle entry \"p\": fifo entries are refused",
        ),
        (
            hostile_archive(&[
                raw(b"a", EntryType::Regular, b"1"),
                raw(b"a", EntryType::Regular, b"2"),
            ]),
            "bundle entry \"a\": listed twice",
        ),
    ];
    for (archive, expect) in &cases {
        assert_eq!(refuse(archive, &limits()), *expect);
    }
}

#[test]
fn caps_are_enforced() {
    use tar::EntryType;
    let small = UnpackLimits {
        max_total_bytes: 10,
        max_entries: 2,
        max_file_bytes: 6,
    };
    let three = hostile_archive(&[
        raw(b"a", EntryType::Regular, b"1"),
        raw(b"b", EntryType::Regular, b"2"),
        raw(b"c", EntryType::Regular, b"3"),
    ]);
    assert_eq!(
        refuse(&three, &small),
        "bundle entry \"c\": more than 2 entries"
    );
    let big_file = hostile_archive(&[raw(b"big", EntryType::Regular, b"1234567")]);
    assert_eq!(
        refuse(&big_file, &small),
        "bundle entry \"big\": 7 bytes is over the per-file limit of 6 bytes"
    );
    let total = hostile_archive(&[
        raw(b"a", EntryType::Regular, b"123456"),
        raw(b"b", EntryType::Regular, b"12345"),
    ]);
    assert_eq!(
        refuse(&total, &small),
        "bundle entry \"b\": the bundle holds more than 10 bytes"
    );

    // A GNU long name of 1 MiB is refused from its header, before it is decompressed (see
    // `long_names_are_bounded_before_reading`).
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(EntryType::GNULongName);
    header.set_size(1 << 20);
    header.set_cksum();
    builder
        .append(&header, io::repeat(b'a').take(1 << 20))
        .expect("long name entry");
    let tar_bytes = builder.into_inner().expect("finish tar");
    let bomb = zstd::stream::encode_all(tar_bytes.as_slice(), 19).expect("compress");
    assert!(
        bomb.len() < 4096,
        "the bomb is small compressed: {}",
        bomb.len()
    );
    assert_eq!(
        refuse(&bomb, &small),
        "bundle entry \"\": path longer than 4096 bytes"
    );
}

/// A GNU long-name entry holding `name` (with its NUL, if any).
fn long_name(name: &[u8]) -> RawEntry<'_> {
    RawEntry {
        name: b"././@LongLink",
        kind: tar::EntryType::GNULongName,
        data: name,
        link: b"",
        size: None,
        gnu: true,
    }
}

/// Regression (found while writing the `bundle_unpack` fuzz target): the tar reader buffered a
/// GNU long-name entry whole, whatever size its header claimed, so a 32 KiB bundle holding a
/// 1 GiB long name made `unpack` allocate over 1.5 GB under the default limits. Long names are
/// now checked against `MAX_PATH_BYTES` from the header, and PAX headers are refused.
#[test]
fn long_names_are_bounded_before_reading() {
    use tar::EntryType;
    // The header claims 1 GiB but the archive holds 1 KiB: the refusal must come from the
    // header (the old reader failed at the end of the stream instead, after buffering it).
    let huge = hostile_archive(&[RawEntry {
        size: Some(1 << 30),
        ..long_name(&[b'n'; 1024])
    }]);
    assert_eq!(
        refuse(&huge, &UnpackLimits::default()),
        "bundle entry \"././@LongLink\": path longer than 4096 bytes"
    );

    let name = format!("{}/{}.yaml", "d".repeat(120), "n".repeat(150));
    let name_entry = format!("{name}\0").into_bytes();
    let ok = hostile_archive(&[
        long_name(&name_entry),
        raw(b"ignored", EntryType::Regular, b"long"),
    ]);
    let out = tempfile::tempdir().expect("tempdir");
    unpack(&ok, &out.path().join("d"), &limits()).expect("a long name within the cap unpacks");
    assert_eq!(
        fs::read(out.path().join("d").join(&name)).expect("file at the long name"),
        b"long"
    );

    let escaping = hostile_archive(&[
        long_name(b"../escaped\0"),
        raw(b"innocent", EntryType::Regular, b"x"),
    ]);
    assert_eq!(
        refuse(&escaping, &limits()),
        "bundle entry \"../escaped\": `..` component"
    );
    let twice = hostile_archive(&[
        long_name(b"a\0"),
        long_name(b"b\0"),
        raw(b"x", EntryType::Regular, b"x"),
    ]);
    assert_eq!(
        refuse(&twice, &limits()),
        "bundle entry \"././@LongLink\": two long-name entries describe the same entry"
    );
    let dangling = hostile_archive(&[long_name(b"a\0")]);
    assert_eq!(
        refuse(&dangling, &limits()),
        "bundle entry \"././@LongLink\": archive ends after a long-name entry"
    );
    let pax = hostile_archive(&[
        raw(b"PaxHeader/x", EntryType::XHeader, b"18 path=../escape\n"),
        raw(b"x", EntryType::Regular, b"x"),
    ]);
    assert_eq!(
        refuse(&pax, &limits()),
        "bundle entry \"PaxHeader/x\": pax header entries are refused"
    );
}

#[test]
fn destination_must_be_fresh() {
    let src = tempfile::tempdir().expect("tempdir");
    let files = sample_tree(src.path());
    let packed = pack(src.path(), &files, &[]).expect("pack");
    let out = tempfile::tempdir().expect("tempdir");
    write(out.path(), "old.txt", "x");
    let error = unpack(&packed.bytes, out.path(), &limits()).expect_err("non-empty destination");
    assert!(error.to_string().ends_with(": not empty"), "{error}");
}
