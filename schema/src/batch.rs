//! The batch spec: what one `cowork run` or `cowork submit` asks for.
//!
//! The spec records what the user typed after validation (harness-behaviour.md#repeat-flags,
//! harness-behaviour.md#matrix-flags), with paths made relative to the bundle root so that it means
//! the same on every machine. It is stored as `batches/<batch>/spec.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Smallest `--repeat` the fleet accepts (harness-behaviour.md#repeat-flags: a repeat batch has at
/// least 2 runs).
pub const REPEAT_MIN: u32 = 2;
/// Largest `--repeat` the fleet accepts. The CLI's cap of 100 is a one-machine limit; the fleet
/// allows more so that eval and flakiness sweeps can use many workers.
pub const REPEAT_MAX: u32 = 10_000;
/// Default `--max-cells`, identical to the CLI's (harness-behaviour.md#matrix-flags).
pub const MAX_CELLS_DEFAULT: u32 = 16;
/// Largest `--max-cells` the fleet accepts, so that a typo cannot plan billions of jobs.
pub const MAX_CELLS_MAX: u32 = 100_000;

/// What the batch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BatchMode {
    /// `cowork-harness run` per job (the main case).
    Run,
    /// `cowork-harness record` per job; the cassette is stored beside `result.json`.
    Record,
    /// `cowork-harness replay` per cassette, on the `replay` tier.
    Replay,
    /// Two arms (A and B) of the same scenarios (decisions.md#eval-design).
    Eval,
}

impl BatchMode {
    /// The envelope's `command` for a batch of this mode: the harness subcommand its jobs run
    /// (an eval's jobs are plain runs).
    pub fn envelope_command(self) -> &'static str {
        match self {
            BatchMode::Record => "record",
            BatchMode::Replay => "replay",
            BatchMode::Run | BatchMode::Eval => "run",
        }
    }

    /// `true` for a batch that spends nothing: a replay re-drives a recording, so the cost in
    /// its results is what the recorded run cost, not what the replay spent. Such batches
    /// count at $0 and are kept apart from live ones in history.
    pub fn spends_nothing(self) -> bool {
        self == BatchMode::Replay
    }
}

/// Which executor runs the jobs (decisions.md#executors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    /// The real `cowork-harness` CLI as a child process.
    Harness,
    /// The real CLI inside a container per job.
    Container,
    /// The seeded simulator; its results are marked simulated everywhere.
    Sim,
}

impl ExecutorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutorKind::Harness => "harness",
            ExecutorKind::Container => "container",
            ExecutorKind::Sim => "sim",
        }
    }
}

/// Policy for a gate with no matching scripted answer, forwarded as `--on-unanswered`.
/// `prompt` is refused by `run` (harness-behaviour.md#job-invocation), so it is not representable
/// here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnUnanswered {
    Fail,
    First,
}

/// The judging flags of a batch (harness-behaviour.md#repeat-flags,
/// harness-behaviour.md#matrix-flags), validated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BatchFlags {
    /// `--repeat N`; `None` means one run per file or cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
    /// `--min-pass-rate`, in [0, 1]; default 1.0.
    pub min_pass_rate: f64,
    /// `--stop-on-diverge`.
    pub stop_on_diverge: bool,
    /// `--max-budget-usd`: the CLI's per-file/per-cell budget (harness-behaviour.md#repeat-loop,
    /// harness-behaviour.md#choice-c6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget_usd: Option<f64>,
    /// A budget in USD for the whole batch, all cells together (`--batch-budget-usd`): a fleet
    /// feature beside the CLI's per-unit budget (harness-behaviour.md#choice-c6). Admission keeps
    /// known spend plus the in-flight estimate under it; when it is reached, every open unit stops
    /// as a budget stop. Needs `repeat`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_budget_usd: Option<f64>,
    /// `--allow-budget-stop`.
    pub allow_budget_stop: bool,
    /// `--max-cells`; default 16 like the CLI.
    pub max_cells: u32,
    /// `--allow-truncated-matrix`.
    pub allow_truncated_matrix: bool,
    /// `--ablate-skill`: every run is a control-arm run (harness-behaviour.md#provenance).
    pub ablate_skill: bool,
    /// `--on-unanswered`, forwarded to every job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_unanswered: Option<OnUnanswered>,
    /// `--decider-model`, forwarded to every job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decider_model: Option<String>,
    /// `--label`, forwarded to every job (single line, at most 200 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Orchestrator wall-clock limit per job in milliseconds; it must exceed the scenario's
    /// `timeout_ms` (harness-behaviour.md#choice-c13). `None` derives it from the scenario.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_timeout_ms: Option<u64>,
    /// The quarantine the verdict honours (`quarantine.yaml`, `--quarantine`): units it covers
    /// still run and are reported but do not gate `ok` or the exit code until they expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<crate::quarantine::QuarantineSpec>,
    /// `--stall-after`: how long the batch may go with jobs outstanding and none started or
    /// finished before it is marked stalled, in milliseconds. `None`: three times the p95 run
    /// time of recent batches, else 15 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_after_ms: Option<u64>,
    /// `--on-stall`: what the coordinator does when the batch stalls (`None`: nothing, it
    /// only says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_stall: Option<OnStall>,
    /// Sandbox and model prices and `--allow-unpriced` (decisions.md#whole-cost).
    #[serde(default, skip_serializing_if = "crate::pricing::Pricing::is_empty")]
    pub pricing: crate::pricing::Pricing,
    /// `--priority`: the batch's class when it shares the fleet (decisions.md#fair-share).
    #[serde(default, skip_serializing_if = "crate::share::Priority::is_normal")]
    pub priority: crate::share::Priority,
}

/// What the coordinator does with a stalled batch (`--on-stall`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnStall {
    /// Cancel it, as `cowork cancel` does, with the reason recorded (a paused batch is kept).
    Cancel,
    /// Only mark it stalled.
    None,
}

impl Default for BatchFlags {
    fn default() -> Self {
        BatchFlags {
            repeat: None,
            min_pass_rate: 1.0,
            stop_on_diverge: false,
            max_budget_usd: None,
            batch_budget_usd: None,
            allow_budget_stop: false,
            max_cells: MAX_CELLS_DEFAULT,
            allow_truncated_matrix: false,
            ablate_skill: false,
            on_unanswered: None,
            decider_model: None,
            label: None,
            job_timeout_ms: None,
            quarantine: None,
            stall_after_ms: None,
            on_stall: None,
            pricing: crate::pricing::Pricing::default(),
            priority: crate::share::Priority::Normal,
        }
    }
}

/// Parameters of the `sim` executor (decisions.md#executors): a seed and an optional profile of
/// per-scenario and per-cell behaviour.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SimSpec {
    /// Seed of every simulated outcome; the same seed gives the same results.
    pub seed: u64,
    /// Rules of the simulation profile, in order; the first matching rule wins per field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<SimRule>,
}

/// One rule of a simulation profile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub struct SimRule {
    /// Scenario name: a substring, anchored with a leading `^` and/or trailing `$`; absent
    /// matches every scenario.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// Exact cell baseline; absent matches any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// Exact cell model; absent matches any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Exact declared cell skill dir; absent matches any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill_dir: Option<String>,
    /// Eval arm (`a` or `b`); absent matches any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm: Option<String>,
    /// Probability that a run passes, in [0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_rate: Option<f64>,
    /// Mean cost of a run in USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Mean duration of a run in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// How far a run's duration strays from `duration_ms`, as a fraction in [0, 1]: each run
    /// draws uniformly within ±spread of it. Default 0.5; 0 makes every run take exactly
    /// `duration_ms` (benchmarks that measure the fleet's own overhead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_spread: Option<f64>,
    /// Probability that a run leaves cost and usage out (missing telemetry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_telemetry_rate: Option<f64>,
    /// Probability that a run is decided non-deterministically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_deterministic_rate: Option<f64>,
    /// Probability that a run ends at an unanswered gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unanswered_rate: Option<f64>,
    /// When set, the simulator sleeps for the simulated duration scaled by this factor (0 = no
    /// sleep; 0.001 turns a 60 s run into 60 ms). Used by demos and fault tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_scale: Option<f64>,
    /// Fault injection: the first N deliveries of a matching job fail before the harness
    /// would spawn (an infrastructure failure with nothing spent; retried,
    /// harness-behaviour.md#choice-c8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infra_failures: Option<u32>,
    /// Fault injection: probability that a run fails with an infrastructure error after the
    /// harness spawned (spend happened; reported, never retried, harness-behaviour.md#choice-c8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infra_after_spend_rate: Option<f64>,
    /// Probability that a completed run hits the model's usage limit (`resultErrorKind:
    /// "usage_limit"`): a failing sample, and a dispatch pause on the fleet
    /// (harness-behaviour.md#choice-c9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_limit_rate: Option<f64>,
}

/// A validated batch, as stored in `batches/<batch>/spec.json` and sent by `submit`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BatchSpec {
    /// Format version of this document.
    pub schema_version: u32,
    pub mode: BatchMode,
    /// The target as the user typed it (for messages only).
    pub target_display: String,
    /// The target (scenario file or directory), bundle-relative with `/` separators: what the
    /// coordinator re-plans from when it receives the bundle.
    pub target: String,
    /// Scenario files of the batch, bundle-relative with `/` separators, in plan order.
    pub scenario_files: Vec<String>,
    /// The matrix file, bundle-relative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix_file: Option<String>,
    pub flags: BatchFlags,
    pub executor: ExecutorKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimSpec>,
    /// sha256 (hex) of the bundle `bundles/<sha256>.tar.zst`.
    pub bundle_sha256: String,
    /// The A/B settings of an eval batch (`mode: eval`, decisions.md#eval-design); absent for every
    /// other mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<EvalSpec>,
    /// Webhooks told of the batch's moments (`--notify`), besides the coordinator's own;
    /// `http://` or `https://` URLs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<String>,
}

/// The A/B settings of an eval batch (`cowork eval`): what the coordinator re-plans the arms
/// from and what its eval report (`batches/<id>/eval.json`) is computed with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EvalSpec {
    /// Every arm's directory in arm order (skill dir or plugin), bundle-relative with `/`
    /// separators: arm A's, then arm B's in the two-arm form. Each replaces the single
    /// `plugins.local_plugins` entry of every scenario's session; the report labels the arms
    /// with these paths. `null` is the no-skill arm: its runs keep the session and pass
    /// `--ablate-skill`, which empties its plugins.
    pub arms: Vec<Option<String>>,
    /// The arms' names in arm order (`--arm NAME=DIR`); empty for the two-arm form, whose arms
    /// are `A` and `B`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arm_names: Vec<String>,
    /// The index of the control arm in `arms` (`--control`): every other arm is compared with
    /// it. 0 (arm A) unless given.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub control: u32,
    /// `--model`: the model both arms run; absent keeps each session's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `--alpha`: significance level of the verdicts, strictly between 0 and 1.
    pub alpha: f64,
    /// Seed of the bootstrap intervals: the same seed reproduces every interval.
    pub seed: u64,
    /// Bootstrap resamples per interval.
    pub resamples: u32,
    /// `--mde`: the difference of pass rates the eval is planned to detect, as a fraction
    /// (`--mde 15` is 0.15); the report gives the runs it needs. Absent when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mde: Option<f64>,
    /// `--sequential`: stop the batch as soon as the sequential test decides (or can no longer
    /// decide); absent for an eval that runs every planned pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<SequentialSpec>,
}

/// The sequential design of an eval (`--sequential`, decisions.md#eval-sequential).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SequentialSpec {
    /// `--looks K`: planned looks, equally spaced in pairs of the planned total (at least 1).
    pub looks: u32,
    /// `--mde POINTS` as a fraction (0.2 for 20 points): the smallest difference worth
    /// detecting; the futility stop asks whether it could still be. Absent: futility only when
    /// no outcome of the remaining pairs could reach significance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mde: Option<f64>,
}

/// The current [`BatchSpec::schema_version`].
pub const BATCH_SPEC_VERSION: u32 = 1;

/// How the planner laid a batch out: the part of the plan the reducer needs, stored beside the
/// spec so that `cowork rollup` can re-judge a stored batch with the same shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanSummary {
    /// `files` (one unit per scenario file) or `matrix` (one unit per kept cell).
    pub kind: PlanKindName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
    /// `totalBeforeCap` for a matrix; the number of files otherwise.
    pub requested_cells: u32,
    pub truncated: bool,
    /// Jobs in the plan (units without a cell error × runs per unit).
    pub n_jobs: u64,
    pub units: Vec<UnitSummary>,
}

impl PlanSummary {
    /// The repeat index of each job of a unit, in order: `0..repeat` with `--repeat`, else one
    /// job without an index.
    pub fn repeat_indices(&self) -> Vec<Option<u32>> {
        match self.repeat {
            Some(n) => (0..n).map(Some).collect(),
            None => vec![None],
        }
    }
}

/// `files` or `matrix`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PlanKindName {
    Files,
    Matrix,
}

/// One unit (scenario file or matrix cell) of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnitSummary {
    pub unit: crate::ids::UnitRef,
    /// The rollup's `scenario`: the name, or `<name> [<axes label>]` for a cell.
    pub label: String,
    pub scenario_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axes: Option<crate::unit::CellAxes>,
    /// A pre-execution cell error (harness-behaviour.md#matrix-repeat); such a cell has no jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell_error: Option<String>,
    pub tier: crate::unit::Tier,
}

/// `batches/<batch>/spec.json`: the submitted spec and the planner's layout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredBatch {
    pub batch_id: crate::ids::BatchId,
    pub spec: BatchSpec,
    pub plan: PlanSummary,
}

/// `batches/<batch>/generation.json`: how many times a batch of a local store was resumed.
/// Each `cowork resume` of the local store writes the next generation before it runs a job, so
/// every resume's jobs get keys and records of their own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoredGeneration {
    /// The latest resume generation (1 after the first resume).
    pub generation: u32,
}

/// A simulation profile file (`--sim-profile`): `rules:` in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SimProfile {
    #[serde(default)]
    pub rules: Vec<SimRule>,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}
