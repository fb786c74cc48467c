//! Judging a batch that never finished: no `rollup.json` was stored (an interrupted
//! `cowork run`, a cancelled batch, a coordinator that died mid-batch).
//!
//! The stored outcomes are offered to a reducer shaped like the batch's plan, in index order.
//! A job the verdicts needed that left no outcome is offered as an error ("never ran"): the
//! harness's own repeat loop would have stopped at such an iteration, so each unit is judged on
//! the runs before it, exactly as `cowork rollup` would judge them, and runs that finished
//! beyond it are set aside like overshoot. Jobs a unit never needed (after its early stop, or
//! after a plain batch's aborting file) are not missing. The result is marked incomplete and
//! names every missing job.

use std::collections::{BTreeSet, HashSet};

use cowork_fabric::ArtifactStore;
use futures::StreamExt;

use cowork_schema::batch::StoredBatch;
use cowork_schema::envelope::Envelope;
use cowork_schema::event::{ErrorCategory, JobOutcome};
use cowork_schema::fleet_key::{FleetKey, UnfinishedMeta};
use cowork_schema::ids::{JobId, UnitRef};
use cowork_schema::layout::BatchKey;
use cowork_schema::rollup::RollupDoc;

use super::{ReportError, job_reads};
use crate::supervisor::{build_envelope, shape_from_summary};
use cowork_core::reduce::BatchReducer;
use cowork_core::report::Incomplete;

/// Why an unfinished batch's report is incomplete, as the report says it.
const REASON: &str = "no rollup was stored: the batch was interrupted or cancelled before it \
was decided";

/// The judgment of an unfinished batch.
pub(super) struct Judged {
    pub(super) rollup: RollupDoc,
    pub(super) envelope: Envelope,
    pub(super) incomplete: Incomplete,
    /// Job ids of the runs that finished but were not folded (beyond their unit's stop).
    pub(super) discarded: HashSet<String>,
}

/// Judges an unfinished batch from its stored outcomes (see the module documentation), read
/// job by job in the plan's (unit, repeat index) order, which is the order the reducer folds
/// in: each outcome is offered as it is read and dropped, so the batch is judged in flat memory.
pub(super) async fn judge(
    store: &dyn ArtifactStore,
    stored: &StoredBatch,
) -> Result<Judged, ReportError> {
    let plan = &stored.plan;
    let shape = shape_from_summary(plan, &stored.spec.flags);
    let shape_error = |message: String| ReportError::Malformed {
        key: BatchKey::new(&stored.batch_id).spec().into_string(),
        what: "batch plan",
        message,
    };
    let mut reducer = BatchReducer::new(shape).map_err(|error| shape_error(error.to_string()))?;
    let repeats = plan.repeat_indices();
    // The same jobs in the same order as the loop below walks them.
    let (_, reads) = job_reads(store, stored);
    let mut reads = std::pin::pin!(reads);
    let mut versions: BTreeSet<String> = BTreeSet::new();
    let mut never_ran = Vec::new();
    // Set once a missing job decided a unit (or, in a plain files batch, aborted the batch):
    // the jobs after it were not skipped by a stop rule, the batch simply ended.
    let mut ended_early = false;
    for (position, unit) in plan.units.iter().enumerate() {
        if unit.cell_error.is_some() {
            continue;
        }
        let unit_idx = position as u32;
        if plan.repeat.is_some() {
            ended_early = false;
        }
        for repeat_index in &repeats {
            let read = match reads.next().await {
                Some(read) => read?,
                None => None,
            };
            if let Some(version) = read
                .as_ref()
                .and_then(|job| job.run.record.as_ref())
                .and_then(|record| record.harness_version.clone())
            {
                versions.insert(version);
            }
            match read.map(|job| job.outcome) {
                Some(outcome) => {
                    reducer.offer(unit_idx, *repeat_index, outcome);
                }
                None if !reducer.is_cancellable(unit_idx, *repeat_index) => {
                    never_ran.push(job_path(unit.unit, *repeat_index));
                    ended_early = true;
                    let missing = JobOutcome::Error {
                        category: ErrorCategory::Cancelled,
                        message: "never ran: the batch ended before this job finished".to_owned(),
                    };
                    reducer.offer(unit_idx, *repeat_index, missing);
                }
                None if ended_early => never_ran.push(job_path(unit.unit, *repeat_index)),
                None => {}
            }
        }
    }
    let reduction = reducer.finish().map_err(|missing| {
        shape_error(format!(
            "unit {} could not be judged from the stored outcomes",
            missing.unit
        ))
    })?;
    let discarded = reduction
        .discarded
        .iter()
        .filter_map(|job| {
            let unit = plan.units.get(job.unit as usize)?;
            Some(
                JobId::new(&stored.batch_id, unit.unit, job.repeat_index)
                    .as_str()
                    .to_owned(),
            )
        })
        .collect();
    let command = stored.spec.mode.envelope_command();
    let version = match versions.len() {
        0 => "unknown".to_owned(),
        1 => versions.pop_first().unwrap_or_default(),
        _ => "mixed".to_owned(),
    };
    let fleet = FleetKey::Unfinished(UnfinishedMeta {
        batch_id: stored.batch_id.to_string(),
        executor: stored.spec.executor.as_str().to_owned(),
        incomplete: true,
    });
    let envelope = build_envelope(&reduction, &version, command, Vec::new(), Some(fleet));
    Ok(Judged {
        rollup: reduction.to_rollup_doc(command),
        envelope,
        incomplete: Incomplete {
            reason: REASON.to_owned(),
            never_ran,
        },
        discarded,
    })
}

/// `c0/r3`, or `f1` without repeat.
fn job_path(unit: UnitRef, repeat_index: Option<u32>) -> String {
    let unit = match unit {
        UnitRef::File(index) => format!("f{index}"),
        UnitRef::Cell(index) => format!("c{index}"),
    };
    match repeat_index {
        Some(index) => format!("{unit}/r{index}"),
        None => unit,
    }
}
