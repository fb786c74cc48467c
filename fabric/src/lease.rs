//! The `CoordinatorLease` port: which of several coordinators on one fabric leads
//! (decisions.md#coordinator-lease).
//!
//! One entry holds the lease: its holder's id and URL, and a revision the store raises on
//! every write. A coordinator *claims* the lease: it takes it when nobody holds it (never
//! held, released, or expired because its holder stopped renewing), renews it when it holds
//! it, and otherwise learns who does. Taking and renewing are compare-and-set on the revision,
//! so two claimers never both win; the revision of the write that won is the holder's
//! *fencing token*: it only grows, so a write carrying an older one comes from a leader that
//! has since lost the lease.
//!
//! The store expires an entry `ttl` after its last write. A holder must stop acting as
//! leader before that can happen, on its own clock: [`LeaseTerm`] says until when a claim
//! that won lets it lead, counted from the instant the claim was *sent*, less a margin, so a
//! slow answer or a paused process never stretches the term past the expiry the store sees.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Who holds (or claims) the lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseHolder {
    /// The coordinator's id (`--coordinator-id`, its host name by default): a restarted
    /// coordinator with the same id renews its own lease at once.
    pub coordinator_id: String,
    /// Where its API answers, for standbys to send clients to.
    pub url: String,
    /// When it took the lease (wall clock, ms since the epoch); kept across renewals.
    pub since_ms: u64,
}

/// What a claim found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// The claimer holds the lease, taken or renewed by the write of `revision`.
    Leading { revision: u64, since_ms: u64 },
    /// Another coordinator holds it.
    Standby { leader: LeaseHolder, revision: u64 },
}

/// Errors of the lease store.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The store did not answer; the claimer knows nothing new.
    #[error("lease store unavailable: {message}")]
    Transient { message: String },
    /// The lease entry cannot be read.
    #[error("lease entry is malformed: {message}")]
    Malformed { message: String },
}

/// The lease port: one lease per fabric.
#[async_trait]
pub trait CoordinatorLease: Send + Sync {
    /// How long the lease lasts after its last write.
    fn ttl(&self) -> Duration;

    /// Takes the lease if nobody holds it, renews it if `me` holds it (same coordinator id),
    /// else says who holds it. A renewal keeps `since_ms` of the held entry.
    async fn claim(&self, me: &LeaseHolder) -> Result<LeaseState, LeaseError>;

    /// Gives the lease up if `me` still holds it at `revision` (a clean shutdown), so a
    /// standby need not wait for it to expire. Returns `false` when it was no longer `me`'s.
    async fn release(&self, me: &LeaseHolder, revision: u64) -> Result<bool, LeaseError>;
}

/// A holder's view of its own term: how long a won claim lets it lead. Pure.
#[derive(Clone, Copy, Debug)]
pub struct LeaseTerm {
    ttl: Duration,
    margin: Duration,
    /// The end of the term on the holder's monotonic clock; `None` while it does not lead.
    valid_until: Option<Instant>,
    revision: u64,
}

impl LeaseTerm {
    /// A term for a lease of `ttl`: a holder leads until `ttl` less a margin (a quarter of
    /// the ttl, at least 1 s, never more than half) after the claim that won was sent.
    pub fn new(ttl: Duration) -> LeaseTerm {
        let margin = (ttl / 4).max(Duration::from_secs(1)).min(ttl / 2);
        LeaseTerm {
            ttl,
            margin,
            valid_until: None,
            revision: 0,
        }
    }

    /// How often a holder renews: three renewals fit in a term.
    pub fn renew_every(&self) -> Duration {
        (self.ttl - self.margin) / 3
    }

    /// A claim sent at `sent_at` came back with `state`.
    pub fn claimed(&mut self, sent_at: Instant, state: &LeaseState) {
        match state {
            LeaseState::Leading { revision, .. } => {
                self.valid_until = Some(sent_at + self.ttl - self.margin);
                self.revision = *revision;
            }
            LeaseState::Standby { .. } => self.valid_until = None,
        }
    }

    /// `true` while the holder may act as leader at `now`.
    pub fn leads_at(&self, now: Instant) -> bool {
        self.valid_until.is_some_and(|until| now < until)
    }

    /// The fencing token of the current term: the revision of the claim that won last.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// When the term ends without a renewal; `None` while not leading.
    pub fn valid_until(&self) -> Option<Instant> {
        self.valid_until
    }

    /// How long a claim sent at `sent_at` may wait for its answer: a renewal interval, and
    /// never past a running term (a claim that hangs must not outlive the term it renews).
    /// A term that already ran out bounds nothing: the claim that could begin the next one
    /// gets its full time.
    pub fn answer_deadline(&self, sent_at: Instant) -> Instant {
        let within = sent_at + self.renew_every();
        match self.valid_until {
            Some(until) if until > sent_at => until.min(within),
            _ => within,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leading(revision: u64) -> LeaseState {
        LeaseState::Leading {
            revision,
            since_ms: 0,
        }
    }

    #[test]
    fn a_term_ends_a_margin_before_the_store_can_expire_the_lease() {
        let mut term = LeaseTerm::new(Duration::from_secs(10));
        let sent = Instant::now();
        assert!(!term.leads_at(sent), "no term before a claim wins");
        term.claimed(sent, &leading(7));
        assert_eq!(term.revision(), 7);
        assert!(term.leads_at(sent + Duration::from_millis(7_499)));
        assert!(!term.leads_at(sent + Duration::from_millis(7_500)));
        // Three renewals fit in the term, so one lost answer never ends it.
        assert_eq!(term.renew_every(), Duration::from_millis(2_500));
    }

    #[test]
    fn a_claim_waits_a_renewal_interval_and_never_past_a_running_term() {
        let mut term = LeaseTerm::new(Duration::from_secs(6));
        let sent = Instant::now();
        let every = term.renew_every();
        assert_eq!(term.answer_deadline(sent), sent + every, "not leading yet");
        term.claimed(sent, &leading(1));
        let late = sent + Duration::from_millis(4_000);
        assert_eq!(
            term.answer_deadline(late),
            sent + Duration::from_millis(4_500),
            "the renewal is cut off where the term ends"
        );
        // The term ran out without an answer: the claim that could begin the next one is
        // not cut off at once by the old term's end.
        let after = sent + Duration::from_secs(30);
        assert!(!term.leads_at(after));
        assert_eq!(term.answer_deadline(after), after + every);
    }

    #[test]
    fn a_renewal_counts_from_when_it_was_sent_and_losing_the_lease_ends_the_term() {
        let mut term = LeaseTerm::new(Duration::from_secs(2));
        let first = Instant::now();
        term.claimed(first, &leading(1));
        let renewed = first + Duration::from_millis(400);
        term.claimed(renewed, &leading(2));
        assert!(term.leads_at(renewed + Duration::from_millis(999)));
        assert!(!term.leads_at(renewed + Duration::from_secs(1)));
        let leader = LeaseHolder {
            coordinator_id: "b".to_owned(),
            url: "http://b".to_owned(),
            since_ms: 0,
        };
        term.claimed(
            renewed,
            &LeaseState::Standby {
                leader,
                revision: 3,
            },
        );
        assert!(!term.leads_at(renewed));
    }
}
