//! Integration tests of the worker crate: one test binary (style rule 19).
//!
//! - [`harness`]: the harness executor against `tests/fixtures/fake-harness`, a stand-in CLI
//!   that follows the documented command line and envelope contract.
//! - [`sim`]: the simulator's determinism, statistics and schema validity.

mod harness;
mod sim;
mod support;
