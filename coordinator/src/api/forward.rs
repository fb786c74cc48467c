//! A standby's part of the API (decisions.md#coordinator-lease): each authorized request it
//! gets is sent on to the leader and the leader's answer sent back, so a client that reaches
//! any coordinator (one URL behind a Kubernetes Service) is served by the one that admits and
//! holds the batches' live progress. When the leader cannot be reached (it just died, and the
//! lease has not expired yet), the request comes back whole: a standby answers a read from the
//! store itself and refuses a change with `503` naming the leader.

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::ApiFailure;

/// The header of a forwarded request (the standby's id): the coordinator that gets it answers
/// itself, never forwards it again, so two coordinators that each think the other leads do not
/// send a request back and forth.
pub(crate) const FORWARDED_BY: &str = "cowork-forwarded-by";

/// How long reaching the leader may take before the standby answers itself: the leader runs
/// next to it, so a longer wait means it is gone.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Headers that belong to one connection, not to the request or answer (HTTP/1.1 hop-by-hop),
/// and the ones the client library sets itself.
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::HOST,
];

/// What became of a request a standby tried to forward.
pub(crate) enum Forwarding {
    /// The leader's answer (or why forwarding failed after the request was sent), to send back.
    Answered(Response),
    /// The leader could not be reached, so nothing was sent: the request, whole again.
    Unreachable(Request),
}

/// One HTTP client for every forwarded request (its connections are kept).
fn http() -> &'static reqwest::Client {
    static HTTP: OnceLock<reqwest::Client> = OnceLock::new();
    HTTP.get_or_init(|| {
        reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            // A redirect is the leader's answer to pass on, not to follow here.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default()
    })
}

/// `true` when `request` was forwarded by another coordinator already.
pub(crate) fn was_forwarded(request: &Request) -> bool {
    request.headers().contains_key(FORWARDED_BY)
}

/// Sends `request` to the leader at `leader_url` on behalf of the coordinator `me`. The body
/// is read first (at most `body_limit` bytes, the submit limit), so it can be answered here
/// when the leader cannot be reached.
pub(crate) async fn to_leader(
    leader_url: &str,
    me: &str,
    request: Request,
    body_limit: usize,
) -> Forwarding {
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, body_limit).await {
        Ok(bytes) => bytes,
        Err(error) => {
            return Forwarding::Answered(
                ApiFailure::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("reading the request body: {error}"),
                )
                .into_response(),
            );
        }
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |path_and_query| path_and_query.as_str());
    let url = format!("{}{path}", leader_url.trim_end_matches('/'));
    let mut headers = without_hop_by_hop(&parts.headers);
    if let Ok(me) = HeaderValue::from_str(me) {
        headers.insert(FORWARDED_BY, me);
    }
    let sent = http()
        .request(parts.method.clone(), &url)
        .headers(headers)
        .body(bytes.clone())
        .send()
        .await;
    match sent {
        Ok(answer) => Forwarding::Answered(passed_back(answer)),
        Err(error) if error.is_connect() => {
            tracing::info!(leader = %leader_url, error = %error, "the leader does not answer: answering here");
            Forwarding::Unreachable(Request::from_parts(parts, Body::from(bytes)))
        }
        Err(error) => {
            tracing::warn!(leader = %leader_url, error = %error, "forwarding to the leader failed");
            Forwarding::Answered(
                ApiFailure::new(
                    StatusCode::BAD_GATEWAY,
                    &format!("forwarding to the leader at {leader_url} failed: {error}"),
                )
                .into_response(),
            )
        }
    }
}

/// The leader's answer as this coordinator's, its body streamed through (a watch's events, a
/// download).
fn passed_back(answer: reqwest::Response) -> Response {
    let status = answer.status();
    let headers = without_hop_by_hop(answer.headers());
    let mut response = Response::new(Body::from_stream(answer.bytes_stream()));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

fn without_hop_by_hop(headers: &HeaderMap) -> HeaderMap {
    let mut kept = headers.clone();
    for name in &HOP_BY_HOP {
        kept.remove(name);
    }
    kept
}
