//! `NatsLease`: the coordinator lease in a JetStream key-value bucket (default
//! `COWORK_LEADER`), one key, history 1, `max_age` = the lease's ttl.
//!
//! Every write of the key resets its age, so the server removes the entry `ttl` after the
//! holder's last renewal. Taking is `create` (refused while the entry exists), renewing is
//! `update` with the revision read (refused once anyone wrote since): the server does the
//! compare-and-set, so two claimers never both win. The entry is read from the bucket's stream
//! leader, never from a replica that may lag behind a write it acknowledged.

use std::time::Duration;

use async_nats::jetstream::Context;
use async_nats::jetstream::kv::{self, CreateErrorKind, Store, UpdateErrorKind};
use async_nats::jetstream::stream::StorageType;
use async_trait::async_trait;

use crate::lease::{CoordinatorLease, LeaseError, LeaseHolder, LeaseState};
use crate::nats::registry::read_from_leader;
use crate::nats::{Mismatch, NatsError};
use crate::registry::RegistryError;

/// The one key of the lease bucket.
const LEASE_KEY: &str = "leader";

/// The default bucket of the lease.
pub const DEFAULT_LEASE_BUCKET: &str = "COWORK_LEADER";

/// The lease on JetStream. Cheap to clone.
#[derive(Clone)]
pub struct NatsLease {
    store: Store,
    bucket: String,
    ttl: Duration,
}

impl NatsLease {
    /// Opens the lease bucket, creating it with `ttl` as its `max_age` when it does not exist
    /// (with `replicas` copies). An existing bucket with another `max_age` is an error naming
    /// both: coordinators that disagree on the ttl would not agree on when a lease expired.
    pub async fn open(
        jetstream: &Context,
        bucket: &str,
        ttl: Duration,
        replicas: usize,
    ) -> Result<NatsLease, NatsError> {
        let config = kv::Config {
            bucket: bucket.to_owned(),
            history: 1,
            max_age: ttl,
            storage: StorageType::File,
            num_replicas: replicas,
            ..kv::Config::default()
        };
        let store =
            match jetstream.get_key_value(bucket).await {
                Ok(store) => store,
                Err(_) => jetstream.create_key_value(config).await.map_err(|source| {
                    NatsError::JetStream {
                        action: "creating bucket",
                        name: bucket.to_owned(),
                        source: Box::new(source),
                    }
                })?,
            };
        let mut stream = store.stream.clone();
        let info = stream.info().await.map_err(|source| NatsError::JetStream {
            action: "reading bucket",
            name: bucket.to_owned(),
            source: Box::new(source),
        })?;
        if info.config.max_age != ttl {
            return Err(NatsError::Mismatch(Box::new(Mismatch {
                kind: "bucket",
                name: bucket.to_owned(),
                field: "max_age",
                found: format!("{:?}", info.config.max_age),
                wanted: format!("{ttl:?} (the lease ttl)"),
                fix: format!(
                    "give every coordinator the same lease ttl, or delete the bucket (nats kv rm {bucket}) while none runs"
                ),
            })));
        }
        Ok(NatsLease {
            store,
            bucket: bucket.to_owned(),
            ttl,
        })
    }

    fn transient(&self, what: &str, error: &dyn std::fmt::Display) -> LeaseError {
        LeaseError::Transient {
            message: format!("{what} {}/{LEASE_KEY}: {error}", self.bucket),
        }
    }

    /// The held entry and its revision; `None` when nobody holds the lease.
    async fn holder(&self) -> Result<Option<(LeaseHolder, u64)>, LeaseError> {
        read_from_leader::<LeaseHolder>(&self.store, &self.bucket, LEASE_KEY)
            .await
            .map_err(|error| match error {
                RegistryError::Malformed { message, .. } => LeaseError::Malformed { message },
                other => LeaseError::Transient {
                    message: other.to_string(),
                },
            })
    }

    fn encode(holder: &LeaseHolder) -> Result<Vec<u8>, LeaseError> {
        serde_json::to_vec(holder).map_err(|error| LeaseError::Malformed {
            message: error.to_string(),
        })
    }
}

#[async_trait]
impl CoordinatorLease for NatsLease {
    fn ttl(&self) -> Duration {
        self.ttl
    }

    async fn claim(&self, me: &LeaseHolder) -> Result<LeaseState, LeaseError> {
        match self.holder().await? {
            None => match self.store.create(LEASE_KEY, Self::encode(me)?.into()).await {
                Ok(revision) => Ok(LeaseState::Leading {
                    revision,
                    since_ms: me.since_ms,
                }),
                // Another claimer took it between the read and the create.
                Err(error) if error.kind() == CreateErrorKind::AlreadyExists => {
                    self.standby().await
                }
                Err(error) => Err(self.transient("taking", &error)),
            },
            Some((held, revision)) if held.coordinator_id == me.coordinator_id => {
                let renewed = LeaseHolder {
                    since_ms: held.since_ms,
                    ..me.clone()
                };
                match self
                    .store
                    .update(LEASE_KEY, Self::encode(&renewed)?.into(), revision)
                    .await
                {
                    Ok(revision) => Ok(LeaseState::Leading {
                        revision,
                        since_ms: held.since_ms,
                    }),
                    // It expired and another coordinator took it since the read.
                    Err(error) if error.kind() == UpdateErrorKind::WrongLastRevision => {
                        self.standby().await
                    }
                    Err(error) => Err(self.transient("renewing", &error)),
                }
            }
            Some((leader, revision)) => Ok(LeaseState::Standby { leader, revision }),
        }
    }

    async fn release(&self, me: &LeaseHolder, revision: u64) -> Result<bool, LeaseError> {
        match self.holder().await? {
            Some((held, now)) if held.coordinator_id == me.coordinator_id && now == revision => {}
            _ => return Ok(false),
        }
        match self
            .store
            .delete_expect_revision(LEASE_KEY, Some(revision))
            .await
        {
            Ok(()) => Ok(true),
            // Refused because someone wrote since (it is not ours any more), or failed.
            Err(error) => match self.holder().await? {
                Some((held, now))
                    if held.coordinator_id == me.coordinator_id && now == revision =>
                {
                    Err(self.transient("releasing", &error))
                }
                _ => Ok(false),
            },
        }
    }
}

impl NatsLease {
    /// The lease as another coordinator holds it, after a claim lost a race.
    async fn standby(&self) -> Result<LeaseState, LeaseError> {
        match self.holder().await? {
            Some((leader, revision)) => Ok(LeaseState::Standby { leader, revision }),
            // Taken and gone again already: nobody leads until the next claim.
            None => Err(LeaseError::Transient {
                message: format!(
                    "the lease {}/{LEASE_KEY} changed hands during the claim",
                    self.bucket
                ),
            }),
        }
    }
}
