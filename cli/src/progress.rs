//! The progress line on stderr: done/running/pass/fail, cost so far and an ETA.
//!
//! The ETA is `cowork_core::eta`: the jobs left at the rate jobs finished while this line was
//! watching (a watch joined late counts only what it saw finish), and none on the last line.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use cowork_core::eta::{EtaInput, eta};
use cowork_schema::api::ProgressSnapshot;
use cowork_schema::registry::{BatchRecord, BatchState};
use tokio::sync::watch;

/// Renders progress until the sender is dropped (`cowork run`).
pub async fn render(mut updates: watch::Receiver<ProgressSnapshot>, started: Instant) {
    let mut line = ProgressLine::from_start(started);
    while updates.changed().await.is_ok() {
        line.show(&updates.borrow_and_update().clone());
    }
    line.show_last(&updates.borrow().clone());
    line.finish();
}

/// One progress line on stderr, fed with snapshots from a local batch ([`render`]) or a
/// watched remote one. On a terminal the line is redrawn in place at most ten times a second;
/// otherwise a line is printed at most every five seconds, so CI logs stay short.
pub struct ProgressLine {
    tty: bool,
    /// Jobs finished when the ETA's observation window began, and when that was; `None` until
    /// the first snapshot of a joined batch.
    baseline: Option<(u64, Instant)>,
    last_draw: Option<Instant>,
    last_line: String,
    /// The latest snapshot skipped for coming too soon after a draw: drawn by
    /// [`ProgressLine::flush_pending`] once the gap has passed, so the last state before a
    /// quiet stretch is never left unprinted in a pipe.
    pending: Option<ProgressSnapshot>,
}

impl ProgressLine {
    /// A line for a batch that started at `started` with nothing finished (`cowork run`).
    pub fn from_start(started: Instant) -> ProgressLine {
        ProgressLine {
            baseline: Some((0, started)),
            ..ProgressLine::joining()
        }
    }

    /// A line for a batch already under way (`cowork watch`): the ETA's window begins at the
    /// first snapshot, so jobs finished before it are not counted as if just seen.
    pub fn joining() -> ProgressLine {
        ProgressLine {
            tty: std::io::stderr().is_terminal(),
            baseline: None,
            last_draw: None,
            last_line: String::new(),
            pending: None,
        }
    }

    /// Shows `snapshot` unless a line was drawn too recently.
    pub fn show(&mut self, snapshot: &ProgressSnapshot) {
        self.show_with(snapshot, false, false);
    }

    /// Shows the batch's last snapshot, whatever the gap, with no ETA: the batch has ended.
    pub fn show_last(&mut self, snapshot: &ProgressSnapshot) {
        self.show_with(snapshot, true, true);
    }

    /// `force` draws even if a line was drawn too recently; `last` also drops the ETA.
    fn show_with(&mut self, snapshot: &ProgressSnapshot, force: bool, last: bool) {
        let min_gap = self.min_gap();
        let (finished_before, since) = *self
            .baseline
            .get_or_insert_with(|| (snapshot.finished, Instant::now()));
        if !force && self.last_draw.is_some_and(|at| at.elapsed() < min_gap) {
            self.pending = Some(snapshot.clone());
            return;
        }
        self.pending = None;
        let left = eta(&EtaInput {
            open: !last,
            remaining: remaining(snapshot),
            finished_in_window: snapshot.finished.saturating_sub(finished_before),
            window: since.elapsed(),
        });
        let seen = snapshot.finished.saturating_sub(finished_before);
        let per_s = (seen > 0).then(|| seen as f64 / since.elapsed().as_secs_f64().max(1e-3));
        let line = format_line_at(snapshot, left, per_s);
        if line != self.last_line {
            draw(&line, self.tty);
            self.last_line = line;
            self.last_draw = Some(Instant::now());
        }
    }

    /// The least time between two draws. Redraw limits: 100 ms keeps a terminal smooth without
    /// burning a core; 5 s keeps a CI log readable.
    fn min_gap(&self) -> Duration {
        if self.tty {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(5)
        }
    }

    /// When a skipped snapshot waits to be drawn: the moment its gap has passed.
    pub fn pending_due(&self) -> Option<Instant> {
        let min_gap = self.min_gap();
        self.pending.as_ref()?;
        Some(self.last_draw.map_or_else(Instant::now, |at| at + min_gap))
    }

    /// Draws the skipped snapshot, if any.
    pub fn flush_pending(&mut self) {
        if let Some(snapshot) = self.pending.take() {
            self.show_with(&snapshot, true, false);
        }
    }

    /// Ends the progress line (a newline on a terminal).
    pub fn finish(&self) {
        if self.tty && !self.last_line.is_empty() {
            eprintln!();
        }
    }
}

/// Prints `line` on stderr on a line of its own, also while a progress line is redrawn in place
/// (on a terminal the partial progress line is cleared first; the next redraw comes below).
pub fn note(line: &str) {
    let mut stderr = std::io::stderr().lock();
    if stderr.is_terminal() {
        let _ = write!(stderr, "\r\x1b[2K");
    }
    let _ = writeln!(stderr, "{}", cowork_core::safe_text::for_terminal(line));
    let _ = stderr.flush();
}

fn draw(line: &str, tty: bool) {
    // The line names units and workers: escaped, so it stays one line that only `\r` redraws.
    let line = &cowork_core::safe_text::for_terminal(line);
    let mut stderr = std::io::stderr().lock();
    if tty {
        let columns = terminal_size::terminal_size_of(std::io::stderr())
            .map(|(terminal_size::Width(columns), _)| usize::from(columns));
        let line = fit_to_width(line, columns);
        let _ = write!(stderr, "\r\x1b[2K{line}");
    } else {
        let _ = writeln!(stderr, "{line}");
    }
    let _ = stderr.flush();
}

/// The ETA `cowork status` shows from one snapshot. One snapshot shows no rate; the batch's
/// own age does: what finished since it was submitted, over that time (`now_ms` is the wall
/// clock). None once it stops admitting (stopping, cancelled, done).
pub fn status_eta(
    record: &BatchRecord,
    progress: &ProgressSnapshot,
    now_ms: u64,
) -> Option<Duration> {
    eta(&EtaInput {
        open: matches!(record.state, BatchState::Planned | BatchState::Running),
        remaining: remaining(progress),
        finished_in_window: progress.finished,
        window: Duration::from_millis(now_ms.saturating_sub(record.created_at_ms)),
    })
}

/// The jobs of `progress` that will still run: planned, minus skipped, minus finished.
pub fn remaining(progress: &ProgressSnapshot) -> u64 {
    progress
        .planned
        .saturating_sub(progress.skipped)
        .saturating_sub(progress.finished)
}

/// `line` cut to one column less than a terminal of `columns` (unknown: left whole), ending in
/// `…` when cut: a redrawn line that wraps leaves its first part behind on every redraw, so
/// the in-place line would scroll instead.
pub fn fit_to_width(line: &str, columns: Option<usize>) -> String {
    match columns {
        Some(columns) if columns >= 2 && line.chars().count() > columns - 1 => {
            let kept: String = line.chars().take(columns - 2).collect();
            format!("{kept}…")
        }
        _ => line.to_owned(),
    }
}

/// One progress line, e.g. `[#####.....] 50/100 jobs  running 4  pass 40  fail 8  error 2  $1.2345  ETA 12s`,
/// with the ETA given (none: no ETA shown) and no rate.
pub fn format_line(progress: &ProgressSnapshot, eta: Option<Duration>) -> String {
    format_line_at(progress, eta, None)
}

/// [`format_line`] with the rate jobs were seen to finish, in jobs a second. At a job a second
/// or faster (a replay corpus: its cost is $0 and its rate is the news) the rate comes before
/// the ETA, e.g. `$0.0000  118 jobs/s  ETA 2s`.
pub fn format_line_at(
    progress: &ProgressSnapshot,
    eta: Option<Duration>,
    per_s: Option<f64>,
) -> String {
    // Finished and skipped jobs add up to the planned ones once the batch ends: the count says
    // both against what was planned, and the bar fills with both.
    let planned = progress.planned.max(1);
    let skipped = progress.skipped.min(planned);
    let done = progress.finished.min(planned - skipped);
    let width = 20u64;
    let filled = ((done + skipped) * width / planned) as usize;
    let bar: String = "#".repeat(filled) + &".".repeat(width as usize - filled);
    let eta = eta.map_or_else(String::new, |left| {
        format!("  ETA {}", human_duration(left.as_secs_f64()))
    });
    let rate = match per_s {
        Some(per_s) if done > 0 && per_s >= 1.0 => format!("  {per_s:.0} jobs/s"),
        _ => String::new(),
    };
    let skipped = if skipped > 0 {
        format!(" ({skipped} skipped)")
    } else {
        String::new()
    };
    let mut line = format!(
        "[{bar}] {done}/{} jobs{skipped}  running {}  pass {}  fail {}  error {}  ${:.4}{rate}{eta}",
        progress.planned,
        progress.running,
        progress.passed,
        progress.failed,
        progress.errored,
        progress.cost_usd
    );
    if progress.retries > 0 {
        line.push_str(&format!("  retries {}", progress.retries));
    }
    if progress.sandbox_start_retries > 0 {
        line.push_str(&format!(
            "  sandbox-start retries {}",
            progress.sandbox_start_retries
        ));
    }
    if progress.disrupted > 0 {
        line.push_str(&format!("  cut short {}", progress.disrupted));
    }
    if progress.redelivered > 0 {
        line.push_str(&format!("  redelivered {}", progress.redelivered));
    }
    if progress.duplicates > 0 {
        line.push_str(&format!("  duplicates {}", progress.duplicates));
    }
    if progress.reacked > 0 {
        line.push_str(&format!("  re-acked {}", progress.reacked));
    }
    if progress.discarded > 0 {
        // Discarded jobs finished (pass, fail and error count them) after their unit was
        // decided: said as a part of the finished ones, not beside them.
        line.push_str(&format!(
            "  discarded {} of the {done} finished",
            progress.discarded
        ));
    }
    if progress.pauses > 0 {
        line.push_str(&format!("  usage-limit pauses {}", progress.pauses));
    }
    if let Some(stall) = &progress.stall {
        line.push_str(&format!("  STALLED: {}", stall.message));
    }
    for unserved in &progress.unserved_tiers {
        line.push_str(&format!("  {}", unserved.describe()));
    }
    for stall in &progress.fabric_stalls {
        line.push_str(&format!(
            "  STALLED: {} {} {}",
            stall.kind, stall.name, stall.reason
        ));
    }
    if !progress.paused_tiers.is_empty() {
        let tiers: Vec<&str> = progress
            .paused_tiers
            .iter()
            .map(|tier| tier.as_str())
            .collect();
        line.push_str(&format!("  paused: {}", tiers.join(",")));
    }
    if progress.generation > 0 {
        line.push_str(&format!("  generation {}", progress.generation));
    }
    if let Some(cap) = progress.batch_budget_usd {
        // The whole cost (model plus sandbox) the budget counts, when the snapshot has it.
        let spent = progress.budget_spent_usd.unwrap_or(progress.cost_usd);
        line.push_str(&format!("  budget ${spent:.4}/${cap:.2}"));
    }
    push_waits(&mut line, progress);
    line
}

/// What the batch holds of each tier, and why admission waits.
fn push_waits(line: &mut String, progress: &ProgressSnapshot) {
    for share in &progress.shares {
        line.push_str(&format!(
            "  {} {}: {} running, {} queued of {} slots",
            share.priority,
            share.tier.as_str(),
            share.running,
            share.queued,
            share.slots
        ));
    }
    if let Some(why) = &progress.held_by {
        line.push_str(&format!("  waiting: {why}"));
    }
}

fn human_duration(seconds: f64) -> String {
    let seconds = seconds.round() as u64;
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h{:02}m", seconds / 3600, (seconds / 60) % 60),
    }
}

/// The wall clock in milliseconds since the epoch, for how long a stall has lasted.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redrawn_line_never_reaches_the_terminals_last_column() {
        let line = "[##########..........] 50/100 jobs  running 4  pass 40  fail 8  error 2  $1.2346  ETA 10s  retries 2  redelivered 1  waiting: no live worker serves tier microvm";
        let fitted = fit_to_width(line, Some(100));
        assert_eq!(fitted.chars().count(), 99, "{fitted}");
        assert!(fitted.ends_with('…') && line.starts_with(fitted.trim_end_matches('…')));
        assert_eq!(fit_to_width("short", Some(100)), "short");
        assert_eq!(
            fit_to_width(line, None),
            line,
            "no terminal width known: whole"
        );
    }

    #[test]
    fn line_shows_counts_cost_and_eta() {
        let progress = ProgressSnapshot {
            planned: 100,
            finished: 50,
            running: 4,
            passed: 40,
            failed: 8,
            errored: 2,
            cost_usd: 1.23456,
            ..ProgressSnapshot::default()
        };
        let line = format_line(&progress, Some(Duration::from_secs(10)));
        assert_eq!(
            line,
            "[##########..........] 50/100 jobs  running 4  pass 40  fail 8  error 2  $1.2346  ETA 10s"
        );
        let line = format_line_at(&progress, Some(Duration::from_secs(10)), Some(5.0));
        assert!(line.ends_with("$1.2346  5 jobs/s  ETA 10s"), "{line}");
        // Slower than a job a second: no rate.
        let line = format_line_at(&progress, Some(Duration::from_secs(100)), Some(0.5));
        assert!(line.ends_with("$1.2346  ETA 1m40s"), "{line}");
    }

    #[test]
    fn status_estimates_from_the_batch_age_and_not_for_an_ended_batch() {
        let record = |state| BatchRecord {
            batch_id: cowork_schema::BatchId::new("20261201-000000-abcdef").expect("a batch id"),
            state,
            spec_sha256: String::new(),
            n_jobs: 80,
            created_at_ms: 1_000_000,
            updated_at_ms: 1_000_000,
            ok: None,
            exit_code: None,
            eval_verdict: None,
            owner: None,
            generation: 0,
            kill_running: false,
            controls: Default::default(),
            listing: Default::default(),
        };
        let progress = ProgressSnapshot {
            planned: 80,
            finished: 8,
            running: 4,
            ..ProgressSnapshot::default()
        };
        // 8 of 80 finished in the 40 s since submission: 72 left at 0.2 a second is 6 minutes
        // (this said "ETA 0s").
        let now_ms = 1_040_000;
        assert_eq!(
            status_eta(&record(BatchState::Running), &progress, now_ms),
            Some(Duration::from_secs(360))
        );
        let line = format_line(
            &progress,
            status_eta(&record(BatchState::Running), &progress, now_ms),
        );
        assert!(line.ends_with("ETA 6m00s"), "{line}");
        for ended in [
            BatchState::Cancelled,
            BatchState::Stopping,
            BatchState::Done,
        ] {
            let left = status_eta(&record(ended), &progress, now_ms);
            assert_eq!(left, None, "{ended:?}");
            assert!(!format_line(&progress, left).contains("ETA"));
        }
        // Nothing finished yet: no rate, no figure.
        let fresh = ProgressSnapshot {
            finished: 0,
            ..progress
        };
        assert_eq!(
            status_eta(&record(BatchState::Running), &fresh, now_ms),
            None
        );
    }

    #[test]
    fn line_shows_retries_redeliveries_and_pauses() {
        let progress = ProgressSnapshot {
            planned: 10,
            finished: 10,
            passed: 10,
            retries: 2,
            redelivered: 1,
            duplicates: 1,
            reacked: 2,
            pauses: 3,
            paused_tiers: vec![cowork_schema::job::Tier::Container],
            generation: 1,
            batch_budget_usd: Some(2.0),
            held_by: Some("model limit claude-sonnet=2".into()),
            ..ProgressSnapshot::default()
        };
        let line = format_line(&progress, None);
        assert!(
            line.ends_with(
                "retries 2  redelivered 1  duplicates 1  re-acked 2  usage-limit pauses 3  paused: container  generation 1  budget $0.0000/$2.00  waiting: model limit claude-sonnet=2"
            ),
            "{line}"
        );
    }

    #[test]
    fn a_snapshot_skipped_for_coming_too_soon_is_drawn_once_due() {
        let mut line = ProgressLine {
            tty: false,
            ..ProgressLine::from_start(Instant::now())
        };
        let at = |finished: u64| ProgressSnapshot {
            planned: 8,
            finished,
            ..ProgressSnapshot::default()
        };
        line.show(&at(0));
        assert_eq!(line.pending_due(), None);
        // Within the pipe's five seconds: kept, not drawn, and due when the gap has passed.
        line.show(&at(4));
        assert!(
            line.last_line.starts_with("[....................] 0/8"),
            "{}",
            line.last_line
        );
        let due = line.pending_due().expect("a snapshot waits");
        assert!(due > Instant::now());
        line.flush_pending();
        assert!(
            line.last_line.starts_with("[##########..........] 4/8"),
            "{}",
            line.last_line
        );
        assert_eq!(line.pending_due(), None);
    }

    #[test]
    fn skipped_and_discarded_jobs_add_up_to_the_planned_ones() {
        let progress = ProgressSnapshot {
            planned: 10,
            skipped: 7,
            finished: 3,
            ..ProgressSnapshot::default()
        };
        assert!(
            format_line(&progress, None)
                .starts_with("[####################] 3/10 jobs (7 skipped)")
        );
        // It said "9/9 jobs … discarded 7" for 10 planned.
        let progress = ProgressSnapshot {
            planned: 10,
            skipped: 1,
            finished: 9,
            errored: 9,
            discarded: 7,
            ..ProgressSnapshot::default()
        };
        let line = format_line(&progress, None);
        assert!(
            line.starts_with("[####################] 9/10 jobs (1 skipped)"),
            "{line}"
        );
        assert!(line.ends_with("discarded 7 of the 9 finished"), "{line}");
    }
}
