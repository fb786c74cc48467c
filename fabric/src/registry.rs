//! The registry ports: batch records with compare-and-set (`COWORK_BATCHES`) and worker
//! heartbeats (`COWORK_WORKERS`). Both are key-value buckets in JetStream; in process they are
//! maps.

use async_trait::async_trait;
use cowork_schema::BatchId;
use cowork_schema::registry::{BatchRecord, WorkerInfo};

/// Errors of the registries.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A compare-and-set lost: the entry changed since `expected` was read.
    #[error("batch {batch_id} changed concurrently (expected revision {expected})")]
    Conflict { batch_id: String, expected: u64 },
    /// `create` of an id that exists.
    #[error("batch {batch_id} already exists")]
    AlreadyExists { batch_id: String },
    #[error("registry is unavailable: {message}")]
    Transient { message: String },
    #[error("registry entry {key} is malformed: {message}")]
    Malformed { key: String, message: String },
    #[error("registry failed: {message}")]
    Failed { message: String },
}

impl RegistryError {
    /// `true` when retrying the same call may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, RegistryError::Transient { .. })
    }
}

/// Batch records with revisions, for leader-free coordination of coordinator replicas.
#[async_trait]
pub trait BatchRegistry: Send + Sync {
    /// Stores a new record; fails with `AlreadyExists` if the id is taken. Returns the revision.
    async fn create(&self, record: &BatchRecord) -> Result<u64, RegistryError>;
    /// Replaces the record if its revision is still `expected`; returns the new revision.
    async fn update(&self, record: &BatchRecord, expected: u64) -> Result<u64, RegistryError>;
    /// The record and its revision.
    async fn get(&self, batch_id: &BatchId) -> Result<Option<(BatchRecord, u64)>, RegistryError>;
    /// Every record, sorted by batch id.
    async fn list(&self) -> Result<Vec<BatchRecord>, RegistryError>;
    /// The current record of every batch, then every later change, as they happen. Workers
    /// follow it to act on `cancel --kill-running`. The stream ends when the registry goes
    /// away; a follower re-subscribes and receives the current values again.
    async fn watch(&self) -> Result<RecordStream, RegistryError>;
}

/// A stream of batch records (see [`BatchRegistry::watch`]).
pub type RecordStream = futures::stream::BoxStream<'static, Result<BatchRecord, RegistryError>>;

/// Worker heartbeats; entries expire when a worker stops sending them.
#[async_trait]
pub trait WorkerRegistry: Send + Sync {
    /// Records a heartbeat (replacing the worker's previous one).
    async fn heartbeat(&self, info: &WorkerInfo) -> Result<(), RegistryError>;
    /// Removes a worker's entry (clean shutdown).
    async fn remove(&self, worker_id: &str) -> Result<(), RegistryError>;
    /// Every live worker, sorted by id.
    async fn list(&self) -> Result<Vec<WorkerInfo>, RegistryError>;
}
