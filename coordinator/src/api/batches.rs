//! `/v1/batches`: submit (multipart `spec` + `bundle`), list, status, cancel and report; the
//! watch (SSE) is `batch_events.rs`.

use std::sync::Arc;

use axum::Json;
use axum::extract::multipart::MultipartError;
use axum::extract::{Multipart, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cowork_core::plan::Plan;
use cowork_fabric::ArtifactError;
use cowork_schema::BatchId;
use cowork_schema::api::{BatchStatus, MAX_ARTIFACT_PAGE, ProgressSnapshot, SubmitResponse};
use cowork_schema::batch::{BatchSpec, StoredBatch};
use cowork_schema::layout::BatchKey;
use cowork_schema::registry::{BatchRecord, BatchState};
use cowork_schema::rollup::RollupDoc;
use futures::stream::{self, BoxStream, StreamExt};
use tokio::sync::OwnedSemaphorePermit;

use super::ApiFailure;
use super::records::{parse_id, record_of};
use super::stored_body::{StoredBody, set_length, stored_body};
use super::upload::{self, PartError, UploadedBundle};
use crate::intake::submitted::plan_from_bundle_reader;
use crate::service::{CancelError, LiveBatch, ResumeError, Service, new_batch_id};

/// `Retry-After` of a submit refused because every submit slot is busy: validating a bundle
/// takes seconds.
const SUBMIT_RETRY_AFTER_S: u64 = 5;

/// `POST /v1/batches`: validates a batch, stores it and starts supervising it (`201`).
/// Nothing is stored when validation fails (`400`, every problem listed), nor when its
/// priority class is above what its token's policy allows (`400`, `--token-policy`). A batch
/// accepted under a policy records the policy's name (`listing.tokenName`).
#[tracing::instrument(skip_all, fields(batch_id = tracing::field::Empty))]
pub(crate) async fn submit(
    State(service): State<Arc<Service>>,
    headers: HeaderMap,
    multipart: Multipart,
) -> Result<(StatusCode, Json<SubmitResponse>), ApiFailure> {
    // Taken before the body is read: a refused submit costs no memory, disk or CPU.
    let _submit_slot = take_submit_slot(&service)?;
    let (mut spec, bundle) = receive_submit(&service, multipart).await?;
    // A class above the token's policy is refused before the bundle is unpacked.
    let policy = service.token_policy(super::bearer_token(&headers));
    if let Some(policy) = policy {
        policy.check_priority(spec.flags.priority).map_err(|problem| {
            tracing::info!(token_policy = %policy.name, priority = %spec.flags.priority, "batch refused: priority above its token's");
            ApiFailure::bad_request("batch refused", vec![problem])
        })?;
    }
    let token_name = policy.map(|policy| policy.name.clone());

    let batch_id = new_batch_id();
    tracing::Span::current().record("batch_id", tracing::field::display(&batch_id));
    let mut plan = check_submitted(&service, &spec, &bundle, &batch_id).await?;
    // A batch budget over a tier or model nothing prices is refused before anything is stored.
    crate::pricing::check_priced(service.ports.store.as_ref(), &plan, &service.config.prices)
        .await
        .map_err(|problems| ApiFailure::bad_request("batch refused", problems))?;
    // Stored with the batch: a restart, and its eval report, charge it at the prices it was
    // accepted with, whatever the coordinator's settings become.
    spec.flags.pricing = spec.flags.pricing.over(&service.config.prices);
    plan.flags.pricing = spec.flags.pricing.clone();

    let response = SubmitResponse {
        batch_id: batch_id.clone(),
        n_jobs: plan.n_jobs(),
        units: u32::try_from(plan.units.len()).unwrap_or(u32::MAX),
        state: BatchState::Planned,
    };
    let stored = StoredBatch {
        batch_id,
        spec,
        plan: plan.summary(),
    };
    service
        .accept(stored, &bundle.path, plan, token_name)
        .await
        .map_err(|error| ApiFailure::port("storing the batch", &error, error.is_transient()))?;
    Ok((StatusCode::CREATED, Json(response)))
}

/// One of the submit slots (`max_concurrent_submits`), held while the submit is read and
/// validated; `503` with `Retry-After` when every slot is busy.
fn take_submit_slot(service: &Arc<Service>) -> Result<OwnedSemaphorePermit, ApiFailure> {
    Arc::clone(&service.submit_slots)
        .try_acquire_owned()
        .map_err(|_| {
            let cap = service.config.max_concurrent_submits;
            tracing::info!(
                max_concurrent_submits = cap,
                "submit refused: every submit slot busy"
            );
            ApiFailure::busy(
                &format!(
                    "the coordinator is already validating {cap} submits at once (--max-concurrent-submits); try again in {SUBMIT_RETRY_AFTER_S} s"
                ),
                SUBMIT_RETRY_AFTER_S,
            )
        })
}

/// The parts of a submit as received, and what is wrong with them so far.
#[derive(Default)]
struct SubmitParts {
    spec: Option<Vec<u8>>,
    bundle: Option<UploadedBundle>,
    problems: Vec<String>,
}

/// Reads a submit's body into its spec and bundle; `400` naming every problem when a part is
/// missing, repeated or unknown, or the spec is not a batch spec.
async fn receive_submit(
    service: &Service,
    multipart: Multipart,
) -> Result<(BatchSpec, UploadedBundle), ApiFailure> {
    let SubmitParts {
        spec: spec_part,
        bundle: bundle_part,
        mut problems,
    } = receive_parts(service, multipart).await?;
    if spec_part.is_none() {
        problems.push("part spec: missing (the batch spec as json)".to_owned());
    }
    if bundle_part.is_none() {
        problems.push("part bundle: missing (the bundle's tar.zst bytes)".to_owned());
    }
    // `Json::from_bytes` reports the path of a wrongly typed field (`flags.repeat: …`), which
    // serde_json alone does not.
    let spec = match spec_part.as_deref().map(Json::<BatchSpec>::from_bytes) {
        Some(Ok(Json(spec))) => Some(spec),
        Some(Err(rejection)) => {
            problems.push(format!(
                "part spec: not a valid batch spec: {}",
                rejection.body_text()
            ));
            None
        }
        None => None,
    };
    let (Some(spec), Some(bundle), true) = (spec, bundle_part, problems.is_empty()) else {
        return Err(ApiFailure::bad_request("submit refused", problems));
    };
    Ok((spec, bundle))
}

/// Receives every part of a submit's multipart body. Neither part is held whole: the bundle
/// streams into a scratch file, hashed on the way (`upload`), and the spec is read under a
/// small cap.
async fn receive_parts(
    service: &Service,
    mut multipart: Multipart,
) -> Result<SubmitParts, ApiFailure> {
    let mut parts = SubmitParts::default();
    let max_bundle_bytes = service.config.max_bundle_bytes;
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|error| multipart_failure(error, None, max_bundle_bytes))?
    {
        let name = field.name().unwrap_or_default().to_owned();
        let repeated = match name.as_str() {
            "spec" => {
                let bytes = upload::receive_small(&mut field, upload::MAX_SPEC_BYTES)
                    .await
                    .map_err(|error| part_failure(error, &name, max_bundle_bytes))?;
                parts.spec.replace(bytes).is_some()
            }
            "bundle" => {
                let bundle = upload::receive_bundle(
                    &mut field,
                    &service.config.scratch_dir,
                    max_bundle_bytes,
                )
                .await
                .map_err(|error| part_failure(error, &name, max_bundle_bytes))?;
                parts.bundle.replace(bundle).is_some()
            }
            other => {
                parts.problems.push(format!(
                    "part {other:?}: unknown; a submit has the parts spec and bundle"
                ));
                continue;
            }
        };
        if repeated {
            parts
                .problems
                .push(format!("part {name}: given more than once"));
        }
    }
    Ok(parts)
}

/// Unpacks and checks a submitted bundle against its spec and plans the batch as `batch_id`;
/// `400` listing every problem when the batch is refused.
async fn check_submitted(
    service: &Service,
    spec: &BatchSpec,
    bundle: &UploadedBundle,
    batch_id: &BatchId,
) -> Result<Plan, ApiFailure> {
    let scratch = service.config.scratch_dir.clone();
    let limits = service.config.unpack_limits;
    let checked_spec = spec.clone();
    let bundle_path = bundle.path.clone();
    let bundle_sha256 = bundle.sha256.clone();
    let checked_id = batch_id.clone();
    // Unpacking and reading YAML are blocking work, so they run in `spawn_blocking`.
    tokio::task::spawn_blocking(move || {
        let file = std::fs::File::open(&bundle_path).map_err(|error| {
            vec![format!(
                "bundle: reading the received upload {}: {error}",
                bundle_path.display()
            )]
        })?;
        plan_from_bundle_reader(
            &checked_spec,
            std::io::BufReader::new(file),
            &bundle_sha256,
            checked_id,
            &scratch,
            &limits,
        )
    })
    .await
    .map_err(|error| ApiFailure::port("validating the batch", &error, false))?
    .map_err(|problems| {
        tracing::info!(n_problems = problems.len(), "batch refused");
        ApiFailure::bad_request("batch refused", problems)
    })
}

/// A part that could not be received, named.
fn part_failure(error: PartError, name: &str, max_bundle_bytes: u64) -> ApiFailure {
    match error {
        PartError::Body(error) => multipart_failure(error, Some(name), max_bundle_bytes),
        PartError::TooLarge { limit, read } => ApiFailure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "reading part {name}: over the upload limit after {read} bytes; a {name} may hold at most {limit} bytes{}",
                if name == "bundle" {
                    " (--max-bundle-mib)"
                } else {
                    ""
                }
            ),
        ),
        PartError::Io(message) => {
            tracing::error!(error = %message, "receiving a submit failed");
            ApiFailure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "part {name}: the coordinator could not store the upload in its scratch dir"
                ),
            )
        }
    }
}

/// A multipart body that could not be read, named after the part being read when there is one.
/// A body over the upload limit says what the limit is for, so the client learns which input
/// is too big.
fn multipart_failure(
    error: MultipartError,
    part: Option<&str>,
    max_bundle_bytes: u64,
) -> ApiFailure {
    let status = error.status();
    let reading = part.map_or(String::new(), |name| format!(" (reading part {name})"));
    let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
        format!(
            "multipart body: over the upload limit{reading}; a bundle may hold at most {max_bundle_bytes} bytes"
        )
    } else {
        format!("multipart body: {}{reading}", error.body_text())
    };
    ApiFailure::new(status, &message)
}

/// `GET /v1/batches`: every batch record, sorted by id.
#[tracing::instrument(skip_all)]
pub(crate) async fn list(
    State(service): State<Arc<Service>>,
) -> Result<Json<Vec<BatchRecord>>, ApiFailure> {
    service
        .ports
        .batches
        .list()
        .await
        .map(Json)
        .map_err(|error| {
            let transient = error.is_transient();
            ApiFailure::port("listing batches", &error, transient)
        })
}

/// `GET /v1/batches/{id}`: the record, live progress when supervised here, and the rollup once
/// the batch is done.
#[tracing::instrument(skip_all, fields(batch_id = %id))]
pub(crate) async fn status(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
) -> Result<Json<BatchStatus>, ApiFailure> {
    let batch_id = parse_id(&id)?;
    let record = record_of(&service, &batch_id).await?;
    let progress = service
        .live(&batch_id)
        .map(|live| live_progress(&service, &live, record.state.is_final()));
    let rollup = if record.state == BatchState::Done {
        read_rollup(&service, &batch_id).await
    } else {
        None
    };
    Ok(Json(BatchStatus {
        record,
        progress,
        rollup,
        notify_error: service.notifier.last_error(&batch_id),
    }))
}

/// The progress of a batch supervised here, with the fleet view's unserved tiers and the
/// fabric view's stalls while it runs: an ended batch waits for nothing. The stall watchdog's
/// verdict stays on a batch it cancelled.
fn live_progress(service: &Service, live: &LiveBatch, ended: bool) -> ProgressSnapshot {
    if ended {
        return ProgressSnapshot {
            stall: live.stall.borrow().clone(),
            ..live.progress.borrow().clone()
        };
    }
    ProgressSnapshot {
        stall: live.stall.borrow().clone(),
        unserved_tiers: live.unserved.borrow().clone(),
        fabric_stalls: service.views.fabric.borrow().stalls.clone(),
        lost_workers: service.views.lost_workers.borrow().clone(),
        ..live.progress.borrow().clone()
    }
}

/// The stored rollup of a done batch; `None` when it is missing or unreadable (logged).
async fn read_rollup(service: &Service, batch_id: &BatchId) -> Option<RollupDoc> {
    let key = BatchKey::new(batch_id).rollup();
    match service.ports.store.get(key.as_str()).await {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(rollup) => Some(rollup),
            Err(error) => {
                tracing::warn!(s3_key = %key, error = %error, "stored rollup is unreadable");
                None
            }
        },
        Err(ArtifactError::NotFound { .. }) => None,
        Err(error) => {
            tracing::warn!(s3_key = %key, error = %error, "stored rollup cannot be read");
            None
        }
    }
}

/// Query of `POST /v1/batches/{id}/cancel`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelQuery {
    /// Also kill the batch's in-flight jobs (workers kill their process groups) and skip its
    /// queued ones.
    #[serde(default)]
    kill_running: bool,
}

/// `POST /v1/batches/{id}/cancel[?kill_running=true]`: `202` with the record (now
/// `stopping`); `409` if the batch is already final.
#[tracing::instrument(skip_all, fields(batch_id = %id))]
pub(crate) async fn cancel(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
    query: Result<axum::extract::Query<CancelQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<(StatusCode, Json<BatchRecord>), ApiFailure> {
    let batch_id = parse_id(&id)?;
    let axum::extract::Query(query) = query.map_err(|rejection| {
        ApiFailure::new(
            StatusCode::BAD_REQUEST,
            &format!("cancel query: {}", rejection.body_text()),
        )
    })?;
    match service.cancel(&batch_id, query.kill_running).await {
        Ok(Some(record)) => Ok((StatusCode::ACCEPTED, Json(record))),
        Ok(None) => Err(ApiFailure::not_found(&format!("batch {batch_id}"))),
        Err(CancelError::Final(state)) => Err(ApiFailure::new(
            StatusCode::CONFLICT,
            &format!("batch {batch_id} is already {}", state.as_str()),
        )),
        Err(CancelError::Registry(error)) => {
            let transient = error.is_transient();
            Err(ApiFailure::port("cancelling the batch", &error, transient))
        }
    }
}

/// `POST /v1/batches/{id}/resume`: `202` with the record (generation + 1, `planned`); `409`
/// if the batch is not final yet, `422` if it cannot be planned again.
#[tracing::instrument(skip_all, fields(batch_id = %id))]
pub(crate) async fn resume(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<BatchRecord>), ApiFailure> {
    let batch_id = parse_id(&id)?;
    match service.resume(&batch_id).await {
        Ok(Some(record)) => Ok((StatusCode::ACCEPTED, Json(record))),
        Ok(None) => Err(ApiFailure::not_found(&format!("batch {batch_id}"))),
        Err(error @ ResumeError::NotFinal(_)) => Err(ApiFailure::new(
            StatusCode::CONFLICT,
            &format!("batch {batch_id}: {error}"),
        )),
        Err(error @ ResumeError::Load(_)) => Err(ApiFailure::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("batch {batch_id}: {error}"),
        )),
        Err(ResumeError::Registry(error)) => {
            let transient = error.is_transient();
            Err(ApiFailure::port("resuming the batch", &error, transient))
        }
    }
}

/// `GET /v1/batches/{id}/report`: the stored `envelope.json`; `404` until the batch is done.
/// With `?format=html|junit|markdown|json`, the rendered report instead ([`super::pages`]).
#[tracing::instrument(skip_all, fields(batch_id = %id))]
pub(crate) async fn report(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
    axum::extract::Query(query): axum::extract::Query<super::pages::PageQuery>,
) -> Result<Response, ApiFailure> {
    if let Some(format) = query.format.as_deref() {
        return super::pages::report(&service, &id, format, query.token.clone()).await;
    }
    let batch_id = parse_id(&id)?;
    let record = record_of(&service, &batch_id).await?;
    if record.state == BatchState::Cancelled {
        return unfinished_envelope(&service, &batch_id).await;
    }
    if record.state != BatchState::Done {
        return Err(ApiFailure::not_found(&format!(
            "report of batch {batch_id} (the batch is {})",
            record.state.as_str()
        )));
    }
    let key = BatchKey::new(&batch_id).envelope().into_string();
    // Streamed: a million-run batch's envelope is 1.5 GB.
    match stored_body(service.ports.store.as_ref(), &key).await {
        Ok(StoredBody { body, size }) => {
            let mut response = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
            set_length(&mut response, size);
            Ok(response)
        }
        Err(ArtifactError::NotFound { .. }) => Err(ApiFailure::not_found(&format!(
            "report of batch {batch_id}"
        ))),
        Err(error) => {
            let transient = error.is_transient();
            Err(ApiFailure::port("reading the report", &error, transient))
        }
    }
}

/// The envelope of a cancelled batch: none was stored, so its stored outcomes are judged as
/// `cowork rollup` judges an interrupted batch (marked incomplete, every missing job named),
/// the same judgment its formatted reports show. Its `ok` is false: a batch cancelled before
/// its verdict fails, as `cowork watch` says of it.
async fn unfinished_envelope(
    service: &Service,
    batch_id: &BatchId,
) -> Result<Response, ApiFailure> {
    // The same turn as a formatted report: judging reads every stored outcome once.
    let _render_turn = Arc::clone(&service.report_renders)
        .acquire_owned()
        .await
        .map_err(|error| ApiFailure::port("waiting for a report render", &error, true))?;
    let envelope = match crate::report_input::unfinished_envelope(
        service.ports.store.as_ref(),
        batch_id,
    )
    .await
    {
        Ok(envelope) => envelope,
        Err(error) if error.is_not_found() => {
            return Err(ApiFailure::not_found(&format!(
                "report of batch {batch_id}"
            )));
        }
        Err(error) => {
            let transient = error.is_transient();
            return Err(ApiFailure::port(
                "judging the cancelled batch",
                &error,
                transient,
            ));
        }
    };
    let body = cowork_schema::json_number::to_vec(&envelope)
        .map_err(|error| ApiFailure::port("writing the envelope", &error, false))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// The query of `GET /v1/batches/{id}/artifacts`.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ArtifactsQuery {
    /// Only the keys under this prefix, relative to `batches/<id>/` (e.g. `jobs/c3/r2/`).
    prefix: Option<String>,
    /// Only the keys that sort after this one (relative, as listed): the last key of the
    /// previous page.
    after: Option<String>,
    /// One page of at most this many keys (cut to [`MAX_ARTIFACT_PAGE`]) instead of the whole
    /// listing.
    limit: Option<usize>,
}

/// `GET /v1/batches/{id}/artifacts[?prefix=…][&after=…][&limit=N]`: the stored keys of the
/// batch (or those under `prefix`), relative to `batches/<id>/`, sorted (spec, jobs'
/// artifacts, rollup, envelope), as one JSON array. With `limit`, one page of at most that
/// many keys after `after`. Without it, the whole listing, read from the store a page at a
/// time and written out as it is read: a million-job batch has millions of keys, and the
/// coordinator holds one page of them, never the list.
pub(crate) async fn artifacts(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
    axum::extract::Query(query): axum::extract::Query<ArtifactsQuery>,
) -> Result<Response, ApiFailure> {
    let batch_id = parse_id(&id)?;
    record_of(&service, &batch_id).await?;
    let under = query.prefix.unwrap_or_default();
    // The store's own rule for a listing prefix, so a prefix cannot leave the batch.
    if let Err(error) = cowork_fabric::artifacts::check_prefix(&under) {
        return Err(ApiFailure::bad_request(
            "invalid prefix",
            vec![format!(
                "{error}: give a path inside the batch, like jobs/c3/r2/"
            )],
        ));
    }
    let batch_prefix = BatchKey::new(&batch_id).prefix();
    let prefix = batch_prefix.key(&under).into_string();
    let after = query
        .after
        .map(|after| batch_prefix.key(&after).into_string());
    let limit = query
        .limit
        .map_or(MAX_ARTIFACT_PAGE, |limit| limit.min(MAX_ARTIFACT_PAGE));
    let store = Arc::clone(&service.ports.store);
    // The first page is read before the response starts, so that a store that cannot list
    // answers with an error status rather than a cut body.
    let first = store
        .list_page(&prefix, after.as_deref(), limit)
        .await
        .map_err(|error| {
            let transient = error.is_transient();
            ApiFailure::port("listing the batch's artifacts", &error, transient)
        })?;
    let relative = move |key: &str| batch_prefix.relative(key).unwrap_or(key).to_owned();
    if query.limit.is_some() {
        let keys: Vec<String> = first.iter().map(|key| relative(key)).collect();
        return Ok(Json(keys).into_response());
    }
    let mut first_key = true;
    let keys = listing_pages(store, prefix, first, limit).map(move |page| {
        let mut chunk = String::new();
        for key in &page? {
            if !std::mem::take(&mut first_key) {
                chunk.push(',');
            }
            chunk.push_str(&serde_json::Value::String(relative(key)).to_string());
        }
        Ok::<_, std::io::Error>(axum::body::Bytes::from(chunk))
    });
    let bracket = |text: &'static str| {
        stream::once(async move { Ok(axum::body::Bytes::from_static(text.as_bytes())) })
    };
    let body = bracket("[").chain(keys).chain(bracket("]"));
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}

/// The pages of a listing that starts with `first`: each next page is read after the last key
/// of the one before, until a page comes back short. A store error mid-way ends the stream
/// with it (the response is cut, which a client reads as an error, not as a shorter list).
fn listing_pages(
    store: Arc<dyn cowork_fabric::ArtifactStore>,
    prefix: String,
    first: Vec<String>,
    limit: usize,
) -> BoxStream<'static, std::io::Result<Vec<String>>> {
    stream::unfold(Some(first), move |page| {
        let store = Arc::clone(&store);
        let prefix = prefix.clone();
        async move {
            let page = page?;
            let next = if page.len() < limit {
                None
            } else {
                match page.last() {
                    Some(last) => match store.list_page(&prefix, Some(last), limit).await {
                        Ok(next) => Some(next),
                        Err(error) => {
                            tracing::warn!(%prefix, %error, "listing a batch's artifacts failed mid-way");
                            return Some((Err(std::io::Error::other(error.to_string())), None));
                        }
                    },
                    None => None,
                }
            };
            Some((Ok(page), next))
        }
    })
    .boxed()
}
