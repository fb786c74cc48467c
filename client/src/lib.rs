//! The HTTP client of the coordinator API, for `cowork submit`, `status`, `watch`, `cancel`,
//! `results` and `report`.
//!
//! Every call sends the bearer token when one is configured and maps a refusal to a
//! [`ClientError`] variant a caller can act on. [`CoordinatorClient::watch`] and
//! [`CoordinatorClient::live_events`] read the server-sent events themselves ([`SseParser`]).

mod artifact_reader;
mod bases;
mod live;
mod sse;
mod watch;

use std::time::Duration;

use cowork_schema::BatchId;
use cowork_schema::api::{
    ApiError, BatchStatus, FabricStatus, LEADER_HEADER, SubmitResponse, WorkerStatus,
};
use cowork_schema::batch::BatchSpec;
use cowork_schema::envelope::Envelope;
use cowork_schema::layout::names;
use cowork_schema::registry::BatchRecord;
use reqwest::StatusCode;
use serde::de::DeserializeOwned;

pub use artifact_reader::ApiArtifactReader;
pub use sse::{SseEvent, SseParser};
pub use watch::WatchEvent;

use crate::bases::Bases;
use crate::sse::SseReader;

/// How long connecting to the coordinator may take before the call fails as unavailable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call to the coordinator failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `401`: no token, or a token the coordinator does not accept.
    #[error("the coordinator refused the request: {message} (check the api token)")]
    Unauthorized {
        message: String,
        /// Whether this client sent a token: without one, the fix is to set one, not to
        /// check it.
        token_sent: bool,
    },
    /// `403`: the token is valid but may not do this (a read-only token on a request that
    /// changes a batch).
    #[error("the coordinator refused the request: {message}")]
    Forbidden { message: String },
    /// `400` or `413`: the request was refused; `problems` lists every problem found.
    #[error("the coordinator refused the request: {message}")]
    BadRequest {
        message: String,
        problems: Vec<String>,
    },
    /// `404`.
    #[error("{message}")]
    NotFound { message: String },
    /// `409`: the request conflicts with the batch's state (e.g. cancelling a final batch).
    #[error("{message}")]
    Conflict { message: String },
    /// The coordinator could not be reached, or answered 502/504; a retry may succeed.
    #[error("the coordinator at {url} is unavailable: {message}")]
    Unavailable { url: String, message: String },
    /// The coordinator answered 503: it runs, but what it needs does not answer now (the
    /// queue stalls, the store is down); the message says what. A retry may succeed.
    #[error("the coordinator at {url} cannot serve now: {message}")]
    CannotServe { url: String, message: String },
    /// Any other error status.
    #[error("the coordinator failed with status {status}: {message}")]
    Server { status: u16, message: String },
    /// An answer that does not have the documented shape.
    #[error("unexpected answer from the coordinator at {url}: {message}")]
    Protocol { url: String, message: String },
    /// The configured base url cannot be used.
    #[error("invalid coordinator url {url:?}: {message}")]
    InvalidUrl { url: String, message: String },
    /// A download could not be written where it was asked to go (the message names the file).
    #[error("{message}")]
    Local { message: String },
}

impl ClientError {
    /// `true` when retrying the same call may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClientError::Unavailable { .. } | ClientError::CannotServe { .. }
        )
    }
}

/// A client of a coordinator, or of several on one fabric: it talks to one at a time and moves
/// to another when that one cannot be reached or names another as the leader.
#[derive(Clone)]
pub struct CoordinatorClient {
    bases: Bases,
    token: Option<String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for CoordinatorClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorClient")
            .field("base", &self.bases.current().as_str())
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish()
    }
}

impl CoordinatorClient {
    /// A client of the coordinator at `base_url` (e.g. `http://127.0.0.1:8080`), or of the
    /// coordinators of a comma-separated list of them (the first is asked first), sending
    /// `token` as a bearer token when given.
    pub fn new(base_url: &str, token: Option<String>) -> Result<CoordinatorClient, ClientError> {
        CoordinatorClient::with_ca(base_url, token, None)
    }

    /// [`CoordinatorClient::new`] trusting also the CA in `ca_pem` (PEM) for an https
    /// coordinator.
    pub fn with_ca(
        base_url: &str,
        token: Option<String>,
        ca_pem: Option<&[u8]>,
    ) -> Result<CoordinatorClient, ClientError> {
        let invalid = |message: String| ClientError::InvalidUrl {
            url: base_url.to_owned(),
            message,
        };
        let bases = Bases::parse(base_url, |one| {
            let mut base = parse_base_url(one)?;
            // Joining relative paths keeps a base path such as `/coordinator/` only with a
            // trailing slash.
            if !base.path().ends_with('/') {
                let path = format!("{}/", base.path());
                base.set_path(&path);
            }
            Ok(base)
        })
        .map_err(invalid)?;
        let mut builder = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT);
        if let Some(pem) = ca_pem {
            let certificate = reqwest::Certificate::from_pem(pem)
                .map_err(|e| invalid(format!("the CA file is not a PEM certificate: {e}")))?;
            builder = builder.add_root_certificate(certificate);
        }
        let http = builder.build().map_err(|e| invalid(e.to_string()))?;
        Ok(CoordinatorClient { bases, token, http })
    }

    /// Submits a batch: its spec and the bundle bytes the spec's `bundleSha256` names.
    pub async fn submit(
        &self,
        spec: &BatchSpec,
        bundle: Vec<u8>,
    ) -> Result<SubmitResponse, ClientError> {
        let spec_json =
            cowork_schema::json_number::to_vec(spec).expect("a batch spec always serializes");
        let spec_part = reqwest::multipart::Part::bytes(spec_json)
            .file_name(names::SPEC)
            .mime_str("application/json")
            .expect("a literal mime type parses");
        let bundle_part = reqwest::multipart::Part::bytes(bundle)
            .file_name(format!("bundle{}", names::BUNDLE_EXTENSION))
            .mime_str("application/zstd")
            .expect("a literal mime type parses");
        let form = reqwest::multipart::Form::new()
            .part("spec", spec_part)
            .part("bundle", bundle_part);
        // An upload is sent once (its body streams), so with several coordinators ask first
        // which one leads: a standby names it, an unreachable one is passed over.
        if self.bases.len() > 1 {
            let _ = self.fabric().await;
        }
        let url = self.url("v1/batches")?;
        let request = self.http.post(url.clone()).multipart(form);
        self.call_json(url, request).await
    }

    /// Every batch record, sorted by id.
    pub async fn list(&self) -> Result<Vec<BatchRecord>, ClientError> {
        let url = self.url("v1/batches")?;
        self.call_json(url.clone(), self.http.get(url)).await
    }

    /// A batch's record, live progress and (once done) rollup.
    pub async fn status(&self, batch_id: &BatchId) -> Result<BatchStatus, ClientError> {
        let url = self.url(&format!("v1/batches/{batch_id}"))?;
        self.call_json(url.clone(), self.http.get(url)).await
    }

    /// Cancels a batch; returns its record (`stopping`).
    pub async fn cancel(
        &self,
        batch_id: &BatchId,
        kill_running: bool,
    ) -> Result<BatchRecord, ClientError> {
        let path = if kill_running {
            format!("v1/batches/{batch_id}/cancel?kill_running=true")
        } else {
            format!("v1/batches/{batch_id}/cancel")
        };
        let url = self.url(&path)?;
        self.call_json(url.clone(), self.http.post(url)).await
    }

    /// Changes a running batch's controls: `pause`, `resume-dispatch` or `adjust` (with the
    /// new limits in `request`). Returns the record as changed.
    pub async fn control(
        &self,
        batch_id: &BatchId,
        control: &str,
        request: &cowork_schema::api::ControlRequest,
    ) -> Result<BatchRecord, ClientError> {
        let url = self.url(&format!("v1/batches/{batch_id}/{control}"))?;
        self.call_json(url.clone(), self.http.post(url).json(request))
            .await
    }

    /// The live view of a batch.
    pub async fn live(
        &self,
        batch_id: &BatchId,
    ) -> Result<cowork_schema::live::LiveSnapshot, ClientError> {
        let url = self.url(&format!("v1/batches/{batch_id}/live"))?;
        self.call_json(url.clone(), self.http.get(url)).await
    }

    /// Resumes a done or cancelled batch: jobs without a result, or whose run ended in an
    /// infrastructure failure, run again.
    pub async fn resume(&self, batch_id: &BatchId) -> Result<BatchRecord, ClientError> {
        let url = self.url(&format!("v1/batches/{batch_id}/resume"))?;
        self.call_json(url.clone(), self.http.post(url)).await
    }

    /// The envelope of a done batch.
    pub async fn report(&self, batch_id: &BatchId) -> Result<Envelope, ClientError> {
        let url = self.url(&format!("v1/batches/{batch_id}/report"))?;
        self.call_json(url.clone(), self.http.get(url)).await
    }

    /// The compact JSON summary of an ended batch (`GET /v1/batches/{id}/report?format=json`):
    /// verdict, units, failure reasons and stop notes, as `cowork report --format json` prints it.
    pub async fn report_summary(
        &self,
        batch_id: &BatchId,
    ) -> Result<serde_json::Value, ClientError> {
        let url = self.url(&format!("v1/batches/{batch_id}/report?format=json"))?;
        self.call_json(url.clone(), self.http.get(url)).await
    }

    /// The base URL of the coordinator the client talks to now, as given (e.g.
    /// `http://127.0.0.1:8080/`).
    pub fn base_url(&self) -> &str {
        self.bases.current().as_str()
    }

    /// Whether the client sends a bearer token (a browser then needs `?token=` on a page).
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The address of a batch's live page, to open in a browser.
    pub fn live_page_url(&self, batch_id: &BatchId) -> String {
        self.url(&format!("v1/batches/{batch_id}/live.html"))
            .map_or_else(
                |_| format!("{}v1/batches/{batch_id}/live.html", self.bases.current()),
                |url| url.to_string(),
            )
    }

    /// Every stored key of a batch, relative to `batches/<id>/`.
    pub async fn artifacts(&self, batch_id: &BatchId) -> Result<Vec<String>, ClientError> {
        self.artifacts_under(batch_id, "").await
    }

    /// The stored keys of a batch under `prefix` (relative to `batches/<id>/`, e.g.
    /// `jobs/c3/r2/`), relative to `batches/<id>/`; an empty prefix lists every key.
    pub async fn artifacts_under(
        &self,
        batch_id: &BatchId,
        prefix: &str,
    ) -> Result<Vec<String>, ClientError> {
        let mut url = self.url(&format!("v1/batches/{batch_id}/artifacts"))?;
        if !prefix.is_empty() {
            url.query_pairs_mut().append_pair("prefix", prefix);
        }
        self.call_json(url.clone(), self.http.get(url)).await
    }

    /// One page of a batch's stored keys: at most `limit` keys under `prefix` that sort after
    /// `after` (all relative to `batches/<id>/`), sorted. A page shorter than `limit` is the
    /// last; pass the last key of a page as the next `after`. Use this to walk a listing too
    /// long to hold (a big batch has millions of keys). A coordinator that cannot page sends
    /// the whole listing, which is then the one and last page (longer than `limit`).
    pub async fn artifacts_page(
        &self,
        batch_id: &BatchId,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, ClientError> {
        let mut url = self.url(&format!("v1/batches/{batch_id}/artifacts"))?;
        {
            let mut query = url.query_pairs_mut();
            if !prefix.is_empty() {
                query.append_pair("prefix", prefix);
            }
            if let Some(after) = after {
                query.append_pair("after", after);
            }
            query.append_pair("limit", &limit.to_string());
        }
        self.call_json(url.clone(), self.http.get(url)).await
    }

    /// The bytes of one stored object of a batch (`path` as listed by [`Self::artifacts`]).
    pub async fn artifact(&self, batch_id: &BatchId, path: &str) -> Result<Vec<u8>, ClientError> {
        let url = self.url(&format!("v1/batches/{batch_id}/artifacts/{path}"))?;
        let response = self.send(url.clone(), self.http.get(url.clone())).await?;
        let response = self.check(url.clone(), response).await?;
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ClientError::Unavailable {
                url: url.to_string(),
                message: e.to_string(),
            })?;
        Ok(bytes.to_vec())
    }

    /// Writes the batch's stored `envelope.json` to the file at `path` as it arrives (a
    /// million-run batch's is 1.5 GB: never held in memory); returns its size. Read its head
    /// with [`cowork_schema::envelope::read_head`].
    pub async fn download_report(
        &self,
        batch_id: &BatchId,
        path: &std::path::Path,
    ) -> Result<u64, ClientError> {
        let url = self.url(&format!("v1/batches/{batch_id}/report"))?;
        self.download(url, path).await
    }

    /// Writes one stored object of a batch to the file at `path` as it arrives; returns its
    /// size.
    pub async fn download_artifact(
        &self,
        batch_id: &BatchId,
        key: &str,
        path: &std::path::Path,
    ) -> Result<u64, ClientError> {
        let url = self.url(&format!("v1/batches/{batch_id}/artifacts/{key}"))?;
        self.download(url, path).await
    }

    /// GETs `url` into the file at `path`, piece by piece. A body cut off half way is an
    /// `Unavailable` error and leaves a partial file, which the caller's next try overwrites.
    async fn download(
        &self,
        url: reqwest::Url,
        path: &std::path::Path,
    ) -> Result<u64, ClientError> {
        use tokio::io::AsyncWriteExt;
        let response = self.send(url.clone(), self.http.get(url.clone())).await?;
        let mut response = self.check(url.clone(), response).await?;
        let local = |error: std::io::Error| ClientError::Local {
            message: format!("writing {}: {error}", path.display()),
        };
        let mut file = tokio::fs::File::create(path).await.map_err(local)?;
        let mut size = 0u64;
        while let Some(piece) = response
            .chunk()
            .await
            .map_err(|e| transport_error(&url, &e))?
        {
            size += piece.len() as u64;
            file.write_all(&piece).await.map_err(local)?;
        }
        file.flush().await.map_err(local)?;
        Ok(size)
    }

    /// Every live worker.
    pub async fn workers(&self) -> Result<Vec<WorkerStatus>, ClientError> {
        let url = self.url("v1/workers")?;
        self.call_json(url.clone(), self.http.get(url)).await
    }

    /// How each tier's live slots are divided between the running batches
    /// (decisions.md#fair-share).
    pub async fn shares(&self) -> Result<cowork_schema::share::FleetShares, ClientError> {
        let url = self.url("v1/shares")?;
        self.call_json(url.clone(), self.http.get(url)).await
    }

    /// The queue's streams and buckets as the coordinator last checked them (what stalls,
    /// since when, what runs short of replicas).
    pub async fn fabric(&self) -> Result<FabricStatus, ClientError> {
        let url = self.url("v1/fabric")?;
        self.call_json(url.clone(), self.http.get(url)).await
    }

    fn url(&self, path: &str) -> Result<reqwest::Url, ClientError> {
        let base = self.bases.current();
        base.join(path).map_err(|e| ClientError::InvalidUrl {
            url: base.to_string(),
            message: e.to_string(),
        })
    }

    async fn call_json<T: DeserializeOwned>(
        &self,
        url: reqwest::Url,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let response = self.send(url.clone(), request).await?;
        let response = self.check(url.clone(), response).await?;
        let bytes = response
            .bytes()
            .await
            .map_err(|e| transport_error(&url, &e))?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol {
            url: url.to_string(),
            message: format!("body is not the documented json: {e}"),
        })
    }

    /// The body of `GET path` as text.
    async fn text(&self, path: &str) -> Result<String, ClientError> {
        let url = self.url(path)?;
        let response = self.send(url.clone(), self.http.get(url.clone())).await?;
        let response = self.check(url.clone(), response).await?;
        response.text().await.map_err(|e| transport_error(&url, &e))
    }

    /// Opens the server-sent events of `GET path`.
    async fn event_stream(&self, path: &str) -> Result<SseReader, ClientError> {
        let url = self.url(path)?;
        let request = self
            .http
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let response = self.send(url.clone(), request).await?;
        let response = self.check(url.clone(), response).await?;
        Ok(SseReader::new(&url, response))
    }

    async fn send(
        &self,
        url: reqwest::Url,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let mut request = request.build().map_err(|e| transport_error(&url, &e))?;
        // Each known coordinator is asked at most once more.
        let mut tries_left = self.bases.len();
        loop {
            tries_left -= 1;
            // A request whose body cannot be sent twice (a streamed upload) is sent once.
            let again = if tries_left > 0 {
                request.try_clone()
            } else {
                None
            };
            let sent_to = request.url().clone();
            let result = self.http.execute(request).await;
            let elsewhere = match &result {
                // Only a refusal goes on to the leader: any other answer is the answer.
                Ok(response) => leader_named(response)
                    .and_then(|leader| self.bases.follow_leader(&sent_to, &leader))
                    .filter(|_| response.status() == StatusCode::SERVICE_UNAVAILABLE),
                // Not connected: nothing was sent, so sending it elsewhere is safe.
                Err(error) if error.is_connect() && again.is_some() => {
                    self.bases.next_after(&sent_to)
                }
                Err(_) => None,
            };
            match (elsewhere, again) {
                (Some(elsewhere), Some(mut again)) => {
                    *again.url_mut() = elsewhere;
                    request = again;
                }
                _ => return result.map_err(|e| transport_error(&sent_to, &e)),
            }
        }
    }

    /// Passes a success through and turns an error status into its [`ClientError`].
    async fn check(
        &self,
        url: reqwest::Url,
        response: reqwest::Response,
    ) -> Result<reqwest::Response, ClientError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let text = response.text().await.unwrap_or_default();
        let (message, problems) = match serde_json::from_str::<ApiError>(&text) {
            Ok(body) => (body.error, body.problems),
            Err(_) => (
                format!("{status}: {}", text.lines().next().unwrap_or_default()),
                Vec::new(),
            ),
        };
        Err(match status {
            StatusCode::UNAUTHORIZED => ClientError::Unauthorized {
                message,
                token_sent: self.token.is_some(),
            },
            StatusCode::FORBIDDEN => ClientError::Forbidden { message },
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => {
                ClientError::BadRequest { message, problems }
            }
            StatusCode::NOT_FOUND => ClientError::NotFound { message },
            StatusCode::CONFLICT => ClientError::Conflict { message },
            StatusCode::SERVICE_UNAVAILABLE => ClientError::CannotServe {
                url: url.to_string(),
                message,
            },
            StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT => ClientError::Unavailable {
                url: url.to_string(),
                message,
            },
            other => ClientError::Server {
                status: other.as_u16(),
                message,
            },
        })
    }
}

/// The leader a standby names in its answer's `Cowork-Leader` header.
fn leader_named(response: &reqwest::Response) -> Option<reqwest::Url> {
    let value = response.headers().get(LEADER_HEADER)?.to_str().ok()?;
    reqwest::Url::parse(value.trim()).ok()
}

/// The form of a coordinator address, for messages about one that cannot be used.
const EXPECTED_FORM: &str = "expected the coordinator's address as http://HOST:8700 (or \
     https://HOST:PORT, or HOST:PORT for http)";

/// The coordinator's base URL from `text`: an http or https URL, or `HOST:PORT` (or `HOST`)
/// read as `http://HOST:PORT`. Anything else is refused with the expected form.
fn parse_base_url(text: &str) -> Result<reqwest::Url, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("it is empty; {EXPECTED_FORM}"));
    }
    if text.contains("://") {
        let base = reqwest::Url::parse(text).map_err(|e| format!("{e}; {EXPECTED_FORM}"))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(format!(
                "the scheme must be http or https, not {:?}; {EXPECTED_FORM}",
                base.scheme()
            ));
        }
        return Ok(base);
    }
    // No scheme: only a bare host and port is read as http, so a typo such as `http//host`
    // is refused rather than taken for a host named `http`.
    let base = reqwest::Url::parse(&format!("http://{text}"))
        .ok()
        .filter(|base| {
            base.host_str().is_some_and(|host| !host.is_empty())
                && base.path() == "/"
                && base.query().is_none()
                && base.fragment().is_none()
                && base.username().is_empty()
                && !text.ends_with('/')
        })
        .ok_or_else(|| format!("not a URL nor HOST:PORT; {EXPECTED_FORM}"))?;
    Ok(base)
}

/// Whether `message` (an error chain) says the peer answered with something that is not HTTP:
/// hyper's parse errors ("invalid HTTP version parsed" when a NATS server's `INFO` line is read
/// as the answer, "received unexpected message from connection" when that line arrives before
/// the request is sent, and "connection was not ready" when the peer also closed the connection
/// on reading the request: a NATS server's answer to a line it cannot parse).
fn answered_not_http(message: &str) -> bool {
    [
        "invalid HTTP",
        "message head is too large",
        "received unexpected message from connection",
        "connection was not ready",
    ]
    .iter()
    .any(|said| message.contains(said))
}

/// A transport failure: unreachable, timed out or cut off is `Unavailable`, anything else
/// (a body that cannot be decoded, an answer that is not HTTP) is `Protocol`. The message says
/// what to check.
fn transport_error(url: &reqwest::Url, error: &reqwest::Error) -> ClientError {
    let message = cowork_fabric::error_chain(error);
    let address = url.origin().ascii_serialization();
    if answered_not_http(&message) {
        return ClientError::Protocol {
            url: url.to_string(),
            message: format!(
                "{address} answered, but not as a cowork coordinator's HTTP API does (is it a \
                 NATS port? `cowork coordinator` serves its API on port 8700 by default; give \
                 --coordinator http://HOST:8700): {message}"
            ),
        };
    }
    if error.is_connect() {
        return ClientError::Unavailable {
            url: url.to_string(),
            message: format!(
                "{message}; check that `cowork coordinator` is running at {address} (the port \
                 its --listen names, 8700 by default) and that no firewall blocks that port"
            ),
        };
    }
    if error.is_timeout() || error.is_request() || error.is_body() {
        ClientError::Unavailable {
            url: url.to_string(),
            message,
        }
    } else {
        ClientError::Protocol {
            url: url.to_string(),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_way_a_nats_port_answers_http_is_read_as_not_a_coordinator() {
        for said in [
            "invalid HTTP version parsed",
            "client error (SendRequest): received unexpected message from connection",
            "client error (Canceled): operation was canceled: connection was not ready",
        ] {
            assert!(answered_not_http(said), "{said}");
        }
        assert!(!answered_not_http("tcp connect error: Connection refused"));
    }

    #[test]
    fn base_urls_keep_their_path() {
        let client = CoordinatorClient::new("http://127.0.0.1:1/coord", Some("t".into()))
            .expect("a valid url");
        assert_eq!(
            client.url("v1/batches").expect("joins").as_str(),
            "http://127.0.0.1:1/coord/v1/batches"
        );
        assert!(!format!("{client:?}").contains("\"t\""));
        assert!(matches!(
            CoordinatorClient::new("ftp://x", None),
            Err(ClientError::InvalidUrl { .. })
        ));
    }

    #[test]
    fn a_host_and_port_is_read_as_http_and_garbage_is_refused_with_the_expected_form() {
        let base = |text: &str| parse_base_url(text).map(|url| url.to_string());
        assert_eq!(
            base("127.0.0.1:8700").as_deref(),
            Ok("http://127.0.0.1:8700/")
        );
        assert_eq!(
            base(" coordinator:8700 ").as_deref(),
            Ok("http://coordinator:8700/")
        );
        assert_eq!(base("localhost").as_deref(), Ok("http://localhost/"));
        assert_eq!(
            base("https://c.example:9443/api").as_deref(),
            Ok("https://c.example:9443/api")
        );
        for garbage in [
            "",
            "http//x",
            "foo bar",
            "host:port",
            "x:8700/path",
            "nats://n:4222",
        ] {
            let error = base(garbage).expect_err(garbage);
            assert!(error.contains("http://HOST:8700"), "{garbage:?}: {error}");
        }
    }
}
