//! `MemLease`: the coordinator lease in process, with the NATS lease's rules (take when free
//! or expired, renew when held, compare-and-set on a revision that only grows), on tokio's
//! clock so tests can move time.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::lease::{CoordinatorLease, LeaseError, LeaseHolder, LeaseState};

#[derive(Debug, Default)]
struct Entry {
    /// The holder, the revision of its last write and when that write expires.
    held: Option<(LeaseHolder, u64, Instant)>,
    last_revision: u64,
}

/// One lease shared by the claimers holding a clone. A single `cowork run` has one claimer,
/// which always leads.
#[derive(Clone, Debug)]
pub struct MemLease {
    entry: Arc<Mutex<Entry>>,
    ttl: Duration,
}

impl MemLease {
    pub fn new(ttl: Duration) -> MemLease {
        MemLease {
            entry: Arc::default(),
            ttl,
        }
    }
}

#[async_trait]
impl CoordinatorLease for MemLease {
    fn ttl(&self) -> Duration {
        self.ttl
    }

    async fn claim(&self, me: &LeaseHolder) -> Result<LeaseState, LeaseError> {
        let now = Instant::now();
        // Every change is a plain assignment: a poisoned lock still holds a valid entry.
        let mut entry = self.entry.lock().unwrap_or_else(PoisonError::into_inner);
        let live = entry.held.clone().filter(|(_, _, expires)| now < *expires);
        let since_ms = match live {
            Some((leader, revision, _)) if leader.coordinator_id != me.coordinator_id => {
                return Ok(LeaseState::Standby { leader, revision });
            }
            Some((held, _, _)) => held.since_ms,
            None => me.since_ms,
        };
        entry.last_revision += 1;
        let revision = entry.last_revision;
        let holder = LeaseHolder {
            since_ms,
            ..me.clone()
        };
        entry.held = Some((holder, revision, now + self.ttl));
        Ok(LeaseState::Leading { revision, since_ms })
    }

    async fn release(&self, me: &LeaseHolder, revision: u64) -> Result<bool, LeaseError> {
        let mut entry = self.entry.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = entry.held.as_ref().is_some_and(|(held, at, _)| {
            held.coordinator_id == me.coordinator_id && *at == revision
        });
        if mine {
            entry.held = None;
            entry.last_revision += 1;
        }
        Ok(mine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(id: &str) -> LeaseHolder {
        LeaseHolder {
            coordinator_id: id.to_owned(),
            url: format!("http://{id}"),
            since_ms: 1,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_claimer_leads_until_its_lease_expires_then_the_other_takes_it() {
        let lease = MemLease::new(Duration::from_secs(10));
        let (a, b) = (holder("a"), holder("b"));
        let Ok(LeaseState::Leading {
            revision: first, ..
        }) = lease.claim(&a).await
        else {
            panic!("the first claim takes a free lease");
        };
        let Ok(LeaseState::Standby { leader, .. }) = lease.claim(&b).await else {
            panic!("a second claimer stands by");
        };
        assert_eq!(leader.coordinator_id, "a");
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(
            matches!(lease.claim(&a).await, Ok(LeaseState::Leading { revision, .. }) if revision > first)
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        let Ok(LeaseState::Leading {
            revision: taken, ..
        }) = lease.claim(&b).await
        else {
            panic!("an expired lease is taken");
        };
        assert!(taken > first, "the fencing token grows with every holder");
        assert!(matches!(
            lease.claim(&a).await,
            Ok(LeaseState::Standby { .. })
        ));
        assert!(
            !lease.release(&a, first).await.expect("release"),
            "not a's any more"
        );
        assert!(lease.release(&b, taken).await.expect("release"));
        assert!(
            matches!(lease.claim(&a).await, Ok(LeaseState::Leading { .. })),
            "a released lease is free at once"
        );
    }
}
