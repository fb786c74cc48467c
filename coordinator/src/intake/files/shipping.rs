//! Resolving the paths inputs write to bundle-relative paths that stay inside the bundle root
//! (through `..` and symlinks), and shipping the files and directories they name.

use std::fs;
use std::path::{Path, PathBuf};

use cowork_core::plan::materialize::{base_of, join_rel, normalize_rel};
use cowork_core::prepared::InputError;
use cowork_fabric::bundle::check_entry_path;
use cowork_schema::session::{PathAnchor, PathField, PathKind};

use super::{
    Ctx, Origin, Refusal, display_rel, is_env_file, normalize_absolute, path_to_rel, plain_error,
};

impl Ctx {
    /// Maps a path the user typed (relative to the cwd) to a bundle-relative path.
    pub(super) fn rel_of_user_path(&mut self, path: &Path, what: &str) -> Option<String> {
        let absolute = normalize_absolute(&self.cwd.join(path));
        // Lexically first (keeps the user's spelling), then through symlinks, for a root or a
        // target spelled through a symlinked directory.
        let lexical = absolute.strip_prefix(&self.root).ok();
        let inside = lexical.and_then(path_to_rel).or_else(|| {
            let real = fs::canonicalize(&absolute).ok()?;
            real.strip_prefix(&self.canonical_root)
                .ok()
                .and_then(path_to_rel)
        });
        if inside.is_some() {
            return inside;
        }
        // Inside the root but not expressible as a bundle path: say so, not "outside".
        if lexical.is_some_and(|rel| rel.to_str().is_none()) {
            self.errors.push(plain_error(
                path,
                &format!("{what}'s path is not UTF-8; a bundle can only hold UTF-8 names"),
            ));
        } else {
            self.errors.push(InputError {
                hint: Some(self.bundle_root_hint()),
                ..plain_error(path, &format!("{what} lies outside the bundle root"))
            });
        }
        None
    }

    /// Checks that a user-typed path stays inside the root once symlinks are resolved.
    pub(super) fn check_inside(&mut self, shown: &Path, rel: &str) -> Option<()> {
        match fs::canonicalize(self.root.join(rel)) {
            Ok(real) if real.starts_with(&self.canonical_root) => Some(()),
            Ok(_) => {
                self.errors.push(InputError {
                    hint: Some(self.bundle_root_hint()),
                    ..plain_error(
                        shown,
                        "resolves (through a symlink) outside the bundle root",
                    )
                });
                None
            }
            Err(e) => {
                self.errors
                    .push(plain_error(shown, &format!("cannot be read: {e}")));
                None
            }
        }
    }

    /// Resolves one path field of a file and ships what it names.
    pub(super) fn ship_path_field(&mut self, file_rel: &str, dir: &str, field: &PathField) {
        let origin = Origin {
            file_rel,
            key: &field.key,
            position: field.position,
        };
        if field.anchor == PathAnchor::WorkerCwd {
            let message = if field.value.starts_with('~') || Path::new(&field.value).is_absolute() {
                "names a path outside the bundle; a worker cannot reach it"
            } else {
                "is resolved against the worker's working directory, not the session file, so a \
                 relative value cannot be shipped"
            };
            self.error_at(
                &origin,
                message.to_owned(),
                Some("projects[].from is not supported in fleet batches".to_owned()),
            );
            return;
        }
        let Some(rel) = self.resolve(&origin, dir, &field.value, field.kind) else {
            return;
        };
        self.ship(&origin, &rel);
    }

    /// Resolves `value`, written in a file whose directory is `dir`, to a bundle-relative path
    /// that exists, has the right kind and stays inside the root through symlinks.
    pub(super) fn resolve(
        &mut self,
        origin: &Origin<'_>,
        dir: &str,
        value: &str,
        kind: PathKind,
    ) -> Option<String> {
        match self.try_resolve(dir, value, kind) {
            Ok(rel) => Some(rel),
            Err(refusal) => {
                let hint = Some(self.bundle_root_hint());
                let (message, hint) = match refusal {
                    Refusal::Absolute => (
                        format!("absolute path {value:?} cannot be shipped in a bundle"),
                        hint,
                    ),
                    Refusal::Tilde => (
                        format!(
                            "{value:?}: `~` paths are not supported; they would name the worker's home directory"
                        ),
                        hint,
                    ),
                    Refusal::Escapes => {
                        (format!("{value:?} resolves outside the bundle root"), hint)
                    }
                    Refusal::SymlinkEscapes(rel) => (
                        format!(
                            "{value:?} resolves through a symlink ({rel}) outside the bundle root"
                        ),
                        hint,
                    ),
                    Refusal::Missing => (format!("{value:?} does not exist"), None),
                    Refusal::WrongKind(expected) => (format!("{value:?} is not {expected}"), None),
                    Refusal::Other(message) => (format!("{value:?}: {message}"), None),
                };
                self.error_at(origin, message, hint);
                None
            }
        }
    }

    fn try_resolve(&self, dir: &str, value: &str, kind: PathKind) -> Result<String, Refusal> {
        if value.starts_with('~') {
            return Err(Refusal::Tilde);
        }
        if Path::new(value).is_absolute() {
            return Err(Refusal::Absolute);
        }
        let rel = normalize_rel(dir, value).ok_or(Refusal::Escapes)?;
        let path = self.root.join(&rel);
        let metadata = match fs::metadata(&path) {
            Ok(metadata) => metadata,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Refusal::Missing),
            Err(e) => return Err(Refusal::Other(e.to_string())),
        };
        match kind {
            PathKind::File if !metadata.is_file() => return Err(Refusal::WrongKind("a file")),
            PathKind::Dir if !metadata.is_dir() => return Err(Refusal::WrongKind("a directory")),
            PathKind::Any if !metadata.is_file() && !metadata.is_dir() => {
                return Err(Refusal::WrongKind("a file or a directory"));
            }
            _ => {}
        }
        match fs::canonicalize(&path) {
            Ok(real) if real.starts_with(&self.canonical_root) => Ok(rel),
            Ok(_) => Err(Refusal::SymlinkEscapes(rel)),
            Err(e) => Err(Refusal::Other(e.to_string())),
        }
    }

    /// Ships a resolved file or directory.
    pub(super) fn ship(&mut self, origin: &Origin<'_>, rel: &str) {
        if self.root.join(rel).is_dir() {
            let mut ancestors = Vec::new();
            self.walk(origin, rel, &mut ancestors);
        } else {
            self.ship_file(origin, rel);
        }
    }

    /// Ships one file named by an input, refusing `.env` files and unshippable names.
    pub(super) fn ship_file(&mut self, origin: &Origin<'_>, rel: &str) -> Option<()> {
        if is_env_file(base_of(rel)) {
            self.error_at(
                origin,
                format!("{rel} is a .env file; credentials come from the worker's environment and are never shipped"),
                None,
            );
            return None;
        }
        if let Err(reason) = check_entry_path(rel) {
            self.error_at(
                origin,
                format!("{rel} cannot be stored in a bundle: {reason}"),
                None,
            );
            return None;
        }
        self.files.insert(rel.to_owned());
        Some(())
    }

    /// Ships `rel` if it is a file (optional inputs such as redaction policies).
    pub(super) fn ship_if_present(&mut self, rel: &str) {
        let path = self.root.join(rel);
        let inside =
            fs::canonicalize(&path).is_ok_and(|real| real.starts_with(&self.canonical_root));
        if inside && path.is_file() {
            self.files.insert(rel.to_owned());
        }
    }

    /// Ships every file under a directory, recursively: `.git` and `.env` files are skipped,
    /// symlinks are followed when they stay inside the root.
    fn walk(&mut self, origin: &Origin<'_>, rel: &str, ancestors: &mut Vec<PathBuf>) {
        let path = self.root.join(rel);
        let real = match fs::canonicalize(&path) {
            Ok(real) => real,
            Err(e) => {
                self.error_at(
                    origin,
                    format!("cannot read {}: {e}", display_rel(rel)),
                    None,
                );
                return;
            }
        };
        // A symlink back to an ancestor would recurse forever; its files are shipped once
        // through the ancestor already.
        if ancestors.contains(&real) {
            return;
        }
        let listing = match fs::read_dir(&path) {
            Ok(listing) => listing,
            Err(e) => {
                self.error_at(
                    origin,
                    format!("cannot list {}: {e}", display_rel(rel)),
                    None,
                );
                return;
            }
        };
        let mut names = Vec::new();
        for entry in listing {
            match entry {
                Ok(entry) => names.push(entry.file_name()),
                Err(e) => {
                    self.error_at(
                        origin,
                        format!("cannot list {}: {e}", display_rel(rel)),
                        None,
                    );
                    return;
                }
            }
        }
        names.sort();
        ancestors.push(real);
        for name in names {
            let Some(name) = name.to_str() else {
                self.error_at(
                    origin,
                    format!("{} holds a file name that is not UTF-8", display_rel(rel)),
                    None,
                );
                continue;
            };
            if name == ".git" || is_env_file(name) {
                continue;
            }
            let child = join_rel(rel, name);
            if let Err(reason) = check_entry_path(&child) {
                self.error_at(
                    origin,
                    format!("{child} cannot be stored in a bundle: {reason}"),
                    None,
                );
                continue;
            }
            let child_path = self.root.join(&child);
            let metadata = match fs::metadata(&child_path) {
                Ok(metadata) => metadata,
                Err(e) => {
                    self.error_at(origin, format!("cannot read {child}: {e}"), None);
                    continue;
                }
            };
            match fs::canonicalize(&child_path) {
                Ok(real) if real.starts_with(&self.canonical_root) => {}
                _ => {
                    self.error_at(
                        origin,
                        format!("{child} is a symlink that resolves outside the bundle root"),
                        Some(self.bundle_root_hint()),
                    );
                    continue;
                }
            }
            if metadata.is_dir() {
                self.walk(origin, &child, ancestors);
            } else if metadata.is_file() {
                self.files.insert(child);
            } else {
                self.error_at(
                    origin,
                    format!("{child} is not a regular file or directory"),
                    None,
                );
            }
        }
        ancestors.pop();
    }
}
