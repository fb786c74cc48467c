//! Cowork Fleet coordinator service: the IO around the pure core (`cowork-core`).
//!
//! Modules, in reading order:
//! - [`intake`]: the one path from a person's files and flags to a plan, spec and bundle —
//!   `intake::batch` and `intake::eval` on the machine that has the files, [`intake::files`]
//!   reading and validating them, [`intake::submitted`] the server's own check of a submitted
//!   spec and bundle.
//! - [`pricing`]: the submit-time refusal of a batch budget over tiers or models nothing
//!   prices.
//! - [`supervisor`]: the thin async driver of the core's `Admission`: catch-up from the event
//!   log, publishing what admission decides, folding what workers report, storing the
//!   batch's documents.
//! - [`stored_job`]: a job's stored outcome and result, found through its record.
//! - [`rejudge`]: re-judging stored runs (`cowork rollup`).
//! - [`report_input`]: reading a stored batch into the core's report input (what every report
//!   format renders).
//! - [`history`]: the `stats.json` of recent decided batches (dry runs, trends, scheduling).
//! - [`catalog`]: a store's batches for people — the batch list, and each decided batch's
//!   per-unit history (`stats.json`, or its rollup for batches written without one).
//! - [`eval`]: storing and reading an eval batch's A/B document.
//! - `fleet_view`: the live workers against the live batches' tiers (unserved tiers, workers
//!   refused for their protocol version).
//! - `stall_watch`: batches with jobs outstanding and no start or finish for their
//!   `--stall-after`, marked stalled with the reason; `--on-stall cancel` cancels them.
//! - `fabric_view`: the queue's streams and buckets checked every few seconds (which one has
//!   no leader, since when; which runs short of replicas), for status, watch and `/readyz`.
//! - [`leadership`]: which of several coordinators on one fabric leads (the lease claimed in a
//!   loop, a term per win whose token stops its supervisions); the others stand by.
//! - `service`: the coordinator service the API and the views share — config and ports, access
//!   by token, each batch's lifecycle and the controls people change.
//! - [`server`]: `run`, which starts the service, its views and the API (and re-exports the
//!   config types the binaries use).
//! - [`api`]: the HTTP API routes (axum), one file per resource, with bearer auth, over a
//!   service.
//! - `batch_counts`: batches per state, kept from the registry's change stream for `/metrics`.
//! - [`metrics`]: `/metrics` in OpenMetrics text (prometheus-client), and its grammar check.
//! - [`tls`]: HTTPS for the API with rustls.
//! - [`live_ui`]: one batch's live page and controls served by the process that runs the
//!   batch (`cowork run --ui`), on the same routes as the coordinator's.
//! - [`notify`]: notifications of a batch's moments, POSTed signed to webhooks in the
//!   background and retried.
//! - [`http_serve`]: the API's connection loop (plain or TLS) with a header-read timeout, an
//!   idle timeout and a connection cap that closes idle connections first.
//! - [`k8s`] (feature `k8s`): a Kubernetes Job of workers for a large batch — its pure
//!   manifest and the `WorkerJobs` port on `kube`.

pub mod api;
mod batch_counts;
pub mod catalog;
pub mod eval;
mod fabric_view;
mod fleet_view;
pub mod history;
pub mod http_serve;
pub mod intake;
#[cfg(feature = "k8s")]
pub mod k8s;
pub mod leadership;
pub mod live_ui;
pub mod metrics;
pub mod notify;
pub mod pricing;
pub mod rejudge;
pub mod report_input;
pub mod server;
mod service;
mod stall_watch;
pub mod stored_job;
pub mod supervisor;
pub mod tls;
