//! Mapping of AWS SDK errors to `ArtifactError`: which failures a caller may retry
//! (`Transient`), which mean "no such object" (`NotFound`) and which are permanent (`Failed`).
//! The decision itself ([`classify_response`], [`classify_no_response`]) is pure so the table can
//! be tested without a server.

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use crate::artifacts::ArtifactError;

/// What a failed call means to the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// The object (not the bucket) does not exist.
    NotFound,
    /// A conditional request's condition failed (412): for `If-None-Match: *`, the object exists.
    PreconditionFailed,
    /// Retrying later may succeed: timeouts, refused connections, 5xx, throttling.
    Transient,
    /// Retrying will not help: access denied, missing bucket, bad request.
    Failed,
    /// The TLS handshake failed (an untrusted certificate, a plain-HTTP endpoint): permanent,
    /// and the fix is the CA file.
    Tls,
}

/// Why no HTTP response was received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoResponse {
    /// The SDK's connect or operation timeout fired.
    Timeout,
    /// A network error: refused or reset connection, DNS failure, TLS handshake failure.
    Io,
    /// The connector reported a failure it itself considers transient (throttling, server).
    OtherTransient,
    /// The response could not be read or parsed (truncated body, garbled XML).
    BadResponse,
    /// The request could not be built or was refused by the connector as invalid.
    Invalid,
}

/// Error codes of S3 and S3-compatible servers that mean "slow down and retry"; the same list
/// the SDK's own retry classifier uses, plus S3's conditional-write conflict codes.
const TRANSIENT_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "ServiceUnavailable",
    // 409s that S3 returns when two conditional writes of one key race; AWS says to retry.
    "ConditionalRequestConflict",
    "OperationAborted",
];

/// Classifies an HTTP error response by its status and S3 error code.
pub(crate) fn classify_response(status: u16, code: Option<&str>) -> Class {
    match code {
        // A 404 for the bucket is a configuration problem, not a missing object.
        Some("NoSuchBucket") => return Class::Failed,
        Some("NoSuchKey" | "NotFound") => return Class::NotFound,
        Some("PreconditionFailed") => return Class::PreconditionFailed,
        Some(code) if TRANSIENT_CODES.contains(&code) => return Class::Transient,
        _ => {}
    }
    match status {
        // HEAD responses carry no body, hence no code: the status alone decides.
        404 => Class::NotFound,
        412 => Class::PreconditionFailed,
        408 | 429 | 500..=599 => Class::Transient,
        _ => Class::Failed,
    }
}

/// Classifies a failure that produced no HTTP error response.
pub(crate) fn classify_no_response(why: NoResponse) -> Class {
    match why {
        NoResponse::Timeout | NoResponse::Io | NoResponse::OtherTransient => Class::Transient,
        // A truncated or garbled response usually comes from a connection cut mid-way.
        NoResponse::BadResponse => Class::Transient,
        NoResponse::Invalid => Class::Failed,
    }
}

/// The class of an SDK error.
pub(crate) fn classify<E, R>(error: &SdkError<E, R>) -> Class
where
    E: ProvideErrorMetadata,
    R: HasStatus,
{
    match error {
        SdkError::ServiceError(service) => {
            classify_response(service.raw().status_code(), service.err().code())
        }
        SdkError::TimeoutError(_) => classify_no_response(NoResponse::Timeout),
        SdkError::DispatchFailure(dispatch) => {
            if dispatch
                .as_connector_error()
                .is_some_and(|connector| crate::is_tls_failure(connector))
            {
                return Class::Tls;
            }
            let why = if dispatch.is_timeout() {
                NoResponse::Timeout
            } else if dispatch.is_io() {
                NoResponse::Io
            } else if dispatch.is_user() {
                NoResponse::Invalid
            } else if dispatch.as_other().is_some() {
                // The HTTP client attaches a kind only to failures it knows to be retryable (a
                // response cut off mid-message is `TransientError`); unknown ones carry none.
                NoResponse::OtherTransient
            } else {
                NoResponse::Invalid
            };
            classify_no_response(why)
        }
        SdkError::ResponseError(response) => {
            // An error status whose body did not parse still tells us what happened.
            let status = response.raw().status_code();
            if status >= 400 {
                classify_response(status, None)
            } else {
                classify_no_response(NoResponse::BadResponse)
            }
        }
        SdkError::ConstructionFailure(_) => classify_no_response(NoResponse::Invalid),
        _ => Class::Failed,
    }
}

/// Access to the HTTP status of a raw response, so [`classify`] stays generic over it.
pub(crate) trait HasStatus {
    fn status_code(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

/// Maps an SDK error on `key` to an `ArtifactError`. The message is the SDK's error chain, which
/// names the operation and the server's code but never the credentials.
pub(crate) fn artifact_error<E, R>(key: &str, error: &SdkError<E, R>) -> ArtifactError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: HasStatus + std::fmt::Debug,
{
    let key = key.to_owned();
    let message = DisplayErrorContext(error).to_string();
    match classify(error) {
        Class::NotFound => ArtifactError::NotFound { key },
        Class::Transient => ArtifactError::Transient { key, message },
        // Only conditional requests expect a 412; callers of those handle it before mapping.
        Class::PreconditionFailed | Class::Failed => ArtifactError::Failed { key, message },
        Class::Tls => ArtifactError::Failed {
            key,
            message: format!(
                "{message} (the TLS handshake with the endpoint failed: if its certificate is signed by a private CA, give the CA with --s3-ca-file)"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_classified_by_code_then_status() {
        fn check(status: u16, code: Option<&str>, expected: Class) {
            assert_eq!(
                classify_response(status, code),
                expected,
                "status {status}, code {code:?}"
            );
        }
        check(404, Some("NoSuchKey"), Class::NotFound);
        check(404, None, Class::NotFound);
        check(404, Some("NoSuchBucket"), Class::Failed);
        check(412, Some("PreconditionFailed"), Class::PreconditionFailed);
        check(412, None, Class::PreconditionFailed);
        check(503, Some("SlowDown"), Class::Transient);
        check(500, Some("InternalError"), Class::Transient);
        check(502, None, Class::Transient);
        check(429, None, Class::Transient);
        check(408, None, Class::Transient);
        check(400, Some("RequestTimeout"), Class::Transient);
        check(409, Some("ConditionalRequestConflict"), Class::Transient);
        check(403, Some("AccessDenied"), Class::Failed);
        check(403, Some("SignatureDoesNotMatch"), Class::Failed);
        check(400, Some("InvalidArgument"), Class::Failed);
        check(409, Some("BucketAlreadyExists"), Class::Failed);
    }

    #[test]
    fn failures_without_a_response() {
        fn check(why: NoResponse, expected: Class) {
            assert_eq!(classify_no_response(why), expected, "{why:?}");
        }
        check(NoResponse::Timeout, Class::Transient);
        check(NoResponse::Io, Class::Transient);
        check(NoResponse::OtherTransient, Class::Transient);
        check(NoResponse::BadResponse, Class::Transient);
        check(NoResponse::Invalid, Class::Failed);
    }
}
