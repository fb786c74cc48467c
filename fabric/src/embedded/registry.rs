//! In-process registries.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cowork_schema::BatchId;
use cowork_schema::registry::{BatchRecord, WorkerInfo};

use futures::StreamExt;

use crate::registry::{BatchRegistry, RecordStream, RegistryError, WorkerRegistry};

/// Batch records in a map, with revisions like a KV bucket's.
#[derive(Clone)]
pub struct MemBatchRegistry {
    entries: Arc<Mutex<BTreeMap<BatchId, (BatchRecord, u64)>>>,
    last_revision: Arc<Mutex<u64>>,
    /// Every stored record, for [`BatchRegistry::watch`] followers.
    changes: tokio::sync::broadcast::Sender<BatchRecord>,
}

impl Default for MemBatchRegistry {
    fn default() -> MemBatchRegistry {
        MemBatchRegistry {
            entries: Arc::default(),
            last_revision: Arc::default(),
            changes: tokio::sync::broadcast::Sender::new(WATCH_BUFFER),
        }
    }
}

/// Record changes a slow watcher may fall behind by before it misses some (it then gets the
/// current values again).
const WATCH_BUFFER: usize = 1024;

impl MemBatchRegistry {
    pub fn new() -> MemBatchRegistry {
        MemBatchRegistry::default()
    }

    fn next_revision(&self) -> u64 {
        let mut last = self
            .last_revision
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *last += 1;
        *last
    }
}

#[async_trait]
impl BatchRegistry for MemBatchRegistry {
    async fn create(&self, record: &BatchRecord) -> Result<u64, RegistryError> {
        let revision = self.next_revision();
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.contains_key(&record.batch_id) {
            return Err(RegistryError::AlreadyExists {
                batch_id: record.batch_id.to_string(),
            });
        }
        entries.insert(record.batch_id.clone(), (record.clone(), revision));
        // Sent under the lock so watchers see changes in revision order; no receiver is fine.
        let _ = self.changes.send(record.clone());
        Ok(revision)
    }

    async fn update(&self, record: &BatchRecord, expected: u64) -> Result<u64, RegistryError> {
        let revision = self.next_revision();
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match entries.get(&record.batch_id) {
            Some((_, current)) if *current == expected => {
                entries.insert(record.batch_id.clone(), (record.clone(), revision));
                let _ = self.changes.send(record.clone());
                Ok(revision)
            }
            _ => Err(RegistryError::Conflict {
                batch_id: record.batch_id.to_string(),
                expected,
            }),
        }
    }

    async fn get(&self, batch_id: &BatchId) -> Result<Option<(BatchRecord, u64)>, RegistryError> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(entries.get(batch_id).cloned())
    }

    async fn list(&self) -> Result<Vec<BatchRecord>, RegistryError> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(entries.values().map(|(record, _)| record.clone()).collect())
    }

    async fn watch(&self) -> Result<RecordStream, RegistryError> {
        // Subscribe before reading the current values, so no change falls between the two.
        let receiver = self.changes.subscribe();
        let current = self.list().await?;
        let initial = futures::stream::iter(current.into_iter().map(Ok));
        let changes = futures::stream::unfold(receiver, |mut receiver| async move {
            loop {
                match receiver.recv().await {
                    Ok(record) => return Some((Ok(record), receiver)),
                    // A lagging follower skips to the newest changes; records carry their
                    // whole state, so the next one of a batch is all it needs.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        Ok(Box::pin(initial.chain(changes)))
    }
}

/// Worker heartbeats in a map (no expiry: one process has one worker set).
#[derive(Clone, Default)]
pub struct MemWorkerRegistry {
    workers: Arc<Mutex<BTreeMap<String, WorkerInfo>>>,
}

impl MemWorkerRegistry {
    pub fn new() -> MemWorkerRegistry {
        MemWorkerRegistry::default()
    }
}

#[async_trait]
impl WorkerRegistry for MemWorkerRegistry {
    async fn heartbeat(&self, info: &WorkerInfo) -> Result<(), RegistryError> {
        let mut workers = self
            .workers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        workers.insert(info.worker_id.clone(), info.clone());
        Ok(())
    }

    async fn remove(&self, worker_id: &str) -> Result<(), RegistryError> {
        let mut workers = self
            .workers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        workers.remove(worker_id);
        Ok(())
    }

    async fn list(&self) -> Result<Vec<WorkerInfo>, RegistryError> {
        let workers = self
            .workers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(workers.values().cloned().collect())
    }
}
