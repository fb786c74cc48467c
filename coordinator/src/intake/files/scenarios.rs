//! Loading a batch's inputs: listing the targets, reading scenarios, cassettes, sessions and
//! the matrix file, and recording every problem each has.

use std::fs;
use std::path::Path;

use cowork_core::plan::materialize::{base_of, dir_of, join_rel};
use cowork_core::prepared::{InputError, PreparedMatrix, PreparedScenario, PreparedSession};
use cowork_schema::batch::BatchMode;
use cowork_schema::load::{self, LoadError, Position};
use cowork_schema::matrix::MatrixFile;
use cowork_schema::scenario::{Execution, Scenario, SessionRef, UnansweredPolicy};
use cowork_schema::session::{PathKind, Session};

use super::{Ctx, Origin, display_rel, plain_error};

/// Largest cassette we read for its frozen scenario. Cassettes inline small artifact bodies and
/// every event of a run, so they are much larger than scenario files.
const MAX_CASSETTE_BYTES: usize = 256 * 1024 * 1024;

/// The redaction policy file the CLI looks for when recording (harness-behaviour.md#job-bundle).
const REDACT_FILE: &str = ".cowork-redact.json";

impl Ctx {
    /// Lists the target (step 1 of harness-behaviour.md#job-expansion): a file as-is, a directory
    /// non-recursively.
    pub(super) fn list_targets(&mut self, target: &Path, mode: BatchMode) -> Option<Vec<String>> {
        let metadata = match fs::metadata(target) {
            Ok(metadata) => metadata,
            Err(e) => {
                self.errors.push(plain_error(
                    target,
                    &format!("target does not exist or cannot be read: {e}"),
                ));
                return None;
            }
        };
        let target_rel = self.rel_of_user_path(target, "the target")?;
        self.target_rel = target_rel.clone();
        if metadata.is_file() {
            self.check_inside(target, &target_rel)?;
            return Some(vec![target_rel]);
        }
        let suffixes: &[&str] = if mode == BatchMode::Replay {
            &[".json"]
        } else {
            &[".yaml", ".yml"]
        };
        let listing = match fs::read_dir(target) {
            Ok(listing) => listing,
            Err(e) => {
                self.errors.push(plain_error(
                    target,
                    &format!("cannot list the target directory: {e}"),
                ));
                return None;
            }
        };
        let mut names: Vec<String> = Vec::new();
        for entry in listing {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    self.errors.push(plain_error(
                        target,
                        &format!("cannot list the target directory: {e}"),
                    ));
                    return None;
                }
            };
            let file_name = entry.file_name();
            let Some(name) = file_name.to_str().map(str::to_owned) else {
                // Skipping it would quietly run fewer scenarios than the directory holds.
                let bytes = file_name.as_encoded_bytes();
                if suffixes
                    .iter()
                    .any(|suffix| bytes.ends_with(suffix.as_bytes()))
                {
                    self.errors.push(plain_error(
                        &target.join(&file_name),
                        "the file name is not UTF-8; a bundle can only hold UTF-8 names",
                    ));
                }
                continue;
            };
            // The CLI's suffix test is case-sensitive (step 1 of
            // harness-behaviour.md#job-expansion).
            if suffixes.iter().any(|suffix| name.ends_with(suffix)) {
                names.push(name);
            }
        }
        // JavaScript's default sort compares UTF-16 code units.
        names.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
        if names.is_empty() {
            let what = if mode == BatchMode::Replay {
                "*.json cassette"
            } else {
                "*.yaml / *.yml"
            };
            self.errors.push(plain_error(
                target,
                &format!("the target directory holds no {what} files"),
            ));
            return None;
        }
        Some(
            names
                .into_iter()
                .map(|name| join_rel(&target_rel, &name))
                .collect(),
        )
    }

    /// Reads an input file as text, recording an error on failure (including a symlink that
    /// leads outside the root).
    fn read(&mut self, rel: &str, max_bytes: usize) -> Option<String> {
        let path = self.root.join(rel);
        if fs::canonicalize(&path).is_ok_and(|real| !real.starts_with(&self.canonical_root)) {
            self.errors.push(InputError {
                hint: Some(self.bundle_root_hint()),
                ..plain_error(
                    &self.display(rel),
                    "resolves through a symlink outside the bundle root",
                )
            });
            return None;
        }
        match load::read_text(&path, max_bytes) {
            Ok(text) => Some(text),
            Err(mut error) => {
                error.file = self.display(rel);
                self.errors.push(error.into());
                None
            }
        }
    }

    fn push_load_errors(&mut self, errors: Vec<LoadError>) {
        self.errors.extend(errors.into_iter().map(InputError::from));
    }

    pub(super) fn load_scenario(&mut self, rel: &str, mode: BatchMode) -> Option<PreparedScenario> {
        let text = self.read(rel, load::MAX_DOCUMENT_BYTES)?;
        self.files.insert(rel.to_owned());
        let scenario = match Scenario::from_yaml(&text, &self.display(rel)) {
            Ok(scenario) => scenario,
            Err(errors) => {
                self.scenario_refused(rel, &text, errors);
                return None;
            }
        };
        let position = |key: &str| scenario.position_of(key);
        if scenario.on_unanswered == Some(UnansweredPolicy::Prompt) {
            let origin = Origin {
                file_rel: rel,
                key: "on_unanswered",
                position: position("on_unanswered"),
            };
            self.error_at(
                &origin,
                "`prompt` is interactive and is refused by run".to_owned(),
                Some("use fail, first or llm".to_owned()),
            );
        }
        if scenario.execution == Some(Execution::CloudDescribe) {
            let origin = Origin {
                file_rel: rel,
                key: "execution",
                position: position("execution"),
            };
            self.error_at(
                &origin,
                "`cloud-describe` is reserved and has no runner; the CLI refuses it at load"
                    .to_owned(),
                None,
            );
        }
        let dir = dir_of(rel).to_owned();
        for field in scenario.input_paths() {
            self.ship_path_field(rel, &dir, &field);
        }
        if mode == BatchMode::Record {
            self.ship_if_present(&join_rel(&dir, REDACT_FILE));
            self.ship_if_present(REDACT_FILE);
        }
        let session = self.resolve_session(rel, &dir, &scenario)?;
        let file = self.display(rel);
        let name = scenario.effective_name(&file);
        // The name labels the unit in every terminal, report and page.
        if let Some(reason) = cowork_core::safe_text::unsafe_text_reason(&name) {
            let origin = Origin {
                file_rel: rel,
                key: "name",
                position: position("name"),
            };
            self.error_at(
                &origin,
                reason,
                Some("name the scenario (or its file) with printable characters".to_owned()),
            );
            return None;
        }
        Some(PreparedScenario {
            rel_path: rel.to_owned(),
            name,
            scenario,
            session,
        })
    }

    /// Records why a scenario file did not load. A session file given where a scenario belongs
    /// is one error saying so (its keys would otherwise each be "unknown"); for any other
    /// scenario, the session it names is still checked, so that one run lists the typos of
    /// both files.
    fn scenario_refused(&mut self, rel: &str, text: &str, errors: Vec<LoadError>) {
        let file = self.display(rel);
        let root = load::parse_yaml(text, &file).ok();
        if root.as_ref().is_some_and(looks_like_session) {
            self.errors.push(InputError {
                hint: Some(
                    "run the scenario whose `session:` names this file, or a directory of \
                     scenarios"
                        .to_owned(),
                ),
                ..plain_error(
                    &file,
                    "this is a session file, not a scenario: it has session keys and no `prompt`",
                )
            });
            return;
        }
        self.push_load_errors(errors);
        let Some((value, position)) = root.as_ref().and_then(session_path_of) else {
            return;
        };
        let origin = Origin {
            file_rel: rel,
            key: "session",
            position,
        };
        let dir = dir_of(rel).to_owned();
        let Some(session_rel) = self.resolve(&origin, &dir, &value, PathKind::File) else {
            return;
        };
        if !self.sessions.contains_key(&session_rel) {
            let loaded = self.load_session(&session_rel);
            self.sessions.insert(session_rel, loaded);
        }
    }

    /// Reads a cassette's frozen scenario (replay mode).
    pub(super) fn load_cassette(&mut self, rel: &str) -> Option<PreparedScenario> {
        let text = self.read(rel, MAX_CASSETTE_BYTES)?;
        self.files.insert(rel.to_owned());
        let file = self.display(rel);
        let value: serde_json::Value = match serde_json::from_str(&text) {
            Ok(value) => value,
            Err(e) => {
                self.errors.push(InputError {
                    line: Some(e.line() as u64),
                    column: Some(e.column() as u64),
                    ..plain_error(&file, &format!("not a JSON cassette: {e}"))
                });
                return None;
            }
        };
        if self.real_harness && value.get("simulated") == Some(&serde_json::Value::Bool(true)) {
            self.errors.push(InputError {
                hint: Some(
                    "record a real cassette (`cowork run <scenario> --record`, or `cowork-harness \
                     record`) or replay this one with `--executor sim`"
                        .to_owned(),
                ),
                ..plain_error(
                    &file,
                    "a simulated cassette (`\"simulated\": true`, written by the sim executor) holds \
                     no recorded run, so cowork-harness cannot replay it",
                )
            });
            return None;
        }
        let (Some(frozen), true) = (
            value.get("scenario").filter(|s| s.is_object()),
            value.get("events").is_some_and(serde_json::Value::is_array),
        ) else {
            self.errors.push(plain_error(
                &file,
                "not a cassette: expected an object with a `scenario` object and an `events` array",
            ));
            return None;
        };
        let scenario = match Scenario::from_frozen(frozen, &file) {
            Ok(scenario) => scenario,
            Err(errors) => {
                self.push_load_errors(errors);
                return None;
            }
        };
        let dir = dir_of(rel).to_owned();
        // The frozen `session` is stored relative to the cassette's directory
        // (harness-behaviour.md#replay).
        let session = self.resolve_session(rel, &dir, &scenario)?;
        let name = match &scenario.name {
            Some(name) if !name.is_empty() => name.clone(),
            _ => {
                let base = base_of(rel);
                base.strip_suffix(".json").unwrap_or(base).to_owned()
            }
        };
        Some(PreparedScenario {
            rel_path: rel.to_owned(),
            name,
            scenario,
            session,
        })
    }

    /// Resolves, ships and loads the session of a scenario (rule R1 of
    /// harness-behaviour.md#path-resolution). The outer `None` means an error was recorded.
    fn resolve_session(
        &mut self,
        rel: &str,
        dir: &str,
        scenario: &Scenario,
    ) -> Option<Option<PreparedSession>> {
        let SessionRef::Path(value) = scenario.session_ref() else {
            return Some(None);
        };
        let origin = Origin {
            file_rel: rel,
            key: "session",
            position: scenario.position_of("session"),
        };
        let session_rel = self.resolve(&origin, dir, value, PathKind::File)?;
        self.ship_file(&origin, &session_rel)?;
        if !self.sessions.contains_key(&session_rel) {
            let loaded = self.load_session(&session_rel);
            self.sessions.insert(session_rel.clone(), loaded);
        }
        let session = self.sessions.get(&session_rel).cloned().flatten()?;
        Some(Some(PreparedSession {
            rel_path: session_rel,
            session,
        }))
    }

    fn load_session(&mut self, rel: &str) -> Option<Session> {
        let text = self.read(rel, load::MAX_DOCUMENT_BYTES)?;
        let session = match Session::from_yaml(&text, &self.display(rel)) {
            Ok(session) => session,
            Err(errors) => {
                self.push_load_errors(errors);
                return None;
            }
        };
        let dir = dir_of(rel).to_owned();
        let before = self.errors.len();
        for field in session.path_fields() {
            self.ship_path_field(rel, &dir, &field);
        }
        (self.errors.len() == before).then_some(session)
    }

    /// Loads the matrix file and checks its `skill_dirs` candidates
    /// (harness-behaviour.md#matrix-validation, rule R3 of harness-behaviour.md#path-resolution).
    pub(super) fn load_matrix(
        &mut self,
        matrix: &Path,
        scenario: Option<&PreparedScenario>,
    ) -> Option<PreparedMatrix> {
        match fs::metadata(matrix) {
            Ok(metadata) if metadata.is_file() => {}
            Ok(_) => {
                self.errors
                    .push(plain_error(matrix, "the matrix file is not a file"));
                return None;
            }
            Err(e) => {
                self.errors.push(plain_error(
                    matrix,
                    &format!("the matrix file does not exist or cannot be read: {e}"),
                ));
                return None;
            }
        }
        let rel = self.rel_of_user_path(matrix, "the matrix file")?;
        self.check_inside(matrix, &rel)?;
        let text = self.read(&rel, load::MAX_DOCUMENT_BYTES)?;
        self.files.insert(rel.clone());
        let file = match MatrixFile::from_yaml(&text, &self.display(&rel)) {
            Ok(file) => file,
            Err(errors) => {
                self.push_load_errors(errors);
                return None;
            }
        };
        let dir = dir_of(&rel).to_owned();
        let mut skill_dirs = Vec::new();
        let before = self.errors.len();
        if let Some(candidates) = &file.skill_dirs {
            for (index, declared) in candidates.iter().enumerate() {
                let key = load::index_path("skill_dirs", index);
                let origin = Origin {
                    file_rel: &rel,
                    key: &key,
                    position: file.locations.get(&key),
                };
                if let Some(resolved) = self.resolve(&origin, &dir, declared, PathKind::Dir) {
                    self.ship(&origin, &resolved);
                    skill_dirs.push((declared.clone(), resolved));
                }
            }
            // The skill_dirs key, even `[]`, requires exactly one local plugin to replace.
            if let Some(scenario) = scenario {
                self.check_single_local_plugin(&rel, &file, scenario);
            }
        }
        (self.errors.len() == before).then_some(PreparedMatrix {
            rel_path: rel,
            file,
            skill_dirs,
        })
    }

    fn check_single_local_plugin(
        &mut self,
        matrix_rel: &str,
        file: &MatrixFile,
        scenario: &PreparedScenario,
    ) {
        let (count, session_rel, position) = match &scenario.session {
            Some(session) => (
                session.session.plugins.local_plugins.len(),
                session.rel_path.as_str(),
                session
                    .session
                    .locations
                    .get("plugins.local_plugins")
                    .or_else(|| session.session.locations.get("plugins")),
            ),
            None => (
                0,
                scenario.rel_path.as_str(),
                scenario.scenario.position_of("session"),
            ),
        };
        if count == 1 {
            return;
        }
        let skill_dirs_line = file
            .locations
            .get("skill_dirs")
            .map_or(String::new(), |p| format!(" (line {})", p.line));
        let message = format!(
            "the matrix {}{skill_dirs_line} has a skill_dirs axis, so the session must declare exactly one \
             plugins.local_plugins entry; it declares {count}",
            display_rel(matrix_rel),
        );
        let key = if scenario.session.is_some() {
            "plugins.local_plugins"
        } else {
            "session"
        };
        let origin = Origin {
            file_rel: session_rel,
            key,
            position,
        };
        self.error_at(&origin, message, None);
    }
}

/// `true` when a document that failed to load as a scenario reads as a session: no `prompt`,
/// at least one key only a session has, and no key only a scenario has (unknown keys, typos
/// included, decide nothing).
fn looks_like_session(root: &load::Node) -> bool {
    use cowork_schema::scenario::SCENARIO_KEYS;
    use cowork_schema::session::SESSION_KEYS;
    let load::NodeValue::Mapping(entries) = &root.value else {
        return false;
    };
    let keys: Vec<String> = entries
        .iter()
        .filter_map(|(key, _)| key.scalar_text())
        .collect();
    let session_only = keys
        .iter()
        .any(|key| SESSION_KEYS.contains(&key.as_str()) && !SCENARIO_KEYS.contains(&key.as_str()));
    let scenario_only = keys
        .iter()
        .any(|key| SCENARIO_KEYS.contains(&key.as_str()) && !SESSION_KEYS.contains(&key.as_str()));
    session_only && !scenario_only
}

/// The `session:` path of a scenario document that did not load, with where it is written;
/// `None` when it names no file (absent, `(inline)` or not a string).
fn session_path_of(root: &load::Node) -> Option<(String, Option<Position>)> {
    let load::NodeValue::Mapping(entries) = &root.value else {
        return None;
    };
    let (_, value) = entries
        .iter()
        .find(|(key, _)| key.scalar_text().as_deref() == Some("session"))?;
    let load::NodeValue::String(path) = &value.value else {
        return None;
    };
    if path == cowork_schema::scenario::INLINE_SESSION {
        return None;
    }
    Some((path.clone(), value.position))
}
