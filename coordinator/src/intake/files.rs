//! Reading a batch's files: the IO edge that turns a target (and a matrix file) into a
//! [`PreparedBatch`] — every input loaded, validated, resolved inside the bundle root, and the
//! set of files to ship.
//!
//! It follows harness-behaviour.md#job-expansion (targets), harness-behaviour.md#job-bundle (rules
//! R1–R4: what a job must carry), harness-behaviour.md#matrix-validation (matrix checks) and
//! harness-behaviour.md#independent-units (validate everything before dispatching anything), and
//! reports every problem it finds rather than the first. Every path a batch reaches must lie inside
//! the bundle root after `..` and symlinks are resolved, because workers see nothing else; absolute
//! paths and `~` paths are refused for the same reason.
//!
//! Fleet choices made here:
//! - `.git/` directories are not shipped (staleness then reads `mode: raw`), and files named
//!   `.env` or `.env.*` are never shipped: a walk skips them, a path naming one is an error.
//! - Relative `projects[].from` is refused (the reference says to reject or absolutize it,
//!   harness-behaviour.md#path-resolution; a worker's
//!   cwd is not the authoring machine's).
//! - `execution: cloud-describe` is refused up front, like the CLI's loader.
//! - In replay mode the targets are cassettes: a directory keeps its `*.json` entries, each
//!   cassette's frozen scenario is read like `replay` reads it, and its session is resolved
//!   against the cassette's directory (harness-behaviour.md#replay).
//! - In record mode, `.cowork-redact.json` next to each scenario and at the bundle root is
//!   shipped (harness-behaviour.md#job-bundle).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};

use cowork_fabric::bundle::check_entry_path;
use cowork_schema::batch::BatchMode;
use cowork_schema::load::{self, LoadError, Position};
use cowork_schema::matrix::MatrixFile;
use cowork_schema::scenario::{Execution, Scenario, SessionRef, UnansweredPolicy};
use cowork_schema::session::{PathAnchor, PathField, PathKind, Session};

use cowork_core::plan::materialize::{base_of, dir_of, join_rel, normalize_rel};
pub use cowork_core::prepared::{
    InputError, PreparedArm, PreparedBatch, PreparedEval, PreparedMatrix, PreparedScenario,
    PreparedSession,
};

/// Largest cassette we read for its frozen scenario. Cassettes inline small artifact bodies and
/// every event of a run, so they are much larger than scenario files.
const MAX_CASSETTE_BYTES: usize = 256 * 1024 * 1024;

/// The redaction policy file the CLI looks for when recording (harness-behaviour.md#job-bundle).
const REDACT_FILE: &str = ".cowork-redact.json";

/// What to prepare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareInput {
    /// A scenario file (any name) or a directory of them (step 1 of
    /// harness-behaviour.md#job-expansion); cassettes in replay mode.
    pub target: PathBuf,
    /// `--matrix <file>`.
    pub matrix: Option<PathBuf>,
    /// Every input must lie under this directory; it becomes the root of the bundle.
    pub bundle_root: PathBuf,
    pub mode: BatchMode,
}

/// Loads and checks every input of a batch. Returns all problems found.
pub fn prepare(input: &PrepareInput) -> Result<PreparedBatch, Vec<InputError>> {
    let mut ctx = Ctx::for_root(&input.bundle_root)?;

    let targets = ctx.list_targets(&input.target, input.mode);
    if input.matrix.is_some() && input.mode == BatchMode::Replay {
        ctx.errors.push(plain_error(
            &input.target,
            "--matrix cannot be combined with replay",
        ));
    }
    if input.matrix.is_some() && targets.as_ref().is_some_and(|t| t.len() != 1) {
        let n = targets.as_ref().map_or(0, Vec::len);
        ctx.errors.push(InputError {
            hint: Some("pass a single scenario file as the target".to_owned()),
            ..plain_error(
                &input.target,
                &format!("--matrix needs exactly one scenario file, the target holds {n}"),
            )
        });
    }

    let mut scenarios = Vec::new();
    for rel in targets.unwrap_or_default() {
        let prepared = if input.mode == BatchMode::Replay {
            ctx.load_cassette(&rel)
        } else {
            ctx.load_scenario(&rel, input.mode)
        };
        if let Some(prepared) = prepared {
            scenarios.push(prepared);
        }
    }

    let matrix = input
        .matrix
        .as_deref()
        .and_then(|matrix| ctx.load_matrix(matrix, scenarios.first()));

    if ctx.errors.is_empty() {
        Ok(PreparedBatch {
            root: ctx.root,
            scenarios,
            matrix,
            files: ctx.files,
            target: ctx.target_rel,
        })
    } else {
        Err(ctx.errors)
    }
}

/// What to prepare for an eval batch (`cowork eval`): scenario targets and the two arms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareEvalInput {
    /// Scenario files or directories of them (step 1 of harness-behaviour.md#job-expansion), in the
    /// order given.
    pub targets: Vec<PathBuf>,
    /// Arm A's and arm B's skill dir or plugin (`--a`, `--b`), as typed.
    pub arms: [PathBuf; 2],
    /// Every input must lie under this directory; it becomes the root of the bundle.
    pub bundle_root: PathBuf,
}

/// Loads and checks every input of an eval batch: the scenarios of every target (run mode), and
/// each arm directory, which must exist inside the bundle root and be a plugin
/// (`.claude-plugin/plugin.json`) or a skill dir (`SKILL.md`). Returns all problems found.
pub fn prepare_eval(input: &PrepareEvalInput) -> Result<PreparedEval, Vec<InputError>> {
    let mut ctx = Ctx::for_root(&input.bundle_root)?;
    if input.targets.is_empty() {
        ctx.errors.push(plain_error(
            &input.bundle_root,
            "an eval needs at least one scenario file or directory",
        ));
    }

    let mut first_target = None;
    let mut listed: Vec<String> = Vec::new();
    for target in &input.targets {
        let Some(rels) = ctx.list_targets(target, BatchMode::Run) else {
            continue;
        };
        first_target.get_or_insert_with(|| ctx.target_rel.clone());
        for rel in rels {
            if listed.contains(&rel) {
                ctx.errors.push(plain_error(
                    target,
                    &format!("{rel} is given more than once; each scenario runs once per arm"),
                ));
            } else {
                listed.push(rel);
            }
        }
    }
    let mut scenarios = Vec::new();
    for rel in &listed {
        if let Some(prepared) = ctx.load_scenario(rel, BatchMode::Run) {
            scenarios.push(prepared);
        }
    }

    let mut arms = Vec::with_capacity(2);
    for (flag, path) in ["--a", "--b"].into_iter().zip(&input.arms) {
        if let Some(arm) = ctx.prepare_arm(flag, path) {
            arms.push(arm);
        }
    }

    match <[PreparedArm; 2]>::try_from(arms) {
        Ok(arms) if ctx.errors.is_empty() => Ok(PreparedEval {
            batch: PreparedBatch {
                root: ctx.root,
                scenarios,
                matrix: None,
                files: ctx.files,
                target: first_target.unwrap_or_default(),
            },
            arms,
        }),
        _ => Err(ctx.errors),
    }
}

impl Ctx {
    /// Checks and ships one eval arm directory (`flag` is `--a` or `--b`).
    fn prepare_arm(&mut self, flag: &str, path: &Path) -> Option<PreparedArm> {
        let flag_error = |message: String, hint: Option<String>| InputError {
            key: Some(flag.to_owned()),
            hint,
            ..plain_error(path, &message)
        };
        match fs::metadata(path) {
            Ok(metadata) if metadata.is_dir() => {}
            Ok(_) => {
                self.errors.push(flag_error(
                    "is not a directory; an arm is a skill dir or a plugin".to_owned(),
                    None,
                ));
                return None;
            }
            Err(e) => {
                self.errors.push(flag_error(
                    format!("does not exist or cannot be read: {e}"),
                    None,
                ));
                return None;
            }
        }
        let rel = self.rel_of_user_path(path, &format!("{flag}'s directory"))?;
        self.check_inside(path, &rel)?;
        let dir = self.root.join(&rel);
        let is_plugin = dir.join(".claude-plugin").join("plugin.json").is_file();
        let is_skill = dir.join("SKILL.md").is_file();
        if !is_plugin && !is_skill {
            self.errors.push(flag_error(
                "is neither a plugin (.claude-plugin/plugin.json) nor a skill dir (SKILL.md)"
                    .to_owned(),
                Some("point --a and --b at the two versions of the skill or plugin".to_owned()),
            ));
            return None;
        }
        let origin = Origin {
            file_rel: "",
            key: flag,
            position: None,
        };
        let before = self.errors.len();
        self.ship(&origin, &rel);
        (self.errors.len() == before).then(|| PreparedArm {
            declared: path.display().to_string(),
            rel_path: rel,
        })
    }
}

impl Ctx {
    /// The checking context of a batch under `bundle_root` (resolved against the current
    /// directory): the root must exist and be a directory.
    fn for_root(bundle_root: &Path) -> Result<Ctx, Vec<InputError>> {
        let cwd = std::env::current_dir().map_err(|e| {
            vec![plain_error(
                bundle_root,
                &format!("cannot read the current directory: {e}"),
            )]
        })?;
        let root = normalize_absolute(&cwd.join(bundle_root));
        let canonical_root = match fs::canonicalize(&root) {
            Ok(path) if path.is_dir() => path,
            Ok(_) => {
                return Err(vec![plain_error(
                    bundle_root,
                    "bundle root is not a directory",
                )]);
            }
            Err(e) => {
                return Err(vec![plain_error(
                    bundle_root,
                    &format!("bundle root cannot be read: {e}"),
                )]);
            }
        };
        Ok(Ctx {
            root,
            canonical_root,
            display_root: bundle_root.to_path_buf(),
            cwd,
            errors: Vec::new(),
            files: BTreeSet::new(),
            sessions: BTreeMap::new(),
            target_rel: String::new(),
        })
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

fn plain_error(file: &Path, message: &str) -> InputError {
    InputError {
        file: file.to_owned(),
        line: None,
        column: None,
        key: None,
        message: message.to_owned(),
        hint: None,
    }
}

/// Where a path was written: the declaring file (bundle-relative) and its key.
#[derive(Clone, Debug)]
struct Origin<'a> {
    file_rel: &'a str,
    key: &'a str,
    position: Option<Position>,
}

/// Why a written path cannot be used.
enum Refusal {
    Absolute,
    Tilde,
    Escapes,
    Missing,
    WrongKind(&'static str),
    SymlinkEscapes(String),
    Other(String),
}

/// Preparation state: the resolved root, the files found so far and the problems found so far.
struct Ctx {
    /// The bundle root, absolute and lexically normalized.
    root: PathBuf,
    /// The bundle root with symlinks resolved.
    canonical_root: PathBuf,
    /// The bundle root as the user wrote it, for messages.
    display_root: PathBuf,
    cwd: PathBuf,
    errors: Vec<InputError>,
    files: BTreeSet<String>,
    /// Sessions already loaded, by bundle-relative path (`None` when loading failed), so a
    /// session shared by many scenarios is read and reported once.
    sessions: BTreeMap<String, Option<Session>>,
    /// The target, bundle-relative, once listed.
    target_rel: String,
}

impl Ctx {
    /// The path to show for a bundle-relative path.
    fn display(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.display_root.clone()
        } else {
            self.display_root.join(rel)
        }
    }

    fn error_at(&mut self, origin: &Origin<'_>, message: String, hint: Option<String>) {
        self.errors.push(InputError {
            file: self.display(origin.file_rel),
            line: origin.position.map(|p| p.line),
            column: origin.position.map(|p| p.column),
            key: (!origin.key.is_empty()).then(|| origin.key.to_owned()),
            message,
            hint,
        });
    }

    fn bundle_root_hint(&self) -> String {
        format!(
            "every input must lie inside the bundle root {}; pass a --bundle-root that contains it",
            self.display_root.display()
        )
    }

    /// Maps a path the user typed (relative to the cwd) to a bundle-relative path.
    fn rel_of_user_path(&mut self, path: &Path, what: &str) -> Option<String> {
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

    /// Lists the target (step 1 of harness-behaviour.md#job-expansion): a file as-is, a directory
    /// non-recursively.
    fn list_targets(&mut self, target: &Path, mode: BatchMode) -> Option<Vec<String>> {
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

    /// Checks that a user-typed path stays inside the root once symlinks are resolved.
    fn check_inside(&mut self, shown: &Path, rel: &str) -> Option<()> {
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

    fn load_scenario(&mut self, rel: &str, mode: BatchMode) -> Option<PreparedScenario> {
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
    fn load_cassette(&mut self, rel: &str) -> Option<PreparedScenario> {
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

    /// Resolves one path field of a file and ships what it names.
    fn ship_path_field(&mut self, file_rel: &str, dir: &str, field: &PathField) {
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
    fn resolve(
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
    fn ship(&mut self, origin: &Origin<'_>, rel: &str) {
        if self.root.join(rel).is_dir() {
            let mut ancestors = Vec::new();
            self.walk(origin, rel, &mut ancestors);
        } else {
            self.ship_file(origin, rel);
        }
    }

    /// Ships one file named by an input, refusing `.env` files and unshippable names.
    fn ship_file(&mut self, origin: &Origin<'_>, rel: &str) -> Option<()> {
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
    fn ship_if_present(&mut self, rel: &str) {
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

    /// Loads the matrix file and checks its `skill_dirs` candidates
    /// (harness-behaviour.md#matrix-validation, rule R3 of harness-behaviour.md#path-resolution).
    fn load_matrix(
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

/// `.env` and `.env.*`.
fn is_env_file(name: &str) -> bool {
    name == ".env" || name.starts_with(".env.")
}

/// Lexically normalizes an absolute path: drops `.`, applies `..`.
fn normalize_absolute(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Converts a relative `Path` to a `/`-separated string; `None` for non-UTF-8 components.
fn path_to_rel(path: &Path) -> Option<String> {
    let parts: Option<Vec<&str>> = path
        .components()
        .map(|component| match component {
            Component::Normal(part) => part.to_str(),
            _ => None,
        })
        .collect();
    parts.map(|parts| parts.join("/"))
}

fn display_rel(rel: &str) -> &str {
    if rel.is_empty() {
        "the bundle root"
    } else {
        rel
    }
}

#[cfg(test)]
mod tests;
