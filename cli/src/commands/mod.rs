//! One module per subcommand.

pub mod bench;
pub mod coordinator;
pub mod remote;
pub mod rollup;
pub mod run;
pub mod worker;
