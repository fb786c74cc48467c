//! The documents a decided batch leaves in the store: `rollup.json`, `envelope.json` and
//! `stats.json`.
//!
//! The envelope's `results[]` are never held whole: each folded run's `result.json` is read
//! (a few at a time, in the reduction's order), checked against the sha256 its folded
//! `finished` event recorded, decorated, and appended to a spool file, which is then stored with
//! one streaming put. The bytes are those of `Envelope::to_line` on the same values, so the
//! envelope stays byte-compatible with the harness's.

use std::path::Path;
use std::sync::Arc;

use cowork_core::admission::{Admission, JobRef, ResultLocation, sha256_hex};
use cowork_core::reduce::BatchReduction;
use cowork_core::verdict::{Lane, view_with_rederived_verdict, with_rederived_verdict};
use cowork_fabric::ArtifactStore;
use cowork_schema::BatchId;
use cowork_schema::envelope::{Envelope, decorate_result};
use cowork_schema::fleet::FleetMeta;
use cowork_schema::fleet_key::FleetKey;
use cowork_schema::layout::{BatchKey, names};
use futures::StreamExt;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::error::SuperviseError;
use crate::stored_job::{ArtifactLocation, StoredJobError, read_artifact};

// Reads in flight are taken in the reduction's order (`FuturesOrdered`).
use cowork_fabric::artifacts::PARALLEL_READS;

/// The file name of a batch's envelope (kept for callers outside this crate).
pub const ENVELOPE_FILE: &str = names::ENVELOPE;

/// A stored envelope and what the callers of a decided batch need of it.
#[derive(Debug)]
pub struct StoredEnvelope {
    /// The envelope without `results[]`, except where its results are its units (a plain
    /// files batch or a plain matrix, [`Envelope::results_are_units`]), whose few results
    /// the summary table lists and names its rows from.
    pub head: Envelope,
    /// The stored bytes, spooled in a local temporary file (removed when dropped).
    pub spool: tempfile::TempPath,
}

/// Stores `batches/<id>/rollup.json` and returns its bytes.
pub async fn store_rollup(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
    reduction: &BatchReduction,
    command: &str,
) -> Result<Vec<u8>, SuperviseError> {
    let rollup_json = rollup_bytes(reduction, command);
    let key = BatchKey::new(batch_id).rollup().into_string();
    store
        .put(&key, rollup_json.clone())
        .await
        .map_err(|source| SuperviseError::Store { key, source })?;
    Ok(rollup_json)
}

/// The bytes of a batch's `rollup.json`: pretty JSON and a final newline.
pub fn rollup_bytes(reduction: &BatchReduction, command: &str) -> Vec<u8> {
    let mut bytes = cowork_schema::json_number::to_vec_pretty(&reduction.to_rollup_doc(command))
        .expect("a rollup document always serializes");
    bytes.push(b'\n');
    bytes
}

/// Stores `batches/<id>/stats.json`. Stats are a hint for later batches: a failure is logged
/// and the batch stands.
pub async fn store_stats(
    store: &dyn ArtifactStore,
    admission: &Admission,
    reduction: &BatchReduction,
    batch_id: &BatchId,
) -> cowork_schema::history::BatchStats {
    let decided_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        });
    let now = tokio::time::Instant::now().into_std();
    let stats = admission.batch_stats(reduction, decided_at_ms, now);
    let key = BatchKey::new(batch_id).stats().into_string();
    let mut bytes =
        cowork_schema::json_number::to_vec_pretty(&stats).expect("batch stats always serialize");
    bytes.push(b'\n');
    if let Err(error) = store.put(&key, bytes).await {
        tracing::warn!(s3_key = %key, error = %error, "batch stats not stored");
    }
    stats
}

/// Assembles the envelope of a decided batch into a spool file and stores it as
/// `batches/<id>/envelope.json` (one line and a newline, like the CLI's stdout).
pub async fn store_envelope(
    store: &Arc<dyn ArtifactStore>,
    admission: &Admission,
    reduction: &BatchReduction,
    command: &str,
    fleet: &FleetMeta,
) -> Result<StoredEnvelope, SuperviseError> {
    let fleet = Some(FleetKey::Batch(Box::new(fleet.clone())));
    let locate = |job: JobRef| admission.result_location(job);
    let envelope = spool_envelope(
        store,
        &locate,
        reduction,
        EnvelopeHead {
            version: &admission.envelope_version(),
            command,
            fleet,
        },
    )
    .await?;
    let key = BatchKey::new(admission.batch_id()).envelope().into_string();
    store
        .put_file(&key, &envelope.spool)
        .await
        .map_err(|source| SuperviseError::Store { key, source })?;
    Ok(envelope)
}

/// What an envelope says besides its results and what the reduction gives.
pub struct EnvelopeHead<'a> {
    /// The harness version the envelope names.
    pub version: &'a str,
    /// The envelope's `command`.
    pub command: &'a str,
    /// The envelope's `fleet` key.
    pub fleet: Option<FleetKey>,
}

/// Where a folded run's `result.json` is and the digest it must have, by job: the folded
/// `finished` events' (`Admission::result_location`) for a batch just decided, the job
/// records' ([`cowork_core::admission::ResultIndex`]) for a re-judged one.
pub type LocateResult<'a> = dyn Fn(JobRef) -> Option<ResultLocation> + Sync + 'a;

/// Assembles an envelope into a local spool file, reading each folded run's `result.json`
/// once (a few at a time, in the reduction's order) from where `locate` says it is and
/// checking its digest. Nothing holds every result: memory is that of the reads in flight.
pub async fn spool_envelope(
    store: &Arc<dyn ArtifactStore>,
    locate: &LocateResult<'_>,
    reduction: &BatchReduction,
    head: EnvelopeHead<'_>,
) -> Result<StoredEnvelope, SuperviseError> {
    let mut head = build_envelope(
        reduction,
        head.version,
        head.command,
        Vec::new(),
        head.fleet,
    );
    let line = head.to_line();
    // The first `"results":[]` is the key: only `tool`, `version`, `command` and `ok` come
    // before it, and quotes inside their string values are escaped.
    let split = line
        .find(r#""results":[]"#)
        .map(|at| at + r#""results":["#.len())
        .expect("an envelope always has a results key");
    let (prefix, suffix) = line.split_at(split);
    let keep_results = head.results_are_units();
    let spool = tempfile::NamedTempFile::new().map_err(spool_error)?;
    let (file, spool) = spool.into_parts();
    let mut writer = tokio::io::BufWriter::new(tokio::fs::File::from_std(file));
    writer
        .write_all(prefix.as_bytes())
        .await
        .map_err(spool_error)?;
    // Up to PARALLEL_READS reads in flight, taken in order; each owns its handle on the store
    // and its location (a future borrowing from an iterator's closure cannot be shown to be
    // `Send` for every lifetime, which a spawned supervision needs).
    let mut reads = futures::stream::FuturesOrdered::new();
    let mut next = 0;
    let mut first = true;
    loop {
        while reads.len() < PARALLEL_READS
            && let Some(&(unit, repeat_index)) = reduction.results.get(next)
        {
            next += 1;
            let location = locate(JobRef { unit, repeat_index });
            let store = Arc::clone(store);
            reads.push_back(async move { read_result(store.as_ref(), location).await });
        }
        let Some(result) = reads.next().await else {
            break;
        };
        let result = result?;
        if !first {
            writer.write_all(b",").await.map_err(spool_error)?;
        }
        first = false;
        let bytes =
            cowork_schema::json_number::to_vec(&result).expect("a JSON value always serializes");
        writer.write_all(&bytes).await.map_err(spool_error)?;
        if keep_results {
            head.results.push(result);
        }
    }
    writer
        .write_all(suffix.as_bytes())
        .await
        .map_err(spool_error)?;
    writer.write_all(b"\n").await.map_err(spool_error)?;
    writer.flush().await.map_err(spool_error)?;
    drop(writer);
    Ok(StoredEnvelope { head, spool })
}

fn spool_error(error: std::io::Error) -> SuperviseError {
    SuperviseError::Spool {
        message: error.to_string(),
    }
}

/// Reads a folded run's stored result, checks it against the digest its `finished` event
/// recorded, and decorates it for the envelope.
async fn read_result(
    store: &dyn ArtifactStore,
    location: Option<ResultLocation>,
) -> Result<Value, SuperviseError> {
    let Some(location) = location else {
        return Err(SuperviseError::BadResult {
            key: "(none)".to_owned(),
            message: "a folded run has no recorded result".to_owned(),
        });
    };
    let location = ArtifactLocation {
        key: location.key,
        sha256: location.sha256.map(|digest| sha256_hex(&digest)),
    };
    let bytes = read_artifact(store, &location)
        .await
        .map_err(|error| match error {
            // The digest here is the one the folded `finished` event recorded.
            StoredJobError::Mismatch {
                key,
                expected,
                found,
            } => SuperviseError::ResultMismatch {
                key,
                expected,
                found,
            },
            other => other.into(),
        })?;
    decorated_result(&location.key, &bytes)
}

/// A stored `result.json` as an envelope entry: its verdict re-derived when it has none
/// (harness-behaviour.md#verdict-source), `outcome` and `provenance` attached.
pub fn decorated_result(key: &str, bytes: &[u8]) -> Result<Value, SuperviseError> {
    let bad = |message: String| SuperviseError::BadResult {
        key: key.to_owned(),
        message,
    };
    let value: Value = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    let view = view_with_rederived_verdict(&value).map_err(|e| bad(e.to_string()))?;
    let value = with_rederived_verdict(value, Lane::Live);
    Ok(decorate_result(value, &view))
}

/// Copies the stored envelope (its spool) to `writer`: `--output-format json` prints the
/// whole envelope without holding it in memory.
pub fn copy_envelope(spool: &Path, writer: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut file = std::io::BufReader::new(std::fs::File::open(spool)?);
    std::io::copy(&mut file, writer)?;
    writer.flush()
}

/// The batch envelope (harness-behaviour.md#envelope plus the `fleet` key,
/// harness-behaviour.md#choice-c15).
pub fn build_envelope(
    reduction: &BatchReduction,
    version: &str,
    command: &str,
    results: Vec<Value>,
    fleet: Option<FleetKey>,
) -> Envelope {
    let mut envelope = Envelope::new(version, command);
    envelope.ok = reduction.ok;
    envelope.results = results;
    envelope.rollups = reduction.rollups.clone();
    envelope.matrix = reduction.matrix.clone();
    envelope.matrix_repeat = reduction.matrix_repeat.clone();
    envelope.error = reduction.error.clone();
    envelope.fleet = fleet;
    envelope.quarantine = reduction.quarantine.clone();
    envelope
}
