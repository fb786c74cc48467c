//! The progress line on stderr: done/running/pass/fail, cost so far and an ETA.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use cowork_schema::api::ProgressSnapshot;
use tokio::sync::watch;

/// Renders progress until the sender is dropped (`cowork run`).
pub async fn render(mut updates: watch::Receiver<ProgressSnapshot>, started: Instant) {
    let mut line = ProgressLine::new(started);
    while updates.changed().await.is_ok() {
        line.show(&updates.borrow_and_update().clone(), false);
    }
    line.show(&updates.borrow().clone(), true);
    line.finish();
}

/// One progress line on stderr, fed with snapshots from a local batch ([`render`]) or a
/// watched remote one. On a terminal the line is redrawn in place at most ten times a second;
/// otherwise a line is printed at most every five seconds, so CI logs stay short.
pub struct ProgressLine {
    tty: bool,
    started: Instant,
    last_draw: Option<Instant>,
    last_line: String,
}

impl ProgressLine {
    /// A line whose ETA counts from `started`.
    pub fn new(started: Instant) -> ProgressLine {
        ProgressLine {
            tty: std::io::stderr().is_terminal(),
            started,
            last_draw: None,
            last_line: String::new(),
        }
    }

    /// Shows `snapshot` unless a line was drawn too recently (`force` draws anyway).
    pub fn show(&mut self, snapshot: &ProgressSnapshot, force: bool) {
        // Redraw limits: 100 ms keeps a terminal smooth without burning a core; 5 s keeps a CI
        // log readable.
        let min_gap = if self.tty {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(5)
        };
        if !force && self.last_draw.is_some_and(|at| at.elapsed() < min_gap) {
            return;
        }
        let line = format_line(snapshot, self.started.elapsed());
        if line != self.last_line {
            draw(&line, self.tty);
            self.last_line = line;
            self.last_draw = Some(Instant::now());
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
    let _ = writeln!(stderr, "{line}");
    let _ = stderr.flush();
}

fn draw(line: &str, tty: bool) {
    let mut stderr = std::io::stderr().lock();
    if tty {
        let _ = write!(stderr, "\r\x1b[2K{line}");
    } else {
        let _ = writeln!(stderr, "{line}");
    }
    let _ = stderr.flush();
}

/// One progress line, e.g. `[#####.....] 50/100 jobs  running 4  pass 40  fail 8  error 2  $1.2345  ETA 12s`.
/// At a job a second or faster (a replay corpus: its cost is $0 and its rate is the news) the
/// rate comes before the ETA, e.g. `$0.0000  118 jobs/s  ETA 2s`.
pub fn format_line(progress: &ProgressSnapshot, elapsed: Duration) -> String {
    let expected = progress.planned.saturating_sub(progress.skipped).max(1);
    let done = progress.finished.min(expected);
    let width = 20u64;
    let filled = (done * width / expected) as usize;
    let bar: String = "#".repeat(filled) + &".".repeat(width as usize - filled);
    let eta = if done == 0 || done >= expected {
        String::new()
    } else {
        let per_job = elapsed.as_secs_f64() / done as f64;
        format!(
            "  ETA {}",
            human_duration(per_job * (expected - done) as f64)
        )
    };
    let per_s = done as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
    let rate = if done > 0 && per_s >= 1.0 {
        format!("  {per_s:.0} jobs/s")
    } else {
        String::new()
    };
    let mut line = format!(
        "[{bar}] {done}/{expected} jobs  running {}  pass {}  fail {}  error {}  ${:.4}{rate}{eta}",
        progress.running, progress.passed, progress.failed, progress.errored, progress.cost_usd
    );
    if progress.retries > 0 {
        line.push_str(&format!("  retries {}", progress.retries));
    }
    if progress.redelivered > 0 {
        line.push_str(&format!("  redelivered {}", progress.redelivered));
    }
    if progress.duplicates > 0 {
        line.push_str(&format!("  duplicates {}", progress.duplicates));
    }
    if progress.discarded > 0 {
        line.push_str(&format!("  discarded {}", progress.discarded));
    }
    if progress.pauses > 0 {
        line.push_str(&format!("  usage-limit pauses {}", progress.pauses));
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
        line.push_str(&format!("  budget ${:.4}/${cap:.2}", progress.cost_usd));
    }
    if let Some(why) = &progress.held_by {
        line.push_str(&format!("  waiting: {why}"));
    }
    line
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
        let line = format_line(&progress, Duration::from_secs(10));
        assert_eq!(
            line,
            "[##########..........] 50/100 jobs  running 4  pass 40  fail 8  error 2  $1.2346  5 jobs/s  ETA 10s"
        );
        // Slower than a job a second: no rate.
        let line = format_line(&progress, Duration::from_secs(100));
        assert!(line.ends_with("$1.2346  ETA 1m40s"), "{line}");
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
            pauses: 3,
            paused_tiers: vec![cowork_schema::job::Tier::Container],
            generation: 1,
            batch_budget_usd: Some(2.0),
            held_by: Some("model limit claude-sonnet=2".into()),
            ..ProgressSnapshot::default()
        };
        let line = format_line(&progress, Duration::from_secs(1));
        assert!(
            line.ends_with(
                "retries 2  redelivered 1  duplicates 1  usage-limit pauses 3  paused: container  generation 1  budget $0.0000/$2.00  waiting: model limit claude-sonnet=2"
            ),
            "{line}"
        );
    }

    #[test]
    fn skipped_jobs_shrink_the_total() {
        let progress = ProgressSnapshot {
            planned: 10,
            skipped: 7,
            finished: 3,
            ..ProgressSnapshot::default()
        };
        assert!(
            format_line(&progress, Duration::from_secs(1))
                .starts_with("[####################] 3/3 jobs")
        );
    }
}
