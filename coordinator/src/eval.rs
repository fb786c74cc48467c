//! The coordinator's side of an eval batch's report: once the batch is decided, its
//! `batches/<id>/eval.json` is computed from the stored spec's eval settings and the decided
//! outcome, and stored beside the rollup.
//!
//! The computation itself is the core's pure [`eval_document`], the same one `cowork eval` runs.

use cowork_core::prepared::NO_SKILL;
use cowork_fabric::{ArtifactError, ArtifactStore};
use cowork_schema::batch::{EvalSpec, StoredBatch};
use cowork_schema::layout::BatchKey;

use crate::supervisor::BatchOutcome;
use cowork_core::eval::{
    EvalDocument, EvalDocumentError, EvalDocumentInput, NamedArm, eval_document,
};
use cowork_core::plan::Plan;

/// Why a decided eval batch's report was not stored.
#[derive(Debug, thiserror::Error)]
pub enum EvalStoreError {
    /// The store failed on `key`.
    #[error("{doing} {key}")]
    Store {
        doing: &'static str,
        key: String,
        #[source]
        source: ArtifactError,
    },
    /// `spec.json` cannot be read as a batch spec.
    #[error("{key} is not a valid batch spec: {message}")]
    MalformedSpec { key: String, message: String },
    /// The batch's stored envelope cannot be read as an envelope.
    #[error("{key} is not a valid envelope: {message}")]
    MalformedEnvelope { key: String, message: String },
    /// The stored spec has no eval settings.
    #[error("{key} holds no eval settings (spec.eval)")]
    NoEvalSettings { key: String },
    /// The report cannot be computed.
    #[error("computing the eval report of batch {batch_id}")]
    Report {
        batch_id: String,
        #[source]
        source: EvalDocumentError,
    },
    /// The report cannot be serialized.
    #[error("serializing the eval report")]
    Serialize(#[source] serde_json::Error),
}

impl EvalStoreError {
    /// `true` when storing again may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, EvalStoreError::Store { source, .. } if source.is_transient())
    }
}

/// Computes the eval report of the decided eval batch `plan` from its stored spec
/// (`batches/<id>/spec.json`, which names the arms and the statistical settings) and its
/// `outcome`, and stores it as `batches/<id>/eval.json`. Storing again overwrites with the same
/// bytes (the report is deterministic), so a coordinator that re-decides a batch after a
/// restart can call this again.
pub async fn store_eval_document(
    store: &dyn ArtifactStore,
    plan: &Plan,
    outcome: &BatchOutcome,
) -> Result<EvalDocument, EvalStoreError> {
    let spec_key = BatchKey::new(&plan.batch_id).spec().into_string();
    let spec_bytes = store
        .get(&spec_key)
        .await
        .map_err(|source| EvalStoreError::Store {
            doing: "reading",
            key: spec_key.clone(),
            source,
        })?;
    let stored: StoredBatch =
        serde_json::from_slice(&spec_bytes).map_err(|error| EvalStoreError::MalformedSpec {
            key: spec_key.clone(),
            message: error.to_string(),
        })?;
    let Some(settings) = stored.spec.eval else {
        return Err(EvalStoreError::NoEvalSettings { key: spec_key });
    };
    let arms = spec_arm_labels(&settings);
    // The pairing needs every folded run's result: an eval batch is small enough to read its
    // stored envelope back whole.
    let envelope_bytes =
        store
            .get(&outcome.envelope_key)
            .await
            .map_err(|source| EvalStoreError::Store {
                doing: "reading",
                key: outcome.envelope_key.clone(),
                source,
            })?;
    let envelope: cowork_schema::envelope::Envelope = serde_json::from_slice(&envelope_bytes)
        .map_err(|error| EvalStoreError::MalformedEnvelope {
            key: outcome.envelope_key.clone(),
            message: error.to_string(),
        })?;
    let document = eval_document(&EvalDocumentInput {
        plan,
        settings: &settings,
        arms: &arms,
        folded: &outcome.reduction.results,
        results: &envelope.results,
        simulated_runs: outcome.reduction.simulated_runs,
    })
    .map_err(|source| EvalStoreError::Report {
        batch_id: plan.batch_id.to_string(),
        source,
    })?;
    let bytes = document
        .to_stored_json()
        .map_err(EvalStoreError::Serialize)?;
    let key = BatchKey::new(&plan.batch_id).eval().into_string();
    store
        .put(&key, bytes)
        .await
        .map_err(|source| EvalStoreError::Store {
            doing: "storing",
            key,
            source,
        })?;
    Ok(document)
}

/// How a report made by the coordinator labels the arms: their spec names and bundle-relative
/// directories (`no skill` for the no-skill arm).
pub fn spec_arm_labels(settings: &EvalSpec) -> Vec<NamedArm> {
    (0..settings.arms.len())
        .map(|index| NamedArm {
            name: cowork_core::plan::eval::spec_arm_name(settings, index),
            source: settings.arms[index]
                .clone()
                .unwrap_or_else(|| NO_SKILL.to_owned()),
        })
        .collect()
}
