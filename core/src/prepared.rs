//! The validated inputs of a batch, as plain data: what `cowork_coordinator::intake::files` reads
//! from the target, the sessions and the matrix file, and what [`crate::plan`] plans from.
//!
//! Also [`InputError`], the one located problem type of batch preparation: file, line,
//! column, key, message and a hint.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;

use cowork_schema::load::LoadError;
use cowork_schema::matrix::MatrixFile;
use cowork_schema::scenario::Scenario;
use cowork_schema::session::Session;

/// One problem with the inputs of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    /// The file holding the problem (or the target / bundle root itself).
    pub file: PathBuf,
    pub line: Option<u64>,
    pub column: Option<u64>,
    /// Dotted key, such as `session` or `plugins.local_plugins[0]`.
    pub key: Option<String>,
    pub message: String,
    /// What the user can do about it.
    pub hint: Option<String>,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        cowork_schema::load::write_located(
            f,
            &self.file,
            (self.line, self.column),
            self.key.as_deref(),
            &self.message,
        )?;
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

impl std::error::Error for InputError {}

impl From<LoadError> for InputError {
    fn from(error: LoadError) -> InputError {
        InputError {
            file: error.file,
            line: error.line,
            column: error.column,
            key: error.key,
            message: error.message,
            hint: None,
        }
    }
}

/// A validated batch, ready to plan and bundle.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedBatch {
    /// The bundle root, absolute.
    pub root: PathBuf,
    /// Scenario files (cassettes in replay mode) in target order
    /// (harness-behaviour.md#job-expansion).
    pub scenarios: Vec<PreparedScenario>,
    pub matrix: Option<PreparedMatrix>,
    /// Every file to ship, bundle-relative with `/` separators, sorted.
    pub files: BTreeSet<String>,
    /// The target (file or directory), bundle-relative with `/` separators (`.` for the root):
    /// what a coordinator re-plans from when it receives the bundle.
    pub target: String,
}

/// One scenario of the batch.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedScenario {
    /// Bundle-relative path of the scenario file (or cassette).
    pub rel_path: String,
    /// Effective name (harness-behaviour.md#scenario-name).
    pub name: String,
    pub scenario: Scenario,
    /// `None` for an `(inline)` session.
    pub session: Option<PreparedSession>,
}

/// A scenario's session file.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedSession {
    /// Bundle-relative path of the session file.
    pub rel_path: String,
    pub session: Session,
}

/// The matrix file of the batch.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedMatrix {
    /// Bundle-relative path of the matrix file.
    pub rel_path: String,
    pub file: MatrixFile,
    /// Each `skill_dirs` candidate: (declared string, resolved bundle-relative directory).
    pub skill_dirs: Vec<(String, String)>,
}

/// One arm of an eval: the directory that replaces the session's single local plugin, or no
/// skill at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedArm {
    /// The arm's name: `A` and `B` in the two-arm form, `--arm NAME=DIR`'s NAME otherwise.
    pub name: String,
    /// What the arm runs as the user typed it (labels and messages): the path, or
    /// [`NO_SKILL`].
    pub declared: String,
    /// The directory, bundle-relative with `/` separators; `None` for the no-skill arm, whose
    /// runs keep the session and pass `--ablate-skill`.
    pub rel_path: Option<String>,
}

/// How reports name the arm that runs without the skill.
pub const NO_SKILL: &str = "no skill";

/// A validated eval batch: its scenarios (as a plain files batch, every arm's files shipped)
/// and its arms.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedEval {
    pub batch: PreparedBatch,
    /// Every arm in arm order: arm A, then arm B in the two-arm form.
    pub arms: Vec<PreparedArm>,
    /// The index in `arms` of the control arm, which every other arm is compared with.
    pub control: usize,
}
