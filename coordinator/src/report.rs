//! Reading a decided batch from an artifact store into a [`ReportInput`].
//!
//! The layout is brief §5: `batches/<id>/spec.json`, `rollup.json`, `envelope.json`,
//! `jobs/<job>/result.json` and, for an eval batch, `eval.json` (its A/B report, written by
//! `cowork eval` or the coordinator). Results are found by listing `batches/<id>/jobs/` (so runs of
//! units that stopped early, and discarded overshoot, are all seen) and read with bounded
//! parallelism. Every error names the key it is about.
//!
//! The loader reads through the [`ArtifactStore`] port, so the same code serves a local store,
//! the coordinator's S3 bucket and `cowork report --coordinator` (through the client's
//! `ApiArtifactReader`).

use std::collections::HashSet;

use cowork_fabric::{ArtifactError, ArtifactStore};
use cowork_schema::batch::{BatchMode, StoredBatch};
use cowork_schema::envelope::Envelope;
use cowork_schema::ids::{BatchId, JobId, UnitRef};
use cowork_schema::rollup::RollupDoc;
use futures::StreamExt;
use serde_json::Value;

use cowork_core::eval::{ArmSummary, Comparison};
use cowork_core::plan::eval::{EVAL_DOCUMENT_FILE, EvalDocument};
use cowork_core::report::{EvalArm, EvalRow, EvalSection, ReportInput, StoredRun};

/// Reads of `result.json` files in flight at once: a large batch holds thousands of results and
/// each read is a round trip to the store (the same bound as the supervisor's).
const PARALLEL_READS: usize = 32;

/// Why a batch's report could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// No `spec.json`: the store holds no batch with this id.
    #[error("batch {batch_id} not found: {key} does not exist")]
    BatchNotFound { batch_id: String, key: String },
    /// The batch exists but is not decided: its rollup or envelope is not stored yet.
    #[error("batch {batch_id} has no report yet: {key} does not exist (is the batch done?)")]
    NotDecided { batch_id: String, key: String },
    /// A stored document is not what its key should hold.
    #[error("{key} is not a valid {what}: {message}")]
    Malformed {
        key: String,
        what: &'static str,
        message: String,
    },
    /// The store failed.
    #[error("reading {key}")]
    Store {
        key: String,
        #[source]
        source: ArtifactError,
    },
}

impl ReportError {
    /// `true` when retrying the same load may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, ReportError::Store { source, .. } if source.is_transient())
    }

    /// `true` when the batch does not exist or has no report yet.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            ReportError::BatchNotFound { .. } | ReportError::NotDecided { .. }
        )
    }
}

/// What a missing key means for the batch.
#[derive(Clone, Copy)]
enum Missing {
    Batch,
    Report,
}

async fn read(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
    key: &str,
    missing: Missing,
) -> Result<Vec<u8>, ReportError> {
    match store.get(key).await {
        Ok(bytes) => Ok(bytes),
        Err(ArtifactError::NotFound { .. }) => Err(match missing {
            Missing::Batch => ReportError::BatchNotFound {
                batch_id: batch_id.to_string(),
                key: key.to_owned(),
            },
            Missing::Report => ReportError::NotDecided {
                batch_id: batch_id.to_string(),
                key: key.to_owned(),
            },
        }),
        Err(source) => Err(ReportError::Store {
            key: key.to_owned(),
            source,
        }),
    }
}

fn parse<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    key: &str,
    what: &'static str,
) -> Result<T, ReportError> {
    serde_json::from_slice(bytes).map_err(|error| ReportError::Malformed {
        key: key.to_owned(),
        what,
        message: error.to_string(),
    })
}

/// The job ids the envelope's `fleet.discarded` lists (overshoot, never folded).
fn discarded_jobs(envelope: &Envelope) -> HashSet<String> {
    envelope
        .fleet
        .get("discarded")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter_map(|entry| entry.get("job").and_then(Value::as_str))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// A stored `result.json` and the job it belongs to.
struct Located {
    unit: UnitRef,
    repeat_index: Option<u32>,
    job_id: JobId,
    key: String,
}

/// Reads everything the report of `batch_id` is rendered from. `eval` is filled from the
/// batch's `eval.json` when it is an eval batch that has one; an eval batch without it is
/// rendered with a note that its statistics were not computed.
pub async fn load_report_input(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
) -> Result<ReportInput, ReportError> {
    let prefix = format!("batches/{batch_id}/");
    let spec_key = format!("{prefix}spec.json");
    let stored: StoredBatch = parse(
        &read(store, batch_id, &spec_key, Missing::Batch).await?,
        &spec_key,
        "batch spec",
    )?;
    if stored.batch_id != *batch_id {
        return Err(ReportError::Malformed {
            key: spec_key,
            what: "batch spec",
            message: format!("it names batch {}", stored.batch_id),
        });
    }
    let rollup_key = format!("{prefix}rollup.json");
    let rollup: RollupDoc = parse(
        &read(store, batch_id, &rollup_key, Missing::Report).await?,
        &rollup_key,
        "rollup document",
    )?;
    let envelope_key = format!("{prefix}envelope.json");
    let envelope: Envelope = parse(
        &read(store, batch_id, &envelope_key, Missing::Report).await?,
        &envelope_key,
        "envelope",
    )?;
    let jobs_prefix = format!("{prefix}jobs/");
    let keys = store
        .list(&jobs_prefix)
        .await
        .map_err(|source| ReportError::Store {
            key: jobs_prefix.clone(),
            source,
        })?;
    // `jobs/<unit>[/r<k>]/result.json`; other artifacts, and keys that name no job of this
    // batch, are not results.
    let mut located: Vec<Located> = keys
        .into_iter()
        .filter_map(|key| {
            let local = key
                .strip_prefix(&jobs_prefix)?
                .strip_suffix("/result.json")?;
            let (_, unit, repeat_index) = JobId::parse(&format!("{batch_id}/{local}"))?;
            let job_id = JobId::new(batch_id, unit, repeat_index);
            Some(Located {
                unit,
                repeat_index,
                job_id,
                key,
            })
        })
        .collect();
    located.sort_by_key(|job| (job.unit, job.repeat_index));
    let discarded = discarded_jobs(&envelope);
    let reads = located.into_iter().map(|job| {
        let discarded = discarded.contains(job.job_id.as_str());
        async move {
            let bytes = read(store, batch_id, &job.key, Missing::Report).await?;
            let result: Value = parse(&bytes, &job.key, "result")?;
            if !result.is_object() {
                return Err(ReportError::Malformed {
                    key: job.key,
                    what: "result",
                    message: "not a json object".to_owned(),
                });
            }
            Ok(StoredRun {
                unit: job.unit,
                repeat_index: job.repeat_index,
                result,
                discarded,
            })
        }
    });
    // `buffered` keeps the sorted order.
    let mut stream = futures::stream::iter(reads).buffered(PARALLEL_READS);
    let mut runs = Vec::new();
    while let Some(run) = stream.next().await {
        runs.push(run?);
    }
    let eval = if stored.spec.mode == BatchMode::Eval {
        load_eval(store, &format!("{prefix}{EVAL_DOCUMENT_FILE}")).await?
    } else {
        None
    };
    Ok(ReportInput {
        stored,
        rollup,
        envelope,
        runs,
        eval,
    })
}

/// The eval section of the report from the stored `eval.json` at `key`; `None` when there is
/// none.
async fn load_eval(
    store: &dyn ArtifactStore,
    key: &str,
) -> Result<Option<EvalSection>, ReportError> {
    match store.get(key).await {
        Ok(bytes) => {
            let document: EvalDocument = parse(&bytes, key, "eval report")?;
            Ok(Some(eval_section(&document)))
        }
        Err(ArtifactError::NotFound { .. }) => Ok(None),
        Err(source) => Err(ReportError::Store {
            key: key.to_owned(),
            source,
        }),
    }
}

/// The report's eval section of a stored eval report: one row per scenario (in the report's
/// order, by name), then the overall row; arms labelled with their sources.
pub fn eval_section(document: &EvalDocument) -> EvalSection {
    let report = &document.report;
    let [arm_a, arm_b] = &report.arms;
    let mut rows: Vec<EvalRow> = report
        .scenarios
        .iter()
        .map(|scenario| eval_row(&scenario.scenario, &scenario.comparison))
        .collect();
    rows.push(eval_row("overall", &report.overall));
    EvalSection {
        arm_a: arm_a.source.clone(),
        arm_b: arm_b.source.clone(),
        alpha: report.alpha,
        confidence: report.confidence_level,
        decision_rule: report.decision_rule.clone(),
        rows,
    }
}

fn eval_row(scope: &str, comparison: &Comparison) -> EvalRow {
    let [arm_a, arm_b] = &comparison.arms;
    // No complete pair means no difference to estimate; NaN renders as such rather than as a
    // difference of zero.
    let (diff, ci_low, ci_high) = comparison
        .diff
        .map_or((f64::NAN, f64::NAN, f64::NAN), |interval| {
            (interval.estimate, interval.low, interval.high)
        });
    EvalRow {
        scope: scope.to_owned(),
        arm_a: eval_arm(arm_a),
        arm_b: eval_arm(arm_b),
        diff,
        ci_low,
        ci_high,
        a_only_passes: comparison.discordant.a_pass_b_fail,
        b_only_passes: comparison.discordant.a_fail_b_pass,
        p_value: comparison.mcnemar_p,
        verdict: comparison.verdict.label().to_owned(),
        excluded_pairs: comparison.excluded_pairs,
    }
}

fn eval_arm(summary: &ArmSummary) -> EvalArm {
    EvalArm {
        passes: summary.passes,
        completed: summary.completed,
        pass_rate: summary.pass_rate,
        cost_usd: summary.cost_usd,
    }
}

#[cfg(test)]
mod tests;
