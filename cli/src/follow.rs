//! Following a submitted batch to its end: the progress line from the coordinator's event
//! stream, then the same ending as `cowork run` (summary, envelope, exit code).

use anyhow::anyhow;
use cowork_client::{ClientError, CoordinatorClient, WatchEvent};
use cowork_schema::BatchId;
use cowork_schema::registry::BatchState;
use futures::{Stream, StreamExt};

use crate::args::OutputFormat;
use crate::connect::client_error;
use crate::exit::CliError;
use crate::progress::ProgressLine;

/// How a batch is followed.
#[derive(Clone, Copy, Debug, Default)]
pub struct FollowOptions {
    /// No progress line (the lines saying why the batch waits are still printed).
    pub quiet: bool,
    /// Give up once a tier of the batch has had waiting jobs and no live worker for this long.
    pub unserved_timeout: Option<std::time::Duration>,
}

impl FollowOptions {
    /// The options of `--quiet` and `--unserved-timeout`, or a usage error naming the flag.
    pub fn from_flags(
        quiet: bool,
        unserved_timeout: Option<&str>,
    ) -> Result<FollowOptions, CliError> {
        Ok(FollowOptions {
            quiet,
            unserved_timeout: unserved_timeout
                .map(|text| crate::connect::duration_arg("--unserved-timeout", text))
                .transpose()?,
        })
    }
}

/// Follows a batch's event stream to its end, showing the progress line unless `quiet`; the
/// end event, or an error when the stream closed before it (or a tier stayed unserved past
/// `unserved_timeout`).
pub async fn follow(
    client: &CoordinatorClient,
    batch: &BatchId,
    options: FollowOptions,
) -> Result<cowork_schema::api::BatchEnd, CliError> {
    let mut watch = Watch::new(batch, options);
    let end = loop {
        let interruption = match client.watch(batch).await {
            Ok(events) => match watch.read(events).await? {
                Watched::End(end) => break end,
                Watched::Interrupted(interruption) => interruption,
            },
            Err(error) => Interruption::Failed(error),
        };
        watch.wait_to_retry(interruption).await?;
    };
    if !options.quiet {
        if let Ok(status) = client.status(batch).await
            && let Some(snapshot) = status.progress
        {
            watch.progress.show_last(&snapshot);
        }
        watch.progress.finish();
    }
    Ok(end)
}

/// What one followed batch has shown so far, across the watch streams it took.
struct Watch<'a> {
    batch: &'a BatchId,
    options: FollowOptions,
    progress: ProgressLine,
    stalls: Vec<cowork_schema::api::FabricStall>,
    waits: Waits,
    /// Since when the watch is interrupted (see `Interruption`): it says so once and waits.
    interrupted_since: Option<std::time::Instant>,
    attempt: u32,
}

/// How one watch stream stopped.
enum Watched {
    /// The batch ended.
    End(cowork_schema::api::BatchEnd),
    /// The stream stopped before the batch's end.
    Interrupted(Interruption),
}

impl<'a> Watch<'a> {
    fn new(batch: &'a BatchId, options: FollowOptions) -> Watch<'a> {
        Watch {
            batch,
            options,
            progress: ProgressLine::joining(),
            stalls: Vec::new(),
            waits: Waits::default(),
            interrupted_since: None,
            attempt: 0,
        }
    }

    /// Reads one watch stream until the batch's end or the stream's; an error when a tier
    /// stayed unserved past the timeout.
    async fn read(
        &mut self,
        events: impl Stream<Item = Result<WatchEvent, ClientError>>,
    ) -> Result<Watched, CliError> {
        let mut events = std::pin::pin!(events);
        loop {
            let event = match self.next_event(&mut events).await? {
                None => return Ok(Watched::Interrupted(Interruption::Closed)),
                Some(Err(error)) => return Ok(Watched::Interrupted(Interruption::Failed(error))),
                Some(Ok(event)) => event,
            };
            self.interrupted_since = None;
            self.attempt = 0;
            match event {
                WatchEvent::Progress(snapshot) => {
                    // A stall is said once when it starts and once when it ends, also with
                    // --quiet: it is why the batch does not move.
                    note_stalls(&mut self.stalls, &snapshot.fabric_stalls);
                    // Why the batch waits, as lines of their own: a pipe (CI) shows only
                    // every fifth second's progress line, a terminal redraws it.
                    self.waits.note(&snapshot);
                    if !self.options.quiet {
                        self.progress.show(&snapshot);
                    }
                }
                WatchEvent::End(batch_end) => return Ok(Watched::End(batch_end)),
            }
        }
    }

    /// The stream's next item. Meanwhile it shows a progress line skipped for coming too soon
    /// once it is due, and gives up once a tier stays unserved past the timeout.
    async fn next_event<S: Stream + Unpin>(
        &mut self,
        events: &mut S,
    ) -> Result<Option<S::Item>, CliError> {
        loop {
            // Without an unserved tier there is no deadline: the stream's own next event (or
            // its end) is all there is to wait for.
            // The next event, or the first of two moments: the unserved tier's deadline, and
            // when a progress line skipped for coming too soon is due (without it, a pipe
            // would never show the state a quiet batch waits in). Dropping `next()` at either
            // is safe: the stream keeps its place.
            let unserved = self.waits.deadline(self.options.unserved_timeout);
            let due = self.progress.pending_due().filter(|_| !self.options.quiet);
            let wake = match (&unserved, due) {
                (Some((deadline, _)), Some(due)) => Some((*deadline).min(due)),
                (Some((deadline, _)), None) => Some(*deadline),
                (None, due) => due,
            };
            let Some(wake) = wake else {
                return Ok(events.next().await);
            };
            match tokio::time::timeout_at(wake.into(), events.next()).await {
                Ok(next) => return Ok(next),
                Err(_) => {
                    if let Some((deadline, tier)) = &unserved
                        && std::time::Instant::now() >= *deadline
                    {
                        self.progress.finish();
                        return Err(unserved_for_too_long(self.batch, tier, self.options));
                    }
                    self.progress.flush_pending();
                }
            }
        }
    }

    /// Waits before the next watch of a batch whose stream stopped early; an error when the
    /// failure is one no retry can mend, or the watch has been interrupted for too long.
    async fn wait_to_retry(&mut self, interruption: Interruption) -> Result<(), CliError> {
        // A watch whose stream drops while the batch runs (the coordinator restarted, its
        // NATS node lost, its queue stalled) connects again and keeps waiting, for at most
        // `INTERRUPTED_FOR` from the first failure; a failure no retry can mend ends it.
        let failure = match interruption {
            Interruption::Failed(failure) if !failure.is_transient() => {
                return Err(client_error(failure, "watching the batch"));
            }
            retried => retried,
        };
        let batch = self.batch;
        let since = *self.interrupted_since.get_or_insert_with(|| {
            // On a line of its own: a progress line may be drawn in place on a terminal.
            crate::progress::note(&format!("{}; waiting", failure.describe(batch)));
            std::time::Instant::now()
        });
        if since.elapsed() > INTERRUPTED_FOR {
            return Err(match failure {
                Interruption::Failed(failure) => client_error(failure, "watching the batch"),
                Interruption::Closed => CliError::Failed(anyhow!(
                    "the coordinator closed the watch of batch {batch} before it ended, again for {}s",
                    INTERRUPTED_FOR.as_secs()
                )),
            });
        }
        self.attempt += 1;
        tokio::time::sleep(WATCH_RETRY.delay(self.attempt)).await;
        Ok(())
    }
}

/// How long a watch waits on a coordinator it cannot reach, that answers 503, or that closes
/// the watch before the batch ended: a NATS cluster elects new leaders within seconds, a
/// restarted node or coordinator is back within a minute.
const INTERRUPTED_FOR: std::time::Duration = cowork_schema::retries::client::WATCH_GIVE_UP;
/// Pauses between watch attempts on such a coordinator: from 500 ms, doubling to 5 s.
/// Also between reads of the report of a batch whose end was seen but whose record, read
/// from a replica that lags, does not say so yet.
const WATCH_RETRY: cowork_fabric::backoff::Backoff =
    cowork_fabric::backoff::Backoff::of(cowork_schema::retries::client::WATCH);

/// Why a watch's stream stopped before the batch's end.
enum Interruption {
    /// Connecting or reading failed.
    Failed(ClientError),
    /// The coordinator closed the stream (it shut down, or lost the batch to another).
    Closed,
}

impl Interruption {
    fn describe(&self, batch: &BatchId) -> String {
        match self {
            Interruption::Failed(failure) => failure.to_string(),
            Interruption::Closed => {
                format!("the coordinator closed the watch of batch {batch} before it ended")
            }
        }
    }
}

/// The reasons a followed batch waits, as last printed: the tiers no live worker serves
/// (with when each was first seen) and what holds admission.
#[derive(Default)]
struct Waits {
    unserved: Vec<(cowork_schema::api::UnservedTier, std::time::Instant)>,
    held_by: Option<String>,
    lost_workers: Vec<String>,
    /// The stall reason last printed.
    stall: Option<String>,
    /// Jobs past their timeout plus grace already named.
    overdue: Vec<String>,
}

impl Waits {
    /// Prints each reason to wait that starts or ends in `snapshot`, once.
    fn note(&mut self, snapshot: &cowork_schema::api::ProgressSnapshot) {
        let now = &snapshot.unserved_tiers;
        for unserved in now {
            if self
                .unserved
                .iter()
                .any(|(seen, _)| seen.tier == unserved.tier)
            {
                continue;
            }
            crate::progress::note(&format!("waiting: {}", unserved.describe()));
            self.unserved
                .push((unserved.clone(), std::time::Instant::now()));
        }
        self.unserved.retain(|(seen, _)| {
            let still = now.iter().any(|u| u.tier == seen.tier);
            if !still {
                crate::progress::note(&format!("tier {} is served again", seen.tier.as_str()));
            }
            still
        });
        for (seen, _) in &mut self.unserved {
            if let Some(latest) = now.iter().find(|u| u.tier == seen.tier) {
                seen.waiting = latest.waiting;
            }
        }
        for lost in &snapshot.lost_workers {
            if !self.lost_workers.contains(&lost.worker_id) {
                crate::progress::note(&lost.describe(crate::progress::now_ms()));
            }
        }
        for gone in self
            .lost_workers
            .iter()
            .filter(|id| !snapshot.lost_workers.iter().any(|l| &l.worker_id == *id))
        {
            crate::progress::note(&format!(
                "worker {gone}: no longer listed as lost (it beats again, or its entry expired)"
            ));
        }
        self.lost_workers = snapshot
            .lost_workers
            .iter()
            .map(|lost| lost.worker_id.clone())
            .collect();
        for overdue in &snapshot.overdue_jobs {
            if !self.overdue.contains(&overdue.job_id) {
                crate::progress::note(&overdue.describe(crate::progress::now_ms()));
            }
        }
        self.overdue = snapshot
            .overdue_jobs
            .iter()
            .map(|overdue| overdue.job_id.clone())
            .collect();
        let stall = snapshot.stall.as_ref().map(|stall| stall.message.clone());
        if stall != self.stall {
            match &snapshot.stall {
                Some(stall) => crate::progress::note(&stall.describe(crate::progress::now_ms())),
                None => crate::progress::note("no longer stalled: a job started or finished"),
            }
            self.stall = stall;
        }
        if snapshot.held_by != self.held_by {
            if let Some(why) = &snapshot.held_by {
                crate::progress::note(&format!("waiting: {why}"));
            }
            self.held_by.clone_from(&snapshot.held_by);
        }
    }

    /// When the longest-unserved tier runs out of `limit`, and that tier.
    fn deadline(
        &self,
        limit: Option<std::time::Duration>,
    ) -> Option<(std::time::Instant, cowork_schema::api::UnservedTier)> {
        let limit = limit?;
        self.unserved
            .iter()
            .min_by_key(|(_, since)| *since)
            .map(|(tier, since)| (*since + limit, tier.clone()))
    }
}

/// The error of a watch that gave up on an unserved tier: which tier, for how long, and what
/// to do (the batch itself keeps running).
fn unserved_for_too_long(
    batch: &BatchId,
    tier: &cowork_schema::api::UnservedTier,
    options: FollowOptions,
) -> CliError {
    let limit = options.unserved_timeout.unwrap_or_default();
    CliError::Failed(anyhow!(
        "tier {tier_name} of batch {batch} had no live worker for {limit:?} (--unserved-timeout; {waiting} job(s) waiting): \
         start a worker with --tiers {tier_name}, or `cowork cancel {batch}`; the batch keeps running",
        tier_name = tier.tier.as_str(),
        waiting = tier.waiting,
    ))
}

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
            cowork_core::safe_text::for_terminal(&stall.describe(crate::progress::now_ms()))
        );
    }
    for ended in seen
        .iter()
        .filter(|s| !now.iter().any(|stall| same(s, stall)))
    {
        eprintln!(
            "queue serves again: {}",
            cowork_core::safe_text::for_terminal(&format!("{} {}", ended.kind, ended.name))
        );
    }
    *seen = now.to_vec();
}

/// Follows a batch to its end, then prints the summary (and the envelope with JSON output) and
/// returns the batch's exit code — the same ending as `cowork run`.
pub async fn watch_to_end(
    client: &CoordinatorClient,
    batch: &BatchId,
    output: OutputFormat,
    options: FollowOptions,
) -> Result<i32, CliError> {
    crate::progress::note(&live_page_line(client, batch));
    let end = match crate::interrupts::Interrupts::install() {
        Ok(mut interrupts) => tokio::select! {
            end = follow(client, batch, options) => end?,
            _ = interrupts.next() => {
                crate::progress::note(&interrupted_watch_note(client, batch));
                return Ok(INTERRUPTED_EXIT);
            }
        },
        // Without a handler Ctrl-C ends the watch as it always would.
        Err(_) => follow(client, batch, options).await?,
    };
    match end.state {
        BatchState::Done => {
            let envelope = report_of_ended(client, batch).await?;
            let exit_code = end
                .exit_code
                .unwrap_or(if envelope.head.ok { 0 } else { 1 });
            let mut summary = crate::summary::Summary::new(&envelope.head, exit_code);
            // An eval batch ends judged by its A/B comparison, not by its arms' rollup.
            if let Some(words) = end.eval_verdict {
                summary = summary.judged_as(format!("{words} (eval, A/B comparison)"), exit_code);
            } else if !envelope.head.ok {
                let reasons = crate::summary_reasons::remote(client, batch, &envelope.head).await;
                summary = summary.with_reasons(reasons);
            }
            crate::summary::print(&summary);
            eprintln!("results: cowork results {batch}");
            if output == OutputFormat::Json {
                envelope.print()?;
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

/// The exit code of a watch stopped by Ctrl-C or SIGTERM, as a shell gives it.
const INTERRUPTED_EXIT: i32 = 130;

/// `live page: <url>`: where a browser follows the batch, with what it needs when the
/// coordinator asks for a token.
pub fn live_page_line(client: &CoordinatorClient, batch: &BatchId) -> String {
    let token = if client.has_token() {
        " (append ?token=<API token>: the page asks for the same token as the API)"
    } else {
        ""
    };
    format!("live page: {}{token}", client.live_page_url(batch))
}

/// What a watch stopped by Ctrl-C says: the batch goes on, and how to follow or stop it.
fn interrupted_watch_note(client: &CoordinatorClient, batch: &BatchId) -> String {
    let coordinator = format!(" --coordinator {}", client.base_url().trim_end_matches('/'));
    format!(
        "stopped watching: batch {batch} keeps running on the fleet; follow it again with \
         `cowork watch {batch}{coordinator}` (or `cowork status {batch}{coordinator}`), \
         cancel it with `cowork cancel {batch}{coordinator}`"
    )
}

/// How long the report of a batch whose end the watch saw may stay unreadable: the record is
/// written before the end is sent, but a read served by a replica that lags (a coordinator
/// cut off from its cluster's leader) can still say "running" for a few seconds.
const REPORT_LAG_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// The envelope of a batch the watch saw end `done`: read again while the coordinator answers
/// "not found" (its record lags the end) or cannot be reached, for at most [`REPORT_LAG_FOR`].
async fn report_of_ended(
    client: &CoordinatorClient,
    batch: &BatchId,
) -> Result<crate::connect::FetchedEnvelope, CliError> {
    let mut lagging_since: Option<std::time::Instant> = None;
    let mut attempt = 0u32;
    loop {
        let error = match crate::connect::fetch_envelope(client, batch).await {
            Ok(envelope) => return Ok(envelope),
            Err(error) => error,
        };
        let retried = error.is_transient() || matches!(error, ClientError::NotFound { .. });
        let since = *lagging_since.get_or_insert_with(std::time::Instant::now);
        if !retried || since.elapsed() > REPORT_LAG_FOR {
            return Err(client_error(error, "fetching the batch's envelope"));
        }
        if attempt == 0 {
            crate::progress::note(&format!(
                "batch {batch} ended but its report is not readable yet ({error}); waiting"
            ));
        }
        attempt += 1;
        tokio::time::sleep(WATCH_RETRY.delay(attempt)).await;
    }
}
