//! `cowork bench`: what each benchmark measures and its settings.

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

// Parsed once at start-up.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum BenchWhat {
    /// Plan a matrix × repeat batch of about --jobs jobs and iterate every job spec.
    Plan {
        #[arg(long, default_value_t = 1_000_000)]
        jobs: u64,
    },
    /// Fold --outcomes synthetic outcomes (cells × repeats) through the reducer.
    Fold {
        #[arg(long, default_value_t = 1_000_000)]
        outcomes: u64,
    },
    /// Raw JetStream baseline: publish with acks, pull and ack --messages small messages.
    Jetstream {
        /// NATS server URL.
        #[arg(long, env = "COWORK_NATS_URL")]
        nats_url: String,
        #[arg(long, default_value_t = 20_000)]
        messages: u64,
    },
    /// The fleet end to end: an in-process coordinator and --workers workers (each with its own
    /// NATS and S3 connections, sim executor) run a --jobs batch submitted over HTTP; with
    /// --coordinator, the batch goes to a running coordinator and its workers instead.
    Fleet {
        #[command(flatten)]
        nats: crate::fleet_args::NatsArgs,
        #[command(flatten)]
        s3: crate::fleet_args::S3Args,
        /// Jobs of the batch: the demo's two scenarios × --jobs / 2 runs, so at most 20000
        /// (--repeat stops at 10000).
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(4..=20_000))]
        jobs: u64,
        /// Workers of the fleet (started in process, or expected at --coordinator).
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// Slots per worker.
        #[arg(long, default_value_t = 8)]
        slots: usize,
        /// Admission window of the batch (in-process coordinator only).
        #[arg(long, default_value_t = 512)]
        window: usize,
        /// Tiers the in-process workers serve (the batch runs on `container`).
        #[arg(long, value_delimiter = ',', default_value = "container")]
        tiers: Vec<String>,
        /// Simulated run time of each job in milliseconds, slept for real (every run takes
        /// exactly this long, so the ideal wall time is jobs × duration / slots); 0 =
        /// zero-duration jobs.
        #[arg(long, default_value_t = 0)]
        duration_ms: u64,
        /// Submit to this running coordinator (e.g. `http://127.0.0.1:8700`, unauthenticated)
        /// instead of starting one in process; waits until --workers workers are live.
        #[arg(long, value_name = "URL")]
        coordinator: Option<String>,
        /// Live pages open on the batch while it runs, each as a browser opens it: the page,
        /// its script, then its live stream (`/live/events`) read to the verdict.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=1000))]
        live_pages: u16,
    },
    /// Sharing the fleet between batches, against a running coordinator whose --workers ×
    /// --slots sim workers are live: a 4-job batch idle, beside a --sweep-jobs sweep and
    /// beside a --big-sweep-jobs sweep (target: ≤ 1.5 × idle); two --sweep-jobs sweeps
    /// together (target: each 40–60% of the starts); an urgent 8-job batch beside two running
    /// sweeps of class batch (target: none of their queued jobs starts first). Every job runs
    /// exactly --duration-ms. Prints a table; with --check a missed target exits 1.
    Fairness(FairnessArgs),
    /// A replay corpus against the CLI's own dir replay, side by side: --slots CLI processes
    /// over even slices of --cassettes (the baseline), then `cowork run --replay --slots`
    /// through this binary, --rounds times; prints both rates and their ratio.
    Replay {
        /// The corpus: a dir of `*.cassette.json` (its slices are laid beside it, so session
        /// paths relative to it resolve the same).
        #[arg(long, value_name = "DIR")]
        cassettes: std::path::PathBuf,
        /// The cowork-harness program both sides run.
        #[arg(long, env = "COWORK_HARNESS_BIN", default_value = "cowork-harness")]
        harness_bin: std::path::PathBuf,
        /// CLI processes of the baseline, and slots of `cowork run`.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
        slots: u16,
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
        rounds: u32,
    },
    /// The raw pipeline baseline: per job exactly the durable work the fleet does (publish,
    /// pull, the stores, the events, ack, events consumed, result read back), through the same
    /// clients, with --workers × --slots jobs in flight and no coordinator or worker logic.
    Pipeline {
        #[command(flatten)]
        nats: crate::fleet_args::NatsArgs,
        #[command(flatten)]
        s3: crate::fleet_args::S3Args,
        /// Jobs of the batch, as for `bench fleet` (at most 20000).
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(4..=20_000))]
        jobs: u64,
        /// Worker connections (each with its own NATS and S3 clients).
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// Jobs in flight per worker connection.
        #[arg(long, default_value_t = 8)]
        slots: usize,
        /// Jobs published and not yet finished, at most (the fleet's admission window).
        #[arg(long, default_value_t = 512)]
        window: usize,
        /// Publish as a leading coordinator's term does: fence the queue first and have the
        /// server check each job against the fence (decisions.md#coordinator-lease).
        #[arg(long)]
        fenced: bool,
    },
}

/// `cowork bench fairness`: the running fleet and the benchmark's shape.
#[derive(Debug, Args)]
pub struct FairnessArgs {
    #[command(flatten)]
    pub client: crate::fleet_args::ClientArgs,
    /// The fleet's NATS, where the batches' events are read back.
    #[command(flatten)]
    pub nats: crate::fleet_args::NatsArgs,
    /// Workers expected live at the coordinator.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Slots per worker.
    #[arg(long, default_value_t = 4)]
    pub slots: usize,
    /// Run time of every job in milliseconds, slept for real.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub duration_ms: u64,
    /// Jobs of a sweep (the demo's two scenarios × half as many runs).
    #[arg(long, default_value_t = 320, value_parser = clap::value_parser!(u64).range(16..=20_000))]
    pub sweep_jobs: u64,
    /// Jobs of the big sweep beside the 4-job batch (cancelled once that batch ends).
    #[arg(long, default_value_t = 3200, value_parser = clap::value_parser!(u64).range(16..=20_000))]
    pub big_sweep_jobs: u64,
    /// Exit 1 when a target is missed (else the table only says so).
    #[arg(long)]
    pub check: bool,
}
