//! The coordinator's HTTP API (axum), one module per resource.
//!
//! Modules:
//! - [`batches`]: submit, list, status, watch (SSE), cancel, report and stored artifacts of
//!   batches.
//! - [`workers`]: the worker registry, the fabric view (`/v1/fabric`) and the fair share
//!   (`/v1/shares`).
//! - [`health`]: `/healthz`, `/readyz` and `/metrics` (open, no token).
//! - [`live`]: the live view of a running batch (JSON, SSE deltas, the page and its script)
//!   and its controls (pause, resume of dispatch, adjust).
//! - [`pages`]: `GET /v1/batches/{id}/report?format=…`, a stored artifact
//!   `GET /v1/batches/{id}/artifacts/<path>` and the batch list `GET /v1/ui`, for browsers:
//!   these routes also accept the token as `?token=` (see [`pages`]).
//!
//! - [`forward`]: a standby sends each authorized request on to the leader.
//!
//! What those routes share sits below them, so they never import each other: `records` (a
//! batch's id and record for a request), `page_headers` (the headers of every page answer) and
//! `stored_body` (a stored object streamed as an answer).
//!
//! Every `/v1/*` route requires `Authorization: Bearer <token>` matching one of the configured
//! tokens; the check runs before the handler (and so before a request body is read), and a
//! refusal is `401` with `WWW-Authenticate: Bearer`. A read-only token passes only on `GET`
//! and `HEAD`; on any other method (submit, cancel, resume, pause, adjust) it gets `403`. Refusals carry an
//! [`ApiError`](cowork_schema::api::ApiError) body naming every problem.

mod batch_events;
pub mod batches;
mod forward;
pub mod health;
pub mod live;
mod page_headers;
pub mod pages;
mod records;
mod stored_body;
mod upload;
pub mod workers;

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cowork_schema::api::ApiError;

use crate::service::{Access, Service};

/// The error of a `403` for a read-only token; the CLI recognises it by its status alone.
pub const READ_ONLY_REFUSAL: &str =
    "this token is read-only: submit, cancel, resume, pause and adjust need a full API token";

/// Room for the multipart framing and the `spec` part on top of the bundle itself.
const SUBMIT_OVERHEAD_BYTES: u64 = 1 << 20;

/// The largest request body taken: a submit's bundle and spec.
fn body_limit(service: &Service) -> usize {
    usize::try_from(
        service
            .config
            .max_bundle_bytes
            .saturating_add(SUBMIT_OVERHEAD_BYTES),
    )
    .unwrap_or(usize::MAX)
}

/// On a standby, sends `request` to the leader and gives back its answer (see [`forward`]);
/// `Err` gives the request back for this coordinator to answer: it leads, the request was
/// forwarded to it already, or the leader does not answer.
pub(crate) async fn forward_when_standby(
    service: &Service,
    request: Request,
) -> Result<Response, Request> {
    let crate::leadership::Role::Standby { leader } = service.leadership.role() else {
        return Err(request);
    };
    if forward::was_forwarded(&request) {
        return Err(request);
    }
    let me = &service.config.coordinator_id;
    match forward::to_leader(&leader.url, me, request, body_limit(service)).await {
        forward::Forwarding::Answered(response) => Ok(response),
        forward::Forwarding::Unreachable(request) => Err(request),
    }
}

/// The API's routes over the shared service state.
pub(crate) fn router(service: Arc<Service>) -> Router {
    let body_limit = body_limit(&service);
    let v1 = Router::new()
        .route(
            "/v1/batches",
            post(batches::submit)
                .layer(DefaultBodyLimit::max(body_limit))
                .get(batches::list),
        )
        .route("/v1/batches/{id}", get(batches::status))
        .route("/v1/batches/{id}/events", get(batch_events::events))
        .route("/v1/batches/{id}/resume", post(batches::resume))
        .route("/v1/batches/{id}/artifacts", get(batches::artifacts))
        .route("/v1/workers", get(workers::list))
        .route("/v1/fabric", get(workers::fabric))
        .route("/v1/shares", get(workers::shares))
        .merge(live_api_routes());
    // Pages a browser opens: the same auth, plus `?token=` (see `pages`).
    let browser_pages = Router::new()
        .route("/v1/ui", get(pages::ui))
        .merge(live_page_routes());
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/", get(pages::root))
        .merge(guarded(&service, v1, browser_pages))
        .with_state(service)
}

/// Only one batch's live page, its stream, strips, report, stored files and controls: what
/// `cowork run --ui` serves for the batch it runs (see [`crate::live_ui`]), with the same auth
/// and cross-site guard as the coordinator's.
pub(crate) fn live_ui_router(service: Arc<Service>) -> Router {
    Router::new()
        .merge(guarded(&service, live_api_routes(), live_page_routes()))
        .with_state(service)
}

/// The API routes of a batch's live view and controls (bearer token only).
fn live_api_routes() -> Router<Arc<Service>> {
    Router::new()
        .route("/v1/batches/{id}/cancel", post(batches::cancel))
        .route("/v1/batches/{id}/pause", post(live::pause))
        .route(
            "/v1/batches/{id}/resume-dispatch",
            post(live::resume_dispatch),
        )
        .route("/v1/batches/{id}/adjust", post(live::adjust))
        .route("/v1/batches/{id}/live", get(live::snapshot))
        .route("/v1/batches/{id}/live/units/{unit}", get(live::unit_runs))
}

/// The pages of one batch a browser opens (bearer token or `?token=`): its live page and
/// stream, its report, and a stored artifact (the report and the strips link each run's
/// files).
fn live_page_routes() -> Router<Arc<Service>> {
    Router::new()
        .route("/v1/batches/{id}/report", get(batches::report))
        .route("/v1/batches/{id}/artifacts/{*path}", get(pages::artifact))
        .route("/v1/batches/{id}/live.html", get(live::page))
        .route("/v1/batches/{id}/live/events", get(live::events))
}

/// `api` behind the bearer check, `pages` behind the bearer-or-`?token=` check, the live
/// page's script (open), and the cross-site guard over all of them.
fn guarded(
    service: &Arc<Service>,
    api: Router<Arc<Service>>,
    pages: Router<Arc<Service>>,
) -> Router<Arc<Service>> {
    let api = api.route_layer(middleware::from_fn_with_state(
        Arc::clone(service),
        require_bearer,
    ));
    let pages = pages.route_layer(middleware::from_fn_with_state(
        Arc::clone(service),
        pages::require_bearer_or_query_token,
    ));
    Router::new()
        .route("/assets/live.js", get(live::script))
        .merge(api)
        .merge(pages)
        // Before the token check, so a cross-site POST is refused whatever it carries.
        .layer(middleware::from_fn(live::refuse_cross_site))
}

/// Lets a request through only with an accepted bearer token.
async fn require_bearer(
    State(service): State<Arc<Service>>,
    request: Request,
    next: Next,
) -> Response {
    match service.access(bearer_token(request.headers())) {
        Some(access) if access_allows(access, request.method()) => {
            let mut response = match forward_when_standby(&service, request).await {
                Ok(answer) => answer,
                Err(request) => match standby_refusal(&service, request.method()) {
                    Some(refusal) => refusal.into_response(),
                    None => next.run(request).await,
                },
            };
            name_the_leader(&service, &mut response);
            response
        }
        Some(_) => {
            tracing::info!(path = %request.uri().path(), method = %request.method(), "request refused: read-only token");
            ApiFailure::read_only().into_response()
        }
        None => {
            tracing::info!(path = %request.uri().path(), "request refused: missing or wrong bearer token");
            ApiFailure::unauthorized().into_response()
        }
    }
}

/// A request that changes a batch, made of a coordinator that does not lead and could not
/// forward it (the leader does not answer, or not known yet): refused with `503` naming the
/// leader (only the leader admits, so only it may accept a change), with a
/// `Retry-After` for clients that retry here, since a standby may lead a moment later.
fn standby_refusal(service: &Service, method: &axum::http::Method) -> Option<ApiFailure> {
    if matches!(*method, axum::http::Method::GET | axum::http::Method::HEAD)
        || service.leadership.leads()
    {
        return None;
    }
    let error = match service.leadership.role() {
        crate::leadership::Role::Standby { leader } => format!(
            "this coordinator is a standby: the leader is {} at {}; send changes there",
            leader.coordinator_id, leader.url
        ),
        _ => "this coordinator does not lead yet: retry in a moment".to_owned(),
    };
    tracing::info!(method = %method, "request refused: not the leader");
    Some(ApiFailure::busy(&error, 1))
}

/// On a standby's every answer, the leader's URL in the `Cowork-Leader` header: a client
/// given several coordinators talks to the leader from then on (it has the batches' live
/// progress and takes changes).
fn name_the_leader(service: &Service, response: &mut Response) {
    if let crate::leadership::Role::Standby { leader } = service.leadership.role()
        && let Ok(value) = axum::http::HeaderValue::from_str(&leader.url)
    {
        response
            .headers_mut()
            .insert(cowork_schema::api::LEADER_HEADER, value);
    }
}

/// `true` when a token of kind `access` may make a request with `method`: a read-only token
/// may only read (`GET`, `HEAD`); every route that changes a batch is a `POST`.
pub(crate) fn access_allows(access: Access, method: &Method) -> bool {
    match access {
        Access::Full => true,
        Access::Read => method == Method::GET || method == Method::HEAD,
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme is case-insensitive).
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|token| !token.is_empty())
}

/// A refused request: a status and an [`ApiError`] body.
#[derive(Debug)]
pub(crate) struct ApiFailure {
    status: StatusCode,
    body: ApiError,
    /// Seconds a client should wait before trying again (`Retry-After`), for a refusal that
    /// passes by itself.
    retry_after_s: Option<u64>,
}

impl ApiFailure {
    pub(crate) fn new(status: StatusCode, error: &str) -> ApiFailure {
        ApiFailure {
            status,
            body: ApiError {
                error: error.to_owned(),
                problems: Vec::new(),
            },
            retry_after_s: None,
        }
    }

    /// A refusal because the coordinator is busy (`503` with `Retry-After`).
    pub(crate) fn busy(error: &str, retry_after_s: u64) -> ApiFailure {
        ApiFailure {
            retry_after_s: Some(retry_after_s),
            ..ApiFailure::new(StatusCode::SERVICE_UNAVAILABLE, error)
        }
    }

    pub(crate) fn bad_request(error: &str, problems: Vec<String>) -> ApiFailure {
        ApiFailure {
            status: StatusCode::BAD_REQUEST,
            body: ApiError {
                error: error.to_owned(),
                problems,
            },
            retry_after_s: None,
        }
    }

    pub(crate) fn unauthorized() -> ApiFailure {
        ApiFailure::new(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token in the authorization header",
        )
    }

    /// A read-only token on a request that changes a batch.
    pub(crate) fn read_only() -> ApiFailure {
        ApiFailure::new(StatusCode::FORBIDDEN, READ_ONLY_REFUSAL)
    }

    pub(crate) fn not_found(what: &str) -> ApiFailure {
        ApiFailure::new(StatusCode::NOT_FOUND, &format!("{what} not found"))
    }

    /// A failure of a port: 503 when a retry may help, 500 otherwise. The message names what
    /// failed; the error chain goes to the log.
    pub(crate) fn port(what: &str, error: &dyn std::error::Error, transient: bool) -> ApiFailure {
        tracing::error!(error = %cowork_fabric::error_chain(error), "{what}");
        let status = if transient {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        ApiFailure::new(status, what)
    }
}

impl IntoResponse for ApiFailure {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body)).into_response();
        if let Some(seconds) = self.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        let check = |value: Option<&str>, expect: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(value) = value {
                headers.insert(
                    header::AUTHORIZATION,
                    HeaderValue::from_str(value).expect("test header is valid"),
                );
            }
            assert_eq!(bearer_token(&headers), expect, "{value:?}");
        };
        check(None, None);
        check(Some("Bearer abc"), Some("abc"));
        check(Some("bearer abc"), Some("abc"));
        check(Some("Basic abc"), None);
        check(Some("Bearer "), None);
        check(Some("Bearer"), None);
    }
}
