//! The coordinator's claim on the lease (decisions.md#coordinator-lease), in a loop until
//! shutdown: a won claim begins a term and resumes the unfinished batches, a lost or
//! unrenewable one ends the term. The state it keeps is `crate::leadership`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cowork_fabric::lease::{CoordinatorLease, LeaseHolder, LeaseState, LeaseTerm};

use super::records::now_ms;
use super::{LeasePort, Service};
use crate::leadership::Role;

/// How often a standby claims the lease: the takeover waits at most this long after the
/// lease expired.
const STANDBY_CLAIM_EVERY: Duration = Duration::from_millis(500);

/// Leads for good and resumes the unfinished batches: a coordinator without a lease port.
pub(crate) fn lead_alone(service: &Arc<Service>) {
    service.leadership.lead_without_lease(&service.shutdown);
    let resumer = Arc::clone(service);
    service
        .tracker
        .spawn(async move { resumer.resume_all(None).await });
}

/// Claims the lease until shutdown, beginning and ending terms; releases it at shutdown when
/// held, so a standby takes over at once.
/// `first_claim` fires once the first claim has come back (or timed out).
pub(crate) async fn claim_lease(
    service: Arc<Service>,
    port: LeasePort,
    first_claim: tokio::sync::oneshot::Sender<()>,
) {
    let mut first_claim = Some(first_claim);
    let lease: Arc<dyn CoordinatorLease> = port.lease;
    let mut me = LeaseHolder {
        coordinator_id: service.config.coordinator_id.clone(),
        url: port.advertise_url,
        since_ms: now_ms(),
    };
    let mut term = LeaseTerm::new(lease.ttl());
    loop {
        let sent_at = Instant::now();
        // A claim that takes the lease says it leads from now (a renewal keeps the held
        // entry's start).
        if !term.leads_at(sent_at) {
            me.since_ms = now_ms();
        }
        // A claim that hangs (the server cut off) must not outlive the term.
        let bound = term.answer_deadline(sent_at);
        let claimed = tokio::select! {
            _ = service.shutdown.cancelled() => break,
            claimed = tokio::time::timeout_at(bound.into(), lease.claim(&me)) => claimed,
        };
        match &claimed {
            Ok(Ok(state)) => term.claimed(sent_at, state),
            Ok(Err(error)) => {
                tracing::warn!(error = %error, "claiming the coordinator lease failed");
            }
            Err(_) => tracing::warn!("claiming the coordinator lease timed out"),
        }
        // A term is running (its token not cancelled): the role alone cannot say, since a
        // term that ran out without an answer leaves the role as it was.
        let leading_before = !service.leadership.term_token().is_cancelled();
        if term.leads_at(Instant::now()) {
            service.leadership.clock.set(term.valid_until());
            if !leading_before {
                begin_term(&service, &term, &claimed);
            }
        } else {
            let role = match &claimed {
                Ok(Ok(LeaseState::Standby { leader, .. })) => Role::Standby {
                    leader: leader.clone(),
                },
                // No answer: who leads is not known until a claim comes back.
                _ if leading_before => Role::Starting,
                _ => service.leadership.role(),
            };
            if leading_before {
                tracing::warn!(
                    "this coordinator lost the lease: its supervisions stop, the leader resumes them"
                );
                service.leadership.end(role);
                service.forget_resumed();
            } else if role != service.leadership.role() {
                if let Role::Standby { leader } = &role {
                    tracing::info!(leader = %leader.coordinator_id, url = %leader.url, "standing by");
                }
                service.leadership.set_role(role);
            }
        }
        if let Some(first_claim) = first_claim.take() {
            // Nobody waiting (the server stopped first) is fine.
            let _ = first_claim.send(());
        }
        let pause = if term.leads_at(Instant::now()) {
            term.renew_every()
        } else {
            STANDBY_CLAIM_EVERY
        };
        tokio::select! {
            _ = service.shutdown.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    if term.leads_at(Instant::now()) {
        match lease.release(&me, term.revision()).await {
            Ok(true) => tracing::info!("coordinator lease released"),
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(error = %error, "releasing the coordinator lease failed; it expires by itself");
            }
        }
    }
}

/// This coordinator won the lease: a new term begins and resumes every unfinished batch.
fn begin_term(
    service: &Arc<Service>,
    term: &LeaseTerm,
    claimed: &Result<Result<LeaseState, cowork_fabric::LeaseError>, tokio::time::error::Elapsed>,
) {
    let since_ms = match claimed {
        Ok(Ok(LeaseState::Leading { since_ms, .. })) => *since_ms,
        _ => now_ms(),
    };
    let role = Role::Leading {
        since_ms,
        revision: term.revision(),
    };
    // The leader this coordinator stood by for, if any: then this is a takeover.
    let previous = match service.leadership.role() {
        Role::Standby { leader } => Some(leader.coordinator_id),
        _ => None,
    };
    service.leadership.begin(&service.shutdown, role);
    if previous.is_some() {
        service.leadership.took_over();
    }
    match &previous {
        Some(previous) => tracing::warn!(
            revision = term.revision(),
            previous_leader = %previous,
            "this coordinator took over the lease: resuming unfinished batches"
        ),
        None => tracing::info!(
            revision = term.revision(),
            "this coordinator leads: resuming unfinished batches"
        ),
    }
    let taken_over = previous.map(|previous| (previous, term.revision()));
    let resumer = Arc::clone(service);
    service
        .tracker
        .spawn(async move { resumer.resume_all(taken_over).await });
}
