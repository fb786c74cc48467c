//! Typed store keys: [`StoreKey`] (one object) and [`StorePrefix`] (a directory of objects,
//! ending in `/`), built only through [`BatchKey`], [`JobKey`] and [`AttemptKey`] or the
//! top-level constructors, so every key has the shape of the layout in [`super`].

use std::fmt;

use super::names;
use crate::ids::{BatchId, JobId};

/// The key of one object in the artifact store, such as `batches/<batch>/spec.json`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StoreKey(String);

impl StoreKey {
    /// `bundles/<sha256>.tar.zst`: a bundle, addressed by the sha256 of its bytes.
    pub fn bundle(sha256: &str) -> StoreKey {
        StoreKey(format!(
            "{}/{sha256}{}",
            names::BUNDLES_DIR,
            names::BUNDLE_EXTENSION
        ))
    }

    /// `probes/<worker id>`: the small object a worker writes at start-up to check that it can
    /// store artifacts at all, before it takes a job whose run it could not keep.
    pub fn probe(worker_id: &str) -> StoreKey {
        StoreKey(format!("{}/{worker_id}", names::PROBES_DIR))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for StoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for StoreKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<StoreKey> for String {
    fn from(key: StoreKey) -> String {
        key.0
    }
}

impl PartialEq<str> for StoreKey {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for StoreKey {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// A directory of the store as a listing prefix: always ends in `/` (`batches/<batch>/jobs/`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StorePrefix(String);

impl StorePrefix {
    /// `batches/`: the prefix of every batch; its children are the batch ids.
    pub fn batches() -> StorePrefix {
        StorePrefix(format!("{}/", names::BATCHES_DIR))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }

    /// The key of `rest` under this prefix (`rest` is a path relative to it, such as
    /// `jobs/c0/r1/result.json`).
    pub fn key(&self, rest: &str) -> StoreKey {
        StoreKey(format!("{}{rest}", self.0))
    }

    /// The part of `key` under this prefix, or `None` when `key` is not under it (parses a
    /// listed key back into its path relative to the prefix).
    pub fn relative<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(self.0.as_str())
    }

    /// The name of `key` when it lies directly in this directory (not in a subdirectory).
    pub fn direct_child<'k>(&self, key: &'k str) -> Option<&'k str> {
        self.relative(key).filter(|rest| !rest.contains('/'))
    }

    /// `<prefix><name>/`: the subdirectory `name` (a path relative to this prefix) as a prefix.
    pub fn child(&self, name: &str) -> StorePrefix {
        StorePrefix(format!("{}{name}/", self.0))
    }
}

impl fmt::Display for StorePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for StorePrefix {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<StorePrefix> for String {
    fn from(prefix: StorePrefix) -> String {
        prefix.0
    }
}

/// The keys of one batch's files: `batches/<batch>/…`.
#[derive(Clone, Copy, Debug)]
pub struct BatchKey<'b> {
    batch: &'b BatchId,
}

impl<'b> BatchKey<'b> {
    pub fn new(batch: &'b BatchId) -> BatchKey<'b> {
        BatchKey { batch }
    }

    /// `batches/<batch>/`: the prefix of every file of the batch.
    pub fn prefix(&self) -> StorePrefix {
        StorePrefix(format!("{}/{}/", names::BATCHES_DIR, self.batch))
    }

    /// `batches/<batch>/<name>`: a batch-level file.
    pub fn file(&self, name: &str) -> StoreKey {
        self.prefix().key(name)
    }

    /// `batches/<batch>/spec.json`.
    pub fn spec(&self) -> StoreKey {
        self.file(names::SPEC)
    }

    /// `batches/<batch>/rollup.json`.
    pub fn rollup(&self) -> StoreKey {
        self.file(names::ROLLUP)
    }

    /// `batches/<batch>/envelope.json`.
    pub fn envelope(&self) -> StoreKey {
        self.file(names::ENVELOPE)
    }

    /// `batches/<batch>/eval.json`.
    pub fn eval(&self) -> StoreKey {
        self.file(names::EVAL)
    }

    /// `batches/<batch>/stats.json`.
    pub fn stats(&self) -> StoreKey {
        self.file(names::STATS)
    }

    /// `batches/<batch>/report.html`.
    pub fn report_html(&self) -> StoreKey {
        self.file(names::REPORT_HTML)
    }

    /// `batches/<batch>/generation.json` (local stores only).
    pub fn generation(&self) -> StoreKey {
        self.file(names::GENERATION)
    }

    /// `batches/<batch>/jobs/`: the prefix of every job's files.
    pub fn jobs_prefix(&self) -> StorePrefix {
        StorePrefix(format!("{}{}/", self.prefix(), names::JOBS_DIR))
    }
}

/// The keys of one job's files: `batches/<batch>/jobs/<unit>[/r<repeat>]/…`.
#[derive(Clone, Copy, Debug)]
pub struct JobKey<'j> {
    job: &'j JobId,
}

impl<'j> JobKey<'j> {
    pub fn new(job: &'j JobId) -> JobKey<'j> {
        JobKey { job }
    }

    /// `batches/<batch>/jobs/<job>`: the job's directory, without a trailing slash.
    pub fn dir(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            names::BATCHES_DIR,
            self.job.batch_part(),
            names::JOBS_DIR,
            self.job.local_part()
        )
    }

    /// `batches/<batch>/jobs/<job>/`: the prefix of every file of the job, all attempts and
    /// generations included.
    pub fn prefix(&self) -> StorePrefix {
        StorePrefix(format!("{}/", self.dir()))
    }

    /// `<job dir>/<name>`: a file directly in the job's directory (attempt 1 of generation 0,
    /// or a job stored before attempts had directories).
    pub fn file(&self, name: &str) -> StoreKey {
        self.prefix().key(name)
    }

    /// `<job dir>/result.json`: the result at its flat place (see [`JobKey::file`]).
    pub fn result(&self) -> StoreKey {
        self.file(names::RESULT)
    }

    /// The keys of one attempt of the job in `generation`.
    pub fn attempt(&self, generation: u32, attempt: u32) -> AttemptKey<'j> {
        AttemptKey {
            job: *self,
            generation,
            attempt,
        }
    }

    /// The job's record for `generation`: `<job dir>/outcome.json` for generation 0, else
    /// `<job dir>/g<generation>/outcome.json`.
    pub fn record(&self, generation: u32) -> StoreKey {
        if generation == 0 {
            self.file(names::JOB_RECORD)
        } else {
            self.file(&format!("g{generation}/{}", names::JOB_RECORD))
        }
    }

    /// The generation of a listed key of the form `<job dir>/g<generation>/outcome.json`, or
    /// `None` for any other key (generation 0's record included: it has no `g` directory).
    pub fn record_generation(&self, key: &str) -> Option<u32> {
        self.prefix()
            .relative(key)?
            .strip_suffix(&format!("/{}", names::JOB_RECORD))?
            .strip_prefix('g')?
            .parse()
            .ok()
    }

    /// `true` when `key` names a file inside the job's own directory, where every attempt's
    /// artifacts and records are: the only keys a `finished` event of that job may name
    /// (another batch's or job's `result.json` must never be folded into this one). Keys with
    /// empty, `.` or `..` segments never are.
    pub fn contains(&self, key: &str) -> bool {
        self.prefix().relative(key).is_some_and(|rest| {
            rest.split('/')
                .all(|segment| !segment.is_empty() && segment != "." && segment != "..")
        })
    }

    /// `batches/<batch>/`: the prefix of every file of the job's batch.
    pub fn batch_prefix(&self) -> StorePrefix {
        StorePrefix(format!("{}/{}/", names::BATCHES_DIR, self.job.batch_part()))
    }
}

/// The keys of one attempt's artifacts. Attempt 1 of generation 0 keeps the job's own
/// directory; any other attempt has `<job dir>/g<generation>a<attempt>/`, so attempts never
/// share a key.
#[derive(Clone, Copy, Debug)]
pub struct AttemptKey<'j> {
    job: JobKey<'j>,
    generation: u32,
    attempt: u32,
}

impl AttemptKey<'_> {
    /// The attempt's directory, without a trailing slash.
    pub fn dir(&self) -> String {
        if self.generation == 0 && self.attempt <= 1 {
            self.job.dir()
        } else {
            format!("{}/g{}a{}", self.job.dir(), self.generation, self.attempt)
        }
    }

    /// The key of artifact `name` of this attempt.
    pub fn artifact(&self, name: &str) -> StoreKey {
        StoreKey(format!("{}/{name}", self.dir()))
    }

    /// The attempt's `result.json`.
    pub fn result(&self) -> StoreKey {
        self.artifact(names::RESULT)
    }

    /// The attempt's `partial-result.json`.
    pub fn partial_result(&self) -> StoreKey {
        self.artifact(names::PARTIAL_RESULT)
    }

    /// The attempt's `envelope.json`.
    pub fn envelope(&self) -> StoreKey {
        self.artifact(names::ENVELOPE)
    }

    /// The attempt's `cassette.json`.
    pub fn cassette(&self) -> StoreKey {
        self.artifact(names::CASSETTE)
    }

    /// The attempt's record: the record of its generation (one per generation, written by
    /// the first attempt that stores one).
    pub fn record(&self) -> StoreKey {
        self.job.record(self.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::UnitRef;

    fn batch() -> BatchId {
        BatchId::new("b1").expect("valid literal")
    }

    #[test]
    fn batch_keys_render_the_layout() {
        let batch = batch();
        let keys = BatchKey::new(&batch);
        assert_eq!(keys.prefix().as_str(), "batches/b1/");
        assert_eq!(keys.spec(), "batches/b1/spec.json");
        assert_eq!(keys.rollup(), "batches/b1/rollup.json");
        assert_eq!(keys.envelope(), "batches/b1/envelope.json");
        assert_eq!(keys.eval(), "batches/b1/eval.json");
        assert_eq!(keys.stats(), "batches/b1/stats.json");
        assert_eq!(keys.report_html(), "batches/b1/report.html");
        assert_eq!(keys.generation(), "batches/b1/generation.json");
        assert_eq!(keys.file("notes.txt"), "batches/b1/notes.txt");
        assert_eq!(keys.jobs_prefix().as_str(), "batches/b1/jobs/");
        assert_eq!(StorePrefix::batches().as_str(), "batches/");
        assert_eq!(StoreKey::bundle("ab"), "bundles/ab.tar.zst");
        assert_eq!(StoreKey::probe("w-1"), "probes/w-1");
        assert_eq!(keys.spec().to_string(), "batches/b1/spec.json");
        assert_eq!(String::from(keys.spec()), "batches/b1/spec.json");
    }

    #[test]
    fn job_and_attempt_keys_render_the_layout() {
        let batch = batch();
        let job = JobId::new(&batch, UnitRef::Cell(2), Some(5));
        let keys = JobKey::new(&job);
        assert_eq!(keys.dir(), "batches/b1/jobs/c2/r5");
        assert_eq!(keys.prefix().as_str(), "batches/b1/jobs/c2/r5/");
        assert_eq!(keys.result(), "batches/b1/jobs/c2/r5/result.json");
        assert_eq!(keys.record(0), "batches/b1/jobs/c2/r5/outcome.json");
        assert_eq!(keys.record(3), "batches/b1/jobs/c2/r5/g3/outcome.json");
        let first = keys.attempt(0, 1);
        assert_eq!(first.dir(), "batches/b1/jobs/c2/r5");
        assert_eq!(first.result(), "batches/b1/jobs/c2/r5/result.json");
        assert_eq!(
            first.partial_result(),
            "batches/b1/jobs/c2/r5/partial-result.json"
        );
        assert_eq!(first.envelope(), "batches/b1/jobs/c2/r5/envelope.json");
        assert_eq!(first.cassette(), "batches/b1/jobs/c2/r5/cassette.json");
        assert_eq!(first.record(), "batches/b1/jobs/c2/r5/outcome.json");
        assert_eq!(keys.attempt(0, 0).dir(), "batches/b1/jobs/c2/r5");
        let retry = keys.attempt(0, 2);
        assert_eq!(retry.dir(), "batches/b1/jobs/c2/r5/g0a2");
        assert_eq!(retry.result(), "batches/b1/jobs/c2/r5/g0a2/result.json");
        let resumed = keys.attempt(2, 1);
        assert_eq!(
            resumed.artifact("harness.stderr.log"),
            "batches/b1/jobs/c2/r5/g2a1/harness.stderr.log"
        );
        assert_eq!(resumed.record(), "batches/b1/jobs/c2/r5/g2/outcome.json");
        let plain = JobId::new(&batch, UnitRef::File(0), None);
        assert_eq!(JobKey::new(&plain).dir(), "batches/b1/jobs/f0");
    }

    #[test]
    fn listed_keys_parse_back() {
        let batch = batch();
        let job = JobId::new(&batch, UnitRef::Cell(0), Some(3));
        let keys = JobKey::new(&job);
        assert_eq!(
            keys.record_generation("batches/b1/jobs/c0/r3/g2/outcome.json"),
            Some(2)
        );
        for key in [
            "batches/b1/jobs/c0/r3/outcome.json",
            "batches/b1/jobs/c0/r3/g2a1/result.json",
            "batches/b1/jobs/c0/r3/gx/outcome.json",
            "batches/b1/jobs/c0/r30/g2/outcome.json",
            "batches/b2/jobs/c0/r3/g2/outcome.json",
        ] {
            assert_eq!(keys.record_generation(key), None, "{key}");
        }
        let prefix = BatchKey::new(&batch).prefix();
        assert_eq!(
            prefix.relative("batches/b1/jobs/c0/r3/result.json"),
            Some("jobs/c0/r3/result.json")
        );
        assert_eq!(prefix.relative("batches/b10/spec.json"), None);
        assert_eq!(prefix.key("jobs/c0/"), "batches/b1/jobs/c0/");
        let job_prefix = keys.prefix();
        assert_eq!(
            job_prefix.direct_child("batches/b1/jobs/c0/r3/result.json"),
            Some("result.json")
        );
        assert_eq!(
            job_prefix.direct_child("batches/b1/jobs/c0/r3/g0a2/result.json"),
            None
        );
    }

    #[test]
    fn subdirectory_and_batch_prefixes_render_the_layout() {
        let batch = batch();
        let jobs = BatchKey::new(&batch).jobs_prefix();
        assert_eq!(jobs.child("c0").as_str(), "batches/b1/jobs/c0/");
        assert_eq!(jobs.child("c0/r3").as_str(), "batches/b1/jobs/c0/r3/");
        let job = JobId::new(&batch, UnitRef::Cell(0), Some(3));
        assert_eq!(JobKey::new(&job).batch_prefix().as_str(), "batches/b1/");
    }
}
