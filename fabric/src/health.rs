//! The `FabricHealth` port: whether each stream and bucket the fleet needs can serve now.
//!
//! A replicated stream keeps working while a majority of its replicas is up; when it has no
//! leader (no quorum) or does not answer at all, every publish, pull and read on it waits. The
//! coordinator checks this port every few seconds so that `status`, `watch`, `workers` and
//! `/readyz` can say which stream stalls and since when, instead of waiting in silence. The
//! embedded fabric of `cowork run` has no such failure and no implementation.

use async_trait::async_trait;

/// What a checked object is, as the operator's tools name it (`nats stream`, `nats kv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    Stream,
    Bucket,
}

impl ObjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Stream => "stream",
            ObjectKind::Bucket => "bucket",
        }
    }
}

/// How one stream or bucket answered a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectState {
    /// It has a leader and serves. `unavailable` names replicas that are offline or behind.
    Serving {
        replicas: usize,
        unavailable: Vec<String>,
    },
    /// It answered but has no leader: too few of its replicas are up for a quorum, or an
    /// election is under way. Nothing can be written to or read from it.
    NoLeader {
        replicas: usize,
        unavailable: Vec<String>,
    },
    /// It has a leader that no longer reaches a majority of its replicas: a write waits for
    /// acknowledgements that cannot come. The leader steps down some seconds later.
    NoQuorum {
        leader: String,
        replicas: usize,
        unavailable: Vec<String>,
    },
    /// It did not answer in time (its only replica is down, or the cluster lost its meta
    /// leader), or the server refused the check.
    Unanswered { error: String },
}

/// The answer of one stream or bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectHealth {
    pub kind: ObjectKind,
    /// The bucket's name for a bucket (not its `KV_` stream), else the stream's.
    pub name: String,
    /// Replicas the fleet asks of it.
    pub asked_replicas: usize,
    pub state: ObjectState,
}

impl ObjectHealth {
    /// Why it cannot serve now, as the end of a sentence that starts with its kind and name
    /// (`has no leader: 2 of 3 replicas unavailable (n2, n3)`); `None` when it serves.
    pub fn stall(&self) -> Option<String> {
        match &self.state {
            ObjectState::Serving { .. } => None,
            ObjectState::NoLeader {
                replicas,
                unavailable,
            } => Some(if unavailable.is_empty() {
                "has no leader".to_owned()
            } else {
                format!(
                    "has no leader: {} of {replicas} replicas unavailable ({})",
                    unavailable.len(),
                    unavailable.join(", ")
                )
            }),
            ObjectState::NoQuorum {
                leader,
                replicas,
                unavailable,
            } => Some(format!(
                "has no quorum: its leader {leader} reaches {} of {} other replicas ({} unavailable)",
                replicas.saturating_sub(1).saturating_sub(unavailable.len()),
                replicas.saturating_sub(1),
                unavailable.join(", ")
            )),
            ObjectState::Unanswered { error } => Some(format!("does not answer: {error}")),
        }
    }

    /// Why it serves with less redundancy than asked: fewer replicas than asked, or replicas
    /// offline or behind. `None` when it is whole, or when it does not serve at all.
    pub fn shortfall(&self) -> Option<String> {
        let ObjectState::Serving {
            replicas,
            unavailable,
        } = &self.state
        else {
            return None;
        };
        let mut problems = Vec::new();
        if *replicas < self.asked_replicas {
            let noun = if *replicas == 1 {
                "replica"
            } else {
                "replicas"
            };
            problems.push(format!(
                "has {replicas} {noun}, {} asked",
                self.asked_replicas
            ));
        }
        if !unavailable.is_empty() {
            problems.push(format!(
                "{} of {replicas} replicas unavailable ({})",
                unavailable.len(),
                unavailable.join(", ")
            ));
        }
        (!problems.is_empty()).then(|| problems.join("; "))
    }
}

/// Checks the streams and buckets the fleet needs.
#[async_trait]
pub trait FabricHealth: Send + Sync {
    /// Checks every stream and bucket once, each within a short deadline, so one that does
    /// not answer costs the caller that deadline and no more.
    async fn check(&self) -> Vec<ObjectHealth>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(state: ObjectState, stall: Option<&str>, shortfall: Option<&str>) {
        let health = ObjectHealth {
            kind: ObjectKind::Stream,
            name: "COWORK_JOBS".to_owned(),
            asked_replicas: 3,
            state,
        };
        assert_eq!(health.stall().as_deref(), stall);
        assert_eq!(health.shortfall().as_deref(), shortfall);
    }

    #[test]
    fn stalls_and_shortfalls_read_as_sentences() {
        check(
            ObjectState::Serving {
                replicas: 3,
                unavailable: Vec::new(),
            },
            None,
            None,
        );
        check(
            ObjectState::Serving {
                replicas: 1,
                unavailable: Vec::new(),
            },
            None,
            Some("has 1 replica, 3 asked"),
        );
        check(
            ObjectState::Serving {
                replicas: 3,
                unavailable: vec!["n2".to_owned()],
            },
            None,
            Some("1 of 3 replicas unavailable (n2)"),
        );
        check(
            ObjectState::NoLeader {
                replicas: 3,
                unavailable: vec!["n2".to_owned(), "n3".to_owned()],
            },
            Some("has no leader: 2 of 3 replicas unavailable (n2, n3)"),
            None,
        );
        check(
            ObjectState::NoQuorum {
                leader: "n1".to_owned(),
                replicas: 3,
                unavailable: vec!["n2".to_owned(), "n3".to_owned()],
            },
            Some("has no quorum: its leader n1 reaches 0 of 2 other replicas (n2, n3 unavailable)"),
            None,
        );
        check(
            ObjectState::Unanswered {
                error: "no answer within 3s".to_owned(),
            },
            Some("does not answer: no answer within 3s"),
            None,
        );
    }
}
