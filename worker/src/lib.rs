//! Cowork Fleet worker: pulls jobs for the tiers it serves, runs each in its executor, stores the
//! artifacts and reports the outcome.
//!
//! Modules, in reading order:
//! - [`job_loop`]: `run` — one job per free slot; the per-job order upload → publish `finished`
//!   → ack (brief §4); retries of infrastructure failures (C8); drain on shutdown.
//! - [`executor`]: the `Executor` trait and its implementations (`harness`, `sim`).
//! - [`heartbeat`]: the worker's record in the workers registry.
//! - [`capabilities`]: the start-up probe of the host (OS, arch, `limactl`, Docker, harness
//!   version) and the pure choice of the tiers this worker can serve.
//! - [`bundle_cache`]: bundles fetched by digest, verified and unpacked once per worker.
//! - [`upload`]: storing a job's artifacts with retries.

pub mod bundle_cache;
pub mod capabilities;
pub mod executor;
pub mod heartbeat;
pub mod job_loop;
pub mod upload;

pub use job_loop::{WorkerConfig, WorkerPorts, WorkerStats, run, run_until_idle};
