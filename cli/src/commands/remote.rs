//! The client commands of the distributed mode: `submit`, `status`, `watch`, `cancel`,
//! `results` and `workers`. Each talks to the coordinator's HTTP API (brief §9).

use anyhow::anyhow;
use cowork_client::{ClientError, CoordinatorClient, WatchEvent};
use cowork_schema::BatchId;
use cowork_schema::registry::BatchState;
use futures::StreamExt;

use crate::args::{OutputFormat, SubmitArgs};
use crate::commands::batches::resolve_remote;
use crate::commands::run::{count, executor_and_sim, mode_and_target, prepare_batch};
use crate::fleet_args::{ClientArgs, read_secret};
use crate::progress::ProgressLine;
use crate::report::CliError;

/// A client for the coordinator named by `args`.
pub fn client(args: &ClientArgs) -> Result<CoordinatorClient, CliError> {
    let token =
        read_secret("COWORK_API_TOKEN", args.token_file.as_deref()).map_err(CliError::usage)?;
    let ca_pem = match &args.coordinator_ca {
        None => None,
        Some(path) => Some(std::fs::read(path).map_err(|e| {
            CliError::usage(format!(
                "--coordinator-ca: cannot read {}: {e}",
                path.display()
            ))
        })?),
    };
    CoordinatorClient::with_ca(&args.coordinator, token, ca_pem.as_deref())
        .map_err(|e| CliError::usage(format!("--coordinator: {e}")))
}

/// Maps a client error to the CLI's: refusals are usage errors (exit 2) listing every problem.
pub fn client_error(error: ClientError, doing: &str) -> CliError {
    match error {
        ClientError::BadRequest { problems, .. } if !problems.is_empty() => {
            CliError::Usage(problems)
        }
        ClientError::Unauthorized { .. } => CliError::usage(format!(
            "{doing}: the coordinator refused the API token (set COWORK_API_TOKEN or --token-file)"
        )),
        other => CliError::Failed(anyhow!(other).context(doing.to_owned())),
    }
}

/// `cowork submit`.
pub async fn submit(args: SubmitArgs) -> Result<i32, CliError> {
    let (mode, target) = mode_and_target(args.target.as_deref(), &args.mode)?;
    let (executor, sim) = executor_and_sim(&args.executor)?;
    let client = client(&args.client)?;
    let prepared = prepare_batch(&target, &args.batch, mode, executor, sim).await?;
    if args.dry_run {
        // Workers probe their own harness; the history is the coordinator's.
        let source = crate::commands::batches::Source::Remote(client);
        return crate::commands::dry_run::print(&prepared.plan, &source, None, None).await;
    }
    let n_jobs = prepared.plan.n_jobs();
    let response = client
        .submit(&prepared.spec, prepared.bundle.bytes)
        .await
        .map_err(|e| client_error(e, "submitting the batch"))?;
    eprintln!(
        "submitted batch {} to {}: {} in {} (bundle {})",
        response.batch_id,
        args.client.coordinator,
        count(response.n_jobs.max(n_jobs), "job"),
        count(u64::from(response.units), "unit"),
        &prepared.spec.bundle_sha256[..12]
    );
    if !args.watch {
        println!("{}", response.batch_id);
        return Ok(0);
    }
    watch_to_end(&client, &response.batch_id, args.output_format, args.quiet).await
}

/// Follows a batch's event stream to its end, showing the progress line unless `quiet`; the
/// end event, or an error when the stream closed before it.
pub async fn follow(
    client: &CoordinatorClient,
    batch: &BatchId,
    quiet: bool,
) -> Result<cowork_schema::api::BatchEnd, CliError> {
    let mut progress = ProgressLine::new(std::time::Instant::now());
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
                                progress.show(&snapshot, false);
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

/// `cowork status <batch>`.
pub async fn status(
    client_args: &ClientArgs,
    id: &str,
    output: OutputFormat,
) -> Result<i32, CliError> {
    let client = client(client_args)?;
    let batch = resolve_remote(id, &client).await?;
    let status = client
        .status(&batch)
        .await
        .map_err(|e| client_error(e, "reading the batch status"))?;
    if output == OutputFormat::Json {
        println!(
            "{}",
            serde_json::to_string(&status).map_err(|e| CliError::Failed(e.into()))?
        );
        return Ok(0);
    }
    let record = &status.record;
    println!("batch    {}", record.batch_id);
    println!("state    {}", record.state.as_str());
    println!("jobs     {}", record.n_jobs);
    if let Some(owner) = &record.owner {
        println!("owner    {owner}");
    }
    if let Some(progress) = &status.progress {
        println!(
            "progress {}",
            crate::progress::format_line(progress, std::time::Duration::ZERO)
        );
        for unserved in &progress.unserved_tiers {
            println!("waiting  {}", unserved.describe());
        }
        for stall in &progress.fabric_stalls {
            println!("stalled  {}", stall.describe(crate::progress::now_ms()));
        }
    }
    if let (Some(ok), Some(code)) = (record.ok, record.exit_code) {
        println!(
            "verdict  {} (exit {code})",
            if ok { "PASS" } else { "FAIL" }
        );
    }
    Ok(0)
}

/// `cowork watch <batch>`.
pub async fn watch(
    client_args: &ClientArgs,
    id: &str,
    output: OutputFormat,
    quiet: bool,
) -> Result<i32, CliError> {
    let client = client(client_args)?;
    let batch = resolve_remote(id, &client).await?;
    watch_to_end(&client, &batch, output, quiet).await
}

/// `cowork cancel <batch>`.
pub async fn cancel(
    client_args: &ClientArgs,
    id: &str,
    kill_running: bool,
) -> Result<i32, CliError> {
    let client = client(client_args)?;
    let batch = resolve_remote(id, &client).await?;
    let record = client
        .cancel(&batch, kill_running)
        .await
        .map_err(|e| client_error(e, "cancelling the batch"))?;
    if kill_running {
        eprintln!(
            "batch {}: {} — admission stopped; workers kill its running jobs",
            record.batch_id,
            record.state.as_str()
        );
    } else {
        eprintln!(
            "batch {}: {} — admission stopped; running jobs finish and are reported as discarded",
            record.batch_id,
            record.state.as_str()
        );
    }
    Ok(0)
}

/// `cowork resume <batch> [--watch]`: runs again what has no result.
pub async fn resume(args: crate::args::ResumeArgs) -> Result<i32, CliError> {
    let client = client(&args.client)?;
    let batch = resolve_remote(&args.batch, &client).await?;
    let record = client
        .resume(&batch)
        .await
        .map_err(|e| client_error(e, "resuming the batch"))?;
    eprintln!(
        "batch {}: resumed (generation {}) — jobs without a result run again",
        record.batch_id, record.generation
    );
    if args.watch {
        return watch_to_end(&client, &batch, args.output_format, args.quiet).await;
    }
    println!("{}", record.batch_id);
    Ok(0)
}

/// `cowork results <batch>`: the envelope on stdout, the summary on stderr; `--download DIR`
/// also saves every stored file of the batch there (spec, each job's artifacts, rollup,
/// envelope), in the store's layout.
pub async fn results(
    client_args: &ClientArgs,
    id: &str,
    download: Option<&std::path::Path>,
) -> Result<i32, CliError> {
    let client = client(client_args)?;
    let batch = resolve_remote(id, &client).await?;
    let envelope = client
        .report(&batch)
        .await
        .map_err(|e| client_error(e, "fetching the batch's envelope"))?;
    let status = client
        .status(&batch)
        .await
        .map_err(|e| client_error(e, "reading the batch status"))?;
    let exit_code = status
        .record
        .exit_code
        .unwrap_or(if envelope.ok { 0 } else { 1 });
    eprint!(
        "{}",
        crate::summary::render(&crate::summary::Summary::new(&envelope, exit_code))
    );
    if let Some(dir) = download {
        let keys = client
            .artifacts(&batch)
            .await
            .map_err(|e| client_error(e, "listing the batch's artifacts"))?;
        for key in &keys {
            // Keys come from the store, which refuses `..` and empty segments; check again
            // before writing below `dir`.
            if key
                .split('/')
                .any(|part| part.is_empty() || part == "." || part == "..")
            {
                return Err(CliError::Failed(anyhow!("refusing artifact key {key:?}")));
            }
            let bytes = client
                .artifact(&batch, key)
                .await
                .map_err(|e| client_error(e, "downloading an artifact"))?;
            let path = dir.join(key);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| CliError::Failed(anyhow!("creating {}: {e}", parent.display())))?;
            }
            std::fs::write(&path, bytes)
                .map_err(|e| CliError::Failed(anyhow!("writing {}: {e}", path.display())))?;
        }
        eprintln!(
            "downloaded {} of batch {batch} to {}",
            count(keys.len() as u64, "file"),
            dir.display()
        );
    }
    println!("{}", envelope.to_line());
    Ok(exit_code)
}

/// `cowork workers`: the live fleet.
pub async fn workers(client_args: &ClientArgs, output: OutputFormat) -> Result<i32, CliError> {
    let client = client(client_args)?;
    // Read first and from the coordinator's memory, so it is said even when the workers'
    // bucket is what stalls. A coordinator without the route is older: nothing to say.
    let fabric = client.fabric().await.unwrap_or_default();
    if output != OutputFormat::Json {
        for stall in &fabric.stalls {
            eprintln!("stalled  {}", stall.describe(crate::progress::now_ms()));
        }
        for shortfall in &fabric.shortfalls {
            eprintln!("short    {shortfall}");
        }
    }
    let workers = client
        .workers()
        .await
        .map_err(|e| client_error(e, "listing workers"))?;
    if output == OutputFormat::Json {
        println!(
            "{}",
            serde_json::to_string(&workers).map_err(|e| CliError::Failed(e.into()))?
        );
        return Ok(0);
    }
    println!(
        "{:<28} {:<22} {:>5} {:>4} {:<8} {:<14} {:<12} {:>8}",
        "worker", "tiers", "slots", "busy", "executor", "harness", "os/arch", "finished"
    );
    for status in &workers {
        let worker = &status.info;
        let tiers: Vec<&str> = worker.tiers.iter().map(|t| t.as_str()).collect();
        let refused = status
            .refused
            .as_deref()
            .map(|reason| format!("  REFUSED: {reason}"))
            .unwrap_or_default();
        println!(
            "{:<28} {:<22} {:>5} {:>4} {:<8} {:<14} {:<12} {:>8}{}{refused}",
            worker.worker_id,
            tiers.join(","),
            worker.slots,
            worker.busy,
            worker.executor,
            worker.harness_version.as_deref().unwrap_or("-"),
            format!("{}/{}", worker.os, worker.arch),
            worker.jobs_finished,
            if worker.draining { "  draining" } else { "" }
        );
    }
    let n_refused = workers.iter().filter(|w| w.refused.is_some()).count();
    if n_refused > 0 {
        eprintln!(
            "{} worker(s), {n_refused} refused (they get no jobs of this coordinator)",
            workers.len()
        );
    } else {
        eprintln!("{} worker(s)", workers.len());
    }
    Ok(0)
}
