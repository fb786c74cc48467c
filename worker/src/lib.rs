//! Cowork Fleet worker: pulls jobs for the tiers it serves, runs each in its executor, stores the
//! artifacts and reports the outcome.
//!
//! Modules, in reading order:
//! - `config`: the worker's settings, ports and counters, shared by the job loop and each job.
//! - [`job_loop`]: `run` — pulls for every free slot at once on every tier it serves; drain on
//!   shutdown.
//! - `job_run`: one delivery from pull to ack — the per-job order upload → record → publish
//!   `finished` → ack (decisions.md#wire-protocol), idempotent redeliveries, retries of
//!   infrastructure failures before spend (harness-behaviour.md#choice-c8), never a second run
//!   after spend.
//! - `pack`: the jobs of one slot run with one executor call (replay packs), each still
//!   settled by its own task.
//! - [`lease`]: the delivery's ack deadline, renewed from pull to ack.
//! - [`executor`]: the `Executor` trait and its implementations (`harness`, `container`, `sim`),
//!   the outcome classification shared by the process executors, and the guard process that
//!   takes a harness's process group down with `cowork`.
//! - [`heartbeat`]: the worker's record in the workers registry.
//! - [`outage`]: a failing queue said once per streak, not once per retry, and the stream
//!   that stalls named once per stall.
//! - [`capabilities`]: the start-up probe of the host (OS, arch, `limactl`, Docker, harness
//!   version) and the pure choice of the tiers this worker can serve.
//! - [`sandbox_starts`]: sandbox start failures in a row, and the tiers backed off after them.
//! - [`bundle_cache`]: bundles fetched by digest, verified and unpacked once per worker.
//! - [`upload`]: storing an attempt's artifacts and the job's record, with retries up to a
//!   deadline.

mod admitted;
pub mod bundle_cache;
pub mod capabilities;
mod config;
pub mod executor;
pub mod heartbeat;
pub mod job_loop;
mod job_run;
pub mod lease;
pub mod outage;
mod pack;
pub mod sandbox_starts;
pub mod upload;

pub use config::{DEFAULT_STORE_DEADLINE, WorkerConfig, WorkerPorts, WorkerStats};
pub use job_loop::{run, run_until_idle};
