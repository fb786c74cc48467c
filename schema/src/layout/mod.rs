//! The storage layout (decisions.md#storage): every key the fleet writes or reads, built in one
//! place.
//!
//! ```text
//! bundles/<sha256>.tar.zst
//! batches/<batch>/spec.json, rollup.json, envelope.json, eval.json, stats.json, report.html, …
//! batches/<batch>/generation.json                      the resume generation (local store)
//! batches/<batch>/jobs/<job>/result.json, …           artifacts of attempt 1 of generation 0
//! batches/<batch>/jobs/<job>/g<G>a<A>/result.json, …  artifacts of any other attempt
//! batches/<batch>/jobs/<job>/outcome.json             the job's record of generation 0
//! batches/<batch>/jobs/<job>/g<G>/outcome.json        the job's record of generation G ≥ 1
//! probes/<worker id>                                  a worker's start-up write check
//! ```
//!
//! Attempts never share an artifact key, so a second delivery of a job (a redelivery after a
//! lost lease, a duplicate run) can never overwrite the files of the attempt that was folded.
//! The usual case, the first attempt of a batch that was never resumed, keeps the short path a
//! person browsing a store expects.
//!
//! The job record (`outcome.json`, a [`JobRecord`](crate::event::JobRecord)) is written last,
//! with create-if-absent: the first attempt that stores one wins, and its record names the
//! keys, sizes and digests of its artifacts. Readers find a job's files through its record
//! (or through the folded `finished` event, which carries the same references), never by
//! guessing a path.
//!
//! Modules: [`names`] spells every file and directory name once; [`keys`] builds typed store
//! keys from them ([`BatchKey`], [`JobKey`], [`AttemptKey`], [`StoreKey`], [`StorePrefix`]);
//! [`local`] gives the local paths (a local store, a batch directory, a job's work and run
//! directories). The free functions below are the older string API, kept as thin wrappers.

pub mod keys;
pub mod local;
pub mod names;

pub use keys::{AttemptKey, BatchKey, JobKey, StoreKey, StorePrefix};
pub use local::{BatchDir, JobWorkDir, RunDir, StoreRoot};

use crate::ids::{BatchId, JobId};

/// The name of a job's record file.
pub const JOB_RECORD_FILE: &str = names::JOB_RECORD;

/// `batches/<batch>/generation.json`: see [`names::GENERATION`].
pub const GENERATION_FILE: &str = names::GENERATION;

/// `batches/<batch>/<name>`: a batch-level file (`spec.json`, `rollup.json`, …).
pub fn batch_key(batch: &BatchId, name: &str) -> String {
    BatchKey::new(batch).file(name).into_string()
}

/// `batches/<batch>/jobs/`: the prefix of every job's files.
pub fn jobs_prefix(batch: &BatchId) -> String {
    BatchKey::new(batch).jobs_prefix().into_string()
}

/// `batches/<batch>/jobs/<job>`: the directory of one job (no trailing slash).
pub fn job_dir(job: &JobId) -> String {
    JobKey::new(job).dir()
}

/// `true` when `key` names a file inside `job`'s own directory ([`job_dir`]); see
/// [`JobKey::contains`].
pub fn is_job_key(job: &JobId, key: &str) -> bool {
    JobKey::new(job).contains(key)
}

/// The directory of one attempt's artifacts: [`job_dir`] for attempt 1 of generation 0, else
/// `<job dir>/g<generation>a<attempt>`.
pub fn attempt_dir(job: &JobId, generation: u32, attempt: u32) -> String {
    JobKey::new(job).attempt(generation, attempt).dir()
}

/// The key of artifact `name` of one attempt of `job`.
pub fn artifact_key(job: &JobId, generation: u32, attempt: u32, name: &str) -> String {
    JobKey::new(job)
        .attempt(generation, attempt)
        .artifact(name)
        .into_string()
}

/// The key of `job`'s record for `generation`.
pub fn job_record_key(job: &JobId, generation: u32) -> String {
    JobKey::new(job).record(generation).into_string()
}

/// `probes/<worker id>`: see [`StoreKey::probe`].
pub fn probe_key(worker_id: &str) -> String {
    StoreKey::probe(worker_id).into_string()
}

/// `bundles/<sha256>.tar.zst`.
pub fn bundle_key(sha256: &str) -> String {
    StoreKey::bundle(sha256).into_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::UnitRef;

    #[test]
    fn only_keys_inside_the_jobs_own_directory_are_its_keys() {
        let batch = BatchId::new("b1").expect("valid literal");
        let job = JobId::new(&batch, UnitRef::Cell(2), Some(5));
        for key in [
            "batches/b1/jobs/c2/r5/result.json",
            "batches/b1/jobs/c2/r5/g1a2/result.json",
            &artifact_key(&job, 3, 4, "cassette.json"),
            &job_record_key(&job, 2),
        ] {
            assert!(is_job_key(&job, key), "{key}");
        }
        for key in [
            "batches/b2/jobs/c2/r5/result.json",
            "batches/b1/jobs/c2/r50/result.json",
            "batches/b1/jobs/c2/r5",
            "batches/b1/jobs/c2/r5/",
            "batches/b1/jobs/c2/r5/../r6/result.json",
            "batches/b1/jobs/c2/r5/./result.json",
            "batches/b1/jobs/c2/r5//result.json",
            "/batches/b1/jobs/c2/r5/result.json",
        ] {
            assert!(!is_job_key(&job, key), "{key}");
        }
    }

    #[test]
    fn keys_follow_the_layout() {
        let batch = BatchId::new("b1").expect("valid literal");
        let job = JobId::new(&batch, UnitRef::Cell(2), Some(5));
        assert_eq!(job_dir(&job), "batches/b1/jobs/c2/r5");
        assert_eq!(
            artifact_key(&job, 0, 1, "result.json"),
            "batches/b1/jobs/c2/r5/result.json"
        );
        assert_eq!(
            artifact_key(&job, 0, 2, "result.json"),
            "batches/b1/jobs/c2/r5/g0a2/result.json"
        );
        assert_eq!(
            artifact_key(&job, 1, 1, "result.json"),
            "batches/b1/jobs/c2/r5/g1a1/result.json"
        );
        assert_eq!(
            job_record_key(&job, 0),
            "batches/b1/jobs/c2/r5/outcome.json"
        );
        assert_eq!(
            job_record_key(&job, 2),
            "batches/b1/jobs/c2/r5/g2/outcome.json"
        );
        let plain = JobId::new(&batch, UnitRef::File(0), None);
        assert_eq!(job_dir(&plain), "batches/b1/jobs/f0");
        assert_eq!(batch_key(&batch, "rollup.json"), "batches/b1/rollup.json");
        assert_eq!(bundle_key("ab"), "bundles/ab.tar.zst");
        assert_eq!(jobs_prefix(&batch), "batches/b1/jobs/");
        assert_eq!(probe_key("w-1"), "probes/w-1");
    }
}
