//! Reading batches back for people: the list of a store's batches (`cowork batches`), and each
//! decided batch's per-unit history (`cowork diff`, `cowork trend`, the `--dry-run` estimate).
//!
//! History is a batch's `stats.json`; a decided batch written without one (before stats
//! existed, or by an older coordinator) is read from its `rollup.json` and envelope instead
//! (`cowork_core::trend::stats_from_rollup`). Everything is read through the
//! [`ArtifactStore`] port, so a local store and a coordinator (through the client's
//! `ApiArtifactReader`) are read the same way.

use cowork_fabric::{ArtifactError, ArtifactStore};
use cowork_schema::BatchId;
use cowork_schema::batch::StoredBatch;
use cowork_schema::envelope::Envelope;
use cowork_schema::history::BatchStats;
use cowork_schema::layout::{BatchKey, StorePrefix};
use cowork_schema::rollup::RollupDoc;

use cowork_core::eval::{
    EvalDocument, EvalGate, EvalVerdict, document_exit_code, document_verdict_words,
};
use cowork_core::trend::stats_from_rollup;
use cowork_schema::batch::BatchMode;

/// Why a batch could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// No `spec.json`: the store holds no batch with this id.
    #[error("batch {batch_id} not found: {key} does not exist")]
    NotFound { batch_id: String, key: String },
    /// A stored document is not what its key should hold.
    #[error("{key} is unreadable: {message}")]
    Malformed { key: String, message: String },
    /// The store failed.
    #[error("reading {key}")]
    Store {
        key: String,
        #[source]
        source: ArtifactError,
    },
}

impl CatalogError {
    /// `true` when the batch does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CatalogError::NotFound { .. })
    }
}

/// What a list of batches shows about one of them.
#[derive(Clone, Debug)]
pub struct BatchOverview {
    pub stored: StoredBatch,
    /// The rollup, once the batch is decided; `None` while it runs, or when it was
    /// interrupted.
    pub rollup: Option<RollupDoc>,
    /// The per-unit history of a decided batch (from `stats.json` or its rollup).
    pub stats: Option<BatchStats>,
    /// An eval batch's A/B report (`eval.json`), once decided: an eval is judged by it, not by
    /// its arms' rollups.
    pub eval: Option<EvalDocument>,
}

impl BatchOverview {
    /// How the batch is judged once decided: an eval by its A/B verdict and the exit code
    /// `cowork eval` gives it with the default gate (`--fail-on b-worse`); any other batch by
    /// its rollup. `None` while it runs or when it was interrupted.
    pub fn verdict(&self) -> Option<(String, i32)> {
        if self.stored.spec.mode == BatchMode::Eval {
            let eval = self.eval.as_ref()?;
            let code = document_exit_code(eval, EvalGate::default());
            if !eval.comparisons.is_empty() {
                return Some((document_verdict_words(eval), code));
            }
            let word = match eval.report.overall.verdict {
                EvalVerdict::NoDetectableDifference => "no difference",
                EvalVerdict::BWorse => "B worse",
                EvalVerdict::BBetter => "B better",
            };
            return Some((word.to_owned(), code));
        }
        let rollup = self.rollup.as_ref()?;
        let word = if rollup.ok { "PASS" } else { "FAIL" };
        Some((word.to_owned(), rollup.exit_code))
    }

    /// Cost of the batch's folded runs, when any run reported one.
    pub fn cost_usd(&self) -> Option<f64> {
        let stats = self.stats.as_ref()?;
        if self.stored.spec.mode.spends_nothing() {
            // Older replay batches' stats hold the recorded runs' cost; a replay spent nothing.
            return Some(0.0);
        }
        let priced = stats.units.iter().any(|unit| unit.priced_runs > 0);
        priced.then(|| stats.units.iter().map(|unit| unit.cost_usd).sum())
    }
}

/// The ids of the batches in `store`, newest first (ids start with their UTC creation time).
/// Entries under `batches/` that are not batch ids are passed over.
pub async fn batch_ids(store: &dyn ArtifactStore) -> Result<Vec<BatchId>, ArtifactError> {
    let mut ids: Vec<BatchId> = store
        .list_children(StorePrefix::batches().as_str())
        .await?
        .iter()
        .filter_map(|name| BatchId::new(name).ok())
        .collect();
    ids.sort_by(|a, b| b.as_str().cmp(a.as_str()));
    Ok(ids)
}

/// Reads a stored document; `None` when it does not exist.
async fn read_optional<T: serde::de::DeserializeOwned>(
    store: &dyn ArtifactStore,
    key: &str,
) -> Result<Option<T>, CatalogError> {
    let bytes = match store.get(key).await {
        Ok(bytes) => bytes,
        Err(ArtifactError::NotFound { .. }) => return Ok(None),
        Err(source) => {
            return Err(CatalogError::Store {
                key: key.to_owned(),
                source,
            });
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|error| CatalogError::Malformed {
            key: key.to_owned(),
            message: error.to_string(),
        })
}

/// The stored spec and plan of a batch.
pub async fn stored_batch(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
) -> Result<StoredBatch, CatalogError> {
    let key = BatchKey::new(batch_id).spec().into_string();
    read_optional(store, &key)
        .await?
        .ok_or_else(|| CatalogError::NotFound {
            batch_id: batch_id.to_string(),
            key,
        })
}

/// Everything a batch list shows about `batch_id`.
pub async fn overview(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
) -> Result<BatchOverview, CatalogError> {
    let stored = stored_batch(store, batch_id).await?;
    let rollup: Option<RollupDoc> =
        read_optional(store, BatchKey::new(batch_id).rollup().as_str()).await?;
    let stats = match &rollup {
        Some(rollup) => Some(unit_history(store, &stored, rollup).await?),
        None => None,
    };
    let eval = if stored.spec.mode == BatchMode::Eval {
        read_optional(store, BatchKey::new(batch_id).eval().as_str()).await?
    } else {
        None
    };
    Ok(BatchOverview {
        stored,
        rollup,
        stats,
        eval,
    })
}

/// The per-unit history of a decided batch: its `stats.json`, else one built from its rollup
/// and the results of its envelope.
async fn unit_history(
    store: &dyn ArtifactStore,
    stored: &StoredBatch,
    rollup: &RollupDoc,
) -> Result<BatchStats, CatalogError> {
    let batch_id = &stored.batch_id;
    if let Some(stats) = read_optional(store, BatchKey::new(batch_id).stats().as_str()).await? {
        return Ok(stats);
    }
    let envelope: Option<Envelope> =
        read_optional(store, BatchKey::new(batch_id).envelope().as_str()).await?;
    let results = envelope
        .map(|envelope| envelope.results)
        .unwrap_or_default();
    Ok(stats_from_rollup(stored, rollup, &results))
}

/// How far [`decided_history`] reads.
#[derive(Clone, Copy, Debug)]
pub struct HistoryScope {
    /// Batches to return, at most.
    pub keep: usize,
    /// Batches to look at, at most: history is a hint, not worth reading every batch a store
    /// ever held.
    pub scan: usize,
}

/// The decided batches among `ids` (newest first) that `wanted` accepts, each read from
/// `store_of(id)`, within `scope`. Undecided batches, and batches whose spec is gone or
/// unreadable, are passed over.
pub async fn decided_history(
    ids: &[BatchId],
    store_of: &dyn Fn(&BatchId) -> std::sync::Arc<dyn ArtifactStore>,
    scope: HistoryScope,
    wanted: &dyn Fn(&BatchOverview) -> bool,
) -> Result<Vec<BatchOverview>, CatalogError> {
    let mut found = Vec::new();
    for batch_id in ids.iter().take(scope.scan) {
        if found.len() >= scope.keep {
            break;
        }
        let store = store_of(batch_id);
        let batch = match overview(store.as_ref(), batch_id).await {
            Ok(batch) => batch,
            // A batch whose spec is gone or unreadable has no history to give.
            Err(CatalogError::NotFound { .. } | CatalogError::Malformed { .. }) => continue,
            Err(error) => return Err(error),
        };
        if batch.stats.is_some() && wanted(&batch) {
            found.push(batch);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_fabric::embedded::DirArtifactStore;

    #[tokio::test]
    async fn ids_come_newest_first_and_stray_names_are_passed_over() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = DirArtifactStore::new(dir.path());
        for name in [
            "20261101-000000-aaaaaa",
            "20261103-000000-aaaaaa",
            "20261102-000000-aaaaaa",
            "not an id",
        ] {
            store
                .put(&format!("batches/{name}/spec.json"), b"{}".to_vec())
                .await
                .expect("put");
        }
        let ids = batch_ids(&store).await.expect("list");
        let ids: Vec<&str> = ids.iter().map(BatchId::as_str).collect();
        assert_eq!(
            ids,
            [
                "20261103-000000-aaaaaa",
                "20261102-000000-aaaaaa",
                "20261101-000000-aaaaaa"
            ]
        );
        // The spec of each is `{}`: unreadable, so no history and a clear error.
        let id = BatchId::new("20261101-000000-aaaaaa").expect("valid id");
        let error = overview(&store, &id).await.expect_err("malformed spec");
        assert!(
            error.to_string().contains("spec.json is unreadable"),
            "{error}"
        );
        let missing = BatchId::new("20261201-000000-aaaaaa").expect("valid id");
        assert!(
            overview(&store, &missing)
                .await
                .expect_err("no such batch")
                .is_not_found()
        );
        let store: std::sync::Arc<dyn ArtifactStore> = std::sync::Arc::new(store);
        let scope = HistoryScope { keep: 5, scan: 10 };
        let none = decided_history(&[id, missing], &|_| store.clone(), scope, &|_| true)
            .await
            .expect("history");
        assert!(none.is_empty());
    }
}
