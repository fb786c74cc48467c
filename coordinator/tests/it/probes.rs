//! `/healthz`, `/readyz` and `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use cowork_fabric::embedded::MemBatchRegistry;
use cowork_fabric::{BatchRegistry, RegistryError, WorkerRegistry};
use cowork_schema::BatchId;
use cowork_schema::job::JobSpec;
use cowork_schema::registry::BatchRecord;

use crate::support::{
    FakeWorker, Fleet, Server, packed, project, repeat, watch_to_end, worker_info,
};

/// A batch registry that fails every call while `down` is set.
struct FlakyRegistry {
    inner: MemBatchRegistry,
    down: AtomicBool,
}

impl FlakyRegistry {
    fn check(&self) -> Result<(), RegistryError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(RegistryError::Transient {
                message: "registry down for the test".into(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl BatchRegistry for FlakyRegistry {
    async fn create(&self, record: &BatchRecord) -> Result<u64, RegistryError> {
        self.check()?;
        self.inner.create(record).await
    }
    async fn update(&self, record: &BatchRecord, expected: u64) -> Result<u64, RegistryError> {
        self.check()?;
        self.inner.update(record, expected).await
    }
    async fn get(&self, batch_id: &BatchId) -> Result<Option<(BatchRecord, u64)>, RegistryError> {
        self.check()?;
        self.inner.get(batch_id).await
    }
    async fn list(&self) -> Result<Vec<BatchRecord>, RegistryError> {
        self.check()?;
        self.inner.list().await
    }
    async fn watch(&self) -> Result<cowork_fabric::RecordStream, RegistryError> {
        self.check()?;
        self.inner.watch().await
    }
}

#[tokio::test]
async fn probes_and_metrics_report_the_service() {
    let fleet = Fleet::new();
    fleet
        .workers
        .heartbeat(&worker_info())
        .await
        .expect("heartbeat");
    let _worker = FakeWorker::eager(
        &fleet,
        Arc::new(|job: &JobSpec| job.repeat_index != Some(2)),
    );
    let registry = Arc::new(FlakyRegistry {
        inner: fleet.batches.clone(),
        down: AtomicBool::new(false),
    });
    let mut ports = fleet.ports();
    ports.batches = registry.clone();
    let server = Server::start(fleet.config("c1", 8), ports).await;
    let client = server.client();
    let dir = project();
    let batch = packed(dir.path(), repeat(3));
    let accepted = client
        .submit(&batch.spec, batch.bundle)
        .await
        .expect("the batch is accepted");
    watch_to_end(&client, &accepted.batch_id).await;

    let http = reqwest::Client::new();
    let get = |path: &str| {
        let request = http.get(format!("{}{path}", server.url));
        async move {
            let response = request.send().await.expect("request");
            let status = response.status().as_u16();
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            (status, content_type, response.text().await.expect("body"))
        }
    };
    assert_eq!(get("/healthz").await.0, 200);
    assert_eq!(get("/readyz").await.0, 200);
    let (status, content_type, metrics) = get("/metrics").await;
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    for line in [
        "cowork_registry_up 1",
        "cowork_batches{state=\"done\"} 1",
        "cowork_batches{state=\"running\"} 0",
        "cowork_jobs_admitted_total 3",
        "cowork_jobs_finished_total 3",
        "cowork_jobs_passed_total 2",
        "cowork_jobs_failed_total 1",
        "cowork_jobs_errored_total 0",
        "cowork_jobs_discarded_total 0",
        "cowork_job_retries_total 0",
        "cowork_spend_usd_total 0.75",
        "cowork_workers_live 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line:?} missing from\n{metrics}"
        );
    }

    // A registry that does not answer makes the service unready, but still healthy.
    registry.down.store(true, Ordering::SeqCst);
    assert_eq!(get("/readyz").await.0, 503);
    assert_eq!(get("/healthz").await.0, 200);
    // A scrape does not call the batch registry (its counts follow the registry's change
    // stream, still open here), so it still answers with them.
    let (_, _, metrics) = get("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "cowork_batches{state=\"done\"} 1"),
        "{metrics}"
    );
    registry.down.store(false, Ordering::SeqCst);
    assert_eq!(get("/readyz").await.0, 200);
    server.stop().await;
}
