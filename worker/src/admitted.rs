//! Which delivered jobs a fleet worker runs (docs/operations/security.md "Trust model").
//!
//! Whoever may publish on `cowork.jobs.>` could otherwise have workers run anything with the
//! fleet's model keys: a job of a batch that does not exist (no batch record used to mean "run
//! it"), a bundle of their own, flags the harness passes on verbatim. So a worker runs a job
//! only when
//!
//! - its batch has a record (the coordinator writes it before it publishes any job), and
//! - the batch's stored `spec.json` has the digest that record names, and the job's bundle,
//!   executor and forwarded flags are what that spec gives every job of the batch.
//!
//! (That its tier is the one of the subject it came on is checked where it is decoded, in the
//! queue.) A job that fails these is never run and never reported: it is acked away, logged
//! with the reason. When the record or the spec cannot be read (the store or the registry is
//! out), the job is handed back, as for any failure before spend: not knowing, running it
//! could spend on a forged job.
//!
//! Specs are read once per batch and kept for the [`SpecFacts::CACHED`] most recent batches.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use cowork_core::plan::ABLATE_SKILL;
use cowork_fabric::{ArtifactStore, sha256_hex};
use cowork_schema::BatchId;
use cowork_schema::batch::{BatchSpec, ExecutorKind, StoredBatch};
use cowork_schema::job::JobSpec;
use cowork_schema::registry::BatchRecord;

/// What every job of one batch shares, as its stored spec says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SpecFacts {
    bundle_sha256: String,
    executor: ExecutorKind,
    forwarded_flags: Vec<String>,
    /// The wire names of an eval's no-skill arms, whose jobs add `--ablate-skill`.
    ablated_arms: Vec<String>,
}

impl SpecFacts {
    /// Batches whose facts a worker keeps.
    const CACHED: usize = 64;

    pub(crate) fn of(spec: &BatchSpec) -> SpecFacts {
        SpecFacts {
            bundle_sha256: spec.bundle_sha256.clone(),
            executor: spec.executor,
            forwarded_flags: cowork_core::plan::forwarded_flags_of(&spec.flags, spec.mode),
            ablated_arms: spec
                .eval
                .iter()
                .flat_map(|eval| (0_u32..).zip(&eval.arms))
                .filter(|(_, dir)| dir.is_none())
                .map(|(index, _)| cowork_core::plan::eval::arm_wire_name(index))
                .collect(),
        }
    }

    /// The flags the spec gives `job`: the batch's, and `--ablate-skill` for a no-skill arm
    /// (as [`cowork_core::plan::Plan::job`] lays them out).
    fn forwarded_flags_of(&self, job: &JobSpec) -> Vec<String> {
        let mut flags = self.forwarded_flags.clone();
        let ablated = job
            .arm
            .as_ref()
            .is_some_and(|arm| self.ablated_arms.contains(arm));
        if ablated && !flags.iter().any(|flag| flag == ABLATE_SKILL) {
            flags.push(ABLATE_SKILL.to_owned());
        }
        flags
    }

    /// Why `job` is not a job of the batch these facts describe; `None` when it is.
    pub(crate) fn refuses(&self, job: &JobSpec) -> Option<String> {
        if job.bundle_sha256 != self.bundle_sha256 {
            return Some(format!(
                "its bundle {} is not its batch's ({})",
                job.bundle_sha256, self.bundle_sha256
            ));
        }
        if job.executor != self.executor {
            return Some(format!(
                "its executor {} is not its batch's ({})",
                job.executor.as_str(),
                self.executor.as_str()
            ));
        }
        let expected = self.forwarded_flags_of(job);
        if job.forwarded_flags != expected {
            return Some(format!(
                "its forwarded flags {:?} are not the ones its batch was accepted with ({:?})",
                job.forwarded_flags, expected
            ));
        }
        None
    }
}

/// What checking a job against its batch came to.
pub(crate) enum Checked {
    /// The job is its batch's.
    Admitted,
    /// Never run it (the reason says why).
    Refused(String),
    /// The spec could not be read now; hand the job back.
    Unknown(String),
}

/// The specs of recent batches, by batch and spec digest.
#[derive(Default)]
pub(crate) struct AdmittedSpecs {
    recent: Mutex<VecDeque<(BatchId, String, Arc<SpecFacts>)>>,
}

impl AdmittedSpecs {
    /// Checks `job` against its batch's `record` and stored spec.
    pub(crate) async fn check(
        &self,
        store: &dyn ArtifactStore,
        record: &BatchRecord,
        job: &JobSpec,
    ) -> Checked {
        let facts = match self.cached(&record.batch_id, &record.spec_sha256) {
            Some(facts) => facts,
            None => match read_facts(store, record).await {
                Ok(facts) => self.keep(record, facts),
                Err(checked) => return checked,
            },
        };
        match facts.refuses(job) {
            None => Checked::Admitted,
            Some(reason) => Checked::Refused(reason),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(BatchId, String, Arc<SpecFacts>)>> {
        // Only pushes, pops and lookups happen under the lock: a poisoned one is consistent.
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn cached(&self, batch_id: &BatchId, spec_sha256: &str) -> Option<Arc<SpecFacts>> {
        self.lock()
            .iter()
            .find(|(id, sha, _)| id == batch_id && sha == spec_sha256)
            .map(|(_, _, facts)| Arc::clone(facts))
    }

    fn keep(&self, record: &BatchRecord, facts: SpecFacts) -> Arc<SpecFacts> {
        let facts = Arc::new(facts);
        let mut recent = self.lock();
        if recent.len() >= SpecFacts::CACHED {
            recent.pop_front();
        }
        recent.push_back((
            record.batch_id.clone(),
            record.spec_sha256.clone(),
            Arc::clone(&facts),
        ));
        facts
    }
}

/// Reads and verifies the spec `record` names.
async fn read_facts(store: &dyn ArtifactStore, record: &BatchRecord) -> Result<SpecFacts, Checked> {
    let key = cowork_schema::layout::BatchKey::new(&record.batch_id).spec();
    let bytes = match store.get(key.as_str()).await {
        Ok(bytes) => bytes,
        Err(error) if error.is_transient() => {
            return Err(Checked::Unknown(format!("reading {key}: {error}")));
        }
        Err(error) => {
            return Err(Checked::Refused(format!(
                "its batch's spec {key} cannot be read: {error}"
            )));
        }
    };
    let found = sha256_hex(&bytes);
    if found != record.spec_sha256 {
        return Err(Checked::Refused(format!(
            "its batch's spec {key} has sha256 {found}, not the {} its record names",
            record.spec_sha256
        )));
    }
    let stored: StoredBatch = serde_json::from_slice(&bytes).map_err(|error| {
        Checked::Refused(format!(
            "its batch's spec {key} is not a batch spec: {error}"
        ))
    })?;
    if stored.batch_id != record.batch_id {
        return Err(Checked::Refused(format!(
            "its batch's spec {key} is batch {}'s",
            stored.batch_id
        )));
    }
    Ok(SpecFacts::of(&stored.spec))
}
