//! `cowork diff THEN NOW`: two decided batches unit by unit (newly failing, newly passing,
//! flaky). The comparison itself is `batch_compare`, which `cowork report --compare` prints too.

use crate::args::DiffArgs;
use crate::exit::CliError;

/// `cowork diff`.
pub async fn run(args: DiffArgs) -> Result<i32, CliError> {
    crate::batch_compare::diff(args).await
}
