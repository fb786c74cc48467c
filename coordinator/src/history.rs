//! Reading the fleet's history: the `stats.json` of the most recent decided batches in a store
//! (`schema::history`), for dry-run estimates, trends and scheduling. The summaries themselves
//! are the core's (`cowork_core::history`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cowork_fabric::{ArtifactError, ArtifactStore};
use cowork_schema::BatchId;
use cowork_schema::history::BatchStats;
use cowork_schema::layout::{BatchKey, StorePrefix};

/// How long one read of the history serves batch starts before the next start reads it again.
/// History orders units longest-expected-first: a hint that changes slowly, not worth a store
/// walk per batch (1,000 submits stalled supervision on store timeouts).
pub const HISTORY_REFRESH: Duration = Duration::from_secs(600);
/// How long a failed read stands (as no history) before a start tries again.
const FAILED_READ_RETRY: Duration = Duration::from_secs(60);

/// The recent batches' stats, read once and shared by every batch start of a process: the
/// read does not depend on the batch (it is the newest decided batches of the store, whatever
/// their scenarios), so one read serves every scenario set. Concurrent starts wait for the one
/// read in progress instead of each walking the store.
#[derive(Debug, Default)]
pub struct HistoryCache {
    held: tokio::sync::Mutex<Option<HeldHistory>>,
    /// Store walks done (`cowork_history_reads_total`).
    reads: AtomicU64,
}

#[derive(Debug)]
struct HeldHistory {
    limit: usize,
    read_at: Instant,
    stands_for: Duration,
    stats: Arc<Vec<BatchStats>>,
}

impl HistoryCache {
    /// The stats of up to `limit` recent decided batches, from the held read while it is
    /// fresh, else read anew (see [`recent_stats`]); `skip` leaves out one batch. A failed read
    /// is logged and stands as no history for a minute.
    pub async fn recent(
        &self,
        store: &dyn ArtifactStore,
        limit: usize,
        skip: Option<&BatchId>,
    ) -> Vec<BatchStats> {
        let mut held = self.held.lock().await;
        let fresh = held
            .as_ref()
            .filter(|held| held.limit == limit && held.read_at.elapsed() < held.stands_for);
        let stats = match fresh {
            Some(held) => Arc::clone(&held.stats),
            None => {
                self.reads.fetch_add(1, Ordering::Relaxed);
                // One more than asked, so leaving out `skip` still leaves `limit`.
                let (stats, stands_for) = match recent_stats(store, limit.saturating_add(1), None)
                    .await
                {
                    Ok(stats) => (stats, HISTORY_REFRESH),
                    Err(error) => {
                        tracing::warn!(error = %error, "history not read; units go in plan order");
                        (Vec::new(), FAILED_READ_RETRY)
                    }
                };
                let stats = Arc::new(stats);
                *held = Some(HeldHistory {
                    limit,
                    read_at: Instant::now(),
                    stands_for,
                    stats: Arc::clone(&stats),
                });
                stats
            }
        };
        drop(held);
        stats
            .iter()
            .filter(|stats| Some(&stats.batch_id) != skip)
            .take(limit)
            .cloned()
            .collect()
    }

    /// Store walks this cache has done since the process started.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

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
    let mut ids = store.list_children(StorePrefix::batches().as_str()).await?;
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
        let key = BatchKey::new(&batch_id).stats();
        let bytes = match store.get(key.as_str()).await {
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
