//! The planner: a prepared batch and its flags → units (files or matrix cells), derived files
//! and, lazily, jobs (harness-behaviour.md#job-expansion, harness-behaviour.md#matrix).
//!
//! Planning is pure: no IO, no clock, no environment. It is split in two because the bundle's
//! digest depends on the derived files the planner writes: [`plan_units`] lays the batch out
//! (units, derived files, forwarded flags), the caller packs the bundle, and [`Plan::new`] adds
//! the batch id, the executor and the digest. [`Plan::jobs`] then yields [`JobSpec`]s on demand,
//! so a million-job plan costs memory per unit, not per job.
//!
//! Axis overrides use strategy A of harness-behaviour.md#choice-c1 (materialize): see
//! [`materialize`].
//!
//! Eval batches are files plans whose units are scenario × arm, laid out by [`eval`]; their
//! jobs are admitted repeat-major so that the two arms meet the same fleet conditions.

pub mod eval;
pub mod flags;
pub mod materialize;
pub mod sequential;

use cowork_schema::batch::{
    BatchFlags, BatchMode, ExecutorKind, OnUnanswered, PlanKindName, PlanSummary, SimSpec,
    UnitSummary,
};
use cowork_schema::ids::{BatchId, JobId, UnitRef};
use cowork_schema::job::{CellAxes, JobCommand, JobSpec, PROTOCOL_VERSION, Tier};

use crate::prepared::{PreparedBatch, PreparedMatrix, PreparedScenario};

/// Margin added to a scenario's own `timeout_ms` for the job's wall-clock limit
/// (harness-behaviour.md#choice-c13): room for sandbox start-up, staging and artifact collection
/// around the agent run.
pub const JOB_TIMEOUT_MARGIN_MS: u64 = 120_000;
/// Job wall-clock limit when neither `--job-timeout` nor the scenario's `timeout_ms` sets one.
pub const DEFAULT_JOB_TIMEOUT_MS: u64 = 30 * 60 * 1000;

/// One unit per scenario file, or one per kept matrix cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanKind {
    Files,
    Matrix,
}

/// A file the planner writes into the bundle (a derived scenario or session of a matrix cell).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DerivedFile {
    /// Bundle-relative path.
    pub path: String,
    pub contents: Vec<u8>,
}

/// One unit of a plan: a scenario file or a matrix cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanUnit {
    pub unit: UnitRef,
    /// Effective scenario name (harness-behaviour.md#scenario-name).
    pub scenario_name: String,
    /// The rollup's `scenario`: the name, or `<name> [<axesLabel>]` for a matrix cell
    /// (harness-behaviour.md#matrix-naming).
    pub label: String,
    /// The cell's axes (matrix plans only).
    pub axes: Option<CellAxes>,
    /// Bundle path of the scenario the jobs run: the derived file for a cell with overrides.
    pub scenario_file: String,
    pub tier: Tier,
    /// A pre-execution cell error (harness-behaviour.md#matrix-repeat): the override cannot be
    /// applied, so the cell has no jobs and counts as failed.
    pub cell_error: Option<String>,
    /// The job's wall-clock limit (harness-behaviour.md#choice-c13).
    pub timeout_ms: u64,
    /// The eval arm the unit runs (eval plans only).
    pub arm: Option<eval::UnitArm>,
}

/// The layout of a batch, before the bundle exists.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanLayout {
    pub kind: PlanKind,
    pub mode: BatchMode,
    pub flags: BatchFlags,
    pub units: Vec<PlanUnit>,
    /// `totalBeforeCap` for a matrix; the number of files otherwise.
    pub requested_cells: u32,
    pub truncated: bool,
    pub derived_files: Vec<DerivedFile>,
    /// Flags every job passes to the CLI after the scenario (harness-behaviour.md#job-invocation).
    pub forwarded_flags: Vec<String>,
}

/// What [`plan`] and [`Plan::new`] need besides the prepared batch.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanInput {
    pub batch_id: BatchId,
    pub flags: BatchFlags,
    pub mode: BatchMode,
    pub executor: ExecutorKind,
    pub sim: Option<SimSpec>,
    /// sha256 of the bundle holding the batch's files and the layout's derived files.
    pub bundle_sha256: String,
}

/// A complete plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub batch_id: BatchId,
    pub kind: PlanKind,
    pub mode: BatchMode,
    pub command: JobCommand,
    pub flags: BatchFlags,
    /// `--repeat N`: runs per unit.
    pub repeat: Option<u32>,
    pub units: Vec<PlanUnit>,
    pub requested_cells: u32,
    pub truncated: bool,
    pub derived_files: Vec<DerivedFile>,
    pub forwarded_flags: Vec<String>,
    pub executor: ExecutorKind,
    pub sim: Option<SimSpec>,
    pub bundle_sha256: String,
    /// Resume generation (0 until `cowork resume`); every job carries it.
    pub generation: u32,
    /// Admission order: repeat-major (every unit's run 0, then every unit's run 1, …) when
    /// set, unit-major otherwise. Eval plans set it so that the arms' jobs alternate
    /// (decisions.md#eval-design); the reducer folds per unit in repeat-index order either way.
    pub interleave: bool,
    /// The sequential design of an eval (`--sequential`): admission stops the batch at the
    /// look where it decides (`admission::sequential`). `None` for every other batch.
    pub sequential: Option<sequential::SequentialSettings>,
}

/// Why a batch cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "{file}: timeout_ms: the job timeout of {job_timeout_ms} ms must exceed the scenario's timeout_ms of {scenario_timeout_ms} ms, so that the harness's own timeout fires first"
    )]
    JobTimeoutTooShort {
        file: String,
        job_timeout_ms: u64,
        scenario_timeout_ms: u64,
    },
    #[error("--matrix needs exactly one scenario file, the batch has {n_files}")]
    MatrixNeedsOneScenario { n_files: usize },
    #[error("--matrix cannot be combined with replay")]
    MatrixInReplay,
    #[error("{matrix}: the matrix has {total} cells, more than the planner can count")]
    MatrixTooLarge { matrix: String, total: String },
    #[error("{path}: a derived file would replace an input file of the same name")]
    DerivedPathCollision { path: String },
    #[error("{file}: fidelity {fidelity:?} has no worker tier")]
    NoTier { file: String, fidelity: String },
    #[error("{flag}: replay jobs take no forwarded flags")]
    FlagNotForReplay { flag: &'static str },
    #[error("{flag}: {reason}")]
    FlagNotForRecord {
        flag: &'static str,
        reason: &'static str,
    },
    #[error("the batch has no scenario")]
    Empty,
}

/// Lays the batch out: units, derived files and forwarded flags.
pub fn plan_units(
    batch: &PreparedBatch,
    flags: &BatchFlags,
    mode: BatchMode,
) -> Result<PlanLayout, Vec<PlanError>> {
    let mut errors = Vec::new();
    if batch.scenarios.is_empty() {
        return Err(vec![PlanError::Empty]);
    }
    let forwarded_flags = forwarded_flags(flags, mode, &mut errors);
    for scenario in &batch.scenarios {
        if let (Some(job_timeout), Some(scenario_timeout)) =
            (flags.job_timeout_ms, scenario.scenario.timeout_ms)
            && job_timeout <= scenario_timeout
        {
            errors.push(PlanError::JobTimeoutTooShort {
                file: scenario.rel_path.clone(),
                job_timeout_ms: job_timeout,
                scenario_timeout_ms: scenario_timeout,
            });
        }
    }
    let layout = match &batch.matrix {
        None => Some(files_layout(batch, flags, mode, &mut errors)),
        Some(matrix) => matrix_layout(batch, matrix, flags, mode, &mut errors),
    };
    match layout {
        Some((kind, units, requested_cells, truncated, derived_files)) if errors.is_empty() => {
            Ok(PlanLayout {
                kind,
                mode,
                flags: flags.clone(),
                units,
                requested_cells,
                truncated,
                derived_files,
                forwarded_flags,
            })
        }
        _ => Err(errors),
    }
}

/// Units, requested cells, truncation and derived files of a layout.
type LayoutParts = (PlanKind, Vec<PlanUnit>, u32, bool, Vec<DerivedFile>);

fn files_layout(
    batch: &PreparedBatch,
    flags: &BatchFlags,
    mode: BatchMode,
    errors: &mut Vec<PlanError>,
) -> LayoutParts {
    let mut units = Vec::with_capacity(batch.scenarios.len());
    for (index, scenario) in batch.scenarios.iter().enumerate() {
        let Some(tier) = tier_of(scenario, mode, errors) else {
            continue;
        };
        units.push(PlanUnit {
            unit: UnitRef::File(index as u32),
            scenario_name: scenario.name.clone(),
            label: scenario.name.clone(),
            axes: None,
            scenario_file: scenario.rel_path.clone(),
            tier,
            cell_error: None,
            timeout_ms: job_timeout_ms(flags, scenario),
            arm: None,
        });
    }
    let n_files = u32::try_from(batch.scenarios.len()).unwrap_or(u32::MAX);
    (PlanKind::Files, units, n_files, false, Vec::new())
}

fn matrix_layout(
    batch: &PreparedBatch,
    matrix: &PreparedMatrix,
    flags: &BatchFlags,
    mode: BatchMode,
    errors: &mut Vec<PlanError>,
) -> Option<LayoutParts> {
    if mode == BatchMode::Replay {
        errors.push(PlanError::MatrixInReplay);
        return None;
    }
    let [scenario] = batch.scenarios.as_slice() else {
        errors.push(PlanError::MatrixNeedsOneScenario {
            n_files: batch.scenarios.len(),
        });
        return None;
    };
    let tier = tier_of(scenario, mode, errors)?;
    // An absent or empty axis contributes one "no override" value
    // (harness-behaviour.md#matrix-expansion).
    let axis = |values: &Option<Vec<String>>| -> Vec<Option<usize>> {
        match values {
            Some(values) if !values.is_empty() => (0..values.len()).map(Some).collect(),
            _ => vec![None],
        }
    };
    let baselines = axis(&matrix.file.baselines);
    let models = axis(&matrix.file.models);
    let skill_dirs = axis(&matrix.file.skill_dirs);
    let total = (baselines.len() as u128) * (models.len() as u128) * (skill_dirs.len() as u128);
    let Ok(requested_cells) = u32::try_from(total) else {
        errors.push(PlanError::MatrixTooLarge {
            matrix: matrix.rel_path.clone(),
            total: total.to_string(),
        });
        return None;
    };
    let kept = requested_cells.min(flags.max_cells);
    let truncated = requested_cells > flags.max_cells;
    let n_inner = models.len() * skill_dirs.len();
    let timeout_ms = job_timeout_ms(flags, scenario);

    let mut units = Vec::with_capacity(kept as usize);
    let mut derived_files = Vec::new();
    for cell in 0..kept {
        // Baselines outermost, then models, then skill_dirs innermost
        // (harness-behaviour.md#matrix-expansion).
        let index = cell as usize;
        let baseline = baselines[index / n_inner];
        let model = models[(index / skill_dirs.len()) % models.len()];
        let skill_dir = skill_dirs[index % skill_dirs.len()];
        let pick = |values: &Option<Vec<String>>, at: Option<usize>| {
            at.and_then(|i| values.as_ref().and_then(|v| v.get(i)).cloned())
        };
        let axes = CellAxes {
            baseline: pick(&matrix.file.baselines, baseline),
            model: pick(&matrix.file.models, model),
            skill_dir: pick(&matrix.file.skill_dirs, skill_dir),
        };
        let resolved_skill_dir = skill_dir
            .and_then(|i| matrix.skill_dirs.get(i))
            .map(|(_, resolved)| resolved.as_str());
        let cell_plan = materialize::materialize_cell(cell, &axes, resolved_skill_dir, scenario);
        let (scenario_file, cell_error) = match cell_plan {
            Ok(materialized) => {
                derived_files.extend(materialized.derived);
                (materialized.scenario_file, None)
            }
            Err(message) => (scenario.rel_path.clone(), Some(message)),
        };
        units.push(PlanUnit {
            unit: UnitRef::Cell(cell),
            scenario_name: scenario.name.clone(),
            label: format!("{} [{}]", scenario.name, axes.label()),
            axes: Some(axes),
            scenario_file,
            tier,
            cell_error,
            timeout_ms,
            arm: None,
        });
    }
    for file in &derived_files {
        if batch.files.contains(&file.path) {
            errors.push(PlanError::DerivedPathCollision {
                path: file.path.clone(),
            });
        }
    }
    Some((
        PlanKind::Matrix,
        units,
        requested_cells,
        truncated,
        derived_files,
    ))
}

/// The tier of a scenario's jobs: `replay` in replay mode, else the tier of its fidelity.
fn tier_of(
    scenario: &PreparedScenario,
    mode: BatchMode,
    errors: &mut Vec<PlanError>,
) -> Option<Tier> {
    if mode == BatchMode::Replay {
        return Some(Tier::Replay);
    }
    let fidelity = scenario.scenario.fidelity.map(|f| f.as_str());
    let tier = Tier::for_fidelity(fidelity);
    if tier.is_none() {
        errors.push(PlanError::NoTier {
            file: scenario.rel_path.clone(),
            fidelity: fidelity.unwrap_or("container").to_owned(),
        });
    }
    tier
}

/// The job wall-clock limit (harness-behaviour.md#choice-c13): `--job-timeout`, else the scenario's
/// `timeout_ms` plus a margin, else a default.
fn job_timeout_ms(flags: &BatchFlags, scenario: &PreparedScenario) -> u64 {
    match (flags.job_timeout_ms, scenario.scenario.timeout_ms) {
        (Some(ms), _) => ms,
        (None, Some(ms)) => ms.saturating_add(JOB_TIMEOUT_MARGIN_MS),
        (None, None) => DEFAULT_JOB_TIMEOUT_MS,
    }
}

/// The CLI flag that runs a scenario with its skill ablated (a control-arm run).
pub const ABLATE_SKILL: &str = "--ablate-skill";

/// The flags every job of a batch with `flags` in `mode` forwards (what its planned jobs
/// carry; a worker checks a delivered job against it). Empty for flags planning refuses.
pub fn forwarded_flags_of(flags: &BatchFlags, mode: BatchMode) -> Vec<String> {
    forwarded_flags(flags, mode, &mut Vec::new())
}

/// The per-job flags of harness-behaviour.md#job-invocation, in a fixed order; batch flags are
/// never forwarded.
fn forwarded_flags(
    flags: &BatchFlags,
    mode: BatchMode,
    errors: &mut Vec<PlanError>,
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(policy) = flags.on_unanswered {
        out.push("--on-unanswered".to_owned());
        out.push(
            match policy {
                OnUnanswered::Fail => "fail",
                OnUnanswered::First => "first",
            }
            .to_owned(),
        );
    }
    if let Some(model) = &flags.decider_model {
        out.push("--decider-model".to_owned());
        out.push(model.clone());
    }
    if flags.ablate_skill {
        out.push(ABLATE_SKILL.to_owned());
    }
    if let Some(label) = &flags.label {
        out.push("--label".to_owned());
        out.push(label.clone());
    }
    if mode == BatchMode::Record {
        // `cowork-harness record` has no `--label` or `--ablate-skill` (it refuses them as
        // unknown flags) and takes `--decider-model` only with `--decider-llm`, which a batch
        // cannot ask for; refusing them here stops the batch before any job is paid for.
        let refused = [
            (
                flags.label.is_some(),
                "--label",
                "cowork-harness record has no --label",
            ),
            (
                flags.ablate_skill,
                "--ablate-skill",
                "cowork-harness record has no --ablate-skill",
            ),
            (
                flags.decider_model.is_some(),
                "--decider-model",
                "cowork-harness record takes it only with --decider-llm, which --record cannot pass",
            ),
        ];
        let mut any_refused = false;
        for (given, flag, reason) in refused {
            if given {
                errors.push(PlanError::FlagNotForRecord { flag, reason });
                any_refused = true;
            }
        }
        if any_refused {
            return Vec::new();
        }
    }
    if mode == BatchMode::Replay && !out.is_empty() {
        // Replay re-drives a recording; it takes none of the run flags.
        let flag = [
            "--on-unanswered",
            "--decider-model",
            "--ablate-skill",
            "--label",
        ]
        .into_iter()
        .find(|flag| out.iter().any(|f| f == flag))
        .unwrap_or("--label");
        errors.push(PlanError::FlagNotForReplay { flag });
        return Vec::new();
    }
    out
}

/// Lays out a batch and completes the plan with `spec`'s bundle digest, which the caller
/// computed over the batch's files and the layout's derived files.
pub fn plan(batch: &PreparedBatch, spec: &PlanInput) -> Result<Plan, Vec<PlanError>> {
    let layout = plan_units(batch, &spec.flags, spec.mode)?;
    Ok(Plan::new(layout, spec.clone()))
}

impl PlanLayout {
    /// The derived files as (path, contents) pairs, as `bundle::pack` takes them.
    pub fn derived_for_bundle(&self) -> Vec<(String, Vec<u8>)> {
        self.derived_files
            .iter()
            .map(|file| (file.path.clone(), file.contents.clone()))
            .collect()
    }
}

impl Plan {
    /// Completes a layout. The layout's flags and mode are the plan's (they are what the units
    /// were laid out with); `input` supplies the batch id, the executor and the bundle digest.
    pub fn new(layout: PlanLayout, input: PlanInput) -> Plan {
        let command = match layout.mode {
            BatchMode::Run | BatchMode::Eval => JobCommand::Run,
            BatchMode::Record => JobCommand::Record,
            BatchMode::Replay => JobCommand::Replay,
        };
        Plan {
            batch_id: input.batch_id,
            kind: layout.kind,
            mode: layout.mode,
            command,
            repeat: layout.flags.repeat,
            flags: layout.flags,
            units: layout.units,
            requested_cells: layout.requested_cells,
            truncated: layout.truncated,
            derived_files: layout.derived_files,
            forwarded_flags: layout.forwarded_flags,
            executor: input.executor,
            sim: input.sim,
            bundle_sha256: input.bundle_sha256,
            generation: 0,
            interleave: layout.mode == BatchMode::Eval,
            sequential: None,
        }
    }

    /// The plan with the sequential design of its eval settings (none without `--sequential`).
    pub fn with_eval_settings(mut self, settings: Option<&cowork_schema::batch::EvalSpec>) -> Plan {
        self.sequential = settings.and_then(|settings| {
            settings
                .sequential
                .as_ref()
                .map(|spec| sequential::SequentialSettings::of(spec, settings.alpha))
        });
        self
    }

    /// Runs per unit: N with `--repeat N`, else 1.
    pub fn runs_per_unit(&self) -> u32 {
        self.repeat.unwrap_or(1)
    }

    /// Jobs in the plan: units without a cell error × runs per unit (step 4 of
    /// harness-behaviour.md#job-expansion).
    pub fn n_jobs(&self) -> u64 {
        let runnable = self
            .units
            .iter()
            .filter(|unit| unit.cell_error.is_none())
            .count() as u64;
        runnable * u64::from(self.runs_per_unit())
    }

    /// Every job, built on demand, in (unit index, repeat index) order, or in (repeat index,
    /// unit index) order when [`Plan::interleave`] is set. Units with a cell error have no jobs
    /// (harness-behaviour.md#matrix-repeat).
    pub fn jobs(&self) -> impl Iterator<Item = JobSpec> + '_ {
        let runs = self.runs_per_unit();
        let runnable: Vec<&PlanUnit> = self
            .units
            .iter()
            .filter(|unit| unit.cell_error.is_none())
            .collect();
        let n_units = runnable.len() as u64;
        let n_jobs = n_units * u64::from(runs);
        let interleave = self.interleave;
        (0..n_jobs).map(move |job_idx| {
            let (unit_idx, run) = if interleave {
                (job_idx % n_units, job_idx / n_units)
            } else {
                (job_idx / u64::from(runs), job_idx % u64::from(runs))
            };
            // Both indices are below their bounds (a usize length and a u32 count).
            let unit = runnable[unit_idx as usize];
            self.job(unit, self.repeat.map(|_| run as u32))
        })
    }

    /// The flags `unit`'s jobs pass to the CLI: the plan's, and `--ablate-skill` for the
    /// no-skill arm of an eval.
    fn unit_forwarded_flags(&self, unit: &PlanUnit) -> Vec<String> {
        let mut flags = self.forwarded_flags.clone();
        if unit.arm.is_some_and(|arm| arm.ablated) && !flags.iter().any(|f| f == ABLATE_SKILL) {
            flags.push(ABLATE_SKILL.to_owned());
        }
        flags
    }

    /// The job of `unit` at `repeat_index`.
    pub fn job(&self, unit: &PlanUnit, repeat_index: Option<u32>) -> JobSpec {
        JobSpec {
            protocol: PROTOCOL_VERSION,
            batch_id: self.batch_id.clone(),
            job_id: JobId::new(&self.batch_id, unit.unit, repeat_index),
            command: self.command,
            tier: unit.tier,
            unit: unit.unit,
            repeat_index,
            scenario_file: unit.scenario_file.clone(),
            scenario_name: unit.scenario_name.clone(),
            axes: unit.axes.clone(),
            arm: unit.arm.map(|arm| eval::arm_wire_name(arm.index)),
            forwarded_flags: self.unit_forwarded_flags(unit),
            bundle_sha256: self.bundle_sha256.clone(),
            timeout_ms: unit.timeout_ms,
            executor: self.executor,
            sim: self.sim.clone(),
            generation: self.generation,
            traceparent: None,
            republished: 0,
            dispatch_epoch: 0,
            leader_term: 0,
        }
    }

    /// The part of the plan the reducer needs, as stored in `spec.json`.
    pub fn summary(&self) -> PlanSummary {
        PlanSummary {
            kind: match self.kind {
                PlanKind::Files => PlanKindName::Files,
                PlanKind::Matrix => PlanKindName::Matrix,
            },
            repeat: self.repeat,
            requested_cells: self.requested_cells,
            truncated: self.truncated,
            n_jobs: self.n_jobs(),
            units: self
                .units
                .iter()
                .map(|unit| UnitSummary {
                    unit: unit.unit,
                    label: unit.label.clone(),
                    scenario_name: unit.scenario_name.clone(),
                    axes: unit.axes.clone(),
                    cell_error: unit.cell_error.clone(),
                    tier: unit.tier,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
