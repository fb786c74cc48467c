//! Reading the fleet's history: the `stats.json` of the most recent decided batches in a store
//! (`schema::history`), for dry-run estimates, trends and scheduling. The summaries themselves
//! are the core's (`cowork_core::history`).

use cowork_fabric::{ArtifactError, ArtifactStore};
use cowork_schema::BatchId;
use cowork_schema::history::{BATCH_STATS_FILE, BatchStats};
use cowork_schema::layout::batch_key;

/// Batch directories looked at per stats file wanted: a store may hold many batches without
/// stats (undecided, or written before stats existed), and history is a hint, not worth a
/// walk of every batch.
const SCAN_PER_WANTED: usize = 10;

/// The stats of up to `limit` most recent decided batches in `store`, newest first (batch ids
/// start with their UTC creation time, so the id order is the time order). Batches without a
/// readable `stats.json` are passed over; `skip` leaves out one batch (the one being planned).
pub async fn recent_stats(
    store: &dyn ArtifactStore,
    limit: usize,
    skip: Option<&BatchId>,
) -> Result<Vec<BatchStats>, ArtifactError> {
    let mut ids = store.list_children("batches/").await?;
    ids.reverse();
    let mut found = Vec::new();
    for id in ids.into_iter().take(limit.saturating_mul(SCAN_PER_WANTED)) {
        if found.len() >= limit {
            break;
        }
        let Ok(batch_id) = BatchId::new(&id) else {
            continue;
        };
        if skip == Some(&batch_id) {
            continue;
        }
        let key = batch_key(&batch_id, BATCH_STATS_FILE);
        let bytes = match store.get(&key).await {
            Ok(bytes) => bytes,
            Err(ArtifactError::NotFound { .. }) => continue,
            Err(error) => return Err(error),
        };
        match serde_json::from_slice::<BatchStats>(&bytes) {
            Ok(stats) => found.push(stats),
            Err(error) => {
                tracing::warn!(s3_key = %key, error = %error, "unreadable batch stats, passed over")
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_fabric::embedded::DirArtifactStore;

    fn stats(id: &str) -> Vec<u8> {
        serde_json::to_vec(&BatchStats {
            batch_id: BatchId::new(id).expect("valid id"),
            decided_at_ms: 1,
            wall_ms: 2,
            units: Vec::new(),
        })
        .expect("serializes")
    }

    #[tokio::test]
    async fn newest_first_passing_over_batches_without_stats() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = DirArtifactStore::new(dir.path());
        for id in [
            "20261101-000000-aaaaaa",
            "20261102-000000-aaaaaa",
            "20261104-000000-aaaaaa",
        ] {
            store
                .put(&format!("batches/{id}/stats.json"), stats(id))
                .await
                .expect("put");
        }
        store
            .put("batches/20261103-000000-aaaaaa/spec.json", b"{}".to_vec())
            .await
            .expect("put");
        store
            .put(
                "batches/20261105-000000-aaaaaa/stats.json",
                b"not json".to_vec(),
            )
            .await
            .expect("put");
        let skip = BatchId::new("20261104-000000-aaaaaa").expect("valid id");
        let found = recent_stats(&store, 2, Some(&skip)).await.expect("history");
        let ids: Vec<&str> = found.iter().map(|s| s.batch_id.as_str()).collect();
        assert_eq!(ids, ["20261102-000000-aaaaaa", "20261101-000000-aaaaaa"]);
    }
}
