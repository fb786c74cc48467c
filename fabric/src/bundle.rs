//! Bundles: every input of a batch as one deterministic `tar.zst`, addressed by its sha256.
//!
//! [`pack`] builds the bundle from a root directory, a set of bundle-relative files and the
//! planner's derived files. The same inputs always give the same bytes: entries are sorted by
//! path, every parent directory gets its own entry, mtime, uid and gid are 0, user and group
//! names are empty, modes are 0644 (0755 for executables and directories), and zstd runs at
//! level 3 on one thread. A symlink in the set is stored as the regular file it points to, and
//! refused when it resolves outside the root.
//!
//! [`unpack`] treats the archive as hostile. It refuses absolute paths, `..` components, every
//! link entry (the packer never writes one, so refusing them all is simpler than judging where
//! they point), device, fifo, PAX and other special entries, a GNU long name over 4096 bytes
//! (before reading it), more than `max_entries` entries, a file over `max_file_bytes`, and more
//! than `max_total_bytes` in all. Decompressed bytes are counted while streaming, so a zstd bomb
//! stops after a bounded amount of work, and no header makes it buffer more than one path in
//! memory. On any error the destination holds a partial tree that must not be trusted: the
//! caller unpacks into a fresh directory and deletes it on error.
//!
//! The path checks ([`check_entry_path`]) are pure functions, tested by table.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// zstd level of every bundle. Level 3 is zstd's default: a good ratio at a fast speed, and a
/// fixed level keeps the bytes (and so the digest) stable.
const ZSTD_LEVEL: i32 = 3;

/// Longest entry path we write or accept, in bytes (Linux's `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;

/// A packed bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedBundle {
    /// The `tar.zst` bytes.
    pub bytes: Vec<u8>,
    /// Lowercase hex sha256 of `bytes`; the bundle's address (`bundles/<sha256>.tar.zst`).
    pub sha256: String,
    /// Tar entries: files plus their parent directories.
    pub n_entries: u64,
    /// Length of the uncompressed tar stream in bytes.
    pub uncompressed_size: u64,
}

/// Caps applied by [`unpack`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Most bytes of file contents in the whole bundle.
    pub max_total_bytes: u64,
    /// Most entries (files and directories).
    pub max_entries: u64,
    /// Most bytes in one file.
    pub max_file_bytes: u64,
}

impl Default for UnpackLimits {
    /// Caps for a worker: 2 GiB of contents, 200,000 entries, 512 MiB per file. A bundle holds
    /// scenarios, sessions and skill trees; these bounds are far above that and far below what
    /// would fill a worker's disk or stall it.
    fn default() -> Self {
        UnpackLimits {
            max_total_bytes: 2 << 30,
            max_entries: 200_000,
            max_file_bytes: 512 << 20,
        }
    }
}

/// What [`unpack`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnpackStats {
    pub n_entries: u64,
    pub n_files: u64,
    pub n_dirs: u64,
    /// Bytes of file contents written.
    pub total_bytes: u64,
}

/// Why an entry path is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryPathError {
    #[error("empty path")]
    Empty,
    #[error("path longer than 4096 bytes")]
    TooLong,
    #[error("absolute path")]
    Absolute,
    #[error("`..` component")]
    ParentComponent,
    #[error("`.` component")]
    CurrentComponent,
    #[error("empty component (`//` or a trailing `/`)")]
    EmptyComponent,
    #[error("backslash in path")]
    Backslash,
    #[error("control character in path")]
    ControlCharacter,
    /// `pack` only writes UTF-8 names; a lossy decoding would unpack a different name than
    /// the archive holds.
    #[error("path is not UTF-8")]
    NotUtf8,
}

/// A bundle could not be packed or unpacked.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("bundle entry {path:?}: {reason}")]
    BadPath {
        path: String,
        #[source]
        reason: EntryPathError,
    },
    #[error("bundle entry {path:?}: resolves outside the bundle root")]
    EscapesRoot { path: String },
    #[error("bundle entry {path:?}: not a regular file")]
    NotAFile { path: String },
    #[error("bundle entry {path:?}: listed twice")]
    Duplicate { path: String },
    #[error("bundle entry {path:?}: is both a file and the directory of another entry")]
    FileDirConflict { path: String },
    #[error("bundle entry {path:?}: {kind} entries are refused")]
    Link { path: String, kind: &'static str },
    #[error("bundle entry {path:?}: {kind} entries are refused")]
    Special { path: String, kind: &'static str },
    #[error("bundle entry {path:?}: more than {limit} entries")]
    TooManyEntries { path: String, limit: u64 },
    #[error("bundle entry {path:?}: {size} bytes is over the per-file limit of {limit} bytes")]
    FileTooLarge { path: String, size: u64, limit: u64 },
    #[error("bundle entry {path:?}: the bundle holds more than {limit} bytes")]
    TotalTooLarge { path: String, limit: u64 },
    #[error("bundle entry {path:?}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("bundle destination {path}: {reason}")]
    Destination { path: PathBuf, reason: String },
}

/// Checks a bundle-relative entry path: `/`-separated, relative, no `.`, `..` or empty
/// components, no backslash or control character, at most 4096 bytes.
pub fn check_entry_path(path: &str) -> Result<(), EntryPathError> {
    if path.is_empty() {
        return Err(EntryPathError::Empty);
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(EntryPathError::TooLong);
    }
    if path.starts_with('/') {
        return Err(EntryPathError::Absolute);
    }
    if path.contains('\\') {
        return Err(EntryPathError::Backslash);
    }
    if path.chars().any(char::is_control) {
        return Err(EntryPathError::ControlCharacter);
    }
    for component in path.split('/') {
        match component {
            "" => return Err(EntryPathError::EmptyComponent),
            "." => return Err(EntryPathError::CurrentComponent),
            ".." => return Err(EntryPathError::ParentComponent),
            _ => {}
        }
    }
    Ok(())
}

/// Every proper parent directory of `path` (`a/b/c` → `a`, `a/b`).
fn parent_dirs(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/')
        .map(move |(index, _)| &path[..index])
}

/// What one tar entry holds before it is written.
enum PackEntry {
    Dir,
    File { contents: Vec<u8>, executable: bool },
}

/// Packs `files` (bundle-relative paths under `root`) and `derived` (path, contents) into a
/// deterministic `tar.zst`.
pub fn pack(
    root: &Path,
    files: &BTreeSet<String>,
    derived: &[(String, Vec<u8>)],
) -> Result<PackedBundle, BundleError> {
    let canonical_root = fs::canonicalize(root).map_err(|source| BundleError::Io {
        path: root.display().to_string(),
        source,
    })?;
    let entries = collect_pack_entries(&canonical_root, files, derived)?;
    let n_entries = entries.len() as u64;
    let tar_bytes = write_tar(&entries)?;
    let bytes = zstd::stream::encode_all(tar_bytes.as_slice(), ZSTD_LEVEL).map_err(|source| {
        BundleError::Io {
            path: "(archive)".to_owned(),
            source,
        }
    })?;
    Ok(PackedBundle {
        sha256: crate::sha256_hex(&bytes),
        n_entries,
        uncompressed_size: tar_bytes.len() as u64,
        bytes,
    })
}

/// Every entry of the bundle by path: the source files, the derived files, and a directory
/// entry for each of their parents. Refuses bad paths, a derived file that repeats a path, and
/// a path that is both a file and a directory.
fn collect_pack_entries(
    canonical_root: &Path,
    files: &BTreeSet<String>,
    derived: &[(String, Vec<u8>)],
) -> Result<BTreeMap<String, PackEntry>, BundleError> {
    let mut entries: BTreeMap<String, PackEntry> = BTreeMap::new();
    for rel in files {
        check_entry_path(rel).map_err(|reason| BundleError::BadPath {
            path: rel.clone(),
            reason,
        })?;
        let (contents, executable) = read_source_file(canonical_root, rel)?;
        entries.insert(
            rel.clone(),
            PackEntry::File {
                contents,
                executable,
            },
        );
    }
    for (rel, contents) in derived {
        check_entry_path(rel).map_err(|reason| BundleError::BadPath {
            path: rel.clone(),
            reason,
        })?;
        let entry = PackEntry::File {
            contents: contents.clone(),
            executable: false,
        };
        if entries.insert(rel.clone(), entry).is_some() {
            return Err(BundleError::Duplicate { path: rel.clone() });
        }
    }
    let dirs: BTreeSet<String> = entries
        .keys()
        .flat_map(|path| parent_dirs(path))
        .map(str::to_owned)
        .collect();
    for dir in &dirs {
        if entries.contains_key(dir) {
            return Err(BundleError::FileDirConflict { path: dir.clone() });
        }
    }
    for dir in dirs {
        entries.insert(dir, PackEntry::Dir);
    }
    Ok(entries)
}

/// The uncompressed tar stream of `entries`, with the fixed headers that keep it deterministic.
fn write_tar(entries: &BTreeMap<String, PackEntry>) -> Result<Vec<u8>, BundleError> {
    let mut builder = tar::Builder::new(Vec::new());
    // BTreeMap order is byte order, so a directory always precedes its contents.
    for (path, entry) in entries {
        let io_error = |source| BundleError::Io {
            path: path.clone(),
            source,
        };
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        match entry {
            PackEntry::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                builder
                    .append_data(&mut header, path, io::empty())
                    .map_err(io_error)?;
            }
            PackEntry::File {
                contents,
                executable,
            } => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(if *executable { 0o755 } else { 0o644 });
                header.set_size(contents.len() as u64);
                builder
                    .append_data(&mut header, path, contents.as_slice())
                    .map_err(io_error)?;
            }
        }
    }
    builder.into_inner().map_err(|source| BundleError::Io {
        path: "(archive)".to_owned(),
        source,
    })
}

/// Reads one source file, following symlinks but refusing any that resolve outside the root.
fn read_source_file(canonical_root: &Path, rel: &str) -> Result<(Vec<u8>, bool), BundleError> {
    let io_error = |source| BundleError::Io {
        path: rel.to_owned(),
        source,
    };
    let resolved = fs::canonicalize(canonical_root.join(rel)).map_err(io_error)?;
    if !resolved.starts_with(canonical_root) {
        return Err(BundleError::EscapesRoot {
            path: rel.to_owned(),
        });
    }
    let metadata = fs::metadata(&resolved).map_err(io_error)?;
    if !metadata.is_file() {
        return Err(BundleError::NotAFile {
            path: rel.to_owned(),
        });
    }
    let contents = fs::read(&resolved).map_err(io_error)?;
    Ok((contents, is_executable(&metadata)))
}

#[cfg(unix)]
fn is_executable(metadata: &fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    metadata.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_metadata: &fs::Metadata) -> bool {
    false
}

/// A reader that fails once more than `limit` bytes have passed through it, and remembers
/// that it did so the caller can tell a cap from a corrupt stream.
struct CappedReader<R> {
    inner: R,
    remaining: u64,
    tripped: Rc<Cell<bool>>,
}

impl<R: Read> Read for CappedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 {
            // Probe one byte: a stream that ends exactly at the cap is fine.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => {
                    self.tripped.set(true);
                    Err(io::Error::other("decompressed bundle exceeds its size cap"))
                }
            };
        }
        let max = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        self.remaining -= n as u64;
        Ok(n)
    }
}

/// Unpacks a bundle into `dest`, which must not exist or be an empty directory.
///
/// On error, `dest` may hold a partial tree: the caller must delete it and trust nothing in it.
pub fn unpack(
    bytes: &[u8],
    dest: &Path,
    limits: &UnpackLimits,
) -> Result<UnpackStats, BundleError> {
    unpack_reader(bytes, dest, limits)
}

/// [`unpack`] from a reader of the archive's bytes (a submitted bundle streamed to disk is
/// unpacked from its file, never held in memory whole).
pub fn unpack_reader(
    archive: impl io::Read,
    dest: &Path,
    limits: &UnpackLimits,
) -> Result<UnpackStats, BundleError> {
    prepare_destination(dest)?;
    let decoder = zstd::stream::read::Decoder::new(archive).map_err(|source| BundleError::Io {
        path: "(archive)".to_owned(),
        source,
    })?;
    let tripped = Rc::new(Cell::new(false));
    let reader = CappedReader {
        inner: decoder,
        remaining: decompressed_cap(limits),
        tripped: Rc::clone(&tripped),
    };
    let errors = StreamErrors {
        tripped,
        max_total_bytes: limits.max_total_bytes,
    };
    let mut archive = tar::Archive::new(reader);
    let mut stats = UnpackStats::default();
    let mut last_path = "(archive)".to_owned();
    // Raw mode: otherwise the tar reader buffers a GNU long-name, long-link or PAX entry whole,
    // whatever size its header claims, up to the stream cap: gigabytes of memory from a bundle
    // of kilobytes. Long names (which `pack` writes for paths over 100 bytes) are read below
    // under `MAX_PATH_BYTES`; long links and PAX headers, which `pack` never writes, are
    // refused like every other special entry.
    let entries = archive
        .entries()
        .map_err(|e| errors.error(&last_path, e))?
        .raw(true);
    // The path a GNU long-name entry gives to the entry that follows it.
    let mut long_name: Option<Vec<u8>> = None;
    for entry in entries {
        let mut entry = entry.map_err(|e| errors.error(&last_path, e))?;
        // Like the tar reader, only GNU and ustar headers can carry a long name.
        let header = entry.header();
        let extended = header.as_gnu().is_some() || header.as_ustar().is_some();
        if extended && header.entry_type().is_gnu_longname() {
            let header_path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            if long_name.is_some() {
                return Err(malformed(
                    &header_path,
                    "two long-name entries describe the same entry",
                ));
            }
            long_name = Some(read_long_name(&mut entry, &header_path, &errors)?);
            last_path = header_path;
            continue;
        }
        let path_bytes = match long_name.take() {
            Some(name) => name,
            None => entry.path_bytes().into_owned(),
        };
        let raw_path = String::from_utf8_lossy(&path_bytes).into_owned();
        if std::str::from_utf8(&path_bytes).is_err() {
            return Err(BundleError::BadPath {
                path: raw_path,
                reason: EntryPathError::NotUtf8,
            });
        }
        last_path.clone_from(&raw_path);
        unpack_entry(&mut entry, raw_path, dest, limits, &errors, &mut stats)?;
    }
    if long_name.is_some() {
        return Err(BundleError::Io {
            path: last_path,
            source: io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "archive ends after a long-name entry",
            ),
        });
    }
    Ok(stats)
}

/// The most decompressed bytes a bundle within `limits` can take.
///
/// The tar stream holds the file contents plus per-entry overhead: a header, padding to a
/// 512-byte block, and at most a long-name header and name of `MAX_PATH_BYTES`. Capping the
/// decompressed stream at that bound stops a zstd bomb early, whatever the headers claim.
fn decompressed_cap(limits: &UnpackLimits) -> u64 {
    let per_entry_overhead = 3 * 512 + MAX_PATH_BYTES as u64;
    limits
        .max_total_bytes
        .saturating_add(
            limits
                .max_entries
                .saturating_add(1)
                .saturating_mul(per_entry_overhead),
        )
        .saturating_add(2 * 512 * 10)
}

/// Turns a read error of the decompressed stream into the error it stands for: the total-size
/// cap when the [`CappedReader`] tripped, else the IO error itself.
struct StreamErrors {
    tripped: Rc<Cell<bool>>,
    max_total_bytes: u64,
}

impl StreamErrors {
    fn error(&self, path: &str, source: io::Error) -> BundleError {
        if self.tripped.get() {
            BundleError::TotalTooLarge {
                path: path.to_owned(),
                limit: self.max_total_bytes,
            }
        } else {
            BundleError::Io {
                path: path.to_owned(),
                source,
            }
        }
    }
}

/// A malformed long-name entry at `path`.
fn malformed(path: &str, message: &str) -> BundleError {
    BundleError::Io {
        path: path.to_owned(),
        source: io::Error::new(io::ErrorKind::InvalidData, message.to_owned()),
    }
}

/// Reads the name a GNU long-name entry carries (without its trailing NUL), refusing one over
/// `MAX_PATH_BYTES` before reading it.
fn read_long_name<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    header_path: &str,
    errors: &StreamErrors,
) -> Result<Vec<u8>, BundleError> {
    // `pack`, like GNU tar, ends the name with a NUL; refuse a longer one unread.
    let size = entry.size();
    if size > MAX_PATH_BYTES as u64 + 1 {
        return Err(BundleError::BadPath {
            path: header_path.to_owned(),
            reason: EntryPathError::TooLong,
        });
    }
    let mut name = Vec::new();
    entry
        .by_ref()
        .take(size)
        .read_to_end(&mut name)
        .map_err(|e| errors.error(header_path, e))?;
    if name.len() as u64 != size {
        return Err(malformed(
            header_path,
            "archive ends inside a long-name entry",
        ));
    }
    if name.last() == Some(&0) {
        name.pop();
    }
    Ok(name)
}

/// Unpacks one file or directory entry at `raw_path` (its UTF-8 path) under `dest`, after the
/// entry-count cap, the refused entry types and the path checks.
fn unpack_entry<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    raw_path: String,
    dest: &Path,
    limits: &UnpackLimits,
    errors: &StreamErrors,
    stats: &mut UnpackStats,
) -> Result<(), BundleError> {
    stats.n_entries += 1;
    if stats.n_entries > limits.max_entries {
        return Err(BundleError::TooManyEntries {
            path: raw_path,
            limit: limits.max_entries,
        });
    }
    let entry_type = entry.header().entry_type();
    if let Some(kind) = refused_kind(entry_type) {
        return Err(if entry_type.is_symlink() || entry_type.is_hard_link() {
            BundleError::Link {
                path: raw_path,
                kind,
            }
        } else {
            BundleError::Special {
                path: raw_path,
                kind,
            }
        });
    }
    let is_dir = entry_type.is_dir();
    // Directory names conventionally end in `/`; strip one before the path check.
    let rel = if is_dir {
        raw_path.strip_suffix('/').unwrap_or(&raw_path)
    } else {
        raw_path.as_str()
    };
    check_entry_path(rel).map_err(|reason| BundleError::BadPath {
        path: raw_path.clone(),
        reason,
    })?;
    let target = dest.join(rel);
    if is_dir {
        fs::create_dir_all(&target).map_err(|source| BundleError::Io {
            path: raw_path.clone(),
            source,
        })?;
        stats.n_dirs += 1;
        return Ok(());
    }
    write_file_entry(entry, raw_path, &target, limits, errors, stats)
}

/// Writes one file entry to `target` (a new file), within the per-file and total size caps.
fn write_file_entry<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    raw_path: String,
    target: &Path,
    limits: &UnpackLimits,
    errors: &StreamErrors,
    stats: &mut UnpackStats,
) -> Result<(), BundleError> {
    let io_error = |source| BundleError::Io {
        path: raw_path.clone(),
        source,
    };
    let size = entry.size();
    if size > limits.max_file_bytes {
        return Err(BundleError::FileTooLarge {
            path: raw_path,
            size,
            limit: limits.max_file_bytes,
        });
    }
    if stats.total_bytes.saturating_add(size) > limits.max_total_bytes {
        return Err(BundleError::TotalTooLarge {
            path: raw_path,
            limit: limits.max_total_bytes,
        });
    }
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent).map_err(io_error)?;
    }
    let executable = entry
        .header()
        .mode()
        .map(|m| m & 0o111 != 0)
        .unwrap_or(false);
    let mut file = create_new_file(target, executable).map_err(|source| {
        if source.kind() == io::ErrorKind::AlreadyExists {
            BundleError::Duplicate {
                path: raw_path.clone(),
            }
        } else {
            io_error(source)
        }
    })?;
    let written = io::copy(&mut entry.by_ref().take(size), &mut file)
        .map_err(|e| errors.error(&raw_path, e))?;
    if written != size {
        return Err(BundleError::Io {
            path: raw_path,
            source: io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "archive ends inside the entry",
            ),
        });
    }
    file.flush().map_err(io_error)?;
    stats.total_bytes += written;
    stats.n_files += 1;
    Ok(())
}

/// The name of an entry type [`unpack`] refuses, or `None` for files and directories.
fn refused_kind(entry_type: tar::EntryType) -> Option<&'static str> {
    if entry_type.is_file() || entry_type.is_contiguous() || entry_type.is_dir() {
        return None;
    }
    Some(if entry_type.is_symlink() {
        "symlink"
    } else if entry_type.is_hard_link() {
        "hard link"
    } else if entry_type.is_character_special() {
        "character device"
    } else if entry_type.is_block_special() {
        "block device"
    } else if entry_type.is_fifo() {
        "fifo"
    } else if entry_type.is_gnu_sparse() {
        "sparse file"
    } else if entry_type.is_pax_local_extensions() || entry_type.is_pax_global_extensions() {
        "pax header"
    } else if entry_type.is_gnu_longlink() {
        "long link name"
    } else {
        "unsupported"
    })
}

/// Creates `dest` or checks that it is an empty directory, so that nothing already there can
/// redirect a write (an old symlink, say).
fn prepare_destination(dest: &Path) -> Result<(), BundleError> {
    let destination_error = |reason: String| BundleError::Destination {
        path: dest.to_owned(),
        reason,
    };
    match fs::symlink_metadata(dest) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(dest).map_err(|e| destination_error(format!("cannot create: {e}")))
        }
        Err(e) => Err(destination_error(format!("cannot inspect: {e}"))),
        Ok(metadata) if !metadata.is_dir() => Err(destination_error("not a directory".to_owned())),
        Ok(_) => {
            let mut listing =
                fs::read_dir(dest).map_err(|e| destination_error(format!("cannot list: {e}")))?;
            if listing.next().is_some() {
                return Err(destination_error("not empty".to_owned()));
            }
            Ok(())
        }
    }
}

#[cfg(unix)]
fn create_new_file(path: &Path, executable: bool) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if executable { 0o755 } else { 0o644 })
        .open(path)
}

#[cfg(not(unix))]
fn create_new_file(path: &Path, _executable: bool) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

#[cfg(test)]
mod tests;
