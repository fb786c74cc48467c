//! Who retries what: every retry policy of the fleet, layer by layer, in one file.
//!
//! The rule behind all of them: a run that may have spent money is never run again by the fleet;
//! everything else is retried. Three layers retry a job itself, from the outside in:
//! 1. [`broker`]: JetStream delivers a job again when its worker stops renewing it (the worker
//!    died or was cut off), up to a number of deliveries;
//! 2. [`worker`]: a worker hands a job back (a `nak`, redelivered after a backoff) when it fails
//!    *before* the run could spend (bundle fetch, work dir, harness start), and retries its
//!    uploads and events *after* the run until a deadline, never the run;
//! 3. [`admission`]: the coordinator publishes a job again once when it never reported back
//!    within its timeout plus a grace, and pauses a tier that hit the usage limit.
//!
//! Around them, the plumbing retries itself: the coordinator's supervision of a batch whose
//! port broke ([`coordinator`]), the event log's subscription ([`event_log`]) and a client
//! watching a coordinator it cannot reach ([`client`]), and a notification's delivery to a
//! webhook ([`notify`](mod@notify)). Each layer's code takes its numbers
//! from here; docs/architecture.md tells the story of one job whose worker died.

use std::time::Duration;

/// An exponential backoff: `initial`, doubled per attempt, capped at `max` (the fabric's
/// `Backoff` adds the jitter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub initial: Duration,
    pub max: Duration,
}

/// The broker's redelivery of a job whose worker went silent.
pub mod broker {
    use std::time::Duration;

    /// How long a delivered job may go without an ack or a renewal before JetStream delivers
    /// it again (`ack_wait`). Workers renew every third of it.
    pub const ACK_WAIT: Duration = Duration::from_secs(60);
    /// Deliveries of one job before JetStream gives up on it (`max_deliver`); the last one's
    /// advisory ends the job as an `infra` error.
    pub const MAX_DELIVER: i64 = 5;
    /// `cowork run`'s embedded queue: a failure to start the harness in one process rarely
    /// heals, so fewer deliveries.
    pub const EMBEDDED_MAX_DELIVER: u32 = 3;
}

/// A worker's own retries, before and after the run spends.
pub mod worker {
    use std::time::Duration;

    use super::Schedule;

    /// Before spend (bundle fetch, work dir, harness start) the job is handed back with a
    /// `nak` after this backoff; also the pace of upload and event retries after spend.
    pub const BEFORE_SPEND: Schedule = Schedule {
        initial: Duration::from_millis(200),
        max: Duration::from_secs(10),
    };
    /// After spend, uploads, the job record and each event are retried until this deadline;
    /// the run itself never is.
    pub const STORE_DEADLINE: Duration = Duration::from_secs(600);
}

/// The coordinator's re-publishing of a silent job and its usage-limit pauses.
pub mod admission {
    use std::time::Duration;

    /// Time a started job has beyond its own timeout to report back before it is published
    /// again (once; then it is an `infra` error): room for the worker's upload retries.
    pub const LOST_JOB_GRACE: Duration = Duration::from_secs(5 * 60);
    /// First dispatch pause of a tier after a `usage_limit` result; doubles up to the max.
    pub const USAGE_PAUSE: Duration = Duration::from_secs(30);
    pub const USAGE_PAUSE_MAX: Duration = Duration::from_secs(600);
}

/// The coordinator's supervision of a batch.
pub mod coordinator {
    use std::time::Duration;

    use super::Schedule;

    /// A supervision a port broke (broker or store down) starts again from catch-up after
    /// this backoff, until it works.
    pub const SUPERVISION: Schedule = Schedule {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(30),
    };
}

/// The event log's subscription.
pub mod event_log {
    use std::time::Duration;

    use super::Schedule;

    /// A lost or silent subscription is recreated after this backoff, forever.
    pub const RESUBSCRIBE: Schedule = Schedule {
        initial: Duration::from_millis(250),
        max: Duration::from_secs(5),
    };
}

/// A client following a batch.
pub mod client {
    use std::time::Duration;

    use super::Schedule;

    /// A watch of an unreachable coordinator retries after this backoff, for
    /// [`WATCH_GIVE_UP`].
    pub const WATCH: Schedule = Schedule {
        initial: Duration::from_millis(500),
        max: Duration::from_secs(5),
    };
    pub const WATCH_GIVE_UP: Duration = Duration::from_secs(600);
}

/// The delivery of a notification to a webhook.
pub mod notify {
    use std::time::Duration;

    use super::Schedule;

    /// A delivery met by a connection error, a timeout, a 5xx, 408 or 429 is tried again after
    /// this backoff, for [`DELIVERY_GIVE_UP`]; any other answer is final.
    pub const DELIVERY: Schedule = Schedule {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(60),
    };
    pub const DELIVERY_GIVE_UP: Duration = Duration::from_secs(600);
}
