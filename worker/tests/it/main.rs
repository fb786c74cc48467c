//! Integration tests of the worker crate: one test binary, as for every crate.
//!
//! - [`container`]: the container executor on this machine's Docker engine, with a test image
//!   built locally from `tests/fixtures/container-image`.
//! - [`delivery`]: one delivery from pull to ack on the embedded ports: the lease through a
//!   store outage, no second run after spend, redeliveries that report a stored record, jobs
//!   of cancelled batches and of other protocol versions.
//! - [`harness`]: the harness executor against `tests/fixtures/strict-harness`, the strict double of the CLI
//!   that follows the documented command line and envelope contract.
//! - [`record`]: a `record` exit 1 classified by what it says; a refused failing run keeps its
//!   result.
//! - [`seal`]: a canary credential the strict double leaks is in no artifact; a file past the
//!   upload limit is cut with a note.
//! - [`sim`]: the simulator's determinism, statistics and schema validity.
//! - [`stopping`]: timeout and cancel stop the strict double `tests/fixtures/strict-harness`
//!   with SIGTERM and a grace, so its sidecar is cleaned up; a cleanup past the grace is cut.

mod container;
mod delivery;
mod harness;
mod idle;
mod packs;
mod record;
mod seal;
mod sim;
mod stopping;
mod support;
