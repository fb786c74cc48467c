//! The coordinator's view of the queue's streams and buckets, checked every [`CHECK_EVERY`]
//! through the `FabricHealth` port: which one has no leader or does not answer, since when,
//! and which serves short of the replicas asked. The API merges the stalls into every batch's
//! progress (`status`, `watch`, `submit --watch`), serves the whole view at `GET /v1/fabric`
//! (`cowork workers`) and fails `/readyz` while something stalls, so a batch never waits on a
//! lost quorum without saying so. A stall and its end are logged once each.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cowork_fabric::ObjectHealth;
use cowork_schema::api::{FabricStall, FabricStatus};

use crate::service::Service;

/// How often the streams are checked. With the check's own deadline (3 s) a stall is named
/// within about 5 s of its start, well inside the 10 s an operator watching a batch gives it.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Checks the fabric until the service shuts down; returns at once for ports without checks.
pub(crate) async fn watch_fabric(service: Arc<Service>) {
    let Some(health) = service.ports.health.clone() else {
        return;
    };
    // (kind, name) → when it was first seen stalled, in ms since the epoch.
    let mut stalled_since: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut shortfalls_logged: Vec<String> = Vec::new();
    loop {
        // Abandoning a check at shutdown is safe: it only reads.
        let checked = tokio::select! {
            _ = service.shutdown.cancelled() => return,
            checked = health.check() => checked,
        };
        let status = fold_check(&checked, &mut stalled_since, now_ms());
        for line in status
            .shortfalls
            .iter()
            .filter(|line| !shortfalls_logged.contains(line))
        {
            tracing::warn!(shortfall = %line, "a stream of the queue runs short of replicas");
        }
        shortfalls_logged.clone_from(&status.shortfalls);
        service.views.fabric.send_if_modified(|current| {
            if *current == status {
                return false;
            }
            for stall in status
                .stalls
                .iter()
                .filter(|stall| !current.stalls.iter().any(|seen| same_object(seen, stall)))
            {
                tracing::warn!(kind = %stall.kind, name = %stall.name, reason = %stall.reason, "a stream of the queue stalls; batches wait for it");
            }
            for ended in current
                .stalls
                .iter()
                .filter(|seen| !status.stalls.iter().any(|stall| same_object(seen, stall)))
            {
                let stalled_s = now_ms().saturating_sub(ended.since_ms) / 1000;
                tracing::info!(kind = %ended.kind, name = %ended.name, stalled_s, "a stream of the queue serves again");
            }
            *current = status;
            true
        });
        // Abandoning the pause at shutdown is safe: nothing is held across it.
        tokio::select! {
            _ = service.shutdown.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
    }
}

fn same_object(a: &FabricStall, b: &FabricStall) -> bool {
    a.kind == b.kind && a.name == b.name
}

/// The view after one check at `now_ms`: a stall keeps the start it was first seen at while
/// it lasts, and is forgotten when its object serves again.
fn fold_check(
    checked: &[ObjectHealth],
    stalled_since: &mut BTreeMap<(String, String), u64>,
    now_ms: u64,
) -> FabricStatus {
    let mut status = FabricStatus {
        replicas: checked
            .first()
            .map(|object| u32::try_from(object.asked_replicas).unwrap_or(u32::MAX)),
        ..FabricStatus::default()
    };
    let mut still_stalled = BTreeMap::new();
    for object in checked {
        let key = (object.kind.as_str().to_owned(), object.name.clone());
        if let Some(reason) = object.stall() {
            let since_ms = stalled_since.get(&key).copied().unwrap_or(now_ms);
            still_stalled.insert(key.clone(), since_ms);
            status.stalls.push(FabricStall {
                kind: key.0,
                name: key.1,
                reason,
                since_ms,
            });
        } else if let Some(shortfall) = object.shortfall() {
            status
                .shortfalls
                .push(format!("{} {} {shortfall}", key.0, key.1));
        }
    }
    *stalled_since = still_stalled;
    status
}

/// The wall clock in milliseconds since the epoch (stall starts are shown as times of day).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_fabric::{ObjectKind, ObjectState};

    fn object(name: &str, state: ObjectState) -> ObjectHealth {
        ObjectHealth {
            kind: ObjectKind::Stream,
            name: name.to_owned(),
            asked_replicas: 3,
            state,
        }
    }

    fn serving(replicas: usize) -> ObjectState {
        ObjectState::Serving {
            replicas,
            unavailable: Vec::new(),
        }
    }

    fn no_leader() -> ObjectState {
        ObjectState::NoLeader {
            replicas: 3,
            unavailable: vec!["n2".to_owned(), "n3".to_owned()],
        }
    }

    #[test]
    fn a_stall_keeps_its_start_until_it_ends() {
        let mut since = BTreeMap::new();
        let first = fold_check(
            &[object("A", no_leader()), object("B", serving(3))],
            &mut since,
            1_000,
        );
        assert_eq!(first.replicas, Some(3));
        assert_eq!(first.stalls.len(), 1);
        assert_eq!(first.stalls[0].since_ms, 1_000);
        assert_eq!(
            first.stalls[0].reason,
            "has no leader: 2 of 3 replicas unavailable (n2, n3)"
        );
        let later = fold_check(
            &[object("A", no_leader()), object("B", serving(1))],
            &mut since,
            5_000,
        );
        assert_eq!(later.stalls[0].since_ms, 1_000, "the start is kept");
        assert_eq!(later.shortfalls, vec!["stream B has 1 replica, 3 asked"]);
        let healed = fold_check(&[object("A", serving(3))], &mut since, 9_000);
        assert!(healed.stalls.is_empty());
        let again = fold_check(&[object("A", no_leader())], &mut since, 12_000);
        assert_eq!(again.stalls[0].since_ms, 12_000, "a new stall starts anew");
    }
}
