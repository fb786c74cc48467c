//! `S3ArtifactStore`: the `ArtifactStore` port on an S3 bucket.
//!
//! Objects live at `<prefix><key>`. Each is written with user metadata `sha256` (lowercase hex
//! of its bytes), which `get` checks. Bodies up to `multipart_threshold` go up in one PUT,
//! larger ones as a multipart upload. The SDK retries a failed request once at most: callers
//! retry with their own backoff, and a long SDK retry loop would hide an outage from them.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketLocationConstraint, CompletedMultipartUpload, CompletedPart, CreateBucketConfiguration,
};
use cowork_schema::event::ArtifactRef;

use super::body::{Body, checked_reference, digest, effective_part_size, file_digest};
use super::client::build_client;
use super::config::S3Config;
use super::errors::{Class, artifact_error, classify};
use crate::artifacts::{ArtifactError, ArtifactStore, PutOutcome, check_key, check_prefix};

/// Name of the user metadata entry holding the object's sha256 (header `x-amz-meta-sha256`).
pub const SHA256_METADATA: &str = "sha256";

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

    /// The S3 key of the store key `key` (which must already have passed `check_key`).
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
