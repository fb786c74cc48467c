//! The client commands of the distributed mode: `submit`, `status`, `watch`, `cancel`,
//! `results` and `workers`. Each talks to the coordinator's HTTP API (decisions.md#operations).

use anyhow::anyhow;
use cowork_client::CoordinatorClient;
use cowork_core::safe_text::{for_terminal, for_terminal_lines};
use cowork_schema::BatchId;
use cowork_schema::registry::BatchState;
use futures::StreamExt;

use crate::args::{OutputFormat, SubmitArgs};
use crate::batch_input::{executor_and_sim, mode_and_target, prepare_batch};
use crate::batch_source::resolve_remote;
use crate::connect::{client, client_error};
use crate::exit::CliError;
use crate::fleet_args::ClientArgs;
use crate::follow::{FollowOptions, watch_to_end};
use crate::text::count;

/// `cowork submit`.
pub async fn submit(args: SubmitArgs) -> Result<i32, CliError> {
    let (mode, target) = mode_and_target(args.target.as_deref(), &args.mode)?;
    let (executor, sim) = executor_and_sim(&args.executor)?;
    let client = client(&args.client)?;
    crate::notify::check_urls(&args.notify)?;
    let mut prepared = prepare_batch(&target, &args.batch, mode, executor, sim).await?;
    prepared.spec.notify = args.notify.clone();
    if args.dry_run {
        // Workers probe their own harness; the history is the coordinator's.
        let source = crate::batch_source::Source::Remote(client);
        return crate::dry_run::print(&prepared.plan, &source, None, None).await;
    }
    let n_jobs = prepared.plan.n_jobs();
    check_fleet_fit(&client, &prepared.plan, executor).await?;
    let response = client
        .submit(&prepared.spec, prepared.bundle.bytes)
        .await
        .map_err(|e| client_error(e, "submitting the batch"))?;
    eprintln!(
        "submitted batch {} to {}: {} in {} (bundle {})",
        response.batch_id,
        // The coordinator that took it (of several given, the leader).
        client.base_url().trim_end_matches('/'),
        count(response.n_jobs.max(n_jobs), "job"),
        count(u64::from(response.units), "unit"),
        &prepared.spec.bundle_sha256[..12]
    );
    if !args.watch {
        eprintln!(
            "{}",
            crate::follow::live_page_line(&client, &response.batch_id)
        );
        println!("{}", response.batch_id);
        return Ok(0);
    }
    let options = FollowOptions::from_flags(args.quiet, args.unserved_timeout.as_deref())?;
    watch_to_end(&client, &response.batch_id, args.output_format, options).await
}

/// Refuses a batch no live worker can run (exit 2, before anything is sent) and warns about
/// the tiers of the batch no live worker serves, so a batch never fails or waits in silence.
/// A coordinator that cannot list its workers (older, or its registry stalls) is not asked.
async fn check_fleet_fit(
    client: &cowork_client::CoordinatorClient,
    plan: &cowork_core::plan::Plan,
    executor: cowork_schema::batch::ExecutorKind,
) -> Result<(), CliError> {
    let Ok(workers) = client.workers().await else {
        return Ok(());
    };
    let workers: Vec<_> = workers.into_iter().map(|status| status.info).collect();
    let mut tiers: Vec<_> = plan.units.iter().map(|unit| unit.tier).collect();
    tiers.sort_unstable();
    tiers.dedup();
    let fit = cowork_core::fleet::batch_fit(
        executor,
        &tiers,
        &workers,
        cowork_schema::job::PROTOCOL_VERSION,
    );
    if let Some(refusal) = fit.refusal {
        return Err(CliError::usage(format!(
            "refusing to submit: {refusal} (`cowork workers` lists the live workers)"
        )));
    }
    for warning in &fit.warnings {
        eprintln!("warning: {}", for_terminal(warning));
    }
    Ok(())
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
            cowork_schema::json_number::to_string(&status)
                .map_err(|e| CliError::Failed(e.into()))?
        );
        return Ok(0);
    }
    let record = &status.record;
    // Owners, worker ids and stall reasons come from the fabric: printed through the
    // terminal escape like every other outside text.
    let line = |label: &str, text: &str| println!("{label} {}", for_terminal(text));
    line("batch   ", record.batch_id.as_str());
    line("state   ", record.state.as_str());
    line("jobs    ", &record.n_jobs.to_string());
    line(
        "live    ",
        crate::follow::live_page_line(&client, &batch).trim_start_matches("live page: "),
    );
    if let Some(owner) = &record.owner {
        line("owner   ", owner);
    }
    // Who decides the batch; a coordinator older than the lease does not say.
    if let Some(leader) = client.fabric().await.ok().and_then(|fabric| fabric.leader) {
        line("leader  ", &leader.describe());
    }
    if let Some(progress) = &status.progress {
        let left = crate::progress::status_eta(record, progress, crate::progress::now_ms());
        line("progress", &crate::progress::format_line(progress, left));
        for share in &progress.shares {
            line("share   ", &crate::share_lines::share_line(share));
        }
        for unserved in &progress.unserved_tiers {
            line("waiting ", &unserved.describe());
        }
        if let Some(stall) = &progress.stall {
            // The label says it already: `stalled  no worker serves tier …`.
            let said = stall.describe(crate::progress::now_ms());
            line("stalled ", said.strip_prefix("stalled: ").unwrap_or(&said));
        }
        for stall in &progress.fabric_stalls {
            line("stalled ", &stall.describe(crate::progress::now_ms()));
        }
        for lost in &progress.lost_workers {
            line("lost    ", &lost.describe(crate::progress::now_ms()));
        }
        for overdue in &progress.overdue_jobs {
            line("overdue ", &overdue.describe(crate::progress::now_ms()));
        }
    }
    if let Some(error) = &status.notify_error {
        line("notify  ", error);
    }
    if let (Some(ok), Some(code)) = (record.ok, record.exit_code) {
        println!(
            "verdict  {} (exit {code})",
            if ok { "PASS" } else { "FAIL" }
        );
        // Why units stopped is in the envelope only; a status without it still stands.
        if let Ok(envelope) = crate::connect::fetch_envelope(&client, &batch).await {
            print!(
                "{}",
                for_terminal_lines(&crate::summary::stop_error_lines(
                    &envelope.head.fleet_view()
                ))
            );
        }
    }
    Ok(0)
}

/// `cowork watch <batch>`.
pub async fn watch(args: &crate::args::BatchRefArgs) -> Result<i32, CliError> {
    let options = FollowOptions::from_flags(args.quiet, args.unserved_timeout.as_deref())?;
    let client = client(&args.client)?;
    let batch = resolve_remote(&args.batch, &client).await?;
    watch_to_end(&client, &batch, args.output_format, options).await
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
    let envelope = crate::connect::fetch_envelope(&client, &batch)
        .await
        .map_err(|e| client_error(e, "fetching the batch's envelope"))?;
    let status = client
        .status(&batch)
        .await
        .map_err(|e| client_error(e, "reading the batch status"))?;
    let exit_code = status
        .record
        .exit_code
        .unwrap_or(if envelope.head.ok { 0 } else { 1 });
    let mut summary = crate::summary::Summary::new(&envelope.head, exit_code);
    // An eval batch is judged by its A/B comparison, not by its arms' rollup.
    if let Some(words) = status.record.eval_verdict {
        summary = summary.judged_as(format!("{words} (eval, A/B comparison)"), exit_code);
    } else if status.record.state == BatchState::Cancelled {
        // Its envelope judges only the runs that finished before the cancel.
        summary = summary.judged_as(
            "INCOMPLETE (cancelled before its verdict; the units judge the runs that finished)"
                .to_owned(),
            exit_code,
        );
    }
    crate::summary::print(&summary);
    let Some(dir) = download else {
        envelope.print()?;
        return Ok(exit_code);
    };
    let downloaded = download_all(&client, &batch, dir).await?;
    crate::progress::note(&format!(
        "downloaded {} of batch {batch} to {}",
        count(downloaded, "file"),
        dir.display()
    ));
    envelope.print()?;
    // The download is what was asked for, and it worked; the verdict is in the summary.
    Ok(0)
}

/// How many files `cowork results --download` fetches at once.
const DOWNLOADS_AT_ONCE: usize = 8;

/// Saves every stored file of `batch` under `dir`, in the store's layout; returns how many. The
/// listing is walked a page at a time and each file streams to disk, so a batch of any size
/// (millions of keys, a 1.5 GB envelope) downloads in flat memory.
async fn download_all(
    client: &CoordinatorClient,
    batch: &BatchId,
    dir: &std::path::Path,
) -> Result<u64, CliError> {
    let page_size = cowork_schema::api::MAX_ARTIFACT_PAGE;
    let mut after: Option<String> = None;
    let mut downloaded = 0u64;
    loop {
        let keys = client
            .artifacts_page(batch, "", after.as_deref(), page_size)
            .await
            .map_err(|e| client_error(e, "listing the batch's artifacts"))?;
        let mut paths = Vec::with_capacity(keys.len());
        for key in &keys {
            // Keys come from the store, which refuses `..` and empty segments; check again
            // before writing below `dir`.
            if key
                .split('/')
                .any(|part| part.is_empty() || part == "." || part == "..")
            {
                return Err(CliError::Failed(anyhow!("refusing artifact key {key:?}")));
            }
            let path = dir.join(key);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| CliError::Failed(anyhow!("creating {}: {e}", parent.display())))?;
            }
            paths.push((key, path));
        }
        // A few at a time: each file is a round trip through the coordinator to the store.
        let mut downloads = futures::stream::iter(paths.iter().map(|(key, path)| async move {
            client
                .download_artifact(batch, key, path)
                .await
                .map_err(|e| client_error(e, &format!("downloading {key}")))
        }))
        .buffer_unordered(DOWNLOADS_AT_ONCE);
        while let Some(done) = downloads.next().await {
            done?;
            downloaded += 1;
        }
        // A short page is the last; so is a longer one (a coordinator that does not page
        // sent the whole listing).
        if keys.len() != page_size {
            return Ok(downloaded);
        }
        // A big batch takes minutes: on a terminal, a count redrawn in place per page.
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprint!("\r\x1b[2Kdownloading batch {batch}: {downloaded} files so far");
        }
        after = keys.last().cloned();
    }
}

/// The `cowork workers` table: one row a worker, within 100 columns (`text::table`), then what
/// is wrong with a worker (draining, refused, lost) on a line of its own, where it has room to
/// say why.
fn workers_table(workers: &[cowork_schema::api::WorkerStatus], now_ms: u64) -> String {
    let rows: Vec<Vec<String>> = workers
        .iter()
        .map(|status| {
            let worker = &status.info;
            let tiers: Vec<&str> = worker.tiers.iter().map(|t| t.as_str()).collect();
            vec![
                worker.worker_id.clone(),
                tiers.join(","),
                worker.slots.to_string(),
                worker.busy.to_string(),
                worker.executor.to_string(),
                worker.harness_version.as_deref().unwrap_or("-").to_owned(),
                format!("{}/{}", worker.os, worker.arch),
                worker.jobs_finished.to_string(),
            ]
        })
        .collect();
    let table = crate::text::table(
        &[
            "worker", "tiers", "slots", "busy", "executor", "harness", "os/arch", "finished",
        ],
        &rows,
        &[2, 3, 7],
        crate::args::TableFormat::Text,
    );
    let mut out = table;
    for status in workers {
        let worker = &status.info;
        let id = &worker.worker_id;
        if worker.draining {
            out.push_str(&format!(
                "{id}  draining (finishing its jobs, taking no new ones)\n"
            ));
        }
        for backoff in &worker.backed_off_tiers {
            let left_s = backoff.until_ms.saturating_sub(now_ms).div_ceil(1000);
            out.push_str(&format!(
                "{id}  BACKED OFF tier {}: {} sandbox start failures in a row; takes it again in {left_s}s\n",
                backoff.tier.as_str(),
                backoff.failures
            ));
        }
        if worker.backed_off_tiers.is_empty() && worker.sandbox_start_failures > 0 {
            out.push_str(&format!(
                "{id}  {} sandbox start failure(s) in a row\n",
                worker.sandbox_start_failures
            ));
        }
        if let Some(reason) = &status.refused {
            out.push_str(&format!("{id}  REFUSED: {reason}\n"));
        }
        if let Some(age_s) = cowork_core::fleet::heartbeat_late_s(worker, now_ms) {
            out.push_str(&format!(
                "{id}  LOST: no heartbeat for {age_s}s (its running jobs are redelivered)\n"
            ));
        }
    }
    out
}

/// `cowork workers`: the live fleet.
pub async fn workers(client_args: &ClientArgs, output: OutputFormat) -> Result<i32, CliError> {
    let client = client(client_args)?;
    // Read first and from the coordinator's memory, so it is said even when the workers'
    // bucket is what stalls. A coordinator without the route is older: nothing to say.
    let fabric = client.fabric().await.unwrap_or_default();
    if output != OutputFormat::Json {
        if let Some(leader) = &fabric.leader {
            eprintln!("leader   {}", for_terminal(&leader.describe()));
        }
        for stall in &fabric.stalls {
            eprintln!(
                "stalled  {}",
                for_terminal(&stall.describe(crate::progress::now_ms()))
            );
        }
        for shortfall in &fabric.shortfalls {
            eprintln!("short    {}", for_terminal(shortfall));
        }
    }
    let workers = client
        .workers()
        .await
        .map_err(|e| client_error(e, "listing workers"))?;
    if output == OutputFormat::Json {
        println!(
            "{}",
            cowork_schema::json_number::to_string(&workers)
                .map_err(|e| CliError::Failed(e.into()))?
        );
        return Ok(0);
    }
    let now_ms = crate::progress::now_ms();
    print!("{}", for_terminal_lines(&workers_table(&workers, now_ms)));
    // How the slots are divided between batches; an older coordinator does not say.
    if let Ok(shares) = client.shares().await
        && !shares.tiers.is_empty()
    {
        print!(
            "\n{}",
            for_terminal_lines(&crate::share_lines::shares_table(&shares))
        );
    }
    let n_refused = workers.iter().filter(|w| w.refused.is_some()).count();
    let n_lost = workers
        .iter()
        .filter(|w| cowork_core::fleet::heartbeat_late_s(&w.info, now_ms).is_some())
        .count();
    let mut tally = format!("{} worker(s)", workers.len());
    if n_refused > 0 {
        tally.push_str(&format!(
            ", {n_refused} refused (they get no jobs of this coordinator)"
        ));
    }
    if n_lost > 0 {
        tally.push_str(&format!(
            ", {n_lost} lost (heartbeat late; listed until their entry expires)"
        ));
    }
    eprintln!("{tally}");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workers_table_fits_100_columns_and_says_what_is_wrong_on_its_own_line() {
        let worker = |id: &str, heartbeat_at_ms: u64, refused: Option<&str>| {
            serde_json::from_value::<cowork_schema::api::WorkerStatus>(serde_json::json!({
                "protocol": 1, "workerId": id,
                "tiers": ["container", "replay", "protocol", "hostloop", "microvm"],
                "slots": 4, "busy": 2, "executor": "harness", "harnessVersion": "2.0.0",
                "os": "linux", "arch": "x86_64", "hostname": "h", "jobsFinished": 12345,
                "startedAtMs": 0, "heartbeatAtMs": heartbeat_at_ms, "heartbeatEveryMs": 5000,
                "refused": refused,
            }))
            .expect("a worker status")
        };
        let now_ms = 1_000_000;
        let workers = [
            worker("cowork-worker-7f9c8d6b5-x2k4q", now_ms, None),
            worker("w2", now_ms - 60_000, None),
            worker("w3", now_ms, Some("protocol 9, this coordinator speaks 1")),
        ];
        let text = workers_table(&workers, now_ms);
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "{} columns: {line}\n{text}",
                line.chars().count()
            );
        }
        assert!(text.contains("w2  LOST: no heartbeat for 60s"), "{text}");
        assert!(text.contains("w3  REFUSED: protocol 9"), "{text}");
        assert!(
            text.contains("x2k4q"),
            "the id keeps its distinct end: {text}"
        );
    }
}
