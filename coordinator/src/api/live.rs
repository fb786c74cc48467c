//! The live page of a batch and its controls:
//! - `GET /v1/batches/{id}/live`: the live view ([`LiveSnapshot`]) as JSON;
//! - `GET /v1/batches/{id}/live/events`: SSE, a `snapshot` first, then a `delta` whenever
//!   something changed, at most every [`LIVE_EVERY`] (never one per job event), and a last
//!   one with the verdict;
//! - `GET /v1/batches/{id}/live/units/{unit}`: one unit's runs, for its strip;
//! - `GET /v1/batches/{id}/live.html`: the page, and `GET /assets/live.js`, its script;
//! - `POST /v1/batches/{id}/pause`, `/resume-dispatch`, `/adjust`: the controls.
//!
//! The page is a static shell; its script (served here, so the content security policy allows
//! scripts from this origin only and no inline script) reads the token from the page's
//! `?token=`, follows the SSE stream and sends the controls as POSTs with
//! `Authorization: Bearer`. Every POST of the API refuses a cross-site request
//! ([`refuse_cross_site`]): a page of another origin can neither read the token nor make a
//! browser send a control.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use cowork_core::admission::live_delta;
use cowork_core::controls::{ControlAsk, check_ask};
use cowork_schema::BatchId;
use cowork_schema::api::ControlRequest;
use cowork_schema::live::{
    LiveSnapshot, LiveUnitRuns, LiveVerdict, LiveWorker, SSE_LIVE_DELTA, SSE_LIVE_SNAPSHOT,
};
use cowork_schema::registry::{BatchRecord, BatchState};
use futures::stream::{self, BoxStream, StreamExt};

use super::ApiFailure;
use super::page_headers::page_bytes_with_policy;
use super::records::{parse_id, record_of};
use crate::service::{ControlError, LiveBatch, Service};
use crate::supervisor::{LIVE_EVERY, UnitRunsRequest};

/// How often an open stream looks again even when nothing was sent: the workers' heartbeats
/// and a batch supervised elsewhere change without a signal here.
const QUIET_REFRESH: Duration = Duration::from_secs(2);
/// How long a strip request waits for the supervisor to answer.
const UNIT_RUNS_TIMEOUT: Duration = Duration::from_secs(5);
/// Interval of SSE keep-alive comments.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The content security policy of the live page: its script from this origin only, its
/// requests to this origin only, inline style (as the other pages), nothing else.
const LIVE_PAGE_CSP: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; \
     style-src 'unsafe-inline'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The live view of `batch_id` now: the supervisor's latest, with the workers, the fleet's
/// words, the controls' history and, once final, the verdict. A batch not supervised here
/// gets what its record says.
pub(crate) fn decorated(
    service: &Service,
    record: Option<&BatchRecord>,
    batch_id: &BatchId,
) -> LiveSnapshot {
    let live = service.live(batch_id);
    let mut snapshot = live
        .as_ref()
        .and_then(|live| live.snapshot.borrow().as_deref().cloned())
        .unwrap_or_else(|| LiveSnapshot {
            batch_id: batch_id.to_string(),
            state: record
                .map_or("planned", |record| record.state.as_str())
                .to_owned(),
            units_per_cell: 1,
            ..LiveSnapshot::default()
        });
    if snapshot.progress.planned == 0
        && let Some(record) = record
    {
        snapshot.progress.planned = record.n_jobs;
    }
    let end = live.as_ref().and_then(|live| live.end.borrow().clone());
    let final_state = end
        .as_ref()
        .map(|end| (end.state, end.ok, end.exit_code, end.eval_verdict.clone()))
        .or_else(|| {
            record
                .filter(|record| record.state.is_final())
                .map(|record| {
                    let eval_verdict = record.eval_verdict.clone();
                    (record.state, record.ok, record.exit_code, eval_verdict)
                })
        });
    if let Some((state, ok, exit_code, eval_verdict)) = final_state {
        snapshot.state = state.as_str().to_owned();
        snapshot.dispatch.held_by = None;
        snapshot.verdict = Some(LiveVerdict {
            ok,
            exit_code,
            eval_verdict,
            report: service
                .links_reports
                .then(|| "report?format=html".to_owned()),
        });
    } else if snapshot.state == "running" && record.is_some_and(|r| r.state == BatchState::Stopping)
    {
        snapshot.state = "cancelling".to_owned();
    }
    if let Some(live) = &live {
        decorate_fleet(service, live, &mut snapshot);
        snapshot.control_changes = live.controls.borrow().changes.clone();
    } else if let Some(record) = record {
        snapshot.control_changes = record.controls.changes.clone();
    }
    snapshot
}

/// The workers serving the batch's tiers, its unserved tiers and the fabric's stalls.
fn decorate_fleet(service: &Service, live: &LiveBatch, snapshot: &mut LiveSnapshot) {
    if snapshot.verdict.is_some() {
        return;
    }
    let workers = service.views.workers_seen.borrow();
    snapshot.workers = workers
        .iter()
        .filter(|worker| worker.tiers.iter().any(|tier| live.tiers.contains(tier)))
        .map(|worker| LiveWorker {
            worker_id: worker.worker_id.clone(),
            tiers: worker.tiers.clone(),
            slots: worker.slots,
            busy: worker.busy,
            draining: worker.draining,
        })
        .collect();
    snapshot.unserved_tiers = live.unserved.borrow().clone();
    snapshot.stall = live.stall.borrow().clone();
    snapshot.fabric_stalls = service.views.fabric.borrow().stalls.clone();
}

/// `GET /v1/batches/{id}/live`.
#[tracing::instrument(skip_all, fields(batch_id = %id))]
pub(crate) async fn snapshot(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
) -> Result<Json<LiveSnapshot>, ApiFailure> {
    let batch_id = parse_id(&id)?;
    let record = record_of(&service, &batch_id).await?;
    Ok(Json(decorated(&service, Some(&record), &batch_id)))
}

type LiveEvents = BoxStream<'static, Result<Event, Infallible>>;

/// What one live stream holds between its events.
struct LiveStream {
    service: Arc<Service>,
    batch_id: BatchId,
    /// The record when the stream opened (a batch supervised elsewhere is re-read).
    record: BatchRecord,
    last: Option<LiveSnapshot>,
    done: bool,
    /// This process's role: a batch it supervises is followed until another coordinator
    /// leads, then the stream ends and the page reconnects (and is sent to the leader).
    roles: tokio::sync::watch::Receiver<crate::leadership::Role>,
}

/// `GET /v1/batches/{id}/live/events`.
#[tracing::instrument(skip_all, fields(batch_id = %id))]
pub(crate) async fn events(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
) -> Result<Sse<axum::response::sse::KeepAliveStream<LiveEvents>>, ApiFailure> {
    let batch_id = parse_id(&id)?;
    let record = record_of(&service, &batch_id).await?;
    let roles = service.leadership.roles();
    let state = LiveStream {
        service,
        batch_id,
        record,
        last: None,
        done: false,
        roles,
    };
    let stream = stream::unfold(state, |mut state| async move {
        let event = next_live_event(&mut state).await?;
        Some((Ok(event), state))
    })
    .boxed();
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// The next event of a live stream; `None` ends it (after the verdict, at shutdown, or when
/// another coordinator leads the batch supervised here).
async fn next_live_event(state: &mut LiveStream) -> Option<Event> {
    if state.done {
        return None;
    }
    // A batch this process supervised before another coordinator took over is not followed
    // from its stale channels: from its record when the stream opened so, else the stream
    // ends below.
    let live = state
        .service
        .live(&state.batch_id)
        .filter(|_| !state.service.leadership.stands_by());
    loop {
        if live.is_none() {
            // Supervised elsewhere (or final): its record is all there is to follow.
            if let Ok(Some((record, _))) = state.service.ports.batches.get(&state.batch_id).await {
                state.record = record;
            }
        }
        let current = decorated(&state.service, Some(&state.record), &state.batch_id);
        let event = match &state.last {
            None => Some(json_event(SSE_LIVE_SNAPSHOT, &current)),
            Some(last) => {
                let delta = live_delta(last, &current);
                (!delta.is_empty()).then(|| json_event(SSE_LIVE_DELTA, &delta))
            }
        };
        let is_final = current.verdict.is_some();
        if let Some(event) = event {
            state.done = is_final;
            state.last = Some(current);
            if !is_final {
                // The rate limit of the stream: whatever happens meanwhile goes in the next
                // delta. Abandoning the pause at shutdown is safe.
                tokio::select! {
                    _ = state.service.shutdown.cancelled() => state.done = true,
                    () = crate::leadership::until_standby(&mut state.roles), if live.is_some() => {
                        state.done = true;
                    }
                    _ = tokio::time::sleep(LIVE_EVERY) => {}
                }
            }
            return Some(event);
        }
        if is_final {
            return None;
        }
        if !wait_for_change(&state.service, live.as_deref(), &mut state.roles).await {
            return None;
        }
    }
}

/// Waits until the batch's live view may have changed; `false` at shutdown, or when this
/// process stands by while a batch supervised here is followed.
async fn wait_for_change(
    service: &Service,
    live: Option<&LiveBatch>,
    roles: &mut tokio::sync::watch::Receiver<crate::leadership::Role>,
) -> bool {
    let Some(live) = live else {
        // Nothing is held across the pause; ending the stream at shutdown is safe.
        return tokio::select! {
            _ = service.shutdown.cancelled() => false,
            _ = tokio::time::sleep(QUIET_REFRESH) => true,
        };
    };
    let mut snapshot = live.snapshot.subscribe();
    let mut end = live.end.subscribe();
    let mut controls = live.controls.subscribe();
    let mut unserved = live.unserved.subscribe();
    let mut stall = live.stall.subscribe();
    // Each receiver is new, so any change from here wakes it; abandoning the others is safe
    // (they are dropped and made again next time).
    tokio::select! {
        _ = service.shutdown.cancelled() => false,
        () = crate::leadership::until_standby(roles) => false,
        _ = snapshot.changed() => true,
        _ = end.changed() => true,
        _ = controls.changed() => true,
        _ = unserved.changed() => true,
        _ = stall.changed() => true,
        _ = tokio::time::sleep(QUIET_REFRESH) => true,
    }
}

fn json_event<T: serde::Serialize>(name: &str, body: &T) -> Event {
    Event::default()
        .event(name)
        .data(cowork_schema::json_number::to_string(body).expect("a live view always serializes"))
}

/// `GET /v1/batches/{id}/live/units/{unit}`: the runs of one unit of a batch supervised
/// here.
#[tracing::instrument(skip_all, fields(batch_id = %id))]
pub(crate) async fn unit_runs(
    State(service): State<Arc<Service>>,
    Path((id, unit)): Path<(String, u32)>,
) -> Result<Json<LiveUnitRuns>, ApiFailure> {
    let batch_id = parse_id(&id)?;
    record_of(&service, &batch_id).await?;
    let not_here = || {
        ApiFailure::not_found(&format!(
            "live runs of unit {unit} of batch {batch_id} (the batch is not supervised here now)"
        ))
    };
    let live = service.live(&batch_id).ok_or_else(not_here)?;
    if live.end.borrow().is_some() {
        return Err(not_here());
    }
    let (reply, answer) = tokio::sync::oneshot::channel();
    live.unit_requests
        .send(UnitRunsRequest { unit, reply })
        .await
        .map_err(|_| not_here())?;
    match tokio::time::timeout(UNIT_RUNS_TIMEOUT, answer).await {
        Ok(Ok(Some(runs))) => Ok(Json(runs)),
        Ok(Ok(None)) => Err(ApiFailure::not_found(&format!(
            "unit {unit} of batch {batch_id}"
        ))),
        Ok(Err(_)) | Err(_) => Err(ApiFailure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the batch's supervisor did not answer; try again",
        )),
    }
}

/// `GET /v1/batches/{id}/live.html`.
#[tracing::instrument(skip_all, fields(batch_id = %id))]
pub(crate) async fn page(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
) -> Result<Response, ApiFailure> {
    let batch_id = parse_id(&id)?;
    record_of(&service, &batch_id).await?;
    let body = cowork_core::report::render_live_page(batch_id.as_str());
    Ok(live_response("text/html; charset=utf-8", body.into_bytes()))
}

/// `GET /assets/live.js`: the live page's script. Open (it holds no data, and a `<script>`
/// cannot send the token); same-origin only by the page's policy.
pub(crate) async fn script() -> Response {
    let mut response = live_response(
        "text/javascript; charset=utf-8",
        cowork_core::report::LIVE_PAGE_SCRIPT.as_bytes().to_vec(),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn live_response(content_type: &'static str, body: Vec<u8>) -> Response {
    let mut response = page_bytes_with_policy(content_type, body, LIVE_PAGE_CSP);
    response
        .headers_mut()
        .insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// `POST /v1/batches/{id}/pause`.
pub(crate) async fn pause(
    state: State<Arc<Service>>,
    path: Path<String>,
    body: Option<Json<ControlRequest>>,
) -> Result<(StatusCode, Json<BatchRecord>), ApiFailure> {
    control(state, path, body, |_| ControlAsk::Pause).await
}

/// `POST /v1/batches/{id}/resume-dispatch`.
pub(crate) async fn resume_dispatch(
    state: State<Arc<Service>>,
    path: Path<String>,
    body: Option<Json<ControlRequest>>,
) -> Result<(StatusCode, Json<BatchRecord>), ApiFailure> {
    control(state, path, body, |_| ControlAsk::ResumeDispatch).await
}

/// `POST /v1/batches/{id}/adjust` with `batchBudgetUsd` and/or `maxRunning`.
pub(crate) async fn adjust(
    state: State<Arc<Service>>,
    path: Path<String>,
    body: Option<Json<ControlRequest>>,
) -> Result<(StatusCode, Json<BatchRecord>), ApiFailure> {
    control(state, path, body, |request| ControlAsk::Adjust {
        batch_budget_usd: request.batch_budget_usd,
        max_running: request.max_running,
    })
    .await
}

/// One control: `200` with the record as changed; `400` for a bad ask, `404` for no such
/// batch, `409` when the batch's state refuses it. Nothing changes when refused.
#[tracing::instrument(skip_all, fields(batch_id = %id))]
async fn control(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
    body: Option<Json<ControlRequest>>,
    ask_of: impl Fn(&ControlRequest) -> ControlAsk,
) -> Result<(StatusCode, Json<BatchRecord>), ApiFailure> {
    let batch_id = parse_id(&id)?;
    let request = body.map(|Json(request)| request).unwrap_or_default();
    let ask = ask_of(&request);
    check_ask(&ask).map_err(|refusal| ApiFailure::bad_request(&refusal.to_string(), Vec::new()))?;
    let by = request
        .by
        .as_deref()
        .map(str::trim)
        .filter(|by| !by.is_empty())
        .unwrap_or("api");
    // Who asked is written into the record and the report: kept short and printable.
    let by: String = by.chars().filter(|c| !c.is_control()).take(80).collect();
    match service.control(&batch_id, &ask, &by).await {
        Ok(Some(record)) => Ok((StatusCode::OK, Json(record))),
        Ok(None) => Err(ApiFailure::not_found(&format!("batch {batch_id}"))),
        Err(ControlError::Refused(refusal)) if refusal.is_bad_input() => {
            Err(ApiFailure::bad_request(&refusal.to_string(), Vec::new()))
        }
        Err(ControlError::Refused(refusal)) => Err(ApiFailure::new(
            StatusCode::CONFLICT,
            &format!("batch {batch_id}: {refusal}"),
        )),
        Err(ControlError::Registry(error)) => {
            let transient = error.is_transient();
            Err(ApiFailure::port(
                "changing the batch's controls",
                &error,
                transient,
            ))
        }
    }
}

/// Refuses a `POST` a browser sends from another site: one whose `Sec-Fetch-Site` says
/// `cross-site` or `same-site`, or whose `Origin` is not this server's. Clients that are not
/// browsers send neither header and pass (they still need the token).
pub(crate) async fn refuse_cross_site(request: Request, next: Next) -> Response {
    if request.method() == axum::http::Method::POST && is_cross_site(request.headers()) {
        tracing::info!(path = %request.uri().path(), "cross-site request refused");
        return ApiFailure::new(
            StatusCode::FORBIDDEN,
            "cross-site request refused: controls are sent from the coordinator's own pages or by clients that are not browsers",
        )
        .into_response();
    }
    next.run(request).await
}

fn is_cross_site(headers: &HeaderMap) -> bool {
    let fetch_site = headers
        .get("sec-fetch-site")
        .and_then(|value| value.to_str().ok());
    if let Some(site) = fetch_site
        && !matches!(site, "same-origin" | "none")
    {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|origin| origin.split_once("://"))
        .map(|(_, rest)| rest.trim_end_matches('/'));
    match (origin_host, host) {
        (Some(origin_host), Some(host)) => !origin_host.eq_ignore_ascii_case(host),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_site_posts_are_told_apart_from_same_origin_and_non_browser_ones() {
        let check = |pairs: &[(&str, &str)], expect: bool| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(
                    axum::http::HeaderName::from_bytes(name.as_bytes()).expect("test header"),
                    HeaderValue::from_str(value).expect("test header"),
                );
            }
            assert_eq!(is_cross_site(&headers), expect, "{pairs:?}");
        };
        check(&[], false);
        check(&[("host", "127.0.0.1:8080")], false);
        check(
            &[
                ("sec-fetch-site", "same-origin"),
                ("origin", "http://127.0.0.1:8080"),
                ("host", "127.0.0.1:8080"),
            ],
            false,
        );
        check(&[("sec-fetch-site", "cross-site")], true);
        check(&[("sec-fetch-site", "same-site")], true);
        check(
            &[
                ("origin", "http://evil.example"),
                ("host", "127.0.0.1:8080"),
            ],
            true,
        );
        check(&[("origin", "null"), ("host", "127.0.0.1:8080")], true);
    }
}
