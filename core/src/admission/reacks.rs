//! Telling a re-ack from a duplicate. After a leader election of the queue, JetStream can
//! deliver a job that already finished again: its ack was lost. That delivery finds the job's
//! record and reports the stored run once more without running it, marking its `finished`
//! event with the attempt that stored the record. Such a report of the very run the fold
//! already holds is a re-ack: the same run again, not a second one. A second `finished` from a
//! delivery that ran the job, or one whose result differs from the folded one, is a duplicate.
//!
//! "The very run" is checked against what the fold keeps anyway: for a completed run the
//! location and sha256 of its `result.json` ([`ResultIndex`]); for an outcome that is not a
//! sample (an error, an unanswered run) a 64-bit digest of the outcome and its artifacts, kept
//! here per job, so nothing per job grows for the usual completed runs.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use cowork_schema::event::{ArtifactRef, JobOutcome};
use cowork_schema::ids::JobId;

use super::results::ResultIndex;

/// A `finished` event of a job whose ordinal the fold already holds.
pub(super) struct Report<'a> {
    pub unit: u32,
    pub run: u32,
    pub ordinal: u64,
    pub job_id: &'a JobId,
    pub outcome: &'a JobOutcome,
    pub artifacts: &'a [ArtifactRef],
    /// The event's `fromRecordOfAttempt`: set only by a delivery that did not run the job.
    pub from_record_of_attempt: Option<u32>,
}

/// Digests of the folded outcomes that are not samples, by job ordinal.
#[derive(Clone, Debug, Default)]
pub(super) struct UnsampledReports {
    digests: HashMap<u64, u64>,
}

impl UnsampledReports {
    /// Keeps the digest of a first folded outcome (completed runs are kept by the results).
    pub(super) fn folded(&mut self, ordinal: u64, outcome: &JobOutcome, artifacts: &[ArtifactRef]) {
        if !matches!(outcome, JobOutcome::Completed { .. }) {
            self.digests.insert(ordinal, digest(outcome, artifacts));
        }
    }

    /// Whether `report` re-reports the folded run from its stored record (a re-ack) rather
    /// than reporting a second run or a different result (a duplicate).
    pub(super) fn is_reack(&self, results: &ResultIndex, report: &Report<'_>) -> bool {
        if report.from_record_of_attempt.is_none() {
            return false;
        }
        match report.outcome {
            JobOutcome::Completed { .. } => {
                results.holds((report.unit, report.run), report.job_id, report.artifacts)
            }
            JobOutcome::Unanswered { .. } | JobOutcome::Error { .. } => {
                self.digests.get(&report.ordinal) == Some(&digest(report.outcome, report.artifacts))
            }
        }
    }
}

/// A digest of an outcome and the artifacts reported with it. `DefaultHasher::new` uses fixed
/// keys, so the same report always gives the same digest within this process, which is all a
/// comparison of two reports of one fold needs.
fn digest(outcome: &JobOutcome, artifacts: &[ArtifactRef]) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    match outcome {
        // Not kept here; hashed only so every outcome has a digest.
        JobOutcome::Completed { .. } => 0u8.hash(&mut hasher),
        JobOutcome::Unanswered { message, hint } => {
            1u8.hash(&mut hasher);
            message.hash(&mut hasher);
            hint.hash(&mut hasher);
        }
        JobOutcome::Error { category, message } => {
            2u8.hash(&mut hasher);
            category.hash(&mut hasher);
            message.hash(&mut hasher);
        }
    }
    for artifact in artifacts {
        artifact.key.hash(&mut hasher);
        artifact.size.hash(&mut hasher);
        artifact.sha256.hash(&mut hasher);
    }
    hasher.finish()
}
