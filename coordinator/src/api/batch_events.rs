//! `GET /v1/batches/{id}/events`: a batch watched as server-sent events — its progress while
//! this process supervises it (from when its events are folded, until another leads), else its
//! record re-read until final; then its end.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use cowork_schema::BatchId;
use cowork_schema::api::{BatchEnd, ProgressSnapshot, SSE_END, SSE_PROGRESS, UnservedTier};
use futures::stream::{self, BoxStream, StreamExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::ApiFailure;
use super::records::{parse_id, record_of};
use crate::service::{LiveBatch, Service, end_of};

/// How often a watch of a batch supervised by another replica re-reads its record. Such a
/// batch has no progress channel here; its record is the only signal.
const REMOTE_POLL: Duration = Duration::from_secs(2);
/// Interval of SSE keep-alive comments, so proxies do not close a quiet stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `GET /v1/batches/{id}/events`: SSE — a `progress` event whenever the progress changes, then
/// one `end` event, then the stream closes. A batch already final gets its `end` at once.
#[tracing::instrument(skip_all, fields(batch_id = %id))]
pub(crate) async fn events(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
) -> Result<Sse<KeepAliveStream<EventStream>>, ApiFailure> {
    let batch_id = parse_id(&id)?;
    let record = record_of(&service, &batch_id).await?;
    let stream = match service.live(&batch_id) {
        Some(live) if live.end.borrow().is_some() => {
            let end = live
                .end
                .borrow()
                .clone()
                .unwrap_or_else(|| end_of(&record, None));
            stream::once(async move { Ok(end_event(&end)) }).boxed()
        }
        _ if record.state.is_final() => {
            let end = end_of(&record, None);
            stream::once(async move { Ok(end_event(&end)) }).boxed()
        }
        // Supervised here in an earlier term (the leader cannot be reached, so this standby
        // answers): the record says how it goes on.
        Some(_) if service.leadership.stands_by() => remote_stream(Arc::clone(&service), batch_id),
        Some(live) => live_stream(live, &service),
        None => remote_stream(Arc::clone(&service), batch_id),
    };
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// The events of one watch.
type EventStream = BoxStream<'static, Result<Event, Infallible>>;

/// State of a watch on a batch supervised by this process.
struct LiveWatch {
    /// Held so the channels' senders outlive the watch.
    live: Arc<LiveBatch>,
    progress: watch::Receiver<ProgressSnapshot>,
    unserved: watch::Receiver<Vec<UnservedTier>>,
    stall: watch::Receiver<Option<cowork_schema::api::BatchStall>>,
    fabric: watch::Receiver<cowork_schema::api::FabricStatus>,
    lost_workers: watch::Receiver<Vec<cowork_schema::api::LostWorker>>,
    end: watch::Receiver<Option<BatchEnd>>,
    /// The supervisor's live view: `None` until it has caught up with the batch's events.
    caught_up: watch::Receiver<Option<Arc<cowork_schema::live::LiveSnapshot>>>,
    last: Option<ProgressSnapshot>,
    /// The stream ends at shutdown, and when this process stands by: the batch's progress goes
    /// on at the new leader, and the client reconnects and is sent there.
    shutdown: CancellationToken,
    roles: watch::Receiver<crate::leadership::Role>,
    done: bool,
}

fn live_stream(live: Arc<LiveBatch>, service: &Service) -> EventStream {
    let shutdown = service.shutdown.clone();
    let state = LiveWatch {
        progress: live.progress.subscribe(),
        unserved: live.unserved.subscribe(),
        stall: live.stall.subscribe(),
        fabric: service.views.fabric.subscribe(),
        lost_workers: service.views.lost_workers.subscribe(),
        end: live.end.subscribe(),
        caught_up: live.snapshot.subscribe(),
        live,
        last: None,
        shutdown,
        roles: service.leadership.roles(),
        done: false,
    };
    stream::unfold(state, |mut state| async move {
        let event = next_live_event(&mut state).await?;
        Some((Ok(event), state))
    })
    .boxed()
}

/// The next event of a live watch; `None` ends the stream (after `end`, at shutdown, or when
/// this process stands by).
async fn next_live_event(state: &mut LiveWatch) -> Option<Event> {
    if state.done {
        return None;
    }
    loop {
        // A batch this process has just begun to supervise (a takeover, a restart) shows
        // nothing until its events are folded: its progress would start from 0, a step back
        // for a watcher who followed it on the previous leader.
        let caught_up = state.caught_up.borrow_and_update().is_some();
        let snapshot = ProgressSnapshot {
            unserved_tiers: state.unserved.borrow_and_update().clone(),
            stall: state.stall.borrow_and_update().clone(),
            fabric_stalls: state.fabric.borrow_and_update().stalls.clone(),
            lost_workers: state.lost_workers.borrow_and_update().clone(),
            ..state.progress.borrow_and_update().clone()
        };
        if caught_up && state.last.as_ref() != Some(&snapshot) {
            let event = progress_event(&snapshot);
            state.last = Some(snapshot);
            return Some(event);
        }
        let end = state.end.borrow_and_update().clone();
        if let Some(end) = end {
            state.done = true;
            return Some(end_event(&end));
        }
        // Abandoning either wait is safe: the receivers keep their position, and at shutdown or
        // standby the stream simply ends (the client reconnects to another coordinator).
        tokio::select! {
            _ = state.shutdown.cancelled() => return None,
            () = crate::leadership::until_standby(&mut state.roles) => return None,
            changed = state.progress.changed() => {
                // The sender lives in `state.live`, so it cannot be gone.
                debug_assert!(changed.is_ok(), "{:p}", state.live);
            }
            changed = state.end.changed() => {
                debug_assert!(changed.is_ok());
            }
            changed = state.unserved.changed() => {
                debug_assert!(changed.is_ok());
            }
            changed = state.stall.changed() => {
                debug_assert!(changed.is_ok());
            }
            // The service, which holds the sender, outlives every watch it serves.
            changed = state.fabric.changed() => {
                debug_assert!(changed.is_ok());
            }
            // As above: the service holds the sender.
            changed = state.lost_workers.changed() => {
                debug_assert!(changed.is_ok());
            }
            // Only until the first view: it is sent again every live turn.
            changed = state.caught_up.changed(), if !caught_up => {
                debug_assert!(changed.is_ok());
            }
        }
    }
}

/// A watch on a batch this process does not supervise (another replica does): its record is
/// re-read until it is final.
fn remote_stream(service: Arc<Service>, batch_id: BatchId) -> EventStream {
    stream::unfold(Some((service, batch_id)), |state| async move {
        let (service, batch_id) = state?;
        loop {
            // Nothing is held across the pause; ending the stream at shutdown is safe.
            tokio::select! {
                _ = service.shutdown.cancelled() => return None,
                _ = tokio::time::sleep(REMOTE_POLL) => {}
            }
            match service.ports.batches.get(&batch_id).await {
                Ok(Some((record, _))) if record.state.is_final() => {
                    return Some((Ok(end_event(&end_of(&record, None))), None));
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(batch_id = %batch_id, error = %error, "re-reading a watched batch failed");
                }
            }
        }
    })
    .boxed()
}

fn progress_event(snapshot: &ProgressSnapshot) -> Event {
    Event::default().event(SSE_PROGRESS).data(
        cowork_schema::json_number::to_string(snapshot)
            .expect("a progress snapshot always serializes"),
    )
}

fn end_event(end: &BatchEnd) -> Event {
    Event::default()
        .event(SSE_END)
        .data(cowork_schema::json_number::to_string(end).expect("a batch end always serializes"))
}
