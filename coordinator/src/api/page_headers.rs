//! The headers every page answer carries: no caching, no referrer, a content security policy
//! and `nosniff` (a page may be opened with its token in the URL; see [`super::pages`]).

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// The content security policy of the HTML pages: inline style only, nothing loaded.
pub(super) const PAGE_CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'";

/// Headers every page answer carries (see the module documentation).
pub(super) fn page_response(content_type: &'static str, body: String) -> Response {
    page_bytes(content_type, body.into_bytes())
}

/// A page answer under content security policy `csp`, with the headers of every page.
pub(super) fn page_bytes_with_policy(
    content_type: &'static str,
    body: Vec<u8>,
    csp: &'static str,
) -> Response {
    page_body_with_policy(content_type, Body::from(body), csp)
}

fn page_bytes(content_type: &'static str, body: Vec<u8>) -> Response {
    page_bytes_with_policy(content_type, body, PAGE_CSP)
}

pub(super) fn page_body_with_policy(
    content_type: &'static str,
    body: Body,
    csp: &'static str,
) -> Response {
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(csp),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}
