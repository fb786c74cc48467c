//! End-to-end tests of the `cowork` binary: each test runs the real executable in its own temp
//! dir with its own `--store`, and judges only what a user sees — exit codes, stdout, stderr and
//! the files under the store.
//!
//! Modules, in reading order: `support` (sandbox, command runner, JSON helpers) and `fleet` (a
//! real nats-server, S3 server, coordinator and workers as processes); `run` (the demo batch,
//! plain repeats, matrix cell errors, accepted flag forms), `rollup` (re-judging a stored batch),
//! `bad_input` (usage errors: exit 2 and nothing written), `hostile` (malicious inputs and
//! archives refused by `run` and by the coordinator, nothing stored), `harness` (the harness
//! executor against the stand-in `fake-harness` script), `help`, `distributed` (the fleet end to
//! end, `cowork submit`), `faults` (workers, coordinator, NATS and S3 broken mid-batch, jobs
//! delivered twice, a worker cut off in a network namespace), `recovery` (cancel
//! `--kill-running`, resume, retries), `interrupt` (Ctrl-C and `kill -9` of `cowork run`, and
//! `cowork resume` of the local store), `limits` (batch budget and model limits on three
//! workers), `capabilities` (workers serve only the tiers their host can), `secrets` (a canary
//! secret reaches only the harness), `multihost` (the fleet as Docker containers on a test
//! network, a worker killed and one disconnected), `eval` (A/B batches embedded and on the
//! fleet), `report` (`cowork report` in every format), `browser` (headless Chromium on a
//! generated report and on the coordinator's pages) and `telemetry` (OTLP traces of a run
//! received by an in-test collector).

mod fleet;
mod support;

mod bad_input;
mod browser;
mod capabilities;
mod distributed;
mod eval;
mod faults;
mod harness;
mod help;
mod hostile;
mod https;
mod interrupt;
mod limits;
mod multihost;
mod recovery;
mod report;
mod rollup;
mod run;
mod secrets;
mod telemetry;
