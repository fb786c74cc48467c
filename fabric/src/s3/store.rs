//! `S3ArtifactStore`: the `ArtifactStore` port on an S3 bucket.
//!
//! Objects live at `<prefix><key>`. Each is written with user metadata `sha256` (lowercase hex
//! of its bytes), which `get` checks. Bodies up to `multipart_threshold` go up in one PUT,
//! larger ones as a multipart upload. The SDK retries a failed request once at most: callers
//! retry with their own backoff, and a long SDK retry loop would hide an outage from them.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketLocationConstraint, CompletedMultipartUpload, CompletedPart, CreateBucketConfiguration,
};
use aws_smithy_http_client::tls;
use cowork_schema::event::ArtifactRef;

use super::config::S3Config;
use super::errors::{Class, artifact_error, classify};
use crate::artifacts::{ArtifactError, ArtifactStore, PutOutcome, check_key, check_prefix};
use crate::sha256_hex;

/// Name of the user metadata entry holding the object's sha256 (header `x-amz-meta-sha256`).
pub const SHA256_METADATA: &str = "sha256";

/// Attempts per request, first one included. Two absorbs a single dropped pooled connection
/// (common after a server restart) without delaying the caller's own backoff.
const SDK_MAX_ATTEMPTS: u32 = 2;
/// The SDK's wait before its one retry; short because the caller's backoff does the real waiting.
const SDK_INITIAL_BACKOFF: Duration = Duration::from_millis(200);
/// Bodies larger than this are hashed on a blocking thread: sha256 runs at roughly 0.5–2 GB/s,
/// so 1 MiB is about the 0.5 ms of CPU the project allows on the async runtime before work moves to
/// `spawn_blocking`.
const BLOCKING_DIGEST_BYTES: usize = 1024 * 1024;
/// S3's limit on the number of parts of one multipart upload.
const MAX_PARTS: u64 = 10_000;

/// An artifact store on an S3 bucket.
#[derive(Clone)]
pub struct S3ArtifactStore {
    client: Client,
    bucket: String,
    /// Empty or ending with `/`.
    key_prefix: String,
    multipart_threshold: u64,
    part_size: u64,
    list_page_size: i32,
    operation_timeout: Duration,
}

impl std::fmt::Debug for S3ArtifactStore {
    // By hand: the SDK client's Debug output is long and says nothing useful here.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3ArtifactStore")
            .field("bucket", &self.bucket)
            .field("key_prefix", &self.key_prefix)
            .finish_non_exhaustive()
    }
}

/// Whether an upload may replace an existing object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    Replace,
    /// Sent with `If-None-Match: *`.
    IfAbsent,
}

/// What an upload did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Written {
    Created,
    /// Only for [`Write::IfAbsent`]: an object was already there and is unchanged.
    AlreadyExists,
}

impl S3ArtifactStore {
    /// Validates `config`, builds the client and checks that the bucket is reachable, creating
    /// it first when `create_bucket` is set. An unreachable server is `Transient`, so a caller
    /// may retry the connect; a bad config or a missing bucket is `Failed`.
    pub async fn connect(config: &S3Config) -> Result<S3ArtifactStore, ArtifactError> {
        let location = format!("s3://{}/{}", config.bucket, config.key_prefix());
        let problems = config.validate();
        if !problems.is_empty() {
            return Err(ArtifactError::Failed {
                key: location,
                message: format!("invalid s3 config: {}", problems.join("; ")),
            });
        }
        let client = build_client(config, &location).await?;
        let store = S3ArtifactStore {
            client,
            bucket: config.bucket.clone(),
            key_prefix: config.key_prefix(),
            multipart_threshold: config.multipart_threshold,
            part_size: config.part_size,
            list_page_size: config.list_page_size,
            operation_timeout: config.operation_timeout,
        };
        if config.create_bucket {
            store.create_bucket(&config.region, &location).await?;
        }
        store.check_bucket(&location).await?;
        Ok(store)
    }

    /// The bucket this store writes to.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The S3 key of the store key `key` (which must already have passed `check_key`).
    /// Starts reading the object under `key`: the answer (its body still to come) and the
    /// sha256 recorded with it, lower-cased, when it has one.
    async fn get_object(
        &self,
        key: &str,
    ) -> Result<
        (
            aws_sdk_s3::operation::get_object::GetObjectOutput,
            Option<String>,
        ),
        ArtifactError,
    > {
        check_key(key)?;
        let object_key = self.object_key(key);
        tracing::debug!(s3_key = %object_key, "getting object");
        let output = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&object_key)
            .send()
            .await
            .map_err(|error| artifact_error(key, &error))?;
        let expected = output
            .metadata()
            .and_then(|metadata| metadata.get(SHA256_METADATA))
            .map(|sha256| sha256.to_ascii_lowercase());
        Ok((output, expected))
    }

    fn object_key(&self, key: &str) -> String {
        format!("{}{key}", self.key_prefix)
    }

    /// The port's keys of a listing page's objects (the store prefix taken off).
    fn keys_of<'page>(
        &'page self,
        page: &'page ListObjectsV2Output,
    ) -> impl Iterator<Item = String> + 'page {
        page.contents()
            .iter()
            .filter_map(|object| object.key())
            .filter_map(|key| key.strip_prefix(self.key_prefix.as_str()))
            .map(str::to_owned)
    }

    /// Lists the objects under the store prefix `prefix` (with `delimiter`, one level; after
    /// the store key `after`, when given), page by page, handing each page to `take` until it
    /// answers `false` or the listing ends.
    async fn list_pages(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        after: Option<&str>,
        mut take: impl FnMut(&ListObjectsV2Output) -> bool,
    ) -> Result<(), ArtifactError> {
        let full_prefix = self.object_key(prefix);
        let mut continuation: Option<String> = None;
        // `start-after` applies to the first request; the continuation token carries it on.
        let mut start_after = after.map(|after| self.object_key(after));
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(&full_prefix)
                .set_delimiter(delimiter.map(str::to_owned))
                .max_keys(self.list_page_size)
                .set_continuation_token(continuation.take())
                .set_start_after(start_after.take())
                .send()
                .await
                .map_err(|error| artifact_error(prefix, &error))?;
            if !take(&page) || page.is_truncated() != Some(true) {
                return Ok(());
            }
            match page.next_continuation_token() {
                Some(token) if !token.is_empty() => continuation = Some(token.to_owned()),
                // Without a token the next request would start over: stop instead of looping.
                _ => {
                    return Err(ArtifactError::Failed {
                        key: prefix.to_owned(),
                        message: "the server marked a listing page truncated but sent no continuation token".to_owned(),
                    });
                }
            }
        }
    }

    async fn create_bucket(&self, region: &str, location: &str) -> Result<(), ArtifactError> {
        let mut request = self.client.create_bucket().bucket(&self.bucket);
        // us-east-1 is S3's default location and must not be named explicitly.
        if region != "us-east-1" {
            request = request.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(region))
                    .build(),
            );
        }
        match request.send().await {
            Ok(_) => {
                tracing::info!(bucket = %self.bucket, "created s3 bucket");
                Ok(())
            }
            // AWS answers "owned by you" for our own bucket; MinIO and s3s-fs say "already
            // exists" either way. Both are fine here: `check_bucket` then proves we can use it.
            Err(error)
                if matches!(
                    error.as_service_error().and_then(|e| e.code()),
                    Some("BucketAlreadyOwnedByYou" | "BucketAlreadyExists")
                ) =>
            {
                Ok(())
            }
            Err(error) => Err(bucket_error(location, &self.bucket, &error)),
        }
    }

    async fn check_bucket(&self, location: &str) -> Result<(), ArtifactError> {
        match self.client.head_bucket().bucket(&self.bucket).send().await {
            Ok(_) => Ok(()),
            Err(error) => Err(bucket_error(location, &self.bucket, &error)),
        }
    }

    async fn upload(
        &self,
        key: &str,
        bytes: Vec<u8>,
        sha256: &str,
        write: Write,
    ) -> Result<Written, ArtifactError> {
        if bytes.len() as u64 > self.multipart_threshold {
            let len = bytes.len() as u64;
            self.upload_multipart(key, Body::Bytes(&bytes), len, sha256, write)
                .await
        } else {
            self.upload_single(key, bytes, sha256, write).await
        }
    }

    async fn upload_single(
        &self,
        key: &str,
        bytes: Vec<u8>,
        sha256: &str,
        write: Write,
    ) -> Result<Written, ArtifactError> {
        let object_key = self.object_key(key);
        tracing::debug!(s3_key = %object_key, size = bytes.len(), ?write, "putting object");
        let mut request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&object_key)
            .metadata(SHA256_METADATA, sha256)
            .body(ByteStream::from(bytes));
        if write == Write::IfAbsent {
            request = request.if_none_match("*");
        }
        match request.send().await {
            Ok(_) => Ok(Written::Created),
            Err(error) => conditional_outcome(key, write, &error),
        }
    }

    async fn upload_multipart(
        &self,
        key: &str,
        body: Body<'_>,
        len: u64,
        sha256: &str,
        write: Write,
    ) -> Result<Written, ArtifactError> {
        // Skip uploading megabytes that the conditional complete would throw away. The
        // condition on the complete request still decides when two writers race.
        if write == Write::IfAbsent && self.exists(key).await? {
            return Ok(Written::AlreadyExists);
        }
        let object_key = self.object_key(key);
        tracing::debug!(s3_key = %object_key, size = len, ?write, "starting multipart upload");
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(&object_key)
            .metadata(SHA256_METADATA, sha256)
            .send()
            .await
            .map_err(|error| artifact_error(key, &error))?;
        let upload_id = created
            .upload_id()
            .ok_or_else(|| ArtifactError::Failed {
                key: key.to_owned(),
                message: "the server started a multipart upload without an upload id".to_owned(),
            })?
            .to_owned();
        let result = self
            .upload_parts(key, &object_key, &upload_id, (body, len), write)
            .await;
        if !matches!(result, Ok(Written::Created)) {
            // An upload that is neither completed nor aborted keeps its parts (and their cost)
            // on the server until a lifecycle rule removes them.
            self.abort_upload(&object_key, &upload_id).await;
        }
        result
    }

    /// Uploads the parts of the `len` bytes of `body` one after another and completes the
    /// upload.
    async fn upload_parts(
        &self,
        key: &str,
        object_key: &str,
        upload_id: &str,
        (body, len): (Body<'_>, u64),
        write: Write,
    ) -> Result<Written, ArtifactError> {
        let part_size = effective_part_size(len, self.part_size);
        let mut parts = Vec::new();
        // Parts go up sequentially: artifacts are rarely more than a few parts, and one stream
        // per upload keeps a worker's memory at one part's copy.
        for (index, offset) in (0..len).step_by(part_size.max(1) as usize).enumerate() {
            let part_number = i32::try_from(index + 1).map_err(|_| ArtifactError::Failed {
                key: key.to_owned(),
                message: format!("part number {} does not fit S3's range", index + 1),
            })?;
            let chunk = body.part(key, offset, part_size.min(len - offset)).await?;
            let uploaded = self
                .client
                .upload_part()
                .bucket(&self.bucket)
                .key(object_key)
                .upload_id(upload_id)
                .part_number(part_number)
                // An owned copy of the part: the SDK needs a body it can resend on retry.
                .body(ByteStream::from(chunk))
                .send()
                .await
                .map_err(|error| artifact_error(key, &error))?;
            let e_tag = uploaded.e_tag().ok_or_else(|| ArtifactError::Failed {
                key: key.to_owned(),
                message: format!("the server returned no etag for part {part_number}"),
            })?;
            parts.push(
                CompletedPart::builder()
                    .part_number(part_number)
                    .e_tag(e_tag)
                    .build(),
            );
        }
        let mut complete = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(object_key)
            .upload_id(upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            );
        if write == Write::IfAbsent {
            complete = complete.if_none_match("*");
        }
        match complete.send().await {
            Ok(_) => Ok(Written::Created),
            Err(error) => conditional_outcome(key, write, &error),
        }
    }

    /// Best effort: a failure here only leaves parts behind, and the upload's own error is the
    /// one the caller needs.
    async fn abort_upload(&self, object_key: &str, upload_id: &str) {
        let aborted = self
            .client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(object_key)
            .upload_id(upload_id)
            .send()
            .await;
        if let Err(error) = aborted {
            tracing::warn!(
                s3_key = %object_key,
                upload_id,
                error = %DisplayErrorContext(&error),
                "could not abort a multipart upload; its parts stay until a lifecycle rule removes them"
            );
        }
    }
}

/// What a multipart upload reads its parts from.
#[derive(Clone, Copy)]
enum Body<'a> {
    Bytes(&'a [u8]),
    /// A file too large to hold in memory: each part is read when it goes up.
    File(&'a std::path::Path),
}

impl Body<'_> {
    /// The `len` bytes at `offset`.
    async fn part(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>, ArtifactError> {
        let failed = |message: String| ArtifactError::Failed {
            key: key.to_owned(),
            message,
        };
        let len = usize::try_from(len).map_err(|_| failed("part too large".to_owned()))?;
        match self {
            Body::Bytes(bytes) => {
                let start = usize::try_from(offset).unwrap_or(usize::MAX);
                bytes
                    .get(start..start.saturating_add(len))
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| failed(format!("no part at offset {offset}")))
            }
            Body::File(path) => {
                use tokio::io::{AsyncReadExt, AsyncSeekExt};
                let read =
                    |error: std::io::Error| failed(format!("reading {}: {error}", path.display()));
                let mut file = tokio::fs::File::open(path).await.map_err(read)?;
                file.seek(std::io::SeekFrom::Start(offset))
                    .await
                    .map_err(read)?;
                let mut part = vec![0; len];
                file.read_exact(&mut part).await.map_err(read)?;
                Ok(part)
            }
        }
    }
}

/// The size and sha256 of the file at `path`, read in pieces on a blocking thread.
async fn file_digest(key: &str, path: &std::path::Path) -> Result<(u64, String), ArtifactError> {
    let path = path.to_path_buf();
    let task_key = key.to_owned();
    tokio::task::spawn_blocking(move || {
        use sha2::Digest;
        let key = task_key;
        use std::io::Read;
        let failed = |error: std::io::Error| ArtifactError::Failed {
            key: key.clone(),
            message: format!("reading {}: {error}", path.display()),
        };
        let mut file = std::fs::File::open(&path).map_err(failed)?;
        let mut hasher = sha2::Sha256::new();
        let mut buffer = vec![0; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buffer).map_err(failed)?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            size += n as u64;
        }
        let sha256 = crate::hex(&hasher.finalize());
        Ok((size, sha256))
    })
    .await
    .map_err(|error| ArtifactError::Failed {
        key: key.to_owned(),
        message: format!("hashing task failed: {error}"),
    })?
}

/// The part size for an object of `len` bytes: the configured size, raised when the object
/// would otherwise need more than S3's 10,000 parts.
fn effective_part_size(len: u64, configured: u64) -> u64 {
    configured.max(len.div_ceil(MAX_PARTS))
}

/// Maps the error of a possibly conditional write: a failed `If-None-Match: *` means the object
/// exists; anything else is an error.
fn conditional_outcome<E, R>(
    key: &str,
    write: Write,
    error: &aws_sdk_s3::error::SdkError<E, R>,
) -> Result<Written, ArtifactError>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: super::errors::HasStatus + std::fmt::Debug,
{
    if write == Write::IfAbsent && classify(error) == Class::PreconditionFailed {
        return Ok(Written::AlreadyExists);
    }
    Err(artifact_error(key, error))
}

/// Maps an error of a bucket-level call; a missing bucket gets a message saying how to fix it.
fn bucket_error<E, R>(
    location: &str,
    bucket: &str,
    error: &aws_sdk_s3::error::SdkError<E, R>,
) -> ArtifactError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: super::errors::HasStatus + std::fmt::Debug,
{
    match artifact_error(location, error) {
        ArtifactError::NotFound { key } => ArtifactError::Failed {
            key,
            message: format!(
                "bucket {bucket} does not exist; create it or set create_bucket: true"
            ),
        },
        other => other,
    }
}

/// Builds the SDK client: static credentials, rustls with ring, small SDK retry, and the
/// config's timeouts.
async fn build_client(config: &S3Config, location: &str) -> Result<Client, ArtifactError> {
    let failed = |message: String| ArtifactError::Failed {
        key: location.to_owned(),
        message,
    };
    let mut http = aws_smithy_http_client::Builder::new().tls_provider(tls::Provider::Rustls(
        tls::rustls_provider::CryptoMode::Ring,
    ));
    let plain_http = config
        .endpoint
        .as_deref()
        .is_some_and(|endpoint| endpoint.starts_with("http://"));
    if let Some(ca_file) = &config.ca_file {
        let pem = tokio::fs::read(ca_file).await.map_err(|error| {
            failed(format!("reading s3 ca_file {}: {error}", ca_file.display()))
        })?;
        check_ca_pem(&pem)
            .map_err(|reason| failed(format!("s3 ca_file {}: {reason}", ca_file.display())))?;
        http = http.tls_context(trust(tls::TrustStore::empty().with_pem_certificate(pem))?);
    } else if plain_http {
        // No TLS to verify: skip loading the system's roots, which the HTTP client otherwise
        // insists on finding even for plain http (and which a scratch image lacks).
        http = http.tls_context(trust(tls::TrustStore::empty())?);
    }
    let credentials = Credentials::new(
        &config.access_key_id,
        config.secret_access_key.expose(),
        None,
        None,
        "cowork-s3-config",
    );
    let mut builder = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(config.region.clone()))
        .credentials_provider(credentials)
        .force_path_style(config.path_style)
        .http_client(http.build_https())
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(SDK_MAX_ATTEMPTS)
                .with_initial_backoff(SDK_INITIAL_BACKOFF),
        )
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(config.connect_timeout)
                .operation_timeout(config.operation_timeout)
                .build(),
        )
        // The SDK's own CRC checksums are off unless an operation requires them: several
        // S3-compatible servers reject or mishandle them, and the sha256 metadata already
        // guards every object end to end.
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
    if let Some(endpoint) = &config.endpoint {
        builder = builder.endpoint_url(endpoint);
    }
    Ok(Client::from_conf(builder.build()))
}

fn trust(store: tls::TrustStore) -> Result<tls::TlsContext, ArtifactError> {
    tls::TlsContext::builder()
        .with_trust_store(store)
        .build()
        .map_err(|error| ArtifactError::Failed {
            key: "s3 tls".to_owned(),
            message: format!("building the tls context: {error}"),
        })
}

/// Checks that `pem` holds at least one certificate usable as a trust anchor. The HTTP client
/// parses the file only when it opens its first connection, and panics there on a bad file.
fn check_ca_pem(pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("not a PEM certificate bundle: {error}"))?;
    if certificates.is_empty() {
        return Err("contains no PEM certificate".to_owned());
    }
    let mut roots = rustls::RootCertStore::empty();
    for (index, certificate) in certificates.into_iter().enumerate() {
        roots
            .add(certificate)
            .map_err(|error| format!("certificate {} is not usable: {error}", index + 1))?;
    }
    Ok(())
}

/// Computes the sha256 of `bytes`, on a blocking thread (`spawn_blocking`) when the body is large,
/// and hands the bytes back.
async fn digest(key: &str, bytes: Vec<u8>) -> Result<(Vec<u8>, String), ArtifactError> {
    if bytes.len() <= BLOCKING_DIGEST_BYTES {
        let sha256 = sha256_hex(&bytes);
        return Ok((bytes, sha256));
    }
    tokio::task::spawn_blocking(move || {
        let sha256 = sha256_hex(&bytes);
        (bytes, sha256)
    })
    .await
    .map_err(|error| ArtifactError::Failed {
        key: key.to_owned(),
        message: format!("hashing task failed: {error}"),
    })
}

/// Checks `key` and computes the reference (size, sha256) of `bytes` stored under it.
async fn checked_reference(
    key: &str,
    bytes: Vec<u8>,
) -> Result<(Vec<u8>, ArtifactRef), ArtifactError> {
    check_key(key)?;
    let (bytes, sha256) = digest(key, bytes).await?;
    let reference = ArtifactRef {
        key: key.to_owned(),
        size: bytes.len() as u64,
        sha256,
    };
    Ok((bytes, reference))
}

#[async_trait]
impl ArtifactStore for S3ArtifactStore {
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<ArtifactRef, ArtifactError> {
        let (bytes, reference) = checked_reference(key, bytes).await?;
        self.upload(key, bytes, &reference.sha256, Write::Replace)
            .await?;
        Ok(reference)
    }

    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<PutOutcome, ArtifactError> {
        let (bytes, reference) = checked_reference(key, bytes).await?;
        // When the SDK retries a write whose first attempt landed, the retry sees the object
        // and reports AlreadyExists; callers treat an existing object with the same digest as
        // success, so that is safe.
        match self
            .upload(key, bytes, &reference.sha256, Write::IfAbsent)
            .await?
        {
            Written::Created => Ok(PutOutcome::Created(reference)),
            Written::AlreadyExists => Ok(PutOutcome::AlreadyExists),
        }
    }

    async fn put_file(
        &self,
        key: &str,
        path: &std::path::Path,
    ) -> Result<ArtifactRef, ArtifactError> {
        check_key(key)?;
        let (size, sha256) = file_digest(key, path).await?;
        if size > self.multipart_threshold {
            self.upload_multipart(key, Body::File(path), size, &sha256, Write::Replace)
                .await?;
        } else {
            let bytes = Body::File(path).part(key, 0, size).await?;
            self.upload_single(key, bytes, &sha256, Write::Replace)
                .await?;
        }
        Ok(ArtifactRef {
            key: key.to_owned(),
            size,
            sha256,
        })
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, ArtifactError> {
        let (output, expected) = self.get_object(key).await?;
        // The SDK's operation timeout ends with the response headers; the body gets its own.
        let body = tokio::time::timeout(self.operation_timeout, output.body.collect())
            .await
            .map_err(|_| ArtifactError::Transient {
                key: key.to_owned(),
                message: format!(
                    "reading the body took longer than the operation timeout of {:?}",
                    self.operation_timeout
                ),
            })?
            .map_err(|error| ArtifactError::Transient {
                key: key.to_owned(),
                message: format!("reading the body: {}", DisplayErrorContext(&error)),
            })?;
        let bytes = Vec::<u8>::from(body.into_bytes());
        let Some(expected) = expected else {
            // Objects written by other tools carry no digest; there is nothing to check.
            return Ok(bytes);
        };
        let (bytes, found) = digest(key, bytes).await?;
        if found != expected {
            return Err(ArtifactError::Corrupt {
                key: key.to_owned(),
                expected,
                found,
            });
        }
        Ok(bytes)
    }

    /// Streams the body into the file piece by piece, hashing as it goes, so a document of any
    /// size (a million-run batch's 1.5 GB envelope) costs one piece of memory. A digest that does
    /// not match removes the file: the caller never reads bytes the store could not vouch for.
    async fn get_file(&self, key: &str, path: &std::path::Path) -> Result<u64, ArtifactError> {
        use sha2::Digest;
        use tokio::io::AsyncWriteExt;
        let (mut output, expected) = self.get_object(key).await?;
        let write_failed = |error: std::io::Error| ArtifactError::Failed {
            key: key.to_owned(),
            message: format!("writing {}: {error}", path.display()),
        };
        let mut file = tokio::fs::File::create(path).await.map_err(write_failed)?;
        let mut hasher = sha2::Sha256::new();
        let mut size = 0u64;
        loop {
            // A big body may take longer than one operation in all; what must not happen is a
            // body that stops moving, so the timeout applies to each piece.
            let piece = tokio::time::timeout(self.operation_timeout, output.body.next())
                .await
                .map_err(|_| ArtifactError::Transient {
                    key: key.to_owned(),
                    message: format!(
                        "the body stopped for longer than the operation timeout of {:?}",
                        self.operation_timeout
                    ),
                })?;
            let Some(piece) = piece else { break };
            let piece = piece.map_err(|error| ArtifactError::Transient {
                key: key.to_owned(),
                message: format!("reading the body: {}", DisplayErrorContext(&error)),
            })?;
            hasher.update(&piece);
            size += piece.len() as u64;
            file.write_all(&piece).await.map_err(write_failed)?;
        }
        file.flush().await.map_err(write_failed)?;
        drop(file);
        let found = crate::hex(&hasher.finalize());
        match expected {
            Some(expected) if expected != found => {
                let _ = tokio::fs::remove_file(path).await;
                Err(ArtifactError::Corrupt {
                    key: key.to_owned(),
                    expected,
                    found,
                })
            }
            // Objects written by other tools carry no digest; there is nothing to check.
            _ => Ok(size),
        }
    }

    async fn exists(&self, key: &str) -> Result<bool, ArtifactError> {
        check_key(key)?;
        let head = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(self.object_key(key))
            .send()
            .await;
        match head {
            Ok(_) => Ok(true),
            Err(error) => match artifact_error(key, &error) {
                ArtifactError::NotFound { .. } => Ok(false),
                other => Err(other),
            },
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, ArtifactError> {
        self.list_page(prefix, None, usize::MAX).await
    }

    async fn list_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, ArtifactError> {
        check_prefix(prefix)?;
        let mut keys = Vec::new();
        if limit == 0 {
            return Ok(keys);
        }
        // S3 lists in byte order, so the first `limit` keys after `after` are the page; a
        // server may send short pages, so this asks until the page is full. Sorting keeps the
        // port's promise on servers that do not list in order.
        self.list_pages(prefix, None, after, |page| {
            keys.extend(self.keys_of(page));
            keys.len() < limit
        })
        .await?;
        keys.sort();
        keys.truncate(limit);
        Ok(keys)
    }

    async fn list_children(&self, prefix: &str) -> Result<Vec<String>, ArtifactError> {
        check_prefix(prefix)?;
        let full_prefix = self.object_key(prefix);
        let mut names = Vec::new();
        self.list_pages(prefix, Some("/"), None, |page| {
            // Objects directly under the prefix, then the "directories" (common prefixes).
            let objects = page.contents().iter().filter_map(|object| object.key());
            let dirs = page
                .common_prefixes()
                .iter()
                .filter_map(|common| common.prefix());
            names.extend(
                objects
                    .chain(dirs)
                    .filter_map(|key| key.strip_prefix(full_prefix.as_str()))
                    .map(|rest| rest.trim_end_matches('/'))
                    .filter(|name| !name.is_empty())
                    .map(str::to_owned),
            );
            true
        })
        .await?;
        names.sort();
        names.dedup();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_size_grows_to_stay_within_ten_thousand_parts() {
        fn check(len: u64, configured: u64, expected: u64) {
            let size = effective_part_size(len, configured);
            assert_eq!(size, expected, "len {len}, configured {configured}");
            assert!(len.div_ceil(size.max(1)) <= MAX_PARTS);
        }
        const MIB: u64 = 1024 * 1024;
        check(12 * MIB, 5 * MIB, 5 * MIB);
        check(10_000 * 8 * MIB, 8 * MIB, 8 * MIB);
        check(10_000 * 8 * MIB + 1, 8 * MIB, 8 * MIB + 1);
        check(0, 8 * MIB, 8 * MIB);
    }

    #[test]
    fn ca_files_must_hold_usable_certificates() {
        assert!(check_ca_pem(b"").is_err());
        assert!(check_ca_pem(b"not a certificate").is_err());
        let garbage = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(check_ca_pem(garbage).is_err());
        assert!(check_ca_pem(TEST_CA_PEM.as_bytes()).is_ok());
    }

    /// A self-signed CA made with `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256
    /// -subj /CN=cowork-test-ca -days 36500 -nodes`; only its parsing matters here.
    const TEST_CA_PEM: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIBiTCCAS+gAwIBAgIUVVBlKB4zPjns9WO+5dCsAaWdvskwCgYIKoZIzj0EAwIw\n\
GTEXMBUGA1UEAwwOY293b3JrLXRlc3QtY2EwIBcNMjYxMTMwMDUyNjI2WhgPMjEy\n\
NjExMDYwNTI2MjZaMBkxFzAVBgNVBAMMDmNvd29yay10ZXN0LWNhMFkwEwYHKoZI\n\
zj0CAQYIKoZIzj0DAQcDQgAE4ceQG12ggUw4bpRRbWXdLsS4Gu8zGv4EYwmIiQQ/\n\
/sGjjNcgu5NmvPKgO4Z0DFSZUiKA+ouw/Kp2TX9aqDKgGKNTMFEwHQYDVR0OBBYE\n\
FIMzSoH3pSfnFq4qVAvzRdtOlCuyMB8GA1UdIwQYMBaAFIMzSoH3pSfnFq4qVAvz\n\
RdtOlCuyMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgT/ZcW5m2\n\
zDgQfkj6BzLLCs112GCNVF95u+lB5jlfnzUCIQCtVlPui38/I7uK6v8wUkCLYkbn\n\
XwZl3Fdm2r2ZJv4Sjg==\n\
-----END CERTIFICATE-----\n\
";
}
