//! `NatsHealth`: the `FabricHealth` port on JetStream's stream info.
//!
//! Every check asks each of the fleet's four streams (the jobs and events streams and the two
//! buckets' `KV_` streams) for its info at once. A replicated stream answers from any live
//! replica, also without a leader, so the answer says whether it has one and which replicas
//! are offline or behind. A stream whose only replica is down, or a cluster without a meta
//! leader, may not answer at all: the check then gives up after [`CHECK_TIMEOUT`].

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
}

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
        futures::future::join_all(
            self.objects
                .iter()
                .map(|(kind, name, stream_name)| self.check_one(*kind, name, stream_name)),
        )
        .await
    }
}
