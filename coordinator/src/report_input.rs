//! Reading a stored batch from an artifact store into a [`ReportInput`].
//!
//! The layout is decisions.md#storage (`schema::layout`): `batches/<id>/spec.json`, `rollup.json`,
//! `envelope.json`, `stats.json` (wall time), the jobs' records and artifacts under
//! `jobs/<job>/` and, for an eval batch, `eval.json` (its A/B report, written by `cowork eval`
//! or the coordinator). Jobs are found by listing `batches/<id>/jobs/` (so runs of units that
//! stopped early, discarded overshoot and jobs that ended without a result are all seen); each
//! job's files are found through its record ([`jobs`]) and read with bounded parallelism. Every
//! error names the key it is about.
//!
//! A batch that never finished (an interrupted `cowork run`, a cancelled batch) has no
//! `rollup.json`: its stored outcomes are judged with the same reducer, every job that never
//! ran counting as an error at its index (so a unit is judged on the runs before it, as the
//! harness's own loop would stop there), and the report is marked incomplete, naming those
//! jobs ([`unfinished`]).
//!
//! The loader reads through the [`ArtifactStore`] port, so the same code serves a local store,
//! the coordinator's S3 bucket and `cowork report --coordinator` (through the client's
//! `ApiArtifactReader`).

mod jobs;
mod unfinished;

use std::collections::HashSet;

use cowork_fabric::{ArtifactError, ArtifactStore};
use cowork_schema::batch::{BatchMode, StoredBatch};
use cowork_schema::envelope::Envelope;
use cowork_schema::ids::{BatchId, JobId};
use cowork_schema::layout::BatchKey;
use cowork_schema::rollup::RollupDoc;
use futures::StreamExt;

use cowork_core::eval::EvalDocument;
use cowork_core::eval::words::{p_value_sentence, power_sentence, sensitivity_sentence};
use cowork_core::eval::{
    ArmSummary, Comparison, ControlComparison, NamedArm, document_verdict_words,
};
use cowork_core::report::{
    DetailedRuns, EvalArm, EvalRow, EvalSection, RankedArm, ReportInput, RunBrief, RunState,
    StoredRun,
};

use cowork_fabric::artifacts::PARALLEL_READS;

/// Why a batch's report could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// No `spec.json`: the store holds no batch with this id.
    #[error("batch {batch_id} not found: {key} does not exist")]
    BatchNotFound { batch_id: String, key: String },
    /// A file the report needs disappeared while it was read.
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
pub(crate) enum Missing {
    Batch,
    Report,
}

pub(crate) async fn read(
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

pub(crate) fn parse<T: serde::de::DeserializeOwned>(
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

/// The job ids the envelope's `fleet.discarded` lists (overshoot, never folded): either a list
/// of `{job, costUsd}` entries, or `{runs: [...], costUsd}`.
fn discarded_jobs(envelope: &Envelope) -> HashSet<String> {
    envelope
        .fleet_view()
        .discarded
        .into_iter()
        .filter_map(|entry| entry.job)
        .collect()
}

/// Reads a document that may be absent: `None` when it is not stored.
async fn read_optional(
    store: &dyn ArtifactStore,
    key: &str,
) -> Result<Option<Vec<u8>>, ReportError> {
    match store.get(key).await {
        Ok(bytes) => Ok(Some(bytes)),
        Err(ArtifactError::NotFound { .. }) => Ok(None),
        Err(source) => Err(ReportError::Store {
            key: key.to_owned(),
            source,
        }),
    }
}

/// The stored envelope at `key` without its `results[]` (the report reads none of them; a big
/// batch's would not fit in memory): copied to a local file and parsed as a stream, every
/// result skipped. `None` when it is not stored.
async fn read_envelope_head(
    store: &dyn ArtifactStore,
    key: &str,
) -> Result<Option<Envelope>, ReportError> {
    let spool = tempfile::NamedTempFile::new().map_err(|error| ReportError::Malformed {
        key: key.to_owned(),
        what: "envelope",
        message: format!("no local spool file: {error}"),
    })?;
    let path = spool.into_temp_path();
    match store.get_file(key, &path).await {
        Ok(_) => {}
        Err(ArtifactError::NotFound { .. }) => return Ok(None),
        Err(source) => {
            return Err(ReportError::Store {
                key: key.to_owned(),
                source,
            });
        }
    }
    let owned_key = key.to_owned();
    // Parsing a big envelope takes seconds of CPU: off the async runtime.
    let head = tokio::task::spawn_blocking(move || {
        let file = std::fs::File::open(&path)?;
        let head = cowork_schema::envelope::read_head(std::io::BufReader::new(file));
        drop(path);
        Ok::<_, std::io::Error>(head)
    })
    .await
    .map_err(|error| ReportError::Malformed {
        key: owned_key.clone(),
        what: "envelope",
        message: error.to_string(),
    })?
    .map_err(|error| ReportError::Malformed {
        key: owned_key.clone(),
        what: "envelope",
        message: error.to_string(),
    })?;
    head.map(Some).map_err(|message| ReportError::Malformed {
        key: owned_key,
        what: "envelope",
        message,
    })
}

/// The batch's wall time: `stats.json`'s (at `stats_key`) `wallMs`, else the envelope's `fleet.wallMs` (or
/// `fleet.timing.wallMs`). A `stats.json` that does not read is passed over: the wall time is
/// then simply unknown.
async fn wall_ms(
    store: &dyn ArtifactStore,
    stats_key: &str,
    envelope: Option<&Envelope>,
) -> Result<Option<u64>, ReportError> {
    let stats = read_optional(store, stats_key).await?;
    /// The one field of `stats.json` read here; any other field may be missing or newer.
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct StatsWall {
        wall_ms: Option<u64>,
    }
    let from_stats = stats
        .and_then(|bytes| serde_json::from_slice::<StatsWall>(&bytes).ok())
        .and_then(|stats| stats.wall_ms);
    let from_fleet = envelope.and_then(|envelope| envelope.fleet_view().wall_ms);
    Ok(from_stats.or(from_fleet))
}

/// Reads everything the report of `batch_id` is rendered from. `eval` is filled from the
/// batch's `eval.json` when it is an eval batch that has one; an eval batch without it is
/// rendered with a note that its statistics were not computed. A batch without a rollup is
/// judged from its stored outcomes and marked incomplete.
pub async fn load_report_input(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
) -> Result<ReportInput, ReportError> {
    let keys = BatchKey::new(batch_id);
    let stored = read_stored_batch(store, batch_id).await?;
    let rollup_key = keys.rollup().into_string();
    let rollup: Option<RollupDoc> = match read_optional(store, &rollup_key).await? {
        Some(bytes) => Some(parse(&bytes, &rollup_key, "rollup document")?),
        None => None,
    };
    let envelope_key = keys.envelope().into_string();
    let envelope = read_envelope_head(store, &envelope_key).await?;
    let wall_ms = wall_ms(store, keys.stats().as_str(), envelope.as_ref()).await?;
    let Some(rollup) = rollup else {
        // Read twice, each time in flat memory: once to judge (the reducer folds in the plan's
        // order, harness-behaviour.md#index-order-reducer), once for the briefs and the runs
        // the page details, marked with what the judgment set aside.
        let judged = unfinished::judge(store, &stored).await?;
        let (runs, briefs) = read_decided_jobs(store, &stored, &judged.discarded).await?;
        return Ok(ReportInput {
            stored,
            rollup: judged.rollup,
            envelope: judged.envelope,
            runs,
            briefs: briefs.into(),
            eval: None,
            wall_ms,
            incomplete: Some(judged.incomplete),
        });
    };
    // A rollup without its envelope (the batch ended between the two writes): the report
    // needs only the envelope's error and `fleet` key, which it can do without.
    let envelope = envelope.unwrap_or_else(|| {
        let mut envelope = Envelope::new("unknown", &rollup.command);
        envelope.ok = rollup.ok;
        envelope
    });
    let discarded = discarded_jobs(&envelope);
    let (runs, briefs) = read_decided_jobs(store, &stored, &discarded).await?;
    let eval = if stored.spec.mode == BatchMode::Eval {
        load_eval(store, keys.eval().as_str()).await?
    } else {
        None
    };
    Ok(ReportInput {
        stored,
        rollup,
        envelope,
        runs,
        briefs: briefs.into(),
        eval,
        wall_ms,
        incomplete: None,
    })
}

/// The batch's jobs, those of its stored plan: their number, and a stream reading each
/// (`None` for a job that left neither a record nor a result) `PARALLEL_READS` at a time in
/// (unit, repeat index) order. Nothing is listed and nothing is held per job before it is read.
fn job_reads<'a>(
    store: &'a dyn ArtifactStore,
    stored: &'a StoredBatch,
) -> (
    usize,
    impl futures::Stream<Item = Result<Option<jobs::ReadJob>, ReportError>> + Send + 'a,
) {
    let batch_id = &stored.batch_id;
    let n_jobs = usize::try_from(stored.plan.n_jobs).unwrap_or(0);
    let reads = jobs::planned_jobs(stored).map(move |job| jobs::read_job(store, batch_id, job));
    // `buffered` keeps the (unit, repeat index) order of the plan.
    (
        n_jobs,
        futures::stream::iter(reads).buffered(PARALLEL_READS),
    )
}

/// The jobs of a batch, streamed: every run in brief, and whole only the runs the
/// report details ([`DetailedRuns`]), so that the report of a batch of any size is read in
/// flat memory (a `result.json` is about 16 KiB, its brief under 100 bytes). `discarded`
/// holds the job ids the envelope lists as discarded.
async fn read_decided_jobs(
    store: &dyn ArtifactStore,
    stored: &StoredBatch,
    discarded: &HashSet<String>,
) -> Result<(Vec<StoredRun>, Vec<RunBrief>), ReportError> {
    let batch_id = &stored.batch_id;
    let (n_jobs, stream) = job_reads(store, stored);
    let mut stream = std::pin::pin!(stream);
    let mut briefs = Vec::with_capacity(n_jobs);
    let mut picker = DetailedRuns::default();
    while let Some(read) = stream.next().await {
        let Some(job) = read? else {
            continue;
        };
        let mut run = job.run;
        let id = JobId::new(batch_id, run.unit, run.repeat_index);
        run.discarded = discarded.contains(id.as_str());
        let brief = RunBrief::of(&run);
        picker.offer(RunState::of(&run), run);
        briefs.push(brief);
    }
    cowork_core::report::sort_briefs(&mut briefs);
    Ok((picker.finish(), briefs))
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
        interval_method: report.interval_method.clone(),
        p_sentence: p_value_sentence(&report.overall),
        sensitivity_sentence: sensitivity_sentence(report, document.runs_per_arm),
        power_sentence: power_sentence(report),
        verdict_words: document_verdict_words(document),
        rows,
        ranking: document.comparisons.iter().map(ranked_arm).collect(),
    }
}

/// One candidate of an eval with several arms, as the report ranks it.
fn ranked_arm(comparison: &ControlComparison) -> RankedArm {
    let overall = &comparison.report.overall;
    let (diff, ci_low, ci_high) = overall
        .diff
        .map_or((f64::NAN, f64::NAN, f64::NAN), |interval| {
            (interval.estimate, interval.low, interval.high)
        });
    let named = |arm: &NamedArm| format!("{} ({})", arm.name, arm.source);
    RankedArm {
        rank: comparison.rank,
        candidate: named(&comparison.candidate),
        control: named(&comparison.control),
        arm: eval_arm(&overall.arms[1]),
        diff,
        ci_low,
        ci_high,
        p_value: overall.mcnemar_p,
        holm_p: comparison.holm_p,
        verdict: comparison.verdict.candidate_word().to_owned(),
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
        pairs: comparison.pairs,
        min_detectable_diff: comparison.min_detectable_diff,
    }
}

fn eval_arm(summary: &ArmSummary) -> EvalArm {
    EvalArm {
        passes: summary.passes,
        completed: summary.completed,
        pass_rate: summary.pass_rate,
        cost_usd: summary.cost_usd,
        whole_cost_usd: summary.whole_cost_usd,
    }
}

#[cfg(test)]
mod tests;

/// The envelope of a batch that never stored one (cancelled, interrupted): its stored outcomes
/// judged as [`load_report_input`] judges them, marked incomplete. Reads the outcomes once, in
/// flat memory, and no run's details.
pub async fn unfinished_envelope(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
) -> Result<Envelope, ReportError> {
    let stored = read_stored_batch(store, batch_id).await?;
    Ok(unfinished::judge(store, &stored).await?.envelope)
}

/// A batch's `spec.json`, checked to name the batch it is stored under.
async fn read_stored_batch(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
) -> Result<StoredBatch, ReportError> {
    let spec_key = BatchKey::new(batch_id).spec().into_string();
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
    Ok(stored)
}
