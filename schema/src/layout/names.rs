//! Every file and directory name of the storage layout, spelled once. Store keys
//! ([`super::keys`]) and local paths ([`super::local`]) are built from these; code that only
//! needs a name (an artifact's `name`, a file it looks for in a directory) uses them directly.

/// `batches/`: the top-level directory of every batch's files.
pub const BATCHES_DIR: &str = "batches";
/// `batches/<batch>/jobs/`: the directory of a batch's job directories.
pub const JOBS_DIR: &str = "jobs";
/// `bundles/`: the top-level directory of the content-addressed bundles.
pub const BUNDLES_DIR: &str = "bundles";
/// `probes/`: the top-level directory of the workers' start-up write checks.
pub const PROBES_DIR: &str = "probes";
/// The extension of a stored bundle (`bundles/<sha256>.tar.zst`).
pub const BUNDLE_EXTENSION: &str = ".tar.zst";

/// `batches/<batch>/spec.json`: the submitted spec and the planner's layout
/// ([`StoredBatch`](crate::batch::StoredBatch)).
pub const SPEC: &str = "spec.json";
/// `batches/<batch>/rollup.json`: the batch's rollup.
pub const ROLLUP: &str = "rollup.json";
/// `batches/<batch>/envelope.json`: the batch's envelope.
pub const ENVELOPE: &str = "envelope.json";
/// `batches/<batch>/eval.json`: the eval document of an A/B batch.
pub const EVAL: &str = "eval.json";
/// `batches/<batch>/stats.json`: the per-unit cost and timings of a decided batch.
pub const STATS: &str = "stats.json";
/// `batches/<batch>/report.html`: the batch's HTML report.
pub const REPORT_HTML: &str = "report.html";
/// `batches/<batch>/generation.json`: the resume generation of a batch in a local store (a
/// [`StoredGeneration`](crate::batch::StoredGeneration)); absent until its first local resume.
/// A coordinator keeps the generation in the batch record instead.
pub const GENERATION: &str = "generation.json";

/// The name of a job's record file (`outcome.json`, a [`JobRecord`](crate::event::JobRecord)).
pub const JOB_RECORD: &str = "outcome.json";
/// The artifact holding a run's result document (a `result.json`).
pub const RESULT: &str = "result.json";
/// The artifact holding the result of a run cut short; never folded.
pub const PARTIAL_RESULT: &str = "partial-result.json";
/// The artifact holding a job's recorded or replayed cassette.
pub const CASSETTE: &str = "cassette.json";
/// The artifact holding a run's trace.
pub const TRACE: &str = "trace.json";
/// The artifact holding the harness's standard error and the worker's notes on the job.
pub const HARNESS_STDERR: &str = "harness.stderr.log";

/// `<work dir>/runs/`: where the harness writes its run directories inside a job's work dir.
pub const RUNS_DIR: &str = "runs";
/// `<run dir>/turns/<N>/`: the files of each turn of a run.
pub const TURNS_DIR: &str = "turns";
/// `cassettes/`: where `record` writes its cassettes, relative to the bundle root.
pub const CASSETTES_DIR: &str = "cassettes";
/// The ending of a recorded cassette's file name (`<scenario stem>.cassette.json`).
pub const CASSETTE_SUFFIX: &str = ".cassette.json";
/// `<store>/work/`: the embedded run's work directories, inside a local store.
pub const WORK_DIR: &str = "work";
/// `<store>/cache/`: the embedded run's caches, inside a local store.
pub const CACHE_DIR: &str = "cache";

/// `<stem>.cassette.json`: the file name of the cassette `record` writes for a scenario file
/// of stem `stem`.
pub fn cassette_file_name(stem: &str) -> String {
    format!("{stem}{CASSETTE_SUFFIX}")
}

/// The artifact holding the harness's standard output, kept when it printed no envelope.
pub const HARNESS_STDOUT: &str = "harness.stdout.log";
/// `<run dir>/events.jsonl`: the run's event log, uploaded under the same name.
pub const RUN_EVENTS: &str = "events.jsonl";
/// `<run dir>/control-out.jsonl`: the run's control-channel output, uploaded under the same name.
pub const RUN_CONTROL_OUT: &str = "control-out.jsonl";
/// `<run dir>/agent.stderr.log`: the agent's standard error, uploaded under the same name.
pub const AGENT_STDERR: &str = "agent.stderr.log";
/// `<run dir>/status.json`: the run's status, uploaded under the same name.
pub const RUN_STATUS: &str = "status.json";
/// `<attempt dir>/run/`: where the run-dir files without a name of their own are uploaded, at
/// their place in the run dir (`run/<path in the run dir>`).
pub const RUN_FILES_DIR: &str = "run";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_and_log_names_are_the_harness_file_names() {
        assert_eq!(HARNESS_STDOUT, "harness.stdout.log");
        assert_eq!(RUN_EVENTS, "events.jsonl");
        assert_eq!(RUN_CONTROL_OUT, "control-out.jsonl");
        assert_eq!(AGENT_STDERR, "agent.stderr.log");
        assert_eq!(RUN_STATUS, "status.json");
        assert_eq!(RUN_FILES_DIR, "run");
    }
}
