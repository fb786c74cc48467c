//! Which coordinator of several on one fabric supervises the batches
//! (decisions.md#coordinator-lease).
//!
//! Every coordinator claims the lease (`cowork_fabric::lease`) in a loop. The one whose claim
//! wins *leads* for a term: it resumes every unfinished batch (as a restart does) and admits,
//! folds and decides; the others *stand by*: they serve reads and refuse writes, naming the
//! leader. Each term has its own cancellation token, a child of the process's shutdown: when
//! the term ends (the lease was lost, or could not be renewed before the term ran out on this
//! process's clock) the token is cancelled, every supervision stops where it is, exactly as at
//! a shutdown, and the next leader resumes them. A supervision also checks the term before it
//! publishes ([`TermClock::leads_now`]), so a process paused past its term (SIGSTOP) and
//! continued does not publish before this loop has noticed.
//!
//! A coordinator without a lease port (`cowork run`, tests of one coordinator) leads from the
//! start, for good. The claiming loop is the service's (`service/leading.rs`); this module is
//! the state it shares with the API and the supervisions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use cowork_fabric::lease::LeaseHolder;
use cowork_schema::api::LeaderStatus;
use tokio_util::sync::CancellationToken;

/// Who leads, as this coordinator last learnt it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Not known: the first claim has not come back, or the term ran out without an answer
    /// (NATS unreachable).
    Starting,
    /// This coordinator leads, since `since_ms` (wall clock), under fencing token `revision`.
    Leading { since_ms: u64, revision: u64 },
    /// Another coordinator leads.
    Standby { leader: LeaseHolder },
}

/// The end of the current term on this process's monotonic clock, shared with every
/// supervision of the term.
#[derive(Debug, Default)]
pub struct TermClock {
    /// `None`: leads without a lease (one coordinator), never ends by itself.
    valid_until: Mutex<Option<Instant>>,
}

impl TermClock {
    /// `true` while this process may still act as leader.
    pub fn leads_now(&self) -> bool {
        let until = *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        until.is_none_or(|until| Instant::now() < until)
    }

    pub(crate) fn set(&self, until: Option<Instant>) {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = until;
    }
}

/// The leadership state the service shares.
#[derive(Debug)]
pub(crate) struct Leadership {
    role: tokio::sync::watch::Sender<Role>,
    /// The current term's token; cancelled while standing by.
    term: Mutex<CancellationToken>,
    pub(crate) clock: Arc<TermClock>,
    /// Terms taken over from another leader, and terms lost, since the process started.
    takeovers: AtomicU64,
    terms_lost: AtomicU64,
    fencing_refusals: AtomicU64,
}

impl Leadership {
    /// The state of a coordinator that has not claimed the lease yet: not leading.
    pub(crate) fn new() -> Leadership {
        let term = CancellationToken::new();
        term.cancel();
        Leadership {
            role: tokio::sync::watch::Sender::new(Role::Starting),
            term: Mutex::new(term),
            clock: Arc::new(TermClock::default()),
            takeovers: AtomicU64::new(0),
            terms_lost: AtomicU64::new(0),
            fencing_refusals: AtomicU64::new(0),
        }
    }

    pub(crate) fn role(&self) -> Role {
        self.role.borrow().clone()
    }

    /// The role from now on, for a task that must notice when this coordinator stands by.
    pub(crate) fn roles(&self) -> tokio::sync::watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// `true` while another coordinator is known to lead: a batch supervised here in an
    /// earlier term goes on there. (A term that ran out without an answer, the NATS quorum
    /// lost, is not that: nobody else leads, and this process takes the batches up again.)
    pub(crate) fn stands_by(&self) -> bool {
        matches!(*self.role.borrow(), Role::Standby { .. })
    }

    /// Says who leads, while this coordinator does not.
    pub(crate) fn set_role(&self, role: Role) {
        self.role.send_replace(role);
    }

    /// `true` while this coordinator leads.
    pub(crate) fn leads(&self) -> bool {
        matches!(*self.role.borrow(), Role::Leading { .. }) && self.clock.leads_now()
    }

    /// Who leads, as the API says it; `me` and `my_url` name this coordinator. `None` while
    /// not known.
    pub(crate) fn leader_status(&self, me: &str, my_url: &str) -> Option<LeaderStatus> {
        match self.role() {
            Role::Starting => None,
            Role::Leading { since_ms, .. } => Some(LeaderStatus {
                coordinator_id: me.to_owned(),
                url: my_url.to_owned(),
                since_ms,
                answering: true,
            }),
            Role::Standby { leader } => Some(LeaderStatus {
                coordinator_id: leader.coordinator_id,
                url: leader.url,
                since_ms: leader.since_ms,
                answering: false,
            }),
        }
    }

    /// The token supervisions of the current term stop on.
    pub(crate) fn term_token(&self) -> CancellationToken {
        self.term
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Begins a term under `shutdown`; returns its token.
    pub(crate) fn begin(&self, shutdown: &CancellationToken, role: Role) -> CancellationToken {
        let token = shutdown.child_token();
        *self.term.lock().unwrap_or_else(PoisonError::into_inner) = token.clone();
        self.role.send_replace(role);
        token
    }

    /// A term began by taking the lease over from another leader.
    pub(crate) fn took_over(&self) {
        self.takeovers.fetch_add(1, Ordering::Relaxed);
    }

    /// The lease as `/metrics` shows it.
    pub(crate) fn counts(&self) -> crate::metrics::LeaseCounts {
        crate::metrics::LeaseCounts {
            leading: self.leads(),
            takeovers: self.takeovers.load(Ordering::Relaxed),
            terms_lost: self.terms_lost.load(Ordering::Relaxed),
            fencing_refusals: self.fencing_refusals.load(Ordering::Relaxed),
        }
    }

    /// The lease revision of the term running now, the fencing token of its writes; 0 when
    /// none runs or the coordinator leads without a lease.
    pub(crate) fn term_revision(&self) -> u64 {
        match *self.role.borrow() {
            Role::Leading { revision, .. } => revision,
            _ => 0,
        }
    }

    /// The queue refused a write of term `revision` because a later leader fenced it: that
    /// term is over. Counted; the term ends (when it is still the current one) and the next
    /// claim learns who leads.
    pub(crate) fn fenced(&self, revision: u64) {
        self.fencing_refusals.fetch_add(1, Ordering::Relaxed);
        if revision != 0 && self.term_revision() == revision {
            tracing::warn!(
                revision,
                "a later leader fenced this coordinator's term: it stops writing and stands by"
            );
            self.end(Role::Starting);
        }
    }

    /// Ends the current term: its supervisions stop.
    pub(crate) fn end(&self, role: Role) {
        self.terms_lost.fetch_add(1, Ordering::Relaxed);
        self.term
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .cancel();
        self.clock.set(Some(Instant::now()));
        self.role.send_replace(role);
    }
}

impl Leadership {
    /// Leads for good under `shutdown`: the only coordinator of its fabric.
    pub(crate) fn lead_without_lease(&self, shutdown: &CancellationToken) {
        let since_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        self.begin(
            shutdown,
            Role::Leading {
                since_ms,
                revision: 0,
            },
        );
    }
}

/// Resolves once `roles` says this coordinator stands by (at once when it does already).
pub(crate) async fn until_standby(roles: &mut tokio::sync::watch::Receiver<Role>) {
    // The sender lives in the service, which outlives every stream that waits here; were it
    // gone, waiting on would be wrong too, so that ends the wait as well.
    let _ = roles
        .wait_for(|role| matches!(role, Role::Standby { .. }))
        .await;
}
