//! `NatsBatchRegistry` and `NatsWorkerRegistry`: the registry ports on JetStream key-value
//! buckets (`COWORK_BATCHES`, `COWORK_WORKERS`).
//!
//! A batch record's key is its batch id and its revision is the bucket's revision, so an
//! update with an expected revision is a compare-and-set done by the server. A worker's key is
//! its id; the workers bucket's `max_age` removes the entry of a worker that stops beating.

use async_nats::jetstream::Context;
use async_nats::jetstream::kv::{CreateErrorKind, Operation, Store, UpdateErrorKind};
use async_trait::async_trait;
use cowork_schema::BatchId;
use cowork_schema::registry::{BatchRecord, WorkerInfo};
use futures::StreamExt;
use serde::de::DeserializeOwned;

use crate::nats::NatsError;
use crate::nats::config::NatsConfig;
use crate::registry::{BatchRegistry, RecordStream, RegistryError, WorkerRegistry};

/// Longest accepted worker id.
const MAX_WORKER_ID_LEN: usize = 128;

/// Checks that `worker_id` can be a key of the workers bucket: 1 to 128 of `A-Z a-z 0-9 - _ =`
/// and `.`, where dots only separate non-empty parts (a key is a subject token sequence).
pub fn check_worker_id(worker_id: &str) -> Result<(), String> {
    let reason = if worker_id.is_empty() || worker_id.len() > MAX_WORKER_ID_LEN {
        Some("must be 1 to 128 characters")
    } else if !worker_id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'=' | b'.'))
    {
        Some("may hold only A-Z, a-z, 0-9, '-', '_', '=' and '.'")
    } else if worker_id.split('.').any(str::is_empty) {
        Some("must not start or end with '.' or hold '..'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(format!("invalid worker id {worker_id:?}: {reason}")),
        None => Ok(()),
    }
}

async fn open_bucket(jetstream: &Context, bucket: &str) -> Result<Store, NatsError> {
    jetstream
        .get_key_value(bucket)
        .await
        .map_err(|source| NatsError::JetStream {
            action: "opening bucket",
            name: bucket.to_owned(),
            source: Box::new(source),
        })
}

fn transient(what: &str, error: &dyn std::fmt::Display) -> RegistryError {
    RegistryError::Transient {
        message: format!("{what}: {error}"),
    }
}

/// Reads every live entry of `store`, sorted by key, skipping entries deleted or expired while
/// the listing ran.
async fn list_values<T: DeserializeOwned>(
    store: &Store,
    bucket: &str,
) -> Result<Vec<T>, RegistryError> {
    let mut keys = store
        .keys()
        .await
        .map_err(|error| transient(&format!("listing bucket {bucket}"), &error))?;
    let mut names = Vec::new();
    while let Some(key) = keys.next().await {
        names.push(key.map_err(|error| transient(&format!("listing bucket {bucket}"), &error))?);
    }
    names.sort();
    let mut values = Vec::with_capacity(names.len());
    for key in names {
        if let Some((value, _)) = read_entry(store, bucket, &key).await? {
            values.push(value);
        }
    }
    Ok(values)
}

/// The value of `key` and its revision; `None` if absent, deleted or purged.
async fn read_entry<T: DeserializeOwned>(
    store: &Store,
    bucket: &str,
    key: &str,
) -> Result<Option<(T, u64)>, RegistryError> {
    let entry = store
        .entry(key)
        .await
        .map_err(|error| transient(&format!("reading {bucket}/{key}"), &error))?;
    let Some(entry) = entry else {
        return Ok(None);
    };
    if entry.operation != Operation::Put {
        return Ok(None);
    }
    Ok(Some((decode(bucket, key, &entry.value)?, entry.revision)))
}

/// The value of `key` and its revision as the bucket's stream leader has them; `None` if
/// absent, deleted or purged.
///
/// A key-value bucket answers reads from any replica ("direct get"), and a follower may not
/// yet hold a write the leader acknowledged: on a three-node cluster just formed, a batch
/// record created by the submit was read back as missing by the coordinator's claim a moment
/// later, and the batch never started. A batch record is read to be changed by
/// compare-and-set, or to decide whether a job may run, so it must be the latest: this asks the
/// stream leader (`STREAM.MSG.GET`), which has every acknowledged write.
pub(crate) async fn read_from_leader<T: DeserializeOwned>(
    store: &Store,
    bucket: &str,
    key: &str,
) -> Result<Option<(T, u64)>, RegistryError> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    let subject = format!("{}{key}", store.prefix);
    let message = match store.stream.get_last_raw_message_by_subject(&subject).await {
        Ok(message) => message,
        Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(None),
        Err(error) => return Err(transient(&format!("reading {bucket}/{key}"), &error)),
    };
    // A delete or purge is stored as an empty message with this header; a put has none.
    let removed = message
        .headers
        .get("KV-Operation")
        .is_some_and(|operation| matches!(operation.as_str(), "DEL" | "PURGE"));
    if removed {
        return Ok(None);
    }
    Ok(Some((
        decode(bucket, key, &message.payload)?,
        message.sequence,
    )))
}

/// The stored value of `bucket/key`, decoded.
fn decode<T: DeserializeOwned>(bucket: &str, key: &str, value: &[u8]) -> Result<T, RegistryError> {
    serde_json::from_slice(value).map_err(|error| RegistryError::Malformed {
        key: format!("{bucket}/{key}"),
        message: error.to_string(),
    })
}

/// Batch records in the batches bucket. Cheap to clone.
#[derive(Clone)]
pub struct NatsBatchRegistry {
    store: Store,
    bucket: String,
}

impl NatsBatchRegistry {
    /// Binds to the batches bucket that `ensure_streams` created.
    pub async fn open(
        jetstream: &Context,
        config: &NatsConfig,
    ) -> Result<NatsBatchRegistry, NatsError> {
        Ok(NatsBatchRegistry {
            store: open_bucket(jetstream, &config.batches_bucket).await?,
            bucket: config.batches_bucket.clone(),
        })
    }

    fn encode(record: &BatchRecord) -> Result<Vec<u8>, RegistryError> {
        cowork_schema::json_number::to_vec(record).map_err(|error| RegistryError::Failed {
            message: format!("encoding the record of batch {}: {error}", record.batch_id),
        })
    }
}

#[async_trait]
impl BatchRegistry for NatsBatchRegistry {
    async fn create(&self, record: &BatchRecord) -> Result<u64, RegistryError> {
        let value = Self::encode(record)?;
        self.store
            .create(record.batch_id.as_str(), value.into())
            .await
            .map_err(|error| match error.kind() {
                CreateErrorKind::AlreadyExists => RegistryError::AlreadyExists {
                    batch_id: record.batch_id.to_string(),
                },
                _ => transient(
                    &format!("creating {}/{}", self.bucket, record.batch_id),
                    &error,
                ),
            })
    }

    async fn update(&self, record: &BatchRecord, expected: u64) -> Result<u64, RegistryError> {
        let value = Self::encode(record)?;
        self.store
            .update(record.batch_id.as_str(), value.into(), expected)
            .await
            .map_err(|error| match error.kind() {
                UpdateErrorKind::WrongLastRevision => RegistryError::Conflict {
                    batch_id: record.batch_id.to_string(),
                    expected,
                },
                _ => transient(
                    &format!("updating {}/{}", self.bucket, record.batch_id),
                    &error,
                ),
            })
    }

    /// Read from the bucket's stream leader, not from any replica: see [`read_from_leader`].
    /// Without a leader (a stream that lost its quorum) a replica's copy is the answer, so
    /// `cowork status` still shows a stalled batch; a record no reachable replica has is then
    /// not known to be missing, and the leader's failure is returned.
    async fn get(&self, batch_id: &BatchId) -> Result<Option<(BatchRecord, u64)>, RegistryError> {
        let key = batch_id.as_str();
        match read_from_leader(&self.store, &self.bucket, key).await {
            Err(leaderless) if leaderless.is_transient() => {
                match read_entry(&self.store, &self.bucket, key).await {
                    Ok(Some(found)) => Ok(Some(found)),
                    Ok(None) | Err(_) => Err(leaderless),
                }
            }
            read => read,
        }
    }

    async fn list(&self) -> Result<Vec<BatchRecord>, RegistryError> {
        list_values(&self.store, &self.bucket).await
    }

    async fn watch(&self) -> Result<RecordStream, RegistryError> {
        let bucket = self.bucket.clone();
        // With history: the last value of every key first, then changes as they are stored.
        let watch = self
            .store
            .watch_with_history(">")
            .await
            .map_err(|error| transient(&format!("watching bucket {bucket}"), &error))?;
        let records = watch.filter_map(move |entry| {
            let bucket = bucket.clone();
            async move {
                match entry {
                    Err(error) => {
                        Some(Err(transient(&format!("watching bucket {bucket}"), &error)))
                    }
                    Ok(entry) if entry.operation != Operation::Put => None,
                    Ok(entry) => Some(decode(&bucket, &entry.key, &entry.value)),
                }
            }
        });
        Ok(Box::pin(records))
    }
}

/// Worker heartbeats in the workers bucket. Cheap to clone.
#[derive(Clone)]
pub struct NatsWorkerRegistry {
    store: Store,
    bucket: String,
}

impl NatsWorkerRegistry {
    /// Binds to the workers bucket that `ensure_streams` created.
    pub async fn open(
        jetstream: &Context,
        config: &NatsConfig,
    ) -> Result<NatsWorkerRegistry, NatsError> {
        Ok(NatsWorkerRegistry {
            store: open_bucket(jetstream, &config.workers_bucket).await?,
            bucket: config.workers_bucket.clone(),
        })
    }
}

fn invalid_worker_id(worker_id: &str) -> Result<(), RegistryError> {
    check_worker_id(worker_id).map_err(|message| RegistryError::Failed { message })
}

#[async_trait]
impl WorkerRegistry for NatsWorkerRegistry {
    async fn heartbeat(&self, info: &WorkerInfo) -> Result<(), RegistryError> {
        invalid_worker_id(&info.worker_id)?;
        let value =
            cowork_schema::json_number::to_vec(info).map_err(|error| RegistryError::Failed {
                message: format!(
                    "encoding the heartbeat of worker {}: {error}",
                    info.worker_id
                ),
            })?;
        self.store
            .put(&info.worker_id, value.into())
            .await
            .map_err(|error| {
                transient(
                    &format!("storing {}/{}", self.bucket, info.worker_id),
                    &error,
                )
            })?;
        Ok(())
    }

    async fn remove(&self, worker_id: &str) -> Result<(), RegistryError> {
        invalid_worker_id(worker_id)?;
        self.store
            .delete(worker_id)
            .await
            .map_err(|error| transient(&format!("deleting {}/{worker_id}", self.bucket), &error))
    }

    async fn list(&self) -> Result<Vec<WorkerInfo>, RegistryError> {
        list_values(&self.store, &self.bucket).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(worker_id: &str, expected: Result<(), &str>) {
        match (check_worker_id(worker_id), expected) {
            (Ok(()), Ok(())) => {}
            (Err(message), Err(fragment)) => {
                assert!(message.contains(fragment), "{worker_id:?}: {message}");
                assert!(message.contains(&format!("{worker_id:?}")), "{message}");
            }
            (got, want) => panic!("{worker_id:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn worker_ids_must_be_bucket_keys() {
        check("w1", Ok(()));
        check("host-1.example.com_slot=2", Ok(()));
        check("", Err("1 to 128"));
        check(&"w".repeat(129), Err("1 to 128"));
        check("has space", Err("may hold only"));
        check("a/b", Err("may hold only"));
        check("a*", Err("may hold only"));
        check(".w", Err("'..'"));
        check("w.", Err("'..'"));
        check("a..b", Err("'..'"));
    }
}
