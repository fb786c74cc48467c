//! Following a submitted batch to its end: the progress line from the coordinator's event
//! stream, then the same ending as `cowork run` (summary, envelope, exit code).

use anyhow::anyhow;
use cowork_client::{CoordinatorClient, WatchEvent};
use cowork_schema::BatchId;
use cowork_schema::registry::BatchState;
use futures::StreamExt;

use crate::args::OutputFormat;
use crate::connect::client_error;
use crate::exit::CliError;
use crate::progress::ProgressLine;

/// Follows a batch's event stream to its end, showing the progress line unless `quiet`; the
/// end event, or an error when the stream closed before it.
pub async fn follow(
    client: &CoordinatorClient,
    batch: &BatchId,
    quiet: bool,
) -> Result<cowork_schema::api::BatchEnd, CliError> {
    let events = client
        .watch(batch)
        .await
        .map_err(|e| client_error(e, "watching the batch"))?;
    let mut events = std::pin::pin!(events);
    let mut progress = ProgressLine::new(std::time::Instant::now());
    let mut end = None;
    while let Some(event) = events.next().await {
        match event.map_err(|e| client_error(e, "watching the batch"))? {
            WatchEvent::Progress(snapshot) => {
                if !quiet {
                    progress.show(&snapshot, false);
                }
            }
            WatchEvent::End(batch_end) => {
                end = Some(batch_end);
                break;
            }
        }
    }
    if !quiet {
        if let Ok(status) = client.status(batch).await
            && let Some(snapshot) = status.progress
        {
            progress.show(&snapshot, true);
        }
        progress.finish();
    }
    end.ok_or_else(|| {
        CliError::Failed(anyhow!(
            "the coordinator closed the watch of batch {batch} before it ended"
        ))
    })
}

/// Follows a batch to its end, then prints the summary (and the envelope with JSON output) and
/// returns the batch's exit code — the same ending as `cowork run`.
pub async fn watch_to_end(
    client: &CoordinatorClient,
    batch: &BatchId,
    output: OutputFormat,
    quiet: bool,
) -> Result<i32, CliError> {
    let end = follow(client, batch, quiet).await?;
    match end.state {
        BatchState::Done => {
            let envelope = client
                .report(batch)
                .await
                .map_err(|e| client_error(e, "fetching the batch's envelope"))?;
            let exit_code = end.exit_code.unwrap_or(if envelope.ok { 0 } else { 1 });
            eprint!(
                "{}",
                crate::summary::render(&crate::summary::Summary::new(&envelope, exit_code))
            );
            eprintln!("results: cowork results {batch}");
            if output == OutputFormat::Json {
                println!("{}", envelope.to_line());
            }
            Ok(exit_code)
        }
        BatchState::Cancelled => {
            eprintln!("batch {batch} was cancelled before it was decided; no verdict");
            Ok(1)
        }
        other => Err(CliError::Failed(anyhow!(
            "batch {batch} ended in state {}{}",
            other.as_str(),
            end.message.map(|m| format!(": {m}")).unwrap_or_default()
        ))),
    }
}
