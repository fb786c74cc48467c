//! Cowork Fleet coordinator: plans batches, admits their jobs and judges them.
//!
//! Modules, in reading order:
//! - [`prepare`]: the IO edge — reads the target, scenarios, sessions and matrix, validates the
//!   whole batch and lists the files of its bundle.
//! - [`plan`]: pure — flags, cells, job ids, materialized axis overrides (contract §1.2, §5).
//! - [`reduce`]: pure — index-order folding into rollups, verdicts, envelope keys and exit codes
//!   (contract §4–§7).
//! - [`supervisor`]: admission in windows and the fold of a batch's events into the reducer.
//! - [`rejudge`]: re-judging stored runs (`cowork rollup`).
//! - [`intake`]: the server's validation of a submitted spec and bundle, and its plan.
//! - [`server`]: the coordinator service — config, ports, batch lifecycle and `run`.
//! - [`api`]: the HTTP API routes (axum), one file per resource, with bearer auth.
//! - [`metrics`]: the Prometheus text of `/metrics`.
//! - [`client`]: the HTTP client of the API (`cowork submit`, `watch`, `status`, …).
//! - [`k8s`]: a Kubernetes Job of workers for a large batch — its pure manifest and the
//!   `WorkerJobs` port on `kube`.
//! - [`report`]: pure HTML, JUnit, Markdown and JSON reports of a stored batch (`cowork report`,
//!   the coordinator's pages) and their loader.

pub mod api;
pub mod client;
pub mod eval;
pub mod intake;
pub mod k8s;
pub mod limits;
pub mod metrics;
pub mod plan;
pub mod prepare;
pub mod reduce;
pub mod rejudge;
pub mod report;
pub mod server;
pub mod supervisor;
pub mod tls;
