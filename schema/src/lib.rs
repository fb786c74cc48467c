//! Wire types and file formats of Cowork Fleet.
//!
//! Modules, in reading order:
//! - [`ids`]: batch and job ids.
//! - [`duration`]: the one parser of durations people write (`500ms`, `90s`, `45m`, `2h`).
//! - [`load`]: strict YAML loading with errors that name file, line and key.
//! - [`scenario`], [`session`], [`matrix`]: the harness's input files.
//! - [`batch`]: the batch spec (what a run or submit asks for).
//! - [`quarantine`]: the quarantine file, the entries a batch applies and what they did.
//! - [`unit`](mod@unit): a plan unit's tier and matrix axes (shared by [`batch`] and [`job`]).
//! - [`job`]: one job and its tier.
//! - [`layout`]: every storage key (decisions.md#storage), built in one place.
//! - [`run_result`]: the reducer's view of a `result.json`.
//! - [`event`]: job events on the event log.
//! - [`retries`]: who retries what, every layer's numbers in one place.
//! - [`registry`]: batch records and worker heartbeats (the fleet's KV buckets).
//! - [`rollup`]: repeat and matrix rollups (harness-behaviour.md#repeat-rollup,
//!   harness-behaviour.md#matrix).
//! - [`history`]: `stats.json`, the per-unit cost and timings of a decided batch.
//! - [`envelope`]: the upstream-compatible envelope plus the `fleet` key
//!   (harness-behaviour.md#envelope).
//! - [`eval`]: the eval document (`eval.json`), an A/B batch's comparison and verdict.
//! - [`fleet`]: the typed `fleet` key of a supervised batch's envelope.
//! - [`fleet_key`]: the envelope's `fleet` key whoever wrote it, and the one reading of it.
//! - [`api`]: the coordinator's HTTP API bodies (submit answer, status, watch events, errors).
//! - [`live`]: the live view of a running batch and its deltas.
//! - [`notify`]: the body of a notification a webhook receives.
//! - [`pricing`]: sandbox and model prices of a batch, and its spend split (the whole cost).
//! - [`json_number`]: JavaScript-compatible number output (harness-behaviour.md#json-numbers).
//! - [`json_schema`]: JSON Schemas generated from these types.
//!
//! This crate does no network IO and pulls in no async runtime.

pub mod api;
pub mod batch;
pub mod duration;
pub mod envelope;
pub mod eval;
pub mod event;
pub mod fleet;
pub mod fleet_key;
pub mod history;
pub mod ids;
pub mod job;
pub mod json_number;
pub mod json_schema;
pub mod layout;
pub mod live;
pub mod load;
pub mod matrix;
pub mod notify;
pub mod pricing;
pub mod quarantine;
pub mod registry;
pub mod retries;
pub mod rollup;
pub mod run_result;
pub mod scenario;
pub mod session;
pub mod share;
pub mod unit;

pub use ids::{BatchId, JobId, UnitRef};
