//! The envelope's `fleet` key, typed (harness-behaviour.md#choice-c15).
//!
//! Several writers, one reading. A batch the fleet supervised writes a [`FleetMeta`];
//! `cowork rollup` re-judging result files or a stored batch writes a [`RejudgedMeta`]; the
//! report of a batch that never finished writes an [`UnfinishedMeta`]; a key
//! written by another version of the fleet (older envelopes lack fields `FleetMeta` now
//! requires, and some had other shapes) is kept whole as [`FleetKey::Other`], so re-writing an
//! envelope loses nothing. Every reader (the summary, the report, the coordinator's report
//! input) reads through [`FleetView`], the one lenient reading of all three, so no reader parses
//! the key by hand.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::fleet::{DiscardedTotal, FleetMeta, StopError};
use crate::registry::ControlChange;
use crate::rollup::FoldOrder;

/// The envelope's `fleet` key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum FleetKey {
    /// What the supervisor writes for a batch it decided.
    Batch(Box<FleetMeta>),
    /// What `cowork rollup` writes when it re-judges.
    Rejudged(RejudgedMeta),
    /// What the report of a batch that never finished says of it.
    Unfinished(UnfinishedMeta),
    /// A key this version does not write (an older or a newer fleet's), kept as read.
    Other(Map<String, Value>),
}

/// The `fleet` key of an envelope `cowork rollup` re-judged: the judging it applied and what it
/// found. Unknown keys are refused so that another shape reads as [`FleetKey::Other`], whole.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RejudgedMeta {
    /// The stored batch re-judged; absent for a set of result files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// Always `true`: the envelope was judged again, not by the batch's own supervisor.
    pub rejudged: bool,
    /// How many result files were read (re-judging files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    #[serde(serialize_with = "crate::json_number::serialize")]
    pub min_pass_rate: f64,
    pub allow_budget_stop: bool,
    pub fold_order: FoldOrder,
    /// Order of `results[]` (a stored batch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results_order: Option<FoldOrder>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_errors: Vec<StopError>,
    /// Some jobs of the stored batch never ran (it was interrupted): listed in `neverRan`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub never_ran: Vec<String>,
    /// Folded runs the simulator made, where the re-judging counted them (a stored batch's
    /// envelope head holds no results to count them from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated_runs: Option<u64>,
}

impl RejudgedMeta {
    /// The key of an envelope re-judged at these settings, folded in index order, before what
    /// the re-judging found is filled in.
    pub fn new(min_pass_rate: f64, allow_budget_stop: bool) -> RejudgedMeta {
        RejudgedMeta {
            batch_id: None,
            rejudged: true,
            files: None,
            min_pass_rate,
            allow_budget_stop,
            fold_order: FoldOrder::Index,
            results_order: None,
            stop_errors: Vec::new(),
            incomplete: false,
            never_ran: Vec::new(),
            simulated_runs: None,
        }
    }
}

/// The `fleet` key of the envelope a report builds for a batch that never finished (it was
/// interrupted): which batch, on which executor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnfinishedMeta {
    pub batch_id: String,
    pub executor: String,
    /// Always `true`.
    pub incomplete: bool,
}

/// One discarded run as a reader sees it (overshoot: left out of every rollup).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiscardedEntry {
    pub job: Option<String>,
    pub cost_usd: Option<f64>,
}

/// What readers take from a `fleet` key, whichever wrote it: absent facts are `None`, empty
/// or zero.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetView {
    pub min_pass_rate: Option<f64>,
    pub allow_budget_stop: Option<bool>,
    pub allow_truncated_matrix: Option<bool>,
    /// `harness`, `container` or `sim`.
    pub executor: Option<String>,
    pub simulated: bool,
    pub simulated_runs: Option<u64>,
    /// Jobs delivered again (a worker lost, an ack wait passed), retried, lost for good and
    /// taken back by a cancel.
    pub redelivered: u64,
    pub retries: u64,
    /// Deliveries handed back because their sandbox did not start, retried as infrastructure.
    pub sandbox_start_retries: u64,
    /// Runs cut short by a worker's stop and handed back.
    pub disrupted: u64,
    pub lost: u64,
    pub withdrawn: u64,
    /// Resume generation (0 = never resumed).
    pub generation: u64,
    pub stop_errors: Vec<StopError>,
    /// The discarded runs listed.
    pub discarded: Vec<DiscardedEntry>,
    /// The listed total spend of discarded runs, where the key gave one beside its list.
    pub discarded_listed_cost_usd: Option<f64>,
    pub discarded_total: Option<DiscardedTotal>,
    pub unit_budget_usd: Option<f64>,
    pub max_unit_spent_usd: Option<f64>,
    pub control_changes: Vec<ControlChange>,
    /// The batch's wall time, where an older key recorded it.
    pub wall_ms: Option<u64>,
    /// The whole cost, split (decisions.md#whole-cost), where the key has it.
    pub spend: Option<crate::pricing::SpendMeta>,
}

impl FleetKey {
    /// The lenient reading of the key.
    pub fn view(&self) -> FleetView {
        match self {
            FleetKey::Batch(meta) => view_of_batch(meta),
            FleetKey::Rejudged(meta) => FleetView {
                min_pass_rate: Some(meta.min_pass_rate),
                allow_budget_stop: Some(meta.allow_budget_stop),
                stop_errors: meta.stop_errors.clone(),
                simulated_runs: meta.simulated_runs,
                ..FleetView::default()
            },
            FleetKey::Unfinished(meta) => FleetView {
                executor: Some(meta.executor.clone()),
                ..FleetView::default()
            },
            FleetKey::Other(map) => view_of_other(map),
        }
    }
}

fn view_of_batch(meta: &FleetMeta) -> FleetView {
    FleetView {
        min_pass_rate: Some(meta.min_pass_rate),
        allow_budget_stop: Some(meta.allow_budget_stop),
        allow_truncated_matrix: Some(meta.allow_truncated_matrix),
        executor: Some(meta.executor.clone()),
        simulated: meta.simulated,
        simulated_runs: Some(meta.simulated_runs),
        redelivered: meta.jobs.redelivered,
        retries: meta.jobs.retries,
        sandbox_start_retries: meta.jobs.sandbox_start_retries,
        disrupted: meta.jobs.disrupted,
        lost: meta.jobs.lost,
        withdrawn: meta.jobs.withdrawn,
        generation: u64::from(meta.generation),
        stop_errors: meta.stop_errors.clone(),
        discarded: meta
            .discarded
            .iter()
            .map(|run| DiscardedEntry {
                job: Some(run.job.clone()),
                cost_usd: run.cost_usd,
            })
            .collect(),
        discarded_listed_cost_usd: None,
        discarded_total: Some(meta.discarded_total.clone()),
        unit_budget_usd: meta.admission.unit_budget_usd,
        max_unit_spent_usd: meta.admission.max_unit_spent_usd,
        control_changes: meta.control_changes.clone(),
        wall_ms: None,
        spend: meta.spend.clone(),
    }
}

/// The shapes keys of other versions had, every field optional. A field of the wrong type
/// makes that whole key read as empty rather than fail the envelope.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct OtherKey {
    min_pass_rate: Option<f64>,
    allow_budget_stop: Option<bool>,
    allow_truncated_matrix: Option<bool>,
    executor: Option<String>,
    simulated: Option<bool>,
    simulated_runs: Option<u64>,
    jobs: OtherJobs,
    generation: Option<u64>,
    stop_errors: Vec<StopError>,
    discarded: Option<OtherDiscarded>,
    discarded_total: Option<OtherTotal>,
    admission: OtherAdmission,
    control_changes: Vec<ControlChange>,
    wall_ms: Option<u64>,
    timing: OtherTiming,
}

#[derive(Default, Deserialize)]
#[serde(default)]
#[serde(rename_all = "camelCase")]
struct OtherJobs {
    redelivered: u64,
    retries: u64,
    sandbox_start_retries: u64,
    disrupted: u64,
    lost: u64,
    withdrawn: u64,
}

/// `discarded` was a list of runs, and for a while `{runs: [...], costUsd}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum OtherDiscarded {
    Runs(Vec<OtherRun>),
    Listed {
        #[serde(default)]
        runs: Vec<OtherRun>,
        #[serde(default, rename = "costUsd")]
        cost_usd: Option<f64>,
    },
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct OtherRun {
    job: Option<String>,
    cost_usd: Option<f64>,
}

/// A total without its spend counts as spending nothing; without its run count it is no total.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OtherTotal {
    runs: u64,
    #[serde(default)]
    cost_usd: f64,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct OtherAdmission {
    unit_budget_usd: Option<f64>,
    max_unit_spent_usd: Option<f64>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct OtherTiming {
    wall_ms: Option<u64>,
}

fn view_of_other(map: &Map<String, Value>) -> FleetView {
    let key: OtherKey = serde_json::from_value(Value::Object(map.clone())).unwrap_or_default();
    let (discarded, discarded_listed_cost_usd) = match key.discarded {
        Some(OtherDiscarded::Runs(runs)) => (runs, None),
        Some(OtherDiscarded::Listed { runs, cost_usd }) => (runs, cost_usd),
        None => (Vec::new(), None),
    };
    FleetView {
        min_pass_rate: key.min_pass_rate,
        allow_budget_stop: key.allow_budget_stop,
        allow_truncated_matrix: key.allow_truncated_matrix,
        executor: key.executor,
        simulated: key.simulated == Some(true),
        simulated_runs: key.simulated_runs,
        redelivered: key.jobs.redelivered,
        retries: key.jobs.retries,
        sandbox_start_retries: key.jobs.sandbox_start_retries,
        disrupted: key.jobs.disrupted,
        lost: key.jobs.lost,
        withdrawn: key.jobs.withdrawn,
        generation: key.generation.unwrap_or(0),
        stop_errors: key.stop_errors,
        discarded: discarded
            .into_iter()
            .map(|run| DiscardedEntry {
                job: run.job,
                cost_usd: run.cost_usd,
            })
            .collect(),
        discarded_listed_cost_usd,
        discarded_total: key.discarded_total.map(|total| DiscardedTotal {
            runs: total.runs,
            cost_usd: total.cost_usd,
        }),
        unit_budget_usd: key.admission.unit_budget_usd,
        max_unit_spent_usd: key.admission.max_unit_spent_usd,
        control_changes: key.control_changes,
        wall_ms: key.wall_ms.or(key.timing.wall_ms),
        spend: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(value: Value) -> FleetKey {
        serde_json::from_value(value).expect("any object is a fleet key")
    }

    #[test]
    fn a_rejudged_key_reads_as_rejudged_and_writes_its_own_bytes() {
        let text = r#"{"batchId":"b1","rejudged":true,"minPassRate":0.9,"allowBudgetStop":false,"foldOrder":"index","resultsOrder":"index","stopErrors":[{"unit":"u","message":"m","category":"runtime"}]}"#;
        let read: FleetKey = serde_json::from_str(text).expect("reads");
        assert!(matches!(read, FleetKey::Rejudged(_)), "{read:?}");
        assert_eq!(serde_json::to_string(&read).expect("writes"), text);
        assert_eq!(read.view().min_pass_rate, Some(0.9));
        assert_eq!(read.view().stop_errors.len(), 1);
    }

    #[test]
    fn a_key_of_another_shape_is_kept_whole_and_read_leniently() {
        let text = r#"{"discarded":{"runs":[{"job":"b/f0/r1","costUsd":0.25}],"costUsd":0.5},"timing":{"wallMs":1200},"jobs":{"redelivered":2},"someFutureKey":[1,2]}"#;
        let read: FleetKey = serde_json::from_str(text).expect("reads");
        assert!(matches!(read, FleetKey::Other(_)), "{read:?}");
        assert_eq!(serde_json::to_string(&read).expect("writes"), text);
        let view = read.view();
        assert_eq!(view.discarded.len(), 1);
        assert_eq!(view.discarded[0].job.as_deref(), Some("b/f0/r1"));
        assert_eq!(view.discarded_listed_cost_usd, Some(0.5));
        assert_eq!(view.wall_ms, Some(1200));
        assert_eq!(view.redelivered, 2);
        assert_eq!(view.discarded_total, None);
    }

    #[test]
    fn a_key_with_a_mistyped_field_reads_as_empty_not_as_an_error() {
        let view = key(serde_json::json!({"simulatedRuns": "many"})).view();
        assert_eq!(view, FleetView::default());
    }
}
