//! Waiting for a condition in a test: poll it until it holds, failing with the reason after a
//! bound. The bound only turns a hang into a failure (a safety net); it never times anything
//! the test asserts, and nothing here sleeps except between two polls.
//!
//! ```no_run
//! # use std::time::Duration;
//! # use cowork_testkit::wait_until;
//! # let started = std::path::Path::new("started");
//! wait_until("the harness wrote its start file")
//!     .within(Duration::from_secs(60))
//!     .every(Duration::from_millis(20))
//!     .poll(|| started.exists());
//! ```
//!
//! A wait for a message ([`Wait::try_receive`]) blocks on its channel instead of polling.
//!
//! What a poll returns decides what the wait gives back ([`Attempt`]): `bool` gives `()`,
//! `Option<T>` gives the `T` found, and `Result<T, E>` gives the `T` and prints the last `E`
//! (the last thing seen) on timeout.

use std::fmt::{self, Display};
use std::time::Duration;

/// How long a wait polls unless [`Wait::within`] says otherwise.
const DEFAULT_WITHIN: Duration = Duration::from_secs(60);

/// How often a wait polls unless [`Wait::every`] says otherwise.
const DEFAULT_EVERY: Duration = Duration::from_millis(50);

/// Starts a wait for `reason`, the condition awaited ("the job is acked"): it is what a timeout
/// says was waited for.
pub fn wait_until(reason: impl Into<String>) -> Wait<'static> {
    Wait {
        reason: reason.into(),
        within: DEFAULT_WITHIN,
        every: DEFAULT_EVERY,
        context: None,
    }
}

/// A wait being set up by [`wait_until`]; [`Wait::poll`] (or [`Wait::poll_async`]) runs it.
#[must_use = "a wait does nothing until it is polled"]
pub struct Wait<'a> {
    reason: String,
    within: Duration,
    every: Duration,
    context: Option<Box<dyn FnOnce() -> String + 'a>>,
}

impl fmt::Debug for Wait<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wait")
            .field("reason", &self.reason)
            .field("within", &self.within)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// One poll's answer: whether the condition holds, and what it found or last saw.
pub trait Attempt {
    /// What the wait returns once the condition holds.
    type Found;
    /// `Ok` with what was found, or `Err` with what was seen instead (if anything worth
    /// printing on timeout).
    fn into_found(self) -> Result<Self::Found, Option<String>>;
}

impl Attempt for bool {
    type Found = ();
    fn into_found(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

impl<T> Attempt for Option<T> {
    type Found = T;
    fn into_found(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Display> Attempt for Result<T, E> {
    type Found = T;
    fn into_found(self) -> Result<T, Option<String>> {
        self.map_err(|seen| Some(seen.to_string()))
    }
}

/// A wait that ran out of time (or whose channel closed): its reason, bound and the last thing
/// seen.
#[derive(Debug)]
pub struct TimedOut {
    reason: String,
    within: Duration,
    last_seen: Option<String>,
}

impl Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gave up after {:?} waiting until {}",
            self.within, self.reason
        )?;
        if let Some(seen) = &self.last_seen {
            write!(f, "\nlast seen: {seen}")?;
        }
        Ok(())
    }
}

impl<'a> Wait<'a> {
    /// Gives up after `bound` (default 60 s).
    pub fn within(mut self, bound: Duration) -> Self {
        self.within = bound;
        self
    }

    /// Polls every `interval` (default 50 ms).
    pub fn every(mut self, interval: Duration) -> Self {
        self.every = interval;
        self
    }

    /// Adds what `context` returns (a fleet's logs, say) to the panic of a timeout; it runs
    /// only then.
    pub fn context<'b>(self, context: impl FnOnce() -> String + 'b) -> Wait<'b>
    where
        'a: 'b,
    {
        Wait {
            reason: self.reason,
            within: self.within,
            every: self.every,
            context: Some(Box::new(context)),
        }
    }

    /// Polls `attempt` until it holds and returns what it found; panics on timeout.
    #[track_caller]
    pub fn poll<A: Attempt>(self, attempt: impl FnMut() -> A) -> A::Found {
        let context = self.context;
        let within = self.within;
        let every = self.every;
        let reason = self.reason;
        let found = try_poll_blocking(reason, within, every, attempt);
        found.unwrap_or_else(|timed_out| fail(&timed_out, context))
    }

    /// Polls `attempt` until it holds: what it found, or [`TimedOut`] (no panic) for a caller
    /// that cleans up before it fails, or that checks what is left itself.
    pub fn try_poll<A: Attempt>(self, attempt: impl FnMut() -> A) -> Result<A::Found, TimedOut> {
        try_poll_blocking(self.reason, self.within, self.every, attempt)
    }

    /// Receives from `channel` until `accept` takes a message (returning `Some`), blocking on
    /// the channel, not polling it: what `accept` returned, or [`TimedOut`] once the bound
    /// passed or every sender hung up.
    pub fn try_receive<T, U>(
        self,
        channel: &std::sync::mpsc::Receiver<T>,
        mut accept: impl FnMut(T) -> Option<U>,
    ) -> Result<U, TimedOut> {
        let deadline = std::time::Instant::now() + self.within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let last_seen = match channel.recv_timeout(left) {
                Ok(message) => match accept(message) {
                    Some(accepted) => return Ok(accepted),
                    None => continue,
                },
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    Some("every sender hung up".to_owned())
                }
            };
            return Err(TimedOut {
                reason: self.reason,
                within: self.within,
                last_seen,
            });
        }
    }

    /// [`Wait::poll`] of an async `attempt`, on tokio's clock (so it also runs in paused time).
    pub async fn poll_async<A: Attempt>(self, attempt: impl AsyncFnMut() -> A) -> A::Found {
        let context = self.context;
        let found = try_poll_tokio(self.reason, self.within, self.every, attempt).await;
        found.unwrap_or_else(|timed_out| fail(&timed_out, context))
    }

    /// [`Wait::try_poll`] of an async `attempt`, on tokio's clock.
    pub async fn try_poll_async<A: Attempt>(
        self,
        attempt: impl AsyncFnMut() -> A,
    ) -> Result<A::Found, TimedOut> {
        try_poll_tokio(self.reason, self.within, self.every, attempt).await
    }
}

fn try_poll_blocking<A: Attempt>(
    reason: String,
    within: Duration,
    every: Duration,
    mut attempt: impl FnMut() -> A,
) -> Result<A::Found, TimedOut> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let last_seen = match attempt().into_found() {
            Ok(found) => return Ok(found),
            Err(seen) => seen,
        };
        if std::time::Instant::now() >= deadline {
            return Err(TimedOut {
                reason,
                within,
                last_seen,
            });
        }
        std::thread::sleep(every);
    }
}

async fn try_poll_tokio<A: Attempt>(
    reason: String,
    within: Duration,
    every: Duration,
    mut attempt: impl AsyncFnMut() -> A,
) -> Result<A::Found, TimedOut> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let last_seen = match attempt().await.into_found() {
            Ok(found) => return Ok(found),
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(TimedOut {
                reason,
                within,
                last_seen,
            });
        }
        tokio::time::sleep(every).await;
    }
}

#[track_caller]
fn fail(timed_out: &TimedOut, context: Option<Box<dyn FnOnce() -> String + '_>>) -> ! {
    match context {
        Some(context) => panic!("{timed_out}\n{}", context()),
        None => panic!("{timed_out}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_returns_what_it_found_once_the_condition_holds() {
        let mut polls = 0;
        let found = wait_until("the third poll")
            .every(Duration::from_millis(1))
            .poll(|| {
                polls += 1;
                (polls == 3).then_some(polls)
            });
        assert_eq!(found, 3);
    }

    #[test]
    fn a_timeout_names_the_reason_and_the_last_thing_seen() {
        let timed_out = wait_until("never")
            .within(Duration::from_millis(20))
            .every(Duration::from_millis(1))
            .try_poll(|| Err::<(), _>("still nothing"))
            .expect_err("the condition never holds");
        let text = timed_out.to_string();
        assert!(text.contains("waiting until never"), "{text}");
        assert!(text.starts_with("gave up after 20ms"), "{text}");
        assert!(text.contains("last seen: still nothing"), "{text}");
    }

    #[test]
    #[should_panic(expected = "the fleet's logs")]
    fn a_failed_poll_panics_with_its_context() {
        wait_until("never")
            .within(Duration::from_millis(5))
            .every(Duration::from_millis(1))
            .context(|| "the fleet's logs".to_owned())
            .poll(|| false);
    }

    #[test]
    fn a_receive_returns_the_first_message_accepted() {
        let (sender, channel) = std::sync::mpsc::channel();
        for line in ["starting", "stopping: waiting for 2 jobs", "later"] {
            sender.send(line).expect("the channel is open");
        }
        let mut passed = Vec::new();
        let found = wait_until("a stopping line").try_receive(&channel, |line| {
            if line.starts_with("stopping") {
                Some(line)
            } else {
                passed.push(line);
                None
            }
        });
        assert_eq!(
            found.expect("the line was sent"),
            "stopping: waiting for 2 jobs"
        );
        assert_eq!(passed, ["starting"]);
        drop(sender);
        let closed = wait_until("another line")
            .try_receive(&channel, |line| (line == "never").then_some(()))
            .expect_err("the sender hung up");
        assert!(
            closed.to_string().contains("every sender hung up"),
            "{closed}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_async_poll_waits_on_tokio_time() {
        let started = tokio::time::Instant::now();
        let mut polls = 0;
        wait_until("the tenth poll")
            .within(Duration::from_secs(3600))
            .every(Duration::from_secs(60))
            .poll_async(async || {
                polls += 1;
                polls == 10
            })
            .await;
        assert_eq!(started.elapsed(), Duration::from_secs(540));
    }
}
