//! The ports of Cowork Fleet and their implementations.
//!
//! Modules, in reading order:
//! - [`queue`]: the `JobQueue` port — jobs per tier, at-least-once delivery with ack, nak and
//!   in-progress.
//! - [`events`]: the `EventLog` port — the per-batch stream of job events, the batch's source of
//!   truth.
//! - [`artifacts`]: the `ArtifactStore` port — bundles, results and rollups under the keys of
//!   decisions.md#storage.
//! - [`registry`]: batch records (compare-and-set) and worker heartbeats.
//! - [`health`]: the `FabricHealth` port — whether each stream and bucket can serve now.
//! - [`lease`]: the `CoordinatorLease` port — which coordinator leads, with a fencing token.
//! - [`backoff`]: the one retry schedule (exponential, capped, jittered).
//! - [`bundle`]: deterministic bundle packing and hostile-input-safe unpacking.
//! - [`embedded`]: in-process implementations (channels and a local directory) for `cowork run`.
//! - [`nats`]: the NATS JetStream implementations of the queue, the event log and the registries.
//! - [`s3`]: the `ArtifactStore` on an S3 bucket (AWS S3, MinIO), with `S3Config`.
//! - [`secret`]: `Secret`, a config string that never prints.
//! - [`trace_context`]: the W3C trace context a job carries from admission to its worker.
//!
//! The distributed implementations (NATS JetStream, S3) implement the same traits.

pub mod artifacts;
pub mod backoff;
pub mod bundle;
pub mod embedded;
pub mod events;
pub mod health;
pub mod lease;
pub mod nats;
pub mod queue;
pub mod registry;
pub mod s3;
pub mod secret;
pub mod trace_context;

pub use artifacts::{ArtifactError, ArtifactStore, PutOutcome};
pub use events::{EventError, EventLog, EventSubscription};
pub use health::{FabricHealth, ObjectHealth, ObjectKind, ObjectState};
pub use lease::{CoordinatorLease, LeaseError, LeaseHolder, LeaseState, LeaseTerm};
pub use queue::{
    Delivery, JobPuller, JobQueue, LostJob, LostJobs, LostReason, Published, QueueError,
};
pub use registry::{BatchRegistry, RecordStream, RegistryError, WorkerRegistry};

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(bytes))
}

/// `bytes` as lowercase hex (a digest computed piece by piece, a random token).
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(2 * bytes.len());
    for byte in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// An error and its sources on one line (`outer: cause: root cause`), for logs and refusals
/// that must say everything in one place.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `true` when `error` or any of its sources is a TLS failure (`rustls::Error`: an untrusted or
/// invalid certificate, a peer that does not speak TLS), also when wrapped in an I/O error.
/// Waiting cannot fix these, so neither NATS nor S3 retries them.
pub fn is_tls_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(cause) = current {
        if cause.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        // `io::Error::source` skips the error an I/O error wraps (it returns the wrapped
        // error's own source), and TLS connectors wrap rustls errors in I/O errors, sometimes
        // twice: descend into the wrapped error itself.
        current = match cause.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => cause.source(),
        };
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_failures_are_found_through_wrapping_io_errors() {
        let rustls_error =
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, rustls_error);
        let outer = std::io::Error::other(inner);
        assert!(is_tls_failure(&outer));
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(!is_tls_failure(&plain));
        let text_only = std::io::Error::other("certificate mentioned in text only");
        assert!(!is_tls_failure(&text_only));
    }
}
