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

mod scenarios;
mod shipping;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};

use cowork_schema::batch::{BatchMode, ExecutorKind};
use cowork_schema::load::Position;
use cowork_schema::session::Session;

pub use cowork_core::prepared::{
    InputError, NO_SKILL, PreparedArm, PreparedBatch, PreparedEval, PreparedMatrix,
    PreparedScenario, PreparedSession,
};

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
    /// The executor of the batch's jobs: every one but `sim` runs the real harness, which
    /// cannot replay a simulated cassette.
    pub executor: ExecutorKind,
}

/// Loads and checks every input of a batch. Returns all problems found.
pub fn prepare(input: &PrepareInput) -> Result<PreparedBatch, Vec<InputError>> {
    let mut ctx = Ctx::for_root(&input.bundle_root)?;
    ctx.real_harness = input.executor != ExecutorKind::Sim;

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
    // Without a matrix every run uses the session's model and the scenario's baseline, and the
    // harness refuses an effort they do not take before it stages anything; a matrix cell is
    // judged on its own axes by the planner (a cell error there). A replay stages nothing.
    if input.matrix.is_none() && input.mode != BatchMode::Replay {
        for scenario in &scenarios {
            if let Some(mut refusal) =
                cowork_core::effort::unit_effort_refusal(scenario, None, None)
            {
                refusal.file = ctx.display(&refusal.file.display().to_string());
                // A session shared by several scenarios is refused once.
                if !ctx.errors.contains(&refusal) {
                    ctx.errors.push(refusal);
                }
            }
        }
    }

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

/// One arm of an eval as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArmInput {
    /// `A` and `B` in the two-arm form, `--arm NAME=DIR`'s NAME otherwise.
    pub name: String,
    /// The flag that gave it, for messages (`--a`, `--b`, `--arm`).
    pub flag: String,
    /// The skill dir or plugin, as typed; `None` for the no-skill arm.
    pub dir: Option<PathBuf>,
}

/// What to prepare for an eval batch (`cowork eval`): scenario targets and the arms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareEvalInput {
    /// Scenario files or directories of them (step 1 of harness-behaviour.md#job-expansion), in the
    /// order given.
    pub targets: Vec<PathBuf>,
    /// Every arm in arm order (arm A, then arm B in the two-arm form).
    pub arms: Vec<ArmInput>,
    /// The index in `arms` of the control arm.
    pub control: usize,
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

    let mut arms = Vec::with_capacity(input.arms.len());
    for arm in &input.arms {
        match &arm.dir {
            None => arms.push(PreparedArm {
                name: arm.name.clone(),
                declared: NO_SKILL.to_owned(),
                rel_path: None,
            }),
            Some(path) => {
                if let Some(prepared) = ctx.prepare_arm(&arm.flag, path) {
                    arms.push(PreparedArm {
                        name: arm.name.clone(),
                        ..prepared
                    });
                }
            }
        }
    }

    if ctx.errors.is_empty() && arms.len() == input.arms.len() {
        Ok(PreparedEval {
            batch: PreparedBatch {
                root: ctx.root,
                scenarios,
                matrix: None,
                files: ctx.files,
                target: first_target.unwrap_or_default(),
            },
            arms,
            control: input.control,
        })
    } else {
        Err(ctx.errors)
    }
}

impl Ctx {
    /// Checks and ships one eval arm directory (`flag` is `--a`, `--b` or `--arm`).
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
            name: String::new(),
            declared: path.display().to_string(),
            rel_path: Some(rel),
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
            real_harness: false,
        })
    }
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
    /// `true` when the real harness runs the jobs: a simulated cassette is then refused.
    real_harness: bool,
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
