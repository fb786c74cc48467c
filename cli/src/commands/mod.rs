//! One module per subcommand.

pub mod bench;
pub mod coordinator;
pub mod eval;
pub mod remote;
pub mod report;
pub mod resume;
pub mod rollup;
pub mod run;
pub mod worker;
