//! The S3 implementation of the `ArtifactStore` port, for AWS S3 and S3-compatible servers
//! (MinIO in self-hosted setups). It behaves like the embedded `DirArtifactStore`: the same keys
//! (decisions.md#storage), the same errors, create-if-absent with `If-None-Match: *`, and a sha256
//! recorded as object metadata `sha256` and checked on every read.
//!
//! Modules, in reading order:
//! - [`config`]: `S3Config`, the plain-data settings, and their validation.
//! - `errors`: mapping of SDK errors to `ArtifactError` (transient, not found, failed).
//! - `client`: the SDK client built from a config (credentials, TLS, retries, timeouts).
//! - `body`: upload bodies, the part size and digests.
//! - [`store`]: `S3ArtifactStore` and the port's operations.
//!
//! TLS uses rustls with ring (no aws-lc); the SDK's credential chain is not built in, so the
//! keys come from the config (see [`S3Config`]).

mod body;
mod client;
pub mod config;
mod errors;
pub mod store;

pub use config::S3Config;
pub use store::S3ArtifactStore;
