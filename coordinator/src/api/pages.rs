//! Pages people open in a browser: a batch's report in any format
//! (`GET /v1/batches/{id}/report?format=html|junit|markdown|json`), the stored files its runs
//! link to (`GET /v1/batches/{id}/artifacts/<path>`) and the batch list (`GET /v1/ui`).
//!
//! These routes sit behind the same bearer auth as every `/v1/*` route, and — because a browser
//! cannot easily send an `Authorization` header when a link is clicked — they ALSO accept the
//! token as a query parameter, `?token=<token>`, checked with the same constant-time
//! [`Service::access`]. No other route accepts `?token=`. A token in a URL can end up in
//! browser history and in the logs of proxies in between, so the pages answer with
//! `Cache-Control: no-store`, `Referrer-Policy: no-referrer` and a content security policy
//! that allows nothing but the page's inline style; the coordinator itself logs only paths,
//! never query strings. An artifact is served as plain text (JSON as JSON) with `nosniff`, so a
//! file an agent wrote can never run as a page.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cowork_fabric::ArtifactError;
use cowork_schema::BatchId;
use cowork_schema::layout::BatchKey;
use cowork_schema::registry::BatchState;
use serde::Deserialize;

use super::page_headers::{PAGE_CSP, page_body_with_policy, page_response};
use super::records::{parse_id, record_of};
use super::stored_body::{StoredBody, set_length, stored_body};
use super::{ApiFailure, access_allows, bearer_token};
use crate::report_input::load_report_input;
use crate::service::Service;
use cowork_core::report::{
    ArtifactLinks, BatchListLive, HtmlOptions, render_batch_list_live, render_html, render_json,
    render_junit, render_markdown,
};

/// The query of the two page routes.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PageQuery {
    /// `html`, `junit`, `markdown` or `json`; absent on the report route means the envelope.
    pub(crate) format: Option<String>,
    /// The API token, for browsers (see the module documentation).
    pub(crate) token: Option<String>,
}

/// The formats of `GET /v1/batches/{id}/report?format=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReportFormat {
    Html,
    Junit,
    Markdown,
    Json,
}

impl ReportFormat {
    pub(crate) fn parse(text: &str) -> Option<ReportFormat> {
        match text {
            "html" => Some(ReportFormat::Html),
            "junit" | "xml" => Some(ReportFormat::Junit),
            "markdown" | "md" => Some(ReportFormat::Markdown),
            "json" => Some(ReportFormat::Json),
            _ => None,
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            ReportFormat::Html => "text/html; charset=utf-8",
            ReportFormat::Junit => "application/xml; charset=utf-8",
            ReportFormat::Markdown => "text/markdown; charset=utf-8",
            ReportFormat::Json => "application/json",
        }
    }
}

/// The auth of the page routes: a bearer token, or else `?token=`.
pub(crate) async fn require_bearer_or_query_token(
    State(service): State<Arc<Service>>,
    request: Request,
    next: Next,
) -> Response {
    let query_token = Query::<HashMap<String, String>>::try_from_uri(request.uri())
        .ok()
        .and_then(|Query(mut query)| query.remove("token"));
    let access = match bearer_token(request.headers()) {
        Some(token) => service.access(Some(token)),
        None => service.access(query_token.as_deref()),
    };
    if let Some(access) = access {
        if !access_allows(access, request.method()) {
            return ApiFailure::read_only().into_response();
        }
        // A standby's page would lack the live progress: the leader's is sent instead.
        match super::forward_when_standby(&service, request).await {
            Ok(answer) => answer,
            Err(request) => next.run(request).await,
        }
    } else {
        tracing::info!(path = %request.uri().path(), "page refused: missing or wrong token");
        ApiFailure::new(
            StatusCode::UNAUTHORIZED,
            "missing or wrong token: send `Authorization: Bearer <token>` or add ?token=<token>",
        )
        .into_response()
    }
}

/// `GET /v1/batches/{id}/report?format=…`: the batch's report in `format`, rendered from the
/// stored batch; `404` until the batch is done or cancelled (a cancelled batch's report judges
/// what ran and is marked incomplete), `400` for an unknown format. The HTML page links each
/// run's stored files through the artifact route, carrying the page's `token` when it was
/// opened with one.
#[tracing::instrument(skip_all, fields(batch_id = %id))]
pub(crate) async fn report(
    service: &Service,
    id: &str,
    format: &str,
    token: Option<String>,
) -> Result<Response, ApiFailure> {
    let Some(format) = ReportFormat::parse(format) else {
        return Err(ApiFailure::bad_request(
            "unknown report format",
            vec![format!(
                "format {format:?}: expected html, junit, markdown or json"
            )],
        ));
    };
    let batch_id = BatchId::new(id).map_err(|_| ApiFailure::not_found(&format!("batch {id:?}")))?;
    let record = match service.ports.batches.get(&batch_id).await {
        Ok(Some((record, _))) => record,
        Ok(None) => return Err(ApiFailure::not_found(&format!("batch {batch_id}"))),
        Err(error) => {
            let transient = error.is_transient();
            return Err(ApiFailure::port(
                "reading the batch record",
                &error,
                transient,
            ));
        }
    };
    if !matches!(record.state, BatchState::Done | BatchState::Cancelled) {
        return Err(ApiFailure::not_found(&format!(
            "report of batch {batch_id} (the batch is {})",
            record.state.as_str()
        )));
    }
    // Held until the page is rendered; the semaphore is never closed.
    let _render_turn = Arc::clone(&service.report_renders)
        .acquire_owned()
        .await
        .map_err(|error| ApiFailure::port("waiting for a report render", &error, true))?;
    let input = match load_report_input(service.ports.store.as_ref(), &batch_id).await {
        Ok(input) => input,
        Err(error) if error.is_not_found() => {
            return Err(ApiFailure::not_found(&format!(
                "report of batch {batch_id}"
            )));
        }
        Err(error) => {
            let transient = error.is_transient();
            return Err(ApiFailure::port("loading the report", &error, transient));
        }
    };
    let options = HtmlOptions {
        links: ArtifactLinks::Coordinator { token },
    };
    // Rendering is CPU work proportional to the batch's runs, so it runs in `spawn_blocking`.
    let body = tokio::task::spawn_blocking(move || match format {
        ReportFormat::Html => render_html(&input, &options),
        ReportFormat::Junit => render_junit(&input),
        ReportFormat::Markdown => render_markdown(&input),
        ReportFormat::Json => render_json(&input),
    })
    .await
    .map_err(|error| ApiFailure::port("rendering the report", &error, false))?;
    Ok(page_response(format.content_type(), body))
}

/// `GET /v1/batches/{id}/artifacts/{*path}`: one stored object of the batch, verified against
/// its recorded sha256 by the store. Served as text (JSON as JSON) with the pages' headers, so
/// a browser shows it and never runs it; API clients read the bytes whatever the type.
#[tracing::instrument(skip_all, fields(batch_id = %id))]
pub(crate) async fn artifact(
    State(service): State<Arc<Service>>,
    Path((id, path)): Path<(String, String)>,
) -> Result<Response, ApiFailure> {
    let batch_id = parse_id(&id)?;
    record_of(&service, &batch_id).await?;
    let key = BatchKey::new(&batch_id).file(&path).into_string();
    // The store refuses keys with `..` or empty segments, so a path cannot leave the batch.
    match stored_body(service.ports.store.as_ref(), &key).await {
        Ok(StoredBody { body, size }) => {
            let mut response = page_body_with_policy(artifact_content_type(&path), body, PAGE_CSP);
            set_length(&mut response, size);
            // A report opened from the page must not be able to load anything either.
            response.headers_mut().insert(
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("inline"),
            );
            Ok(response)
        }
        Err(ArtifactError::NotFound { .. } | ArtifactError::InvalidKey { .. }) => Err(
            ApiFailure::not_found(&format!("artifact {path} of batch {batch_id}")),
        ),
        Err(error) => {
            let transient = error.is_transient();
            Err(ApiFailure::port("reading the artifact", &error, transient))
        }
    }
}

/// The type an artifact is served as: JSON as JSON, the rendered report as HTML, everything
/// else (logs, event streams, cassettes) as plain text, which a browser displays as it is.
fn artifact_content_type(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or(path);
    if name.ends_with(".json") {
        "application/json"
    } else if name.ends_with(".html") {
        "text/html; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    }
}

/// `GET /`: the batch list, with the query kept (a `?token=` goes along).
pub(crate) async fn root(request: Request) -> Response {
    let target = match request.uri().query() {
        Some(query) => format!("/v1/ui?{query}"),
        None => "/v1/ui".to_owned(),
    };
    axum::response::Redirect::to(&target).into_response()
}

/// `GET /v1/ui`: the batch list page, with links to each done batch's reports.
#[tracing::instrument(skip_all)]
pub(crate) async fn ui(
    State(service): State<Arc<Service>>,
    Query(query): Query<PageQuery>,
) -> Result<Response, ApiFailure> {
    let records = service.ports.batches.list().await.map_err(|error| {
        let transient = error.is_transient();
        ApiFailure::port("listing batches", &error, transient)
    })?;
    // Links carry the token only when the page was opened with one: a page opened with a
    // bearer header is read by a client that sends the header again.
    let mut live = std::collections::BTreeMap::new();
    for record in records.iter().filter(|record| !record.state.is_final()) {
        let snapshot = super::live::decorated(&service, Some(record), &record.batch_id);
        let spec = read_spec(&service, &record.batch_id).await;
        live.insert(
            record.batch_id.to_string(),
            BatchListLive {
                finished: snapshot.progress.finished,
                planned: snapshot.progress.planned,
                cost_usd: snapshot.cost.spent_usd,
                simulated: snapshot.simulated,
                paused: snapshot.dispatch.paused || record.controls.paused,
                eval: spec
                    .as_ref()
                    .is_some_and(|spec| spec.mode == cowork_schema::batch::BatchMode::Eval),
                target: spec.map(|spec| spec.target_display),
            },
        );
    }
    let body = render_batch_list_live(&records, &live, query.token.as_deref());
    Ok(page_response(ReportFormat::Html.content_type(), body))
}

/// The spec a batch was submitted with (for its `targetDisplay` and mode), when it can be read.
async fn read_spec(
    service: &Service,
    batch_id: &BatchId,
) -> Option<cowork_schema::batch::BatchSpec> {
    let key = BatchKey::new(batch_id).spec();
    let bytes = service.ports.store.get(key.as_str()).await.ok()?;
    let stored: cowork_schema::batch::StoredBatch = serde_json::from_slice(&bytes).ok()?;
    Some(stored.spec)
}

#[cfg(test)]
mod tests {
    use super::{ReportFormat, artifact_content_type};

    #[test]
    fn artifacts_are_served_as_text_json_or_the_report() {
        assert_eq!(
            artifact_content_type("jobs/c0/r1/result.json"),
            "application/json"
        );
        assert_eq!(
            artifact_content_type("jobs/c0/r1/harness.stderr.log"),
            "text/plain; charset=utf-8"
        );
        assert_eq!(
            artifact_content_type("jobs/c0/r1/events.jsonl"),
            "text/plain; charset=utf-8"
        );
        assert_eq!(
            artifact_content_type("report.html"),
            "text/html; charset=utf-8"
        );
    }

    #[test]
    fn report_formats_parse_with_their_short_names() {
        let check = |text: &str, expect: Option<ReportFormat>| {
            assert_eq!(ReportFormat::parse(text), expect, "{text}");
        };
        check("html", Some(ReportFormat::Html));
        check("junit", Some(ReportFormat::Junit));
        check("xml", Some(ReportFormat::Junit));
        check("markdown", Some(ReportFormat::Markdown));
        check("md", Some(ReportFormat::Markdown));
        check("json", Some(ReportFormat::Json));
        check("HTML", None);
        check("pdf", None);
        check("", None);
    }
}
