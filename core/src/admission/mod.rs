//! Admission: which jobs of a batch go to the queue and when, and what the batch's events mean
//! for it — every decision the batch supervisor makes, as a pure state machine
//! (decisions.md#wire-protocol, harness-behaviour.md#early-stops).
//!
//! [`Admission`] is fed [`Input`]s (the batch's job events, a malformed event, a job the queue
//! gave up on, a cancel, the queue's withdrawal of queued jobs) and asked, at a given instant,
//! for its [`Decision`]: the jobs to publish, the jobs to declare lost, the tiers to withdraw,
//! when to wake it up again, and whether the batch has ended. The clock is an argument; nothing
//! here does IO, sleeps or reads the time. The driver (`cowork_coordinator::supervisor`) only
//! carries out decisions.
//!
//! The rules, each with its own table test (`tests.rs`):
//! - **window**: at most `window` jobs of the batch are outstanding (published, not finished).
//! - **unit decided**: jobs of a unit the reducer no longer needs are never admitted (skipped).
//! - **per-unit budget** (`--max-budget-usd` with `--repeat`) and **batch budget**
//!   (`--batch-budget-usd`): known spend plus the in-flight runs at an estimated price must fit
//!   ([`budget`] has the estimate and the bound it gives).
//! - **speculation bound**: with an early-stop rule (`--stop-on-diverge`), a unit admits at most
//!   `speculation` jobs beyond the lowest index its fold waits for, so few runs are discarded.
//! - **model limits**: the process-wide per-model concurrency and start rate
//!   ([`crate::limits`]); a held unit lets the next units go ahead.
//! - **tier pauses**: a `usage_limit` result pauses its tier's dispatch with doubling pauses
//!   ([`pauses`]).
//! - **cancel**: admits nothing more, withdraws the queued jobs, ends when the started ones end.
//! - **dispatch pause** (`cowork pause`): admits nothing more and withdraws the queued jobs,
//!   which go back to their units' cursors; started jobs finish and count; `resume-dispatch`
//!   admits from where each unit stopped, under the next dispatch epoch ([`controls`]).
//! - **adjusted limits** (`cowork adjust`): the batch budget and the window change at once; a
//!   lowered window comes with the next dispatch epoch, and the queued jobs are taken back as
//!   for a pause and admitted again within the new window ([`controls`]).
//! - **sequential stop** (`cowork eval --sequential`): at the look where the sequential test
//!   decides, nothing more is admitted; the jobs out finish and the batch is decided
//!   ([`sequential`]).
//! - **deadlines**: a started job that does not report back within its timeout plus a grace is
//!   published once more; if it stays silent again it is folded as an infrastructure error.
//! - **job lost**: a job the queue gave up on is folded as an infrastructure error, once.
//! - **history order**: with estimates from earlier batches, units expected to take longest go
//!   first ([`order`]); never with a batch budget, whose stop depends on the admission order.
//!
//! Every unit keeps a cursor: its jobs are admitted in index order, so the reducer, which folds
//! each unit in index order, gives the same rollups whatever order the units go in. Per-job state
//! is kept by job ordinal in bit sets ([`jobs`]); what grows with the window (outstanding jobs,
//! their model slots and deadlines) is kept in maps.

mod budget;
mod controls;
mod events;
mod jobs;
mod ledger;
mod live;
mod order;
mod pauses;
mod reacks;
mod results;
mod round;
mod sequential;
mod share;
mod summary;
#[cfg(test)]
mod tests;
mod whole_cost;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cowork_schema::api::ProgressSnapshot;
use cowork_schema::batch::BatchFlags;
use cowork_schema::event::{ErrorCategory, JobEvent, JobEventKind, JobOutcome};
use cowork_schema::ids::{BatchId, JobId, UnitRef};
use cowork_schema::job::{CellAxes, PROTOCOL_VERSION, Tier};

pub use budget::PriceEstimate;
pub use jobs::{BitSet, JobGrid};
pub use ledger::SAMPLES_PER_UNIT;
pub use live::{LIVE_CELLS_MAX, LIVE_FAILURES_MAX, live_delta};
pub use order::UnitOrder;
pub use pauses::TierPauses;
pub use results::{RESULT_FILE, ResultIndex, ResultLocation, sha256_hex};
pub use sequential::SequentialStop;
pub use share::ShareClaim;

use crate::limits::{DEFAULT_MODEL_KEY, ModelLimits};
use crate::plan::Plan;
use crate::reduce::{BatchReducer, BatchReduction, BatchShape, NotComplete, ShapeError};
use events::Finished;
use ledger::Ledger;
use reacks::UnsampledReports;

/// Jobs of one unit admitted beyond the lowest index its fold waits for, with an early-stop
/// rule: enough to keep a unit's runs overlapping, few enough that a stop discards at most this
/// many runs.
pub const DEFAULT_SPECULATION: u32 = 2;

/// Time a started job has beyond its own timeout to report back before it is published again:
/// room for the worker's artifact upload and event publish retries after the harness stopped.
pub const DEFAULT_DEADLINE_GRACE: Duration = cowork_schema::retries::admission::LOST_JOB_GRACE;

/// The `workerId` of a `finished` event the coordinator publishes for a job that never
/// reported back.
pub const LOST_JOB_WORKER: &str = "coordinator";

/// How one batch is admitted (besides its plan).
#[derive(Clone, Debug)]
pub struct AdmissionConfig {
    /// Jobs outstanding at most (at least 1).
    pub window: usize,
    /// See [`DEFAULT_SPECULATION`].
    pub speculation: u32,
    /// First dispatch pause of a tier after a `usage_limit` result; doubles up to the max.
    pub usage_pause: Duration,
    pub usage_pause_max: Duration,
    /// See [`DEFAULT_DEADLINE_GRACE`].
    pub deadline_grace: Duration,
    /// The per-model limits of this process, shared by its batches.
    pub model_limits: Arc<ModelLimits>,
    /// Expected run time of each unit (by unit index) from earlier batches; empty or all `None`
    /// for plan order.
    pub expected_run_ms: Vec<Option<u64>>,
    /// The division of the fleet's slots this batch shares with the other batches of the
    /// process (decisions.md#fair-share); `None`: only the window bounds it.
    pub fair_share: Option<ShareClaim>,
}

/// What admission is told.
// `Event` is much larger than the other variants; inputs are made and consumed one at a time,
// so boxing it would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Input {
    /// An event of the batch's log.
    Event(JobEvent),
    /// An item of the log that could not be decoded: counted and skipped.
    MalformedEvent,
    /// An event the supervisor's gate refused (forged or misrouted): counted, never folded.
    RefusedEvent,
    /// The queue gave up on the job (its deliveries ran out, or a worker terminated it).
    JobLost(JobId),
    /// The batch was cancelled: admit nothing more.
    Cancel,
    /// The queue took back the batch's queued jobs (after a cancel, a pause or a lowered
    /// cap); `jobs` it removed.
    Withdrawn { jobs: u64 },
    /// The batch's controls as its record now says (a pause, a resume of dispatch, an
    /// adjusted budget or window).
    Controls(cowork_schema::registry::BatchControls),
}

/// One job of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JobRef {
    /// Unit index in the plan.
    pub unit: u32,
    /// `None` without `--repeat`.
    pub repeat_index: Option<u32>,
}

/// A job to publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Publish {
    pub job: JobRef,
    /// 0, or 1 for the re-publication of a job that went silent (`JobSpec::republished`).
    pub republished: u32,
}

/// Something the driver may log.
#[derive(Clone, Debug, PartialEq)]
pub enum Note {
    /// A `usage_limit` result paused the tier's dispatch.
    Paused { tier: Tier, pause: Duration },
    /// The batch budget cannot fit one more job: every open unit stopped as a budget stop.
    BudgetStopped {
        spent_usd: f64,
        cap_usd: f64,
        units: usize,
    },
    /// A job went past its deadline and is published again.
    Republished { job_id: JobId },
    /// A job is declared lost and folded as an infrastructure error.
    Lost { job_id: JobId },
    /// An event named a job this batch does not have; ignored.
    ForeignJob { job_id: JobId },
    /// The sequential test of an eval decided (or became futile) at a look: nothing more is
    /// admitted, the jobs out finish and the batch is decided.
    SequentialStopped(SequentialStop),
}

/// How a batch ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Every needed outcome arrived: the batch can be reduced.
    Decided,
    /// Cancelled before it was decided.
    Cancelled,
}

/// What admission decided at one instant.
#[derive(Clone, Debug, Default)]
pub struct Decision {
    /// Jobs to publish, in this order.
    pub publish: Vec<Publish>,
    /// `finished` events to publish for jobs that never reported back (each folds as an
    /// infrastructure error when it comes back from the log).
    pub lost: Vec<JobEvent>,
    /// Tiers whose queued jobs of this batch must be withdrawn; then the driver reports
    /// [`Input::Withdrawn`].
    pub withdraw: Vec<Tier>,
    pub notes: Vec<Note>,
    /// When to ask again even if nothing happens (a pause or a rate window ends, a deadline).
    pub wake_at: Option<Instant>,
    /// A job waits for a model slot that another batch of this process may give back.
    pub wait_for_release: bool,
    /// Model slots were given back (other batches waiting for one may go on).
    pub released_slots: bool,
    /// A ready job waits for the batch's fair share of a tier: ask again when other batches
    /// free slots.
    pub wait_for_share: bool,
    /// The batch holds or wants fewer slots than before: batches waiting for their share may
    /// go on.
    pub share_freed: bool,
    pub end: Option<End>,
}

/// Why the next job of a unit waits.
#[derive(Clone, Debug, PartialEq)]
enum Wait {
    Paused(Tier, Instant),
    Concurrency(String),
    Rate(String, Instant),
    UnitBudget,
    Speculation,
    /// The batch holds its share of the tier's slots.
    Share(Tier),
}

impl Wait {
    fn held_by(&self) -> String {
        match self {
            Wait::Paused(tier, _) => format!("usage-limit pause ({})", tier.as_str()),
            Wait::Concurrency(rule) | Wait::Rate(rule, _) => format!("model limit {rule}"),
            Wait::UnitBudget => "unit budget".to_owned(),
            Wait::Speculation => "speculation limit".to_owned(),
            Wait::Share(tier) => format!("fair share ({})", tier.as_str()),
        }
    }
}

/// One unit as admission sees it.
#[derive(Clone, Debug)]
struct UnitAdmission {
    unit_ref: UnitRef,
    tier: Tier,
    timeout: Duration,
    /// The key of the model limits (the cell's model axis, or `default`).
    model: String,
    /// `false` for a cell with a pre-execution error: it has no jobs.
    runnable: bool,
    /// Runs below it are admitted, finished or skipped.
    cursor: u32,
    in_flight: u32,
    /// Spend of the unit's finished runs, folded or not.
    spent_usd: f64,
    price: PriceEstimate,
    /// The run whose model-limit delay was counted (each delayed job counts once).
    delay_counted_at: Option<u32>,
    label: String,
    scenario: String,
    axes: Option<CellAxes>,
    arm: Option<String>,
}

/// A published job whose outcome has not been folded.
#[derive(Clone, Debug)]
struct Outstanding {
    unit: u32,
    run: u32,
    /// The model whose limit slot the job holds.
    model_slot: Option<String>,
    deadline: Option<Instant>,
    republished: u32,
    /// Declared lost: its infrastructure-error event is on its way.
    lost: bool,
    /// The worker that last started it, and when its timeout plus the grace runs out for
    /// that start (kept past the deadline, so an overdue job is named with its worker).
    claim: Option<(String, Instant)>,
    /// Deliveries handed back because the sandbox did not start or a worker's stop cut the run
    /// short: not attempts of the job.
    free_deliveries: u32,
    /// `started` events of the job (one per delivery that began running it).
    starts: u32,
}

/// The state of the withdrawal of queued jobs after a cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Withdrawal {
    NotAsked,
    Asked,
    Done,
}

/// The admission state machine of one batch.
#[derive(Debug)]
pub struct Admission {
    batch_id: BatchId,
    executor: &'static str,
    flags: BatchFlags,
    generation: u32,
    interleave: bool,
    window: usize,
    /// The window the batch was configured with, before any `adjust --max-running`.
    configured_window: usize,
    /// The batch budget it was submitted with, before any `adjust`.
    submitted_budget_usd: Option<f64>,
    dispatch: controls::Dispatch,
    /// The changes of the batch's controls so far (for the envelope's `fleet` key).
    control_changes: Vec<cowork_schema::registry::ControlChange>,
    speculation: Option<u32>,
    unit_budget_usd: Option<f64>,
    deadline_grace: Duration,
    limits: Arc<ModelLimits>,
    grid: JobGrid,
    units: Vec<UnitAdmission>,
    order: UnitOrder,
    reducer: BatchReducer,
    started: BitSet,
    finished: BitSet,
    outstanding: HashMap<u64, Outstanding>,
    /// Deadlines of outstanding jobs, earliest first (an entry per job that has one).
    deadlines: BTreeSet<(Instant, u64)>,
    /// Jobs the queue gave up on, not yet declared lost.
    lost_by_queue: Vec<(u32, u32)>,
    /// Jobs declared lost that are not outstanding (admitted by an earlier coordinator).
    lost_elsewhere: Vec<u64>,
    catching_up: bool,
    /// The jobs a worker started before this supervisor did are tracked (with their model
    /// slots), which happens once, before anything new is admitted.
    adopted_running: bool,
    cancelling: bool,
    withdrawal: Withdrawal,
    budget_stopped: Option<Vec<String>>,
    /// The batch budget's estimate of one run's whole cost.
    batch_price: PriceEstimate,
    /// Model plus sandbox spend of the finished runs (what the batch budget counts).
    whole: whole_cost::WholeCost,
    pauses: TierPauses,
    /// Admissions delayed by each model-limit rule.
    delayed: std::collections::BTreeMap<String, u64>,
    notes: Vec<Note>,
    released_slots: bool,
    first_admission: Option<Instant>,
    /// Finished jobs whose run passed, by ordinal (the live page's strips).
    passed: BitSet,
    live: live::LiveTally,
    progress: ProgressSnapshot,
    ledger: Ledger,
    results: ResultIndex,
    /// What the folded outcomes that are not samples were, to tell a re-ack from a duplicate.
    unsampled: UnsampledReports,
    /// The looks of a sequential eval (`--sequential`).
    sequential: Option<sequential::SequentialWatch>,
    /// The batch's seat at the fleet's fair share; `None` when it does not share.
    share: Option<share::ShareSeat>,
}

impl Admission {
    /// Admission of `plan`, before any event.
    pub fn new(plan: &Plan, config: AdmissionConfig) -> Result<Admission, ShapeError> {
        let summary = plan.summary();
        let reducer = BatchReducer::new(BatchShape::from_summary(&summary, &plan.flags))?;
        let n_units = u32::try_from(plan.units.len()).map_err(|_| ShapeError::TooManyUnits)?;
        let units: Vec<UnitAdmission> = plan.units.iter().map(unit_admission).collect();
        // The batch budget stops the batch at the first job that does not fit: which jobs ran
        // by then depends on the admission order, so it keeps plan order.
        let order = if plan.flags.batch_budget_usd.is_none() && !plan.interleave {
            UnitOrder::longest_first(n_units, &config.expected_run_ms)
        } else {
            UnitOrder::plan(n_units)
        };
        let grid = JobGrid::new(n_units, plan.repeat);
        let repeat = plan.repeat.is_some();
        Ok(Admission {
            batch_id: plan.batch_id.clone(),
            executor: plan.executor.as_str(),
            generation: plan.generation,
            interleave: plan.interleave,
            window: config.window.max(1),
            configured_window: config.window.max(1),
            submitted_budget_usd: plan.flags.batch_budget_usd,
            dispatch: controls::Dispatch::default(),
            control_changes: Vec::new(),
            speculation: (repeat && plan.flags.stop_on_diverge).then_some(config.speculation),
            unit_budget_usd: plan.flags.max_budget_usd.filter(|_| repeat),
            deadline_grace: config.deadline_grace,
            limits: config.model_limits,
            grid,
            order,
            reducer,
            started: BitSet::new(grid.n_ordinals()),
            finished: BitSet::new(grid.n_ordinals()),
            outstanding: HashMap::new(),
            deadlines: BTreeSet::new(),
            lost_by_queue: Vec::new(),
            lost_elsewhere: Vec::new(),
            catching_up: true,
            adopted_running: false,
            cancelling: false,
            withdrawal: Withdrawal::NotAsked,
            budget_stopped: None,
            batch_price: PriceEstimate::default(),
            whole: whole_cost::WholeCost::new(&plan.flags.pricing),
            pauses: TierPauses::new(config.usage_pause, config.usage_pause_max),
            delayed: std::collections::BTreeMap::new(),
            notes: Vec::new(),
            released_slots: false,
            first_admission: None,
            passed: BitSet::new(grid.n_ordinals()),
            live: live::LiveTally::new(units.len()),
            progress: ProgressSnapshot {
                planned: plan.n_jobs(),
                generation: plan.generation,
                batch_budget_usd: plan.flags.batch_budget_usd,
                ..ProgressSnapshot::default()
            },
            ledger: Ledger::new(units.len()),
            results: ResultIndex::new(units.len()),
            unsampled: UnsampledReports::default(),
            sequential: sequential::SequentialWatch::of(plan),
            share: config.fair_share.map(|claim| {
                share::ShareSeat::take(
                    claim,
                    &plan.batch_id,
                    plan.flags.priority,
                    crate::share::tiers_of(units.iter().map(|unit| unit.tier)),
                )
            }),
            units,
            flags: plan.flags.clone(),
        })
    }

    /// The batch admitted.
    pub fn batch_id(&self) -> &BatchId {
        &self.batch_id
    }

    /// The live counts of the batch.
    pub fn progress(&self) -> &ProgressSnapshot {
        &self.progress
    }

    /// Jobs started and not reported back whose timeout plus the grace ran out at `now`: each
    /// with the worker that started it last and how long ago its time ran out, longest first.
    pub fn overdue_jobs(&self, now: Instant) -> Vec<(JobId, String, Duration)> {
        let mut overdue: Vec<(u64, &Outstanding, &str, Duration)> = self
            .outstanding
            .iter()
            .filter(|(_, job)| !job.lost)
            .filter_map(|(ordinal, job)| {
                let (worker, until) = job.claim.as_ref()?;
                let past = now.checked_duration_since(*until)?;
                Some((*ordinal, job, worker.as_str(), past))
            })
            .collect();
        overdue.sort_by(|a, b| b.3.cmp(&a.3).then(a.0.cmp(&b.0)));
        overdue
            .into_iter()
            .map(|(_, job, worker, past)| {
                let job_ref = JobRef {
                    unit: job.unit,
                    repeat_index: self.grid.repeat_index(job.run),
                };
                (self.job_id(job_ref), worker.to_owned(), past)
            })
            .collect()
    }

    /// The batch's reducer.
    pub fn reducer(&self) -> &BatchReducer {
        &self.reducer
    }

    /// The reduction, once the batch is decided.
    pub fn finish(&self) -> Result<BatchReduction, NotComplete> {
        self.reducer.finish()
    }

    /// The job id of `job`.
    pub fn job_id(&self, job: JobRef) -> JobId {
        let unit_ref = self
            .units
            .get(job.unit as usize)
            .map_or(UnitRef::File(job.unit), |unit| unit.unit_ref);
        JobId::new(&self.batch_id, unit_ref, job.repeat_index)
    }

    /// Where the folded run `job`'s result is, and the digest its bytes must have.
    pub fn result_location(&self, job: JobRef) -> Option<ResultLocation> {
        let run = job.repeat_index.unwrap_or(0);
        self.results.location((job.unit, run), &self.job_id(job))
    }

    /// The version the envelope names: the one harness version that reported runs, `mixed`,
    /// or `unknown`.
    pub fn envelope_version(&self) -> String {
        self.ledger.envelope_version()
    }

    /// The model limits this batch admits under.
    pub fn model_limits(&self) -> &ModelLimits {
        &self.limits
    }

    /// Catch-up is over: the events of the log before this supervisor started are folded. Jobs
    /// with an event were admitted by an earlier supervisor. Usage limits reported before are
    /// history (the pause they caused is over or nearly so).
    pub fn end_catch_up(&mut self) {
        self.catching_up = false;
        self.progress.admitted = self.started.union_len(&self.finished);
    }

    /// `true` when `job_id` is a job of this plan that a folded event already started or
    /// finished: its later events (a re-ack, a duplicate, the `finished` of a job a worker
    /// started before this supervisor did) are for a job the batch knows to be out.
    pub fn has_events_of(&self, job_id: &JobId) -> bool {
        JobId::parse(job_id.as_str())
            .and_then(|(_, unit, repeat)| self.grid.locate(unit, repeat))
            .is_some_and(|(unit, run)| {
                let ordinal = self.grid.ordinal(unit, run);
                self.started.contains(ordinal) || self.finished.contains(ordinal)
            })
    }

    /// Takes one input into account at `now`.
    pub fn apply(&mut self, input: Input, now: Instant) {
        match input {
            Input::Event(event) => self.apply_event(event, now),
            Input::MalformedEvent => self.progress.malformed_events += 1,
            Input::RefusedEvent => self.progress.refused_events += 1,
            Input::JobLost(job_id) => {
                let located = JobId::parse(job_id.as_str())
                    .and_then(|(_, unit, repeat)| self.grid.locate(unit, repeat));
                match located {
                    Some(job) => self.lost_by_queue.push(job),
                    None => self.notes.push(Note::ForeignJob { job_id }),
                }
            }
            Input::Cancel => self.cancelling = true,
            Input::Withdrawn { jobs } if self.cancelling => self.withdrawn(jobs),
            Input::Withdrawn { jobs } => self.taken_back(jobs),
            Input::Controls(controls) => self.apply_controls(&controls),
        }
    }

    /// Sets (or clears) an outstanding job's deadline.
    fn set_deadline(&mut self, ordinal: u64, deadline: Option<Instant>) {
        let Some(job) = self.outstanding.get_mut(&ordinal) else {
            return;
        };
        if let Some(old) = job.deadline.take() {
            self.deadlines.remove(&(old, ordinal));
        }
        job.deadline = deadline;
        if let Some(at) = deadline {
            self.deadlines.insert((at, ordinal));
        }
    }

    /// Starts tracking a published job.
    fn track(&mut self, unit: u32, run: u32, model_slot: Option<String>) {
        let ordinal = self.grid.ordinal(unit, run);
        self.outstanding.insert(
            ordinal,
            Outstanding {
                unit,
                run,
                model_slot,
                deadline: None,
                republished: 0,
                lost: false,
                claim: None,
                free_deliveries: 0,
                starts: 0,
            },
        );
        self.units[unit as usize].in_flight += 1;
    }

    /// Stops tracking a job (its outcome arrived, or it was withdrawn) and gives back its
    /// model slot.
    fn settle(&mut self, ordinal: u64) {
        let Some(job) = self.outstanding.remove(&ordinal) else {
            return;
        };
        if let Some(at) = job.deadline {
            self.deadlines.remove(&(at, ordinal));
        }
        let unit = &mut self.units[job.unit as usize];
        unit.in_flight = unit.in_flight.saturating_sub(1);
        if let Some(model) = job.model_slot {
            self.limits.release(&model);
            self.released_slots = true;
        }
    }

    /// The queue took back the queued jobs: jobs no worker started are never run.
    fn withdrawn(&mut self, jobs: u64) {
        self.withdrawal = Withdrawal::Done;
        self.progress.withdrawn += jobs;
        for ordinal in self.unstarted_outstanding() {
            self.settle(ordinal);
        }
    }

    /// Ordinals of the outstanding jobs no worker started (the ones a withdrawal takes back).
    fn unstarted_outstanding(&self) -> Vec<u64> {
        self.outstanding
            .keys()
            .copied()
            .filter(|ordinal| !self.started.contains(*ordinal))
            .collect()
    }

    /// The `finished` event that folds a silent job as an infrastructure error.
    fn lost_event(&self, job: JobRef, message: &str) -> JobEvent {
        JobEvent {
            protocol: PROTOCOL_VERSION,
            batch_id: self.batch_id.clone(),
            job_id: self.job_id(job),
            // No delivery made this event: attempt 0 keeps its log id apart from every
            // worker's.
            attempt: 0,
            generation: self.generation,
            worker_id: LOST_JOB_WORKER.to_owned(),
            event: JobEventKind::Finished {
                outcome: JobOutcome::Error {
                    category: ErrorCategory::Infra,
                    message: message.to_owned(),
                },
                artifacts: Vec::new(),
                harness_version: None,
                exit_code: None,
                run_ms: 0,
                unstored_outcome: None,
                from_record_of_attempt: None,
            },
        }
    }
}

impl Drop for Admission {
    /// Model slots still held go back to the process's limits however supervision ends.
    fn drop(&mut self) {
        for job in self.outstanding.values() {
            if let Some(model) = &job.model_slot {
                self.limits.release(model);
            }
        }
    }
}

fn unit_admission(unit: &crate::plan::PlanUnit) -> UnitAdmission {
    UnitAdmission {
        unit_ref: unit.unit,
        tier: unit.tier,
        timeout: Duration::from_millis(unit.timeout_ms),
        model: unit
            .axes
            .as_ref()
            .and_then(|axes| axes.model.clone())
            .unwrap_or_else(|| DEFAULT_MODEL_KEY.to_owned()),
        runnable: unit.cell_error.is_none(),
        cursor: 0,
        in_flight: 0,
        spent_usd: 0.0,
        price: PriceEstimate::default(),
        delay_counted_at: None,
        label: unit.label.clone(),
        scenario: unit.scenario_name.clone(),
        axes: unit.axes.clone(),
        arm: unit
            .arm
            .map(|arm| crate::plan::eval::arm_wire_name(arm.index)),
    }
}

/// `true` for an outcome that `cowork resume` runs again: an infrastructure failure before
/// spend, or a job killed by `cancel --kill-running` (neither left a result).
pub fn is_rerun_on_resume(outcome: &JobOutcome) -> bool {
    matches!(
        outcome,
        JobOutcome::Error {
            category: ErrorCategory::Infra,
            ..
        }
    ) || is_killed(outcome)
}

/// `true` for a job a worker killed (or skipped) for `cancel --kill-running`.
pub fn is_killed(outcome: &JobOutcome) -> bool {
    matches!(
        outcome,
        JobOutcome::Error {
            category: ErrorCategory::Cancelled,
            ..
        }
    )
}
