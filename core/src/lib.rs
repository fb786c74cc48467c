//! Cowork Fleet's pure core: everything that decides, nothing that does IO.
//!
//! Modules, in reading order:
//! - [`prepared`]: the validated inputs of a batch (what `cowork_coordinator::intake::files` reads
//!   from disk), as plain data.
//! - [`plan`]: flags, cells, job ids, materialized axis overrides; eval batches (`plan::eval`).
//! - [`effort`]: the `effort:` a session's model takes under a baseline, as the harness decides.
//! - [`verdict`]: a per-run verdict re-derived for results written without one.
//! - [`reduce`]: index-order folding into rollups, verdicts, envelope keys and exit codes.
//! - [`fleet`]: workers refused for their protocol version, tiers no live worker serves.
//! - [`limits`]: per-model admission limits (`MODEL=N[/PERIOD]`), with the clock passed in.
//! - [`admission`]: which jobs go to the queue and when, and what the batch's events mean — the
//!   supervisor's decisions as a state machine with the clock passed in.
//! - [`controls`]: pause, resume of dispatch and adjusted limits as changes of a batch record.
//! - [`history`]: estimates (cost and time per run) from earlier batches' `stats.json`.
//! - [`trend`]: batches side by side — `cowork diff` rows, `cowork trend` rows and the flaky
//!   rule across batches, and history read from a `rollup.json` for batches without stats.
//! - [`preflight`]: the plan and estimate `--dry-run` prints.
//! - [`pricing`]: the whole cost of a run (model spend plus sandbox minutes) and the rule that a
//!   batch budget runs only what is priced.
//! - [`stall`]: whether a batch that stopped moving is stalled and why, with the clock passed in.
//! - [`eta`]: the time a running batch still needs, from the rate its jobs were seen to finish.
//! - [`eval`]: A/B statistics — McNemar's test, Tango's score interval of the paired
//!   difference, arm summaries, verdict.
//! - [`sim_rules`]: which jobs a `--sim-profile` rule selects.
//! - [`notify`]: a notification's body and Slack line, its event id and its HMAC signature.
//! - [`report`]: HTML, JUnit, Markdown and JSON renderings of a stored batch.
//! - [`safe_text`]: control and bidi characters of outside text as visible escapes, for
//!   terminals and Markdown, and the intake check of free text.
//!
//! **Invariant:** no module here performs IO, reads a clock, the environment or randomness
//! other than a seed it is given, and the crate depends on no async runtime or network crate
//! (`scripts/check-core-deps.sh`, run by CI).

pub mod admission;
pub mod controls;
pub mod effort;
pub mod eta;
pub mod eval;
pub mod fleet;
pub mod history;
pub mod limits;
pub mod notify;
pub mod plan;
pub mod preflight;
pub mod prepared;
pub mod pricing;
pub mod reduce;
pub mod report;
pub mod safe_text;
pub mod share;
pub mod sim_rules;
pub mod stall;
pub mod trend;
pub mod verdict;
