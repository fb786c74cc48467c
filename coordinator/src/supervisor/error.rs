//! Why supervision stopped without a decided batch, and which of those a retry may heal.

use cowork_fabric::{ArtifactError, EventError, QueueError};

use crate::stored_job::StoredJobError;

/// Why supervision stopped without a decided batch.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("publishing job {job_id}")]
    Publish {
        job_id: String,
        #[source]
        source: QueueError,
    },
    #[error("withdrawing the queued {tier} jobs of batch {batch_id}")]
    Withdraw {
        batch_id: String,
        tier: &'static str,
        #[source]
        source: QueueError,
    },
    #[error("reading the events of batch {batch_id}")]
    Events {
        batch_id: String,
        #[source]
        source: EventError,
    },
    #[error("the event log closed before batch {batch_id} was decided")]
    EventsClosed { batch_id: String },
    #[error("storing or reading {key}")]
    Store {
        key: String,
        #[source]
        source: ArtifactError,
    },
    #[error("stored result {key} is unreadable: {message}")]
    BadResult { key: String, message: String },
    #[error(
        "stored result {key} is not the one that was folded: its finished event recorded sha256 {expected}, the store holds {found}"
    )]
    ResultMismatch {
        key: String,
        expected: String,
        found: String,
    },
    #[error("writing the envelope to a local temporary file: {message}")]
    Spool { message: String },
    #[error("the plan cannot be reduced: {message}")]
    Shape { message: String },
    #[error("batch {batch_id} ended before every needed outcome arrived")]
    Incomplete { batch_id: String },
    #[error("batch supervision was cancelled")]
    Cancelled,
}

impl From<StoredJobError> for SuperviseError {
    fn from(error: StoredJobError) -> Self {
        match error {
            StoredJobError::Store { key, source } => SuperviseError::Store { key, source },
            StoredJobError::Unreadable { key, message } => {
                SuperviseError::BadResult { key, message }
            }
            StoredJobError::Mismatch {
                key,
                expected,
                found,
            } => SuperviseError::BadResult {
                key,
                message: format!("sha256 {found}, its job record says {expected}"),
            },
        }
    }
}

impl SuperviseError {
    /// `true` when the queue refused a publish because a later leader fenced this
    /// coordinator's term: the supervision ends as at a lost term.
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            SuperviseError::Publish {
                source: cowork_fabric::queue::QueueError::Fenced { .. },
                ..
            }
        )
    }

    /// `true` when supervising the batch again may succeed: supervision catches up from the
    /// event log, so a retry after a transient port failure loses nothing.
    pub fn is_transient(&self) -> bool {
        match self {
            SuperviseError::Publish { source, .. } | SuperviseError::Withdraw { source, .. } => {
                source.is_transient()
            }
            SuperviseError::Events { source, .. } => source.is_transient(),
            SuperviseError::Store { source, .. } => source.is_transient(),
            SuperviseError::Spool { .. } => true,
            SuperviseError::EventsClosed { .. }
            | SuperviseError::BadResult { .. }
            | SuperviseError::ResultMismatch { .. }
            | SuperviseError::Shape { .. }
            | SuperviseError::Incomplete { .. }
            | SuperviseError::Cancelled => false,
        }
    }
}
