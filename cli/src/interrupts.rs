//! Ctrl-C and SIGTERM, counted: the one way every long-running command (`run`, `resume`,
//! `coordinator`, `worker`) learns that it should stop.
//!
//! Once installed, neither signal ends the process by itself any more: the command decides
//! what each one means (the embedded runner: the first stops starting jobs, the second kills
//! the running ones, the third exits; a worker: the first drains, the second exits).

use tokio::signal::unix::{Signal, SignalKind, signal};

/// The process's Ctrl-C (SIGINT) and SIGTERM, and how many have arrived.
pub struct Interrupts {
    interrupt: Signal,
    terminate: Signal,
    received: u32,
}

impl Interrupts {
    /// Takes over SIGINT and SIGTERM for the rest of the process's life.
    pub fn install() -> std::io::Result<Interrupts> {
        Ok(Interrupts {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            received: 0,
        })
    }

    /// Waits for the next SIGINT or SIGTERM and returns how many arrived so far (1 for the
    /// first). Cancel-safe: a signal that arrives while nobody waits is kept for the next call.
    pub async fn next(&mut self) -> u32 {
        // Both `recv`s are cancel-safe, so the one that loses the race keeps its signal. A
        // stream that ends (the runtime is shutting down) never fires again.
        tokio::select! {
            Some(()) = self.interrupt.recv() => {}
            Some(()) = self.terminate.recv() => {}
            else => std::future::pending::<()>().await,
        }
        self.received += 1;
        self.received
    }

    /// How many arrived so far.
    pub fn received(&self) -> u32 {
        self.received
    }
}
