//! The envelope's `fleet` key (harness-behaviour.md#choice-c15): what the fleet did to produce a
//! batch's results — judging settings, job counts, spend outside the rollups, pauses, limits and
//! workers.
//!
//! The harness envelope has no such key; a consumer of the CLI's envelope ignores it. Unlike
//! `rollup.json` it depends on timing (how many jobs were already running when a unit was
//! decided, which worker ran what), so it is never compared across runs.
//!
//! Keys are written in a fixed order; keys added later come after the older ones of the same
//! object, so a reader that knows an older version of this document still finds what it knows.
//! Readers accept unknown keys and missing newer keys (they default).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rollup::FoldOrder;

/// The envelope's `fleet` key of a supervised batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetMeta {
    pub batch_id: String,
    /// `--min-pass-rate` the batch was judged with.
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub min_pass_rate: f64,
    pub allow_budget_stop: bool,
    pub allow_truncated_matrix: bool,
    /// The batch's exit code (0 pass, 1 verdict fail, 2 error).
    pub exit_code: i32,
    /// Order in which each unit's outcomes were folded: always repeat-index order.
    pub fold_order: FoldOrder,
    /// Order of `results[]`: (unit index, repeat index).
    pub results_order: FoldOrder,
    /// `harness`, `container` or `sim`.
    pub executor: String,
    /// `true` when any folded run came from the simulator.
    pub simulated: bool,
    pub simulated_runs: u64,
    /// Every harness version that reported a run, in first-seen order.
    pub harness_versions: Vec<String>,
    pub jobs: FleetJobs,
    /// Resume generation (0 = never resumed).
    pub generation: u32,
    /// The batch-wide budget; `null` when none was set.
    pub batch_budget: Option<BatchBudgetMeta>,
    /// Per `--model-limit` rule (as written): how many jobs of it ran at once at most and how
    /// many admissions it delayed.
    pub model_limits: IndexMap<String, ModelLimitMeta>,
    pub usage_limit_pauses: UsageLimitPauses,
    /// Runs left out of every rollup because their unit was already decided when they finished
    /// (overshoot), in (unit, repeat index) order, with their spend.
    pub discarded: Vec<DiscardedRunMeta>,
    /// Per worker id: jobs it finished and their executor time.
    pub workers: IndexMap<String, WorkerMeta>,
    /// The total of `discarded`: runs and the money they cost.
    #[serde(default)]
    pub discarded_total: DiscardedTotal,
    /// How jobs were admitted.
    #[serde(default)]
    pub admission: AdmissionMeta,
    /// Units stopped by a run that ended without a result, and why (the rollups say only
    /// `stopped: error`), in unit order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_errors: Vec<StopError>,
    /// Every change people made to the batch's controls while it ran (pause, resume of
    /// dispatch, adjusted limits), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub control_changes: Vec<crate::registry::ControlChange>,
    /// The whole cost, split into model and sandbox spend (decisions.md#whole-cost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::pricing::SpendMeta>,
}

/// A unit stopped by a run that ended without a result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StopError {
    /// The unit's label (the rollup's `scenario`).
    pub unit: String,
    /// Why the run ended without a result (the executor's or the harness's message).
    pub message: String,
    /// The error's category as stored (`runtime`, `timeout`, `cancelled` for a run killed on
    /// request, …); `unanswered` for an unanswered question.
    #[serde(default)]
    pub category: String,
}

/// Job counts of a batch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetJobs {
    /// Jobs the plan holds (before early stops).
    pub planned: u64,
    /// Jobs published to the queue.
    pub admitted: u64,
    /// Jobs with a folded or discarded outcome.
    pub finished: u64,
    /// Jobs never admitted because their unit was decided first.
    pub skipped: u64,
    /// Attempts handed back for retry before anything was spent, sandbox start failures left
    /// out.
    pub retries: u64,
    /// Deliveries handed back because the job's sandbox did not start on its worker (a
    /// container that could not be created or started, a missing image, a full disk): retried
    /// on another worker as infrastructure, not attempts of the job. Left out while 0.
    #[serde(default, skip_serializing_if = "crate::fleet::is_zero_u64")]
    pub sandbox_start_retries: u64,
    /// Runs cut short by a worker's stop (a node drain or spot reclaim: SIGTERM, then its
    /// drain grace passed) and handed back: run again on another worker, not attempts of the
    /// job. Left out while 0.
    #[serde(default, skip_serializing_if = "crate::fleet::is_zero_u64")]
    pub disrupted: u64,
    /// Finished jobs that more than one delivery started (hand-backs that are no attempts left
    /// out: a sandbox that did not start, a run a stopping worker cut short).
    pub redelivered: u64,
    /// Jobs reported again by a second run, or by a report that differs from the folded one.
    pub duplicates: u64,
    /// Finished jobs delivered again (their ack was lost, as in a leader election of the
    /// queue) and reported from their stored record without running: the same run again, so
    /// not a duplicate.
    #[serde(default)]
    pub reacked: u64,
    /// Outcomes of an earlier generation set aside because `cowork resume` runs the job again.
    pub rerun_on_resume: u64,
    /// Items of the event log that could not be decoded; skipped.
    #[serde(default)]
    pub malformed_events: u64,
    /// Events refused by the coordinator's event gate (a job it never admitted or no worker
    /// was handed, an artifact outside the job's own keys): forged or misrouted, never folded.
    /// Left out of the document while 0, so a batch without any reads as before.
    #[serde(default, skip_serializing_if = "crate::fleet::is_zero_u64")]
    pub refused_events: u64,
    /// Jobs published a second time because they did not report back within their deadline.
    #[serde(default)]
    pub republished: u64,
    /// Jobs that never reported back (past their deadline after a re-publication, or given up
    /// by the queue), folded as infrastructure errors.
    #[serde(default)]
    pub lost: u64,
    /// Queued jobs taken back from the queue by a cancel, never run.
    #[serde(default)]
    pub withdrawn: u64,
}

/// The batch-wide budget (`--batch-budget-usd`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchBudgetMeta {
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub cap_usd: f64,
    /// Spend of every finished run, folded or not.
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub spent_usd: f64,
    /// `spentUsd - capUsd`, or 0.
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub overshoot_usd: f64,
    /// `true` when the budget stopped admission.
    pub stopped: bool,
    /// Labels of the units it stopped (each `stoppedEarly: "budget"`).
    pub stopped_units: Vec<String>,
    /// What the cap covers, in words.
    pub scope: String,
}

/// One `--model-limit` rule's effect.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelLimitMeta {
    pub max_in_flight: u32,
    pub delayed_admissions: u64,
}

/// Dispatch pauses after `usage_limit` results.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageLimitPauses {
    pub count: u64,
    pub total_ms: u64,
    /// Pauses per tier.
    pub by_tier: IndexMap<String, u64>,
}

/// A run left out of every rollup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscardedRunMeta {
    /// The job id.
    pub job: String,
    /// `true` for a completed run (not an error or an unanswered gate).
    pub completed: bool,
    /// The run's `cost.usd`, when it reported one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json_number::serialize_opt"
    )]
    pub cost_usd: Option<f64>,
}

/// A worker's share of a batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerMeta {
    pub jobs: u64,
    pub run_ms: u64,
}

/// Runs left out of every rollup and what they cost: money spent that no verdict used.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscardedTotal {
    pub runs: u64,
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub cost_usd: f64,
}

/// The admission settings a batch ran with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionMeta {
    /// Jobs of the batch admitted ahead of results at most.
    pub window: u64,
    /// `plan` (units in plan order) or `history` (units whose runs took longest in earlier
    /// batches first; the rollups do not depend on it).
    pub unit_order: String,
    /// With an early-stop rule (`--stop-on-diverge`): jobs of one unit admitted beyond the
    /// lowest index still waiting for its outcome, at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculation: Option<u32>,
    /// The per-unit budget (`--max-budget-usd`), when set with `--repeat`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json_number::serialize_opt"
    )]
    pub unit_budget_usd: Option<f64>,
    /// The most any one unit spent (folded and discarded runs), with a per-unit budget.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json_number::serialize_opt"
    )]
    pub max_unit_spent_usd: Option<f64>,
}

/// The `scope` of a batch-wide budget.
pub const BATCH_BUDGET_SCOPE: &str =
    "batch (all cells; a fleet feature beside the per-cell --max-budget-usd of the harness CLI)";

/// `true` for 0 (serde's `skip_serializing_if` of counters that are new to a document).
pub(crate) fn is_zero_u64(value: &u64) -> bool {
    *value == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_budget_is_null_and_numbers_print_like_javascript() {
        let meta = FleetMeta {
            batch_id: "b1".into(),
            min_pass_rate: 1.0,
            allow_budget_stop: false,
            allow_truncated_matrix: false,
            exit_code: 0,
            fold_order: FoldOrder::Index,
            results_order: FoldOrder::Index,
            executor: "sim".into(),
            simulated: true,
            simulated_runs: 2,
            harness_versions: vec!["sim-1".into()],
            jobs: FleetJobs::default(),
            generation: 0,
            batch_budget: None,
            model_limits: IndexMap::new(),
            usage_limit_pauses: UsageLimitPauses::default(),
            discarded: vec![DiscardedRunMeta {
                job: "b1/f0/r3".into(),
                completed: true,
                cost_usd: Some(0.5),
            }],
            workers: IndexMap::new(),
            discarded_total: DiscardedTotal {
                runs: 1,
                cost_usd: 0.5,
            },
            admission: AdmissionMeta {
                window: 4,
                unit_order: "plan".into(),
                ..AdmissionMeta::default()
            },
            stop_errors: Vec::new(),
            control_changes: Vec::new(),
            spend: None,
        };
        let text = serde_json::to_string(&meta).expect("serializes");
        assert!(
            text.starts_with(r#"{"batchId":"b1","minPassRate":1,"allowBudgetStop":false"#),
            "{text}"
        );
        assert!(text.contains(r#""batchBudget":null"#), "{text}");
        assert!(
            text.contains(r#""discarded":[{"job":"b1/f0/r3","completed":true,"costUsd":0.5}]"#),
            "{text}"
        );
        let back: FleetMeta = serde_json::from_str(&text).expect("round trip");
        assert_eq!(back, meta);
    }

    #[test]
    fn an_older_fleet_key_still_reads() {
        let text = r#"{"batchId":"b1","minPassRate":0.5,"allowBudgetStop":true,
            "allowTruncatedMatrix":false,"exitCode":1,"foldOrder":"index","resultsOrder":"index",
            "executor":"harness","simulated":false,"simulatedRuns":0,"harnessVersions":[],
            "jobs":{"planned":2,"admitted":2,"finished":2,"skipped":0,"retries":0,
            "redelivered":0,"duplicates":0,"rerunOnResume":0},"generation":0,
            "batchBudget":null,"modelLimits":{},"usageLimitPauses":{"count":0,"totalMs":0,
            "byTier":{}},"discarded":[],"workers":{},"addedLater":true}"#;
        let meta: FleetMeta = serde_json::from_str(text).expect("an older key reads");
        assert_eq!(meta.jobs.malformed_events, 0);
        assert_eq!(meta.discarded_total, DiscardedTotal::default());
    }
}
