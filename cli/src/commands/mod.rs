//! One module per subcommand.

pub mod batches;
pub mod bench;
pub mod coordinator;
pub mod diff;
pub mod eval;
pub mod notify_test;
pub mod remote;
pub mod report;
pub mod resume;
pub mod rollup;
pub mod run;
pub mod steer;
pub mod trend;
pub mod worker;
