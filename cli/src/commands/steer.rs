//! `cowork pause`, `cowork resume-dispatch` and `cowork adjust`: the controls of a running
//! batch, sent to its coordinator (which checks them against the batch record and changes
//! nothing when it refuses).

use cowork_core::controls::{ControlAsk, check_ask};
use cowork_schema::api::ControlRequest;
use cowork_schema::registry::BatchRecord;

use crate::args::{AdjustArgs, SteerArgs};
use crate::batch_source::resolve_remote;
use crate::connect::{client, client_error};
use crate::exit::CliError;

/// `cowork pause <batch>`.
pub async fn pause(args: &SteerArgs) -> Result<i32, CliError> {
    let record = send(
        args,
        "pause",
        ControlRequest::default(),
        "pausing the batch",
    )
    .await?;
    eprintln!(
        "batch {}: dispatch paused — no new job starts on any worker; running jobs finish and count (cowork resume-dispatch {} goes on)",
        record.batch_id, record.batch_id
    );
    Ok(0)
}

/// `cowork resume-dispatch <batch>`.
pub async fn resume_dispatch(args: &SteerArgs) -> Result<i32, CliError> {
    let record = send(
        args,
        "resume-dispatch",
        ControlRequest::default(),
        "resuming the batch's dispatch",
    )
    .await?;
    eprintln!(
        "batch {}: dispatch resumed from where it stopped (dispatch epoch {})",
        record.batch_id, record.controls.dispatch_epoch
    );
    Ok(0)
}

/// `cowork adjust <batch> --max-budget-usd … --max-running …`.
pub async fn adjust(args: &AdjustArgs) -> Result<i32, CliError> {
    let max_running = match args.max_running {
        None => None,
        Some(max) => Some(
            u32::try_from(max)
                .ok()
                .filter(|max| *max > 0)
                .ok_or_else(|| {
                    CliError::usage(format!(
                        "--max-running {max}: must be a whole number, 1 or more"
                    ))
                })?,
        ),
    };
    let ask = ControlAsk::Adjust {
        batch_budget_usd: args.max_budget_usd,
        max_running,
    };
    // Checked here first, so a bad value never reaches the coordinator.
    check_ask(&ask).map_err(|refusal| CliError::usage(refusal.to_string()))?;
    let request = ControlRequest {
        batch_budget_usd: args.max_budget_usd,
        max_running,
        ..ControlRequest::default()
    };
    let record = send(&args.steer, "adjust", request, "adjusting the batch").await?;
    let controls = &record.controls;
    let budget = controls
        .batch_budget_usd
        .map_or_else(|| "as submitted".to_owned(), |usd| format!("${usd}"));
    let running = controls.max_running.map_or_else(
        || "the coordinator's window".to_owned(),
        |max| max.to_string(),
    );
    eprintln!(
        "batch {}: batch budget {budget}, at most {running} job(s) outstanding; admission obeys at once",
        record.batch_id
    );
    Ok(0)
}

async fn send(
    args: &SteerArgs,
    control: &str,
    mut request: ControlRequest,
    doing: &str,
) -> Result<BatchRecord, CliError> {
    let client = client(&args.client)?;
    let batch = resolve_remote(&args.batch, &client).await?;
    request.by = Some(args.by.clone().unwrap_or_else(who_asks));
    client
        .control(&batch, control, &request)
        .await
        .map_err(|error| client_error(error, &format!("{doing} {batch}")))
}

/// `$USER@<host>`, as far as the environment says.
fn who_asks() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| "someone".to_owned());
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|host| host.trim().to_owned())
        .filter(|host| !host.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{user}@{host}")
}
