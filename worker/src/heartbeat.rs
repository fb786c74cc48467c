//! Worker heartbeats into the workers registry (decisions.md#wire-protocol: tiers, slots, harness
//! version, OS, arch), so `cowork workers` can list the fleet and operators can see who is
//! draining.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cowork_fabric::WorkerRegistry;
use cowork_schema::job::Tier;
use cowork_schema::registry::WorkerInfo;
use tokio_util::sync::CancellationToken;

use crate::config::WorkerStats;

/// What a worker says about itself in every heartbeat.
#[derive(Clone, Debug)]
pub struct WorkerIdentity {
    pub worker_id: String,
    pub tiers: Vec<Tier>,
    pub slots: u32,
    pub executor: String,
    pub harness_version: Option<String>,
    pub hostname: String,
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One heartbeat record from the identity and the live counters.
pub fn worker_info(
    identity: &WorkerIdentity,
    stats: &WorkerStats,
    started_at_ms: u64,
    draining: bool,
) -> WorkerInfo {
    WorkerInfo {
        protocol: cowork_schema::job::PROTOCOL_VERSION,
        worker_id: identity.worker_id.clone(),
        tiers: identity.tiers.clone(),
        slots: identity.slots,
        busy: u32::try_from(stats.jobs_running.load(Ordering::Relaxed)).unwrap_or(u32::MAX),
        executor: identity.executor.clone(),
        harness_version: identity.harness_version.clone(),
        os: std::env::consts::OS.to_owned(),
        arch: std::env::consts::ARCH.to_owned(),
        hostname: identity.hostname.clone(),
        jobs_finished: stats.jobs_finished.load(Ordering::Relaxed),
        started_at_ms,
        heartbeat_at_ms: now_ms(),
        // Set by the loop that sends it, which knows its beat.
        heartbeat_every_ms: 0,
        draining,
        sandbox_start_failures: stats.sandbox_starts.in_a_row(),
        backed_off_tiers: stats.sandbox_starts.backed_off(),
    }
}

/// Sends a heartbeat every `interval` until `stop` is cancelled; `draining` flips the flag in
/// the records as soon as shutdown begins. The entry is removed at the end, so a cleanly
/// stopped worker disappears at once instead of after the registry's TTL.
pub async fn heartbeat_loop(
    registry: Arc<dyn WorkerRegistry>,
    identity: WorkerIdentity,
    stats: Arc<WorkerStats>,
    interval: Duration,
    draining: CancellationToken,
    stop: CancellationToken,
) {
    let started_at_ms = now_ms();
    loop {
        let mut info = worker_info(&identity, &stats, started_at_ms, draining.is_cancelled());
        info.heartbeat_every_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        match registry.heartbeat(&info).await {
            Ok(()) => stats.outages.succeeded("heartbeat"),
            Err(error) => stats.outages.failed("heartbeat", &error),
        }
        // Either wake-up is fine to abandon: the next iteration sends a fresh record.
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = draining.cancelled(), if !draining.is_cancelled() => {}
            // A tier backed off is said at once.
            _ = stats.sandbox_starts.changed() => {}
            _ = tokio::time::sleep(interval) => {}
        }
    }
    if let Err(error) = registry.remove(&identity.worker_id).await {
        tracing::warn!(error = %error, "removing the worker's heartbeat failed");
    }
}

/// The local hostname (`/proc/sys/kernel/hostname`, `$HOSTNAME`, else `unknown`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_owned())
}
