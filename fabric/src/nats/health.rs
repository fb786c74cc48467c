//! `NatsHealth`: the `FabricHealth` port on JetStream's stream info.
//!
//! Every check asks each of the fleet's four streams (the jobs and events streams and the two
//! buckets' `KV_` streams) for its info at once. A replicated stream answers from any live
//! replica, also without a leader, so the answer says whether it has one and which replicas
//! are offline or behind. A stream whose only replica is down, or a cluster without a meta
//! leader, may not answer at all: the check then gives up after [`CHECK_TIMEOUT`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_nats::jetstream::Context;
use async_nats::jetstream::stream;
use async_trait::async_trait;

use crate::health::{FabricHealth, ObjectHealth, ObjectKind, ObjectState};
use crate::nats::NatsConfig;

/// How long one check waits for a stream's info. A live stream answers in milliseconds even
/// on a loaded cluster; 3 s keeps a full check (all four in parallel) well inside the few
/// seconds in which an operator expects a stall to be named.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// The health checks of one fleet's streams and buckets.
#[derive(Clone)]
pub struct NatsHealth {
    jetstream: Context,
    /// (kind, name shown, stream name) of every object checked.
    objects: Vec<(ObjectKind, String, String)>,
    replicas: usize,
    /// Checks in a row in which nothing answered at all (see `check`).
    silent_checks: Arc<AtomicU32>,
}

/// Checks in a row with no answer from any stream after which the connection itself is taken
/// for dead and the client moves to another node. A node without quorum still answers stream
/// info (with no leader), so total silence means the node we talk to is gone without closing
/// the connection (a partition, a lost host); the client's pings would find out only later.
const SILENT_CHECKS_BEFORE_RECONNECT: u32 = 2;

impl NatsHealth {
    /// Checks for the streams and buckets `config` names, which the fleet asks `replicas` of.
    pub fn new(jetstream: &Context, config: &NatsConfig, replicas: usize) -> NatsHealth {
        let objects = vec![
            (
                ObjectKind::Stream,
                config.jobs_stream.clone(),
                config.jobs_stream.clone(),
            ),
            (
                ObjectKind::Stream,
                config.events_stream.clone(),
                config.events_stream.clone(),
            ),
            (
                ObjectKind::Bucket,
                config.batches_bucket.clone(),
                format!("KV_{}", config.batches_bucket),
            ),
            (
                ObjectKind::Bucket,
                config.workers_bucket.clone(),
                format!("KV_{}", config.workers_bucket),
            ),
        ];
        NatsHealth {
            jetstream: jetstream.clone(),
            objects,
            replicas,
            silent_checks: Arc::new(AtomicU32::new(0)),
        }
    }

    async fn check_one(&self, kind: ObjectKind, name: &str, stream_name: &str) -> ObjectHealth {
        let state =
            match tokio::time::timeout(CHECK_TIMEOUT, self.jetstream.get_stream(stream_name)).await
            {
                Err(_) => ObjectState::Unanswered {
                    error: format!(
                        "no answer within {}",
                        cowork_schema::duration::format_duration(CHECK_TIMEOUT)
                    ),
                },
                Ok(Err(error)) => ObjectState::Unanswered {
                    error: crate::error_chain(&error),
                },
                Ok(Ok(found)) => state_of(found.cached_info()),
            };
        ObjectHealth {
            kind,
            name: name.to_owned(),
            asked_replicas: self.replicas,
            state,
        }
    }
}

/// A replica its leader has not heard from for this long is counted as unavailable. Healthy
/// replicas are heard from about every second; the server itself marks a silent replica as
/// not current only after about ten, and its leader keeps leading until then, while every
/// write already waits.
const SILENT_REPLICA: Duration = Duration::from_secs(3);

/// The state a stream's info describes.
pub(crate) fn state_of(info: &stream::Info) -> ObjectState {
    let replicas = info.config.num_replicas.max(1);
    let Some(cluster) = &info.cluster else {
        // A server outside any cluster leads all of its streams.
        return ObjectState::Serving {
            replicas,
            unavailable: Vec::new(),
        };
    };
    // The peers other than the leader; a peer offline or not current cannot count towards a
    // quorum now.
    let unavailable: Vec<String> = cluster
        .replicas
        .iter()
        .filter(|peer| peer.offline || !peer.current || peer.active > SILENT_REPLICA)
        .filter(|peer| cluster.leader.as_deref() != Some(peer.name.as_str()))
        .map(|peer| peer.name.clone())
        .collect();
    // The leader and the replicas it hears from must be a majority for a write to commit.
    let reachable = replicas.saturating_sub(unavailable.len());
    match &cluster.leader {
        Some(leader) if !leader.is_empty() && reachable < replicas / 2 + 1 => {
            ObjectState::NoQuorum {
                leader: leader.clone(),
                replicas,
                unavailable,
            }
        }
        Some(leader) if !leader.is_empty() => ObjectState::Serving {
            replicas,
            unavailable,
        },
        _ => ObjectState::NoLeader {
            replicas,
            unavailable,
        },
    }
}

#[async_trait]
impl FabricHealth for NatsHealth {
    async fn check(&self) -> Vec<ObjectHealth> {
        let checked = futures::future::join_all(
            self.objects
                .iter()
                .map(|(kind, name, stream_name)| self.check_one(*kind, name, stream_name)),
        )
        .await;
        let silent = checked
            .iter()
            .all(|object| matches!(object.state, ObjectState::Unanswered { .. }));
        // Relaxed: a counter of this one task's checks; nothing else is ordered by it.
        if !silent {
            self.silent_checks.store(0, Ordering::Relaxed);
            return checked;
        }
        let in_a_row = self.silent_checks.fetch_add(1, Ordering::Relaxed) + 1;
        if in_a_row >= SILENT_CHECKS_BEFORE_RECONNECT {
            self.silent_checks.store(0, Ordering::Relaxed);
            tracing::warn!(
                checks = in_a_row,
                "no stream answers through this connection; moving to another node"
            );
            if let Err(error) = self.jetstream.client().force_reconnect().await {
                tracing::warn!(error = %error, "reconnecting to another node failed");
            }
        }
        checked
    }
}
