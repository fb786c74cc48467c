//! One module per subcommand.

pub mod bench;
pub mod rollup;
pub mod run;
