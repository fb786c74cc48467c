//! Following a submitted batch to its end: the progress line from the coordinator's event
//! stream, then the same ending as `cowork run` (summary, envelope, exit code).

use anyhow::anyhow;
use cowork_client::{ClientError, CoordinatorClient, WatchEvent};
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
    let mut progress = ProgressLine::joining();
    let mut end = None;
    let mut stalls = Vec::new();
    // Since when the coordinator answers 503 (it runs, its queue does not): the watch says so
    // once and waits, for at most `CANNOT_SERVE_FOR`; any other failure ends it as before.
    let mut cannot_serve_since: Option<std::time::Instant> = None;
    let mut attempt = 0u32;
    while end.is_none() {
        let failure = match client.watch(batch).await {
            Ok(events) => {
                let mut events = std::pin::pin!(events);
                let mut failure = None;
                while let Some(event) = events.next().await {
                    let event = match event {
                        Ok(event) => event,
                        Err(error) => {
                            failure = Some(error);
                            break;
                        }
                    };
                    cannot_serve_since = None;
                    attempt = 0;
                    match event {
                        WatchEvent::Progress(snapshot) => {
                            // A stall is said once when it starts and once when it ends, also
                            // with --quiet: it is why the batch does not move.
                            note_stalls(&mut stalls, &snapshot.fabric_stalls);
                            if !quiet {
                                progress.show(&snapshot);
                            }
                        }
                        WatchEvent::End(batch_end) => {
                            end = Some(batch_end);
                            break;
                        }
                    }
                }
                match failure {
                    Some(error) => error,
                    None if end.is_some() => break,
                    None => {
                        return Err(CliError::Failed(anyhow!(
                            "the coordinator closed the watch of batch {batch} before it ended"
                        )));
                    }
                }
            }
            Err(error) => error,
        };
        if !matches!(failure, ClientError::CannotServe { .. }) {
            return Err(client_error(failure, "watching the batch"));
        }
        let since = *cannot_serve_since.get_or_insert_with(|| {
            eprintln!("{failure}; waiting");
            std::time::Instant::now()
        });
        if since.elapsed() > CANNOT_SERVE_FOR {
            return Err(client_error(failure, "watching the batch"));
        }
        attempt += 1;
        tokio::time::sleep(WATCH_RETRY.delay(attempt)).await;
    }
    if !quiet {
        if let Ok(status) = client.status(batch).await
            && let Some(snapshot) = status.progress
        {
            progress.show_last(&snapshot);
        }
        progress.finish();
    }
    end.ok_or_else(|| {
        CliError::Failed(anyhow!(
            "the coordinator closed the watch of batch {batch} before it ended"
        ))
    })
}

/// How long a watch waits on a coordinator that answers 503 before it gives up: a NATS
/// cluster elects new leaders within seconds, a restarted node is back within a minute.
const CANNOT_SERVE_FOR: std::time::Duration = std::time::Duration::from_secs(600);
/// Pauses between watch attempts on such a coordinator: from 500 ms, doubling to 5 s.
const WATCH_RETRY: cowork_fabric::backoff::Backoff = cowork_fabric::backoff::Backoff::new(
    std::time::Duration::from_millis(500),
    std::time::Duration::from_secs(5),
);

/// Prints each stall of `now` that `seen` lacks, and the end of each of `seen` that `now`
/// lacks, then remembers `now`.
fn note_stalls(
    seen: &mut Vec<cowork_schema::api::FabricStall>,
    now: &[cowork_schema::api::FabricStall],
) {
    let same = |a: &cowork_schema::api::FabricStall, b: &cowork_schema::api::FabricStall| {
        a.kind == b.kind && a.name == b.name
    };
    for stall in now
        .iter()
        .filter(|stall| !seen.iter().any(|s| same(s, stall)))
    {
        eprintln!(
            "queue stalled: {}",
            stall.describe(crate::progress::now_ms())
        );
    }
    for ended in seen
        .iter()
        .filter(|s| !now.iter().any(|stall| same(s, stall)))
    {
        eprintln!("queue serves again: {} {}", ended.kind, ended.name);
    }
    *seen = now.to_vec();
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
