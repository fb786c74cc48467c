//! End-to-end tests of the `cowork` binary: each test runs the real executable in its own temp
//! dir with its own `--store`, and judges only what a user sees — exit codes, stdout, stderr and
//! the files under the store.
//!
//! Modules, in reading order: `support` (sandbox, command runner, JSON helpers), `run` (the demo
//! batch, plain repeats, matrix cell errors, accepted flag forms), `rollup` (re-judging a stored
//! batch), `bad_input` (usage errors: exit 2 and nothing written), `harness` (the harness
//! executor against the stand-in `fake-harness` script), `help`, and `distributed` (the fleet:
//! real nats-server and S3 server, coordinator and workers as processes, `cowork submit`).

mod support;

mod bad_input;
mod distributed;
mod harness;
mod help;
mod rollup;
mod run;
