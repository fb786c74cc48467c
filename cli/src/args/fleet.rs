//! The fleet's services: `cowork coordinator` (with its Kubernetes Jobs of workers) and
//! `cowork worker`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::batch::{AdmissionArgs, HarnessProcessArgs, NotifyArgs};

#[derive(Debug, Args)]
pub struct CoordinatorArgs {
    #[command(flatten)]
    pub nats: crate::fleet_args::NatsArgs,
    #[command(flatten)]
    pub s3: crate::fleet_args::S3Args,
    /// Address of the HTTP API.
    #[arg(long, env = "COWORK_LISTEN", default_value = "127.0.0.1:8700")]
    pub listen: std::net::SocketAddr,
    /// PEM certificate chain: serve the API over HTTPS (with --tls-key). Without both, the API
    /// is plain HTTP (e.g. behind an ingress that terminates TLS).
    #[arg(long, env = "COWORK_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "COWORK_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// File with the API bearer token(s), one per line (or set COWORK_API_TOKEN).
    #[arg(long, env = "COWORK_API_TOKEN_FILE", value_name = "FILE")]
    pub api_token_file: Option<PathBuf>,
    /// File with read-only API token(s), one per line (or set COWORK_API_READ_TOKEN): they
    /// may read everything (status, reports, artifacts, workers, the pages) but not submit,
    /// cancel, resume, pause or adjust (403).
    #[arg(long, env = "COWORK_API_READ_TOKEN_FILE", value_name = "FILE")]
    pub api_read_token_file: Option<PathBuf>,
    /// Serve the API without a token (local use only).
    #[arg(long)]
    pub allow_unauthenticated: bool,
    /// What one full API token may submit (repeatable; COWORK_TOKEN_POLICIES takes entries
    /// separated by `;`): `NAME=sha256:<hex>,max-priority=CLASS,max-slots=N`. The token is
    /// named by its sha256 (`printf %s "$TOKEN" | sha256sum`), so the secret stays in the token
    /// file. max-priority (optional) is the highest class it may submit (urgent, normal,
    /// batch; a higher one is refused); max-slots (optional) is the most jobs its batches
    /// together may have running or queued at once. Its batches record NAME as their token.
    #[arg(
        long = "token-policy",
        env = "COWORK_TOKEN_POLICIES",
        value_name = "NAME=sha256:HEX,max-priority=CLASS,max-slots=N",
        value_delimiter = ';'
    )]
    pub token_policy: Vec<String>,
    /// Jobs of one batch outstanding (queued or running) at most: a cap per batch. The
    /// fair share already keeps what all batches queue to the free slots of live workers and
    /// splits those between batches; this only bounds a batch alone on a big fleet.
    #[arg(long, env = "COWORK_WINDOW", default_value_t = 64)]
    pub window: usize,
    #[command(flatten)]
    pub admission: AdmissionArgs,
    #[command(flatten)]
    pub prices: super::batch::FleetPricingArgs,
    /// Largest accepted bundle in MiB.
    #[arg(long, env = "COWORK_MAX_BUNDLE_MIB", default_value_t = 256)]
    pub max_bundle_mib: u64,
    /// Most bytes a submitted bundle may unpack to on the coordinator, in MiB (a compression
    /// bomb is stopped here, while it is decompressed).
    #[arg(long, env = "COWORK_MAX_UNPACKED_MIB", default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub max_unpacked_mib: u64,
    /// Most entries (files and directories) in a submitted bundle.
    #[arg(long, env = "COWORK_MAX_BUNDLE_ENTRIES", default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_bundle_entries: u64,
    /// Submits read and validated at once at most; more are refused with 503 and Retry-After.
    #[arg(long, env = "COWORK_MAX_CONCURRENT_SUBMITS", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub max_concurrent_submits: u64,
    /// Where submitted bundles are unpacked while they are validated.
    #[arg(
        long,
        env = "COWORK_SCRATCH_DIR",
        default_value = ".cowork-coordinator/scratch"
    )]
    pub scratch_dir: PathBuf,
    /// Id of this replica (default <hostname>-<pid>).
    #[arg(long, env = "COWORK_COORDINATOR_ID")]
    pub coordinator_id: Option<String>,
    /// How long the coordinator lease lasts after its holder's last renewal. Several
    /// coordinators may run on one NATS: one leads (admits and decides), the others stand by,
    /// serve reads and take over within this time once the leader is gone. Every coordinator
    /// of a fleet needs the same value.
    #[arg(
        long,
        env = "COWORK_LEASE_TTL",
        default_value = "6s",
        value_name = "DURATION"
    )]
    pub lease_ttl: String,
    /// The URL standbys send clients to while this coordinator leads. Default
    /// http(s)://<the --listen address>; set it when listening on 0.0.0.0 or behind a proxy.
    #[arg(long, env = "COWORK_ADVERTISE_URL", value_name = "URL")]
    pub advertise_url: Option<String>,
    /// Time a client has to send a complete request head once it started one.
    #[arg(long, env = "COWORK_HTTP_HEADER_TIMEOUT", default_value = "10s")]
    pub http_header_timeout: String,
    /// Time an API connection may stay open with no request in flight (one that never sends
    /// a byte included); then the coordinator closes it.
    #[arg(long, env = "COWORK_HTTP_IDLE_TIMEOUT", default_value = "30s")]
    pub http_idle_timeout: String,
    /// Open API connections at most; at the cap the oldest idle one is closed for a new one.
    #[arg(long, env = "COWORK_HTTP_MAX_CONNECTIONS", default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub http_max_connections: u64,
    #[command(flatten)]
    pub notify: NotifyArgs,
    /// The address people open this coordinator at (e.g. https://cowork.example.com): the
    /// notifications link each batch's report under it. Default: they name `cowork report`.
    #[arg(long, env = "COWORK_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
    #[command(flatten)]
    pub k8s: K8sWorkerJobArgs,
}

/// A Kubernetes Job of workers (`cowork worker --exit-when-idle`) for each large batch: created
/// when the batch is accepted, deleted when it ends. Off by default.
#[derive(Debug, Args)]
pub struct K8sWorkerJobArgs {
    /// Create a Kubernetes Job of workers for each batch of at least --k8s-min-jobs jobs
    /// (in-cluster service account or kubeconfig; needs create/delete on batch jobs).
    #[arg(long, env = "COWORK_K8S_WORKER_JOBS")]
    pub k8s_worker_jobs: bool,
    /// Namespace of the Jobs (default: the client's, i.e. the pod's own namespace).
    #[arg(long, env = "COWORK_K8S_NAMESPACE", value_name = "NAMESPACE")]
    pub k8s_namespace: Option<String>,
    /// Worker image of the Jobs (required with --k8s-worker-jobs).
    #[arg(long, env = "COWORK_K8S_WORKER_IMAGE", value_name = "IMAGE")]
    pub k8s_worker_image: Option<String>,
    /// imagePullPolicy of the worker container (default: the cluster's).
    #[arg(long, env = "COWORK_K8S_IMAGE_PULL_POLICY", value_name = "POLICY")]
    pub k8s_image_pull_policy: Option<String>,
    /// Smallest batch, in jobs, that gets a Job of workers.
    #[arg(long, env = "COWORK_K8S_MIN_JOBS", default_value_t = 200)]
    pub k8s_min_jobs: u64,
    /// Jobs per worker pod when sizing the Job's parallelism.
    #[arg(long, env = "COWORK_K8S_JOBS_PER_WORKER", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub k8s_jobs_per_worker: u64,
    /// Largest parallelism of one Job.
    #[arg(long, env = "COWORK_K8S_MAX_PARALLELISM", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub k8s_max_parallelism: u32,
    /// ConfigMap loaded into the workers' environment (NATS and S3 settings).
    #[arg(long, env = "COWORK_K8S_WORKER_CONFIG_MAP", value_name = "NAME")]
    pub k8s_worker_config_map: Option<String>,
    /// Secrets loaded into the workers' environment (credentials), comma-separated.
    #[arg(
        long,
        env = "COWORK_K8S_WORKER_SECRETS",
        value_delimiter = ',',
        value_name = "NAMES"
    )]
    pub k8s_worker_secrets: Vec<String>,
    /// Tiers the Job's workers pull.
    #[arg(
        long,
        env = "COWORK_K8S_WORKER_TIERS",
        value_delimiter = ',',
        default_value = "container"
    )]
    pub k8s_worker_tiers: Vec<String>,
    /// Jobs each worker pod runs at once.
    #[arg(long, env = "COWORK_K8S_WORKER_SLOTS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub k8s_worker_slots: u32,
    /// The workers' --exit-when-idle.
    #[arg(long, env = "COWORK_K8S_IDLE_EXIT", default_value = "2m")]
    pub k8s_idle_exit: String,
    /// Longest job of a batch: the pods' grace period covers it plus a drain tail.
    #[arg(long, env = "COWORK_K8S_LONGEST_JOB", default_value = "60m")]
    pub k8s_longest_job: String,
    /// ttlSecondsAfterFinished of the Jobs.
    #[arg(long, env = "COWORK_K8S_JOB_TTL", default_value = "10m")]
    pub k8s_job_ttl: String,
    /// backoffLimit of the Jobs (failed pods tolerated).
    #[arg(long, env = "COWORK_K8S_BACKOFF_LIMIT", default_value_t = 6)]
    pub k8s_backoff_limit: i32,
    /// Service account of the worker pods.
    #[arg(long, env = "COWORK_K8S_SERVICE_ACCOUNT", value_name = "NAME")]
    pub k8s_service_account: Option<String>,
    /// Mount the node's Docker socket from this path (container executor); the data dir is
    /// then a hostPath at the same path.
    #[arg(long, env = "COWORK_K8S_DOCKER_SOCKET", value_name = "PATH")]
    pub k8s_docker_socket: Option<String>,
    /// Data directory of the worker pods.
    #[arg(long, env = "COWORK_K8S_DATA_DIR", default_value = "/var/lib/cowork")]
    pub k8s_data_dir: String,
    /// Job names are <prefix>-<batch id>.
    #[arg(long, env = "COWORK_K8S_JOB_PREFIX", default_value = "cowork-workers")]
    pub k8s_job_prefix: String,
}

/// Which executor a fleet worker runs jobs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WorkerExecutorArg {
    /// The real cowork-harness CLI (--harness-bin), one process per job.
    Harness,
    /// The harness CLI in one container per job (--container-image), through the Docker API.
    Container,
    /// The seeded simulator: fast, free, and marked simulated everywhere.
    Sim,
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub nats: crate::fleet_args::NatsArgs,
    #[command(flatten)]
    pub s3: crate::fleet_args::S3Args,
    /// Tiers this worker serves (it never pulls others): container, hostloop, microvm, protocol,
    /// replay.
    #[arg(
        long,
        env = "COWORK_TIERS",
        value_delimiter = ',',
        default_value = "container"
    )]
    pub tiers: Vec<String>,
    /// Jobs run at once on this worker (the harness CLI's own local cap is 8).
    #[arg(long, env = "COWORK_SLOTS", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub slots: u16,
    /// Most replay jobs one slot gives one harness process, which replays them as one dir and
    /// splits its output into one result per job (1: every replay in a process of its own);
    /// packs are cut to an even share of the queue across the replay slots.
    #[arg(long, env = "COWORK_REPLAY_PACK", default_value_t = 256, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub replay_pack: u16,
    /// Executor for every job.
    #[arg(long, value_enum, env = "COWORK_EXECUTOR", default_value = "harness")]
    pub executor: WorkerExecutorArg,
    /// Image of the container executor: holds the harness CLI (and the Docker CLI the harness
    /// needs for its own sandboxes, with --container-docker-socket).
    #[arg(long, env = "COWORK_CONTAINER_IMAGE", value_name = "IMAGE")]
    pub container_image: Option<String>,
    /// Owner label of this worker's containers: leftovers of this owner whose job is not
    /// running are removed at start and after each job (default: the hostname).
    #[arg(long, env = "COWORK_CONTAINER_OWNER", value_name = "NAME")]
    pub container_owner: Option<String>,
    /// Pass this Docker socket into each job's container (at /var/run/docker.sock).
    #[arg(long, env = "COWORK_CONTAINER_DOCKER_SOCKET", value_name = "PATH")]
    pub container_docker_socket: Option<PathBuf>,
    /// Memory limit of each job's container, in bytes.
    #[arg(long, env = "COWORK_CONTAINER_MEMORY_BYTES", value_name = "BYTES")]
    pub container_memory_bytes: Option<u64>,
    /// CPU limit of each job's container, in thousandths of a CPU (1500 = 1.5 CPUs).
    #[arg(long, env = "COWORK_CONTAINER_CPU_MILLIS", value_name = "MILLIS")]
    pub container_cpu_millis: Option<u64>,
    /// Docker network of each job's container (default: the engine's default).
    #[arg(long, env = "COWORK_CONTAINER_NETWORK", value_name = "NETWORK")]
    pub container_network: Option<String>,
    /// The cowork-harness program for the harness executor.
    #[arg(long, env = "COWORK_HARNESS_BIN", default_value = "cowork-harness")]
    pub harness_bin: PathBuf,
    #[command(flatten)]
    pub harness: HarnessProcessArgs,
    /// Id shown in events and `cowork workers` (default <hostname>-<pid>).
    #[arg(long, env = "COWORK_WORKER_ID")]
    pub worker_id: Option<String>,
    /// Where bundles are unpacked, by digest.
    #[arg(long, env = "COWORK_CACHE_DIR", default_value = ".cowork-worker/cache")]
    pub cache_dir: PathBuf,
    /// Most MiB of unpacked bundles the cache keeps: after each new bundle, the least
    /// recently used ones no running job holds are removed until the rest fit (0 = no bound).
    #[arg(long, env = "COWORK_CACHE_MAX_MIB", default_value_t = 10240)]
    pub cache_max_mib: u64,
    /// Where each job gets its scratch directory.
    #[arg(long, env = "COWORK_WORK_DIR", default_value = ".cowork-worker/work")]
    pub work_dir: PathBuf,
    /// Keep each job's scratch directory after its artifacts are stored.
    #[arg(long)]
    pub keep_work: bool,
    /// Interval of in-progress acks of a running job (default: a third of --ack-wait). Set
    /// longer than --ack-wait only to test redelivery: the queue then hands running jobs to
    /// other workers, and the coordinator counts each job once.
    #[arg(long, env = "COWORK_IN_PROGRESS_EVERY", value_name = "DURATION")]
    pub in_progress_every: Option<String>,
    /// How long a job's uploads, its record and each of its events are retried when the store
    /// or NATS fails (e.g. 10m, the default). The job's lease is renewed meanwhile. Past it, a
    /// job whose harness ran ends as infra_after_spend (never run again); one that never
    /// started is handed back.
    #[arg(long, env = "COWORK_STORE_DEADLINE", value_name = "DURATION")]
    pub store_deadline: Option<String>,
    /// On SIGTERM (a node drain, a spot reclaim) the worker takes no new job and waits this
    /// long (e.g. 25s, under the platform's own grace) for its running jobs; those still
    /// running then are stopped and handed back for another worker, not counted as attempts.
    /// Without it the worker waits until they finish.
    #[arg(long, env = "COWORK_DRAIN_GRACE", value_name = "DURATION")]
    pub drain_grace: Option<String>,
    /// Sandbox start failures in a row on one tier (a container that cannot be created or
    /// started, a missing image, a full disk) after which this worker stops taking that tier
    /// for a while; 0 never stops. Each failed job is handed back for another worker.
    #[arg(
        long,
        env = "COWORK_SANDBOX_BACKOFF_AFTER",
        value_name = "N",
        default_value_t = 3
    )]
    pub sandbox_backoff_after: u32,
    /// The first pause of a tier after --sandbox-backoff-after failures in a row (default
    /// 60s); each further one doubles it, up to --sandbox-backoff-max (default 10m). A job of
    /// the tier whose sandbox starts ends the doubling.
    #[arg(long, env = "COWORK_SANDBOX_BACKOFF", value_name = "DURATION")]
    pub sandbox_backoff: Option<String>,
    #[arg(long, env = "COWORK_SANDBOX_BACKOFF_MAX", value_name = "DURATION")]
    pub sandbox_backoff_max: Option<String>,
    /// Exit 0 once no job has been pulled or running for DURATION (e.g. 2m): the workers of a
    /// Kubernetes Job for one batch then complete when its queue is drained.
    #[arg(long, env = "COWORK_EXIT_WHEN_IDLE", value_name = "DURATION")]
    pub exit_when_idle: Option<String>,
    /// Tiers of --tiers served without probing their prerequisites (limactl, Docker), for
    /// hosts where they are met in a way the start-up probe cannot see.
    #[arg(
        long,
        env = "COWORK_ASSUME_TIERS",
        value_delimiter = ',',
        value_name = "TIERS"
    )]
    pub assume_tiers: Vec<String>,
    /// Serve microvm with the harness executor on a host that is not macOS, as long as
    /// limactl answers (Lima also runs on Linux).
    #[arg(long, env = "COWORK_ALLOW_MICROVM_OFF_MACOS")]
    pub allow_microvm_off_macos: bool,
    /// Serve this worker's counters as Prometheus text at http://ADDR/metrics (e.g.
    /// 0.0.0.0:9464); off by default.
    #[arg(long, env = "COWORK_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}
