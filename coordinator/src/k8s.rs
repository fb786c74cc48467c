//! A Kubernetes Job of workers for a large batch.
//!
//! When configured, the coordinator creates one `batch/v1` Job per accepted batch of at least
//! `min_jobs` jobs and deletes it when the batch ends. The Job's pods run
//! `cowork worker --exit-when-idle`, so they leave on their own once the queue is drained; the
//! delete only reaps what is left (a cancelled batch, pods still idling).
//!
//! [`worker_job_manifest`] is pure: settings, batch id and size in, typed Job out. [`WorkerJobs`]
//! is the port that talks to the API server; [`KubeWorkerJobs`] implements it with
//! `kube::Api<Job>`. Tests replay recorded API exchanges, since no API server runs here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cowork_schema::BatchId;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, Container, EmptyDirVolumeSource, EnvFromSource, EnvVar, EnvVarSource,
    HostPathVolumeSource, ObjectFieldSelector, PodSpec, PodTemplateSpec, SecretEnvSource, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::Digest;

/// Label carrying the batch id on the Job and its pods (the same label the container executor
/// puts on sandboxes).
pub const BATCH_LABEL: &str = "cowork.fleet/batch";
/// Kubernetes names and label values are at most 63 characters.
const MAX_NAME_LEN: usize = 63;
/// Seconds a draining worker gets on top of the longest job: storing artifacts, publishing
/// `finished` and acking.
const DRAIN_TAIL_SECONDS: u64 = 60;
/// Where the node's Docker socket appears inside the worker container.
const DOCKER_SOCKET_MOUNT: &str = "/var/run/docker.sock";

/// What the Job of workers looks like; set once per coordinator (`--k8s-*` flags).
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerJobSettings {
    /// Namespace the Jobs are created in.
    pub namespace: String,
    /// Worker image (holds `cowork` and the harness CLI).
    pub image: String,
    /// `imagePullPolicy` of the worker container; `None` = the cluster's default.
    pub image_pull_policy: Option<String>,
    /// Job names are `<prefix>-<batch id>`.
    pub name_prefix: String,
    /// Smallest batch (in jobs) that gets a Job of workers.
    pub min_jobs: u64,
    /// Jobs one worker pod is expected to take; sizes the parallelism.
    pub jobs_per_worker: u64,
    /// Upper bound of the Job's parallelism.
    pub max_parallelism: u32,
    /// ConfigMap loaded as the workers' environment (NATS, S3 endpoints, …).
    pub config_map: Option<String>,
    /// Secrets loaded as the workers' environment (credentials), in order.
    pub env_secrets: Vec<String>,
    /// Tiers the workers pull (`COWORK_TIERS`).
    pub tiers: Vec<String>,
    /// Jobs one worker runs at once (`COWORK_SLOTS`).
    pub slots: u32,
    /// A worker exits 0 after this long with nothing pulled and nothing running.
    pub idle_exit: Duration,
    /// The longest job a batch may hold; the pods' grace period covers it plus a drain tail,
    /// so deleting the Job never kills a run that is about to finish.
    pub longest_job: Duration,
    /// Finished Jobs are garbage-collected this long after they end.
    pub ttl_after_finished: Duration,
    /// Failed pods the Job tolerates before it is marked failed.
    pub backoff_limit: i32,
    /// Service account of the pods; `None` = the namespace's default.
    pub service_account: Option<String>,
    /// The node's Docker socket to mount (the container executor needs an engine); the data
    /// directory is then a hostPath at the same path, because sandboxes mount job dirs by path.
    pub docker_socket: Option<String>,
    /// Data directory of the workers (cache and work dirs, one subdirectory per pod).
    pub data_dir: String,
}

/// The Job's name for `batch_id`: `<prefix>-<batch id>`, shortened with a digest when it
/// would exceed the 63 characters Kubernetes allows, so a long id still maps to one name.
pub fn worker_job_name(prefix: &str, batch_id: &BatchId) -> String {
    fit_name(&format!("{prefix}-{}", batch_id.as_str()))
}

/// The value of [`BATCH_LABEL`] for `batch_id` (batch ids may be 64 characters long, label
/// values only 63).
pub fn batch_label_value(batch_id: &BatchId) -> String {
    fit_name(batch_id.as_str())
}

/// `value` if it fits in 63 characters, else its first 54 characters, a dash and 8 hex digits
/// of its sha256. Batch ids and prefixes are `[a-z0-9-]`, so the result is a DNS label once
/// no dash ends it.
fn fit_name(value: &str) -> String {
    if value.len() <= MAX_NAME_LEN {
        return value.to_owned();
    }
    let digest = sha2::Sha256::digest(value.as_bytes());
    let hex = cowork_fabric::hex(&digest[..4]);
    let head = value[..MAX_NAME_LEN - 9].trim_end_matches('-');
    format!("{head}-{hex}")
}

/// Worker pods for a batch of `n_jobs` jobs: `ceil(n_jobs / jobs_per_worker)`, at least 1 and
/// at most `max_parallelism`.
pub fn worker_parallelism(settings: &WorkerJobSettings, n_jobs: u64) -> i32 {
    let per_worker = settings.jobs_per_worker.max(1);
    let wanted = n_jobs.div_ceil(per_worker).max(1);
    let capped = wanted.min(u64::from(settings.max_parallelism.max(1)));
    i32::try_from(capped).unwrap_or(i32::MAX)
}

/// The Job of workers for batch `batch_id` of `n_jobs` jobs. Pure: no clock, no environment.
///
/// The Job has no owner (the coordinator's pod may be replaced while the batch runs) and no
/// `completions`: it is a work-queue Job whose pods exit 0 once the queue stays idle.
pub fn worker_job_manifest(settings: &WorkerJobSettings, batch_id: &BatchId, n_jobs: u64) -> Job {
    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/name".to_owned(),
            "cowork-fleet".to_owned(),
        ),
        (
            "app.kubernetes.io/component".to_owned(),
            "batch-worker".to_owned(),
        ),
        (BATCH_LABEL.to_owned(), batch_label_value(batch_id)),
    ]);
    let (env, env_from) = worker_env(settings);
    let (volumes, volume_mounts) = worker_volumes(settings);
    let grace_seconds = settings
        .longest_job
        .as_secs()
        .saturating_add(DRAIN_TAIL_SECONDS);
    let container = Container {
        name: "worker".to_owned(),
        image: Some(settings.image.clone()),
        image_pull_policy: settings.image_pull_policy.clone(),
        args: Some(vec![
            "worker".to_owned(),
            "--exit-when-idle".to_owned(),
            format!("{}s", settings.idle_exit.as_secs().max(1)),
        ]),
        env: Some(env),
        env_from: (!env_from.is_empty()).then_some(env_from),
        volume_mounts: Some(volume_mounts),
        ..Container::default()
    };
    Job {
        metadata: ObjectMeta {
            name: Some(worker_job_name(&settings.name_prefix, batch_id)),
            namespace: Some(settings.namespace.clone()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            parallelism: Some(worker_parallelism(settings, n_jobs)),
            backoff_limit: Some(settings.backoff_limit),
            ttl_seconds_after_finished: Some(
                i32::try_from(settings.ttl_after_finished.as_secs()).unwrap_or(i32::MAX),
            ),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    // A failed worker pod is replaced by the Job (counted against
                    // backoffLimit); its unacked jobs are redelivered by the queue anyway.
                    restart_policy: Some("Never".to_owned()),
                    service_account_name: settings.service_account.clone(),
                    termination_grace_period_seconds: Some(
                        i64::try_from(grace_seconds).unwrap_or(i64::MAX),
                    ),
                    containers: vec![container],
                    volumes: Some(volumes),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// The worker container's environment: its identity, slots, per-pod directories and tiers,
/// plus the ConfigMap and Secrets the operator named (as `envFrom`).
fn worker_env(settings: &WorkerJobSettings) -> (Vec<EnvVar>, Vec<EnvFromSource>) {
    let pod_data_dir = format!("{}/$(POD_NAME)", settings.data_dir.trim_end_matches('/'));
    let mut env = vec![
        EnvVar {
            name: "POD_NAME".to_owned(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".to_owned(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        },
        env_value("COWORK_WORKER_ID", "$(POD_NAME)"),
        env_value("COWORK_SLOTS", &settings.slots.max(1).to_string()),
        env_value("COWORK_CACHE_DIR", &format!("{pod_data_dir}/cache")),
        env_value("COWORK_WORK_DIR", &format!("{pod_data_dir}/work")),
    ];
    if !settings.tiers.is_empty() {
        env.push(env_value("COWORK_TIERS", &settings.tiers.join(",")));
    }
    let mut env_from: Vec<EnvFromSource> = settings
        .config_map
        .iter()
        .map(|name| EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: name.clone(),
                optional: None,
            }),
            ..EnvFromSource::default()
        })
        .collect();
    env_from.extend(settings.env_secrets.iter().map(|name| EnvFromSource {
        secret_ref: Some(SecretEnvSource {
            name: name.clone(),
            optional: None,
        }),
        ..EnvFromSource::default()
    }));

    (env, env_from)
}

/// The pod's volumes and the worker's mounts: the data dir (on the host next to a mounted Docker
/// socket, so the harness's sibling containers see the same paths; else an emptyDir).
fn worker_volumes(settings: &WorkerJobSettings) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volume_mounts = vec![VolumeMount {
        name: "data".to_owned(),
        mount_path: settings.data_dir.clone(),
        ..VolumeMount::default()
    }];
    let mut volumes = Vec::new();
    match &settings.docker_socket {
        Some(socket) => {
            volumes.push(host_path_volume(
                "data",
                &settings.data_dir,
                "DirectoryOrCreate",
            ));
            volumes.push(host_path_volume("docker-socket", socket, "Socket"));
            volume_mounts.push(VolumeMount {
                name: "docker-socket".to_owned(),
                mount_path: DOCKER_SOCKET_MOUNT.to_owned(),
                ..VolumeMount::default()
            });
        }
        None => volumes.push(Volume {
            name: "data".to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        }),
    }

    (volumes, volume_mounts)
}

fn env_value(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

fn host_path_volume(name: &str, path: &str, kind: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        host_path: Some(HostPathVolumeSource {
            path: path.to_owned(),
            type_: Some(kind.to_owned()),
        }),
        ..Volume::default()
    }
}

/// What a create did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateOutcome {
    Created,
    /// A Job of that name exists (409): a resumed batch, or another replica created it.
    AlreadyExists,
}

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    /// No such Job (404): it was never created, or its TTL already removed it.
    NotFound,
}

/// A failed call to the Kubernetes API.
#[derive(Debug, thiserror::Error)]
pub enum WorkerJobsError {
    #[error("configuring the kubernetes client (in-cluster service account or kubeconfig)")]
    Connect {
        #[source]
        source: kube::Error,
    },
    #[error("creating job {name} in namespace {namespace}")]
    Create {
        name: String,
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting job {name} in namespace {namespace}")]
    Delete {
        name: String,
        namespace: String,
        #[source]
        source: kube::Error,
    },
}

/// The port the coordinator uses to start and reap Jobs of workers.
#[async_trait]
pub trait WorkerJobs: Send + Sync {
    /// Creates `job`; an existing Job of the same name is not an error.
    async fn create(&self, job: &Job) -> Result<CreateOutcome, WorkerJobsError>;
    /// Deletes the Job of `batch_id` and, in the background, its pods.
    async fn delete(&self, batch_id: &BatchId) -> Result<DeleteOutcome, WorkerJobsError>;
}

/// [`WorkerJobs`] on the Kubernetes API.
#[derive(Clone)]
pub struct KubeWorkerJobs {
    api: kube::Api<Job>,
    namespace: String,
    name_prefix: String,
}

impl KubeWorkerJobs {
    /// Jobs in `namespace`, named with `name_prefix` (see [`worker_job_name`]).
    pub fn new(client: kube::Client, namespace: &str, name_prefix: &str) -> KubeWorkerJobs {
        KubeWorkerJobs {
            api: kube::Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name_prefix: name_prefix.to_owned(),
        }
    }

    /// A client from the environment (the pod's service account in a cluster, else the
    /// kubeconfig) and the namespace to use: `namespace`, else the client's default.
    pub async fn connect(
        namespace: Option<&str>,
        name_prefix: &str,
    ) -> Result<(KubeWorkerJobs, String), WorkerJobsError> {
        let client = kube::Client::try_default()
            .await
            .map_err(|source| WorkerJobsError::Connect { source })?;
        let namespace =
            namespace.map_or_else(|| client.default_namespace().to_owned(), str::to_owned);
        let jobs = KubeWorkerJobs::new(client, &namespace, name_prefix);
        Ok((jobs, namespace))
    }
}

#[async_trait]
impl WorkerJobs for KubeWorkerJobs {
    async fn create(&self, job: &Job) -> Result<CreateOutcome, WorkerJobsError> {
        let params = kube::api::PostParams {
            field_manager: Some("cowork-coordinator".to_owned()),
            ..kube::api::PostParams::default()
        };
        match self.api.create(&params, job).await {
            Ok(_) => Ok(CreateOutcome::Created),
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                Ok(CreateOutcome::AlreadyExists)
            }
            Err(source) => Err(WorkerJobsError::Create {
                name: job.metadata.name.clone().unwrap_or_default(),
                namespace: self.namespace.clone(),
                source,
            }),
        }
    }

    async fn delete(&self, batch_id: &BatchId) -> Result<DeleteOutcome, WorkerJobsError> {
        let name = worker_job_name(&self.name_prefix, batch_id);
        // A Job deleted through the API orphans its pods unless a propagation policy says
        // otherwise; background deletion removes them without waiting here.
        match self
            .api
            .delete(&name, &kube::api::DeleteParams::background())
            .await
        {
            Ok(_) => Ok(DeleteOutcome::Deleted),
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(DeleteOutcome::NotFound),
            Err(source) => Err(WorkerJobsError::Delete {
                name,
                namespace: self.namespace.clone(),
                source,
            }),
        }
    }
}

/// The coordinator's Kubernetes Job feature: settings and the port (`--k8s-worker-jobs`).
#[derive(Clone)]
pub struct K8sWorkerJobs {
    pub settings: WorkerJobSettings,
    pub jobs: Arc<dyn WorkerJobs>,
}

impl std::fmt::Debug for K8sWorkerJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("K8sWorkerJobs")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl K8sWorkerJobs {
    /// `true` when a batch of `n_jobs` jobs gets a Job of workers.
    pub fn wants(&self, n_jobs: u64) -> bool {
        n_jobs >= self.settings.min_jobs
    }

    /// Called when a batch is accepted: creates its Job when the batch is large enough. A
    /// failure is logged, not returned: the batch still runs on the standing workers.
    pub async fn batch_accepted(&self, batch_id: &BatchId, n_jobs: u64) {
        if !self.wants(n_jobs) {
            return;
        }
        let job = worker_job_manifest(&self.settings, batch_id, n_jobs);
        let parallelism = job.spec.as_ref().and_then(|spec| spec.parallelism);
        match self.jobs.create(&job).await {
            Ok(outcome) => {
                tracing::info!(batch_id = %batch_id, n_jobs, ?parallelism, ?outcome, "kubernetes job of workers created");
            }
            Err(error) => {
                tracing::error!(batch_id = %batch_id, error = %cowork_fabric::error_chain(&error), "kubernetes job of workers not created");
            }
        }
    }

    /// Called when a batch ends: deletes its Job (if the batch was large enough to get one).
    pub async fn batch_ended(&self, batch_id: &BatchId, n_jobs: u64) {
        if !self.wants(n_jobs) {
            return;
        }
        match self.jobs.delete(batch_id).await {
            Ok(outcome) => {
                tracing::info!(batch_id = %batch_id, ?outcome, "kubernetes job of workers deleted");
            }
            Err(error) => {
                tracing::error!(batch_id = %batch_id, error = %cowork_fabric::error_chain(&error), "kubernetes job of workers not deleted");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> WorkerJobSettings {
        WorkerJobSettings {
            namespace: "cowork".to_owned(),
            image: "cowork-worker:1".to_owned(),
            image_pull_policy: None,
            name_prefix: "cowork-workers".to_owned(),
            min_jobs: 100,
            jobs_per_worker: 50,
            max_parallelism: 8,
            config_map: Some("fleet-config".to_owned()),
            env_secrets: vec!["fleet-secrets".to_owned()],
            tiers: vec!["container".to_owned()],
            slots: 4,
            idle_exit: Duration::from_secs(120),
            longest_job: Duration::from_secs(1800),
            ttl_after_finished: Duration::from_secs(600),
            backoff_limit: 6,
            service_account: None,
            docker_socket: None,
            data_dir: "/var/lib/cowork".to_owned(),
        }
    }

    #[test]
    fn k8s_parallelism_is_sized_from_the_batch_and_capped() {
        let settings = settings();
        assert_eq!(worker_parallelism(&settings, 0), 1);
        assert_eq!(worker_parallelism(&settings, 1), 1);
        assert_eq!(worker_parallelism(&settings, 50), 1);
        assert_eq!(worker_parallelism(&settings, 51), 2);
        assert_eq!(worker_parallelism(&settings, 399), 8);
        assert_eq!(worker_parallelism(&settings, 1_000_000), 8);
    }

    #[test]
    fn k8s_long_batch_ids_give_valid_names() {
        let long = BatchId::new(&"a".repeat(64)).expect("64 characters is a valid batch id");
        let name = worker_job_name("cowork-workers", &long);
        assert!(name.len() <= 63, "{name}");
        assert!(!name.ends_with('-'));
        assert_ne!(
            name,
            worker_job_name(
                "cowork-workers",
                &BatchId::new(&"a".repeat(63)).expect("valid")
            )
        );
        assert_eq!(batch_label_value(&long).len(), 63);
        let short = BatchId::new("20261130-083349-00abcd").expect("valid");
        assert_eq!(
            worker_job_name("cowork-workers", &short),
            "cowork-workers-20261130-083349-00abcd"
        );
    }

    #[test]
    fn k8s_manifest_runs_idle_exiting_workers_with_the_batch_label() {
        let batch_id = BatchId::new("20261130-083349-00abcd").expect("valid");
        let job = worker_job_manifest(&settings(), &batch_id, 120);
        let spec = job.spec.as_ref().expect("a job has a spec");
        assert_eq!(spec.parallelism, Some(3));
        assert_eq!(spec.completions, None);
        assert_eq!(spec.backoff_limit, Some(6));
        assert_eq!(spec.ttl_seconds_after_finished, Some(600));
        assert!(job.metadata.owner_references.is_none());
        let pod = spec.template.spec.as_ref().expect("a pod spec");
        assert_eq!(pod.termination_grace_period_seconds, Some(1860));
        let container = &pod.containers[0];
        assert_eq!(
            container.args.as_deref(),
            Some(
                &[
                    "worker".to_owned(),
                    "--exit-when-idle".to_owned(),
                    "120s".to_owned()
                ][..]
            )
        );
        let pod_labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|meta| meta.labels.as_ref())
            .expect("pod labels");
        assert_eq!(
            pod_labels.get(BATCH_LABEL).map(String::as_str),
            Some("20261130-083349-00abcd")
        );
    }
}
