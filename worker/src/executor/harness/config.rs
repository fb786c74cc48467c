//! Settings of the harness executor and their defaults: which variables reach the harness, which
//! of them are credentials, and the bounds on its output and its stop.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default for [`HarnessConfig::stdout_limit_bytes`]: 64 MiB. The envelope of one run is
/// typically tens of kilobytes; anything near this size is a runaway process.
pub const DEFAULT_STDOUT_LIMIT_BYTES: usize = 64 * 1024 * 1024;

/// Environment variables copied from the worker by default: every variable cowork-harness
/// 2.0.0 reads for the tiers a worker serves (operations/settings.md#harness-environment: what each
/// does), grouped as the CLI uses them. Not here on purpose: `COWORK_HARNESS_OUTPUT_FORMAT` and
/// `COWORK_HARNESS_RUNS_DIR` (the executor passes `--output-format` and `--run-dir`, which
/// must win), `COWORK_HARNESS_DEBUG` (it adds lines to stderr) and `COWORK_HARNESS_MODEL` /
/// `COWORK_HARNESS_FIDELITY` (read only by `skill` and `chat`). More names come from
/// `--harness-env`.
pub const DEFAULT_PASSTHROUGH_ENV: &[&str] = &[
    // The process itself: where its tools, its home (`~/.cowork-harness`) and its locale are.
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "TMPDIR",
    // Model credentials (the secret set: scrubbed from everything stored). Which of them reach
    // the agent depends on the tier (operations/settings.md#harness-environment).
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_CUSTOM_HEADERS",
    // The docker client the CLI spawns inherits its environment.
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CONTEXT",
    "DOCKER_TLS_VERIFY",
    "DOCKER_CERT_PATH",
    // Images, binaries and tiers.
    "COWORK_AGENT_IMAGE",
    "COWORK_CONTAINER_RUNTIME",
    "COWORK_PROXY_IMAGE",
    "COWORK_AGENT_BINARY",
    "COWORK_HARNESS_VERIFY_AGENT_SHA",
    "COWORK_HARNESS_ALLOW_AGENT_FALLBACK",
    "COWORK_HOST_AGENT_BINARY",
    "COWORK_LIMACTL",
    "COWORK_LIMA_INSTANCE",
    "COWORK_VM_GATEWAY",
    "COWORK_VM_PROXY_PORT",
    "COWORK_LOCKDOWN",
    "COWORK_SKIP_CAPABILITY_PROBE",
    "CLAUDE_FORCE_HOST_LOOP",
    // Deciders and judges.
    "COWORK_HARNESS_DECIDER_MODEL",
    "COWORK_HARNESS_JUDGE_MODEL",
    "COWORK_HARNESS_CLAUDE_BIN",
    "COWORK_HARNESS_LLM_TIMEOUT_MS",
    "COWORK_HARNESS_LLM_MAX_BYTES",
    "COWORK_HARNESS_LLM_RETRIES",
    "COWORK_HARNESS_DIALOG_TIMEOUT_MS",
    "COWORK_HARNESS_DECIDER_DIR_TIMEOUT_MS",
    "COWORK_HARNESS_DECIDER_DIR_POLL_MS",
    "COWORK_HARNESS_DECIDER_CMD_TIMEOUT_MS",
    // Scrubbing, redaction and staging.
    "COWORK_HARNESS_SCRUB_KEYS",
    "COWORK_HARNESS_SCRUB_VALUES",
    "COWORK_HARNESS_REDACT_PATTERNS",
    "COWORK_HARNESS_REDACT_KEYS",
    "COWORK_HARNESS_MAX_ARTIFACT_BYTES",
    "COWORK_HARNESS_SOFT_MISSING",
    "COWORK_HARNESS_GITSET",
];

/// Allow-listed variables whose values are credentials: scrubbed from the envelope, the stored
/// stderr and every uploaded run-dir file before anything reaches the store (the CLI itself
/// never scrubs its stdout, stderr or several run-dir files).
pub const SECRET_ENV: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_CUSTOM_HEADERS",
];

/// Default for [`HarnessConfig::upload_limit_bytes`]: 16 MiB, far above a normal run's logs
/// (kilobytes to a few megabytes) and small enough that a runaway log cannot fill the store.
pub const DEFAULT_UPLOAD_LIMIT_BYTES: usize = 16 * 1024 * 1024;

/// Default for [`HarnessConfig::stop_grace`]: 30 s. On SIGTERM the CLI runs `docker rm -f` of
/// its agent container and its proxy and removes two networks, one blocking call after another
/// with no timeout of their own; on a healthy daemon that takes a few seconds, so 30 s leaves
/// room for a loaded one while a hung daemon still cannot hold a slot for long.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(30);

/// Settings of the [`HarnessExecutor`](super::HarnessExecutor).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HarnessConfig {
    /// The CLI to run; a bare name is looked up on the child's `PATH`. Default `cowork-harness`.
    pub program: PathBuf,
    /// Names of worker environment variables copied into the child's otherwise empty
    /// environment; unset names are skipped. Default [`DEFAULT_PASSTHROUGH_ENV`].
    pub passthrough_env: Vec<String>,
    /// Variables set in the child after the passthrough ones (they win). Default none.
    pub extra_env: Vec<(String, String)>,
    /// Most bytes of stdout kept (the tail: the envelope is the last line) and of stderr kept
    /// (the head). Default [`DEFAULT_STDOUT_LIMIT_BYTES`].
    pub stdout_limit_bytes: usize,
    /// A program that runs [`crate::executor::guard::run_guard`] when given
    /// [`GUARD_SUBCOMMAND`](crate::executor::guard::GUARD_SUBCOMMAND) first (the `cowork` binary). When
    /// set, every harness runs under a guard that kills the job's whole process group if this
    /// process dies, even by SIGKILL. Default none: the harness is started directly and is
    /// killed only on timeout, cancel or a clean shutdown.
    pub guard: Option<PathBuf>,
    /// How long a harness sent SIGTERM (timeout, cancel, the worker's death) may take to exit
    /// before its process group is killed. Default [`DEFAULT_STOP_GRACE`].
    pub stop_grace: Duration,
    /// Most bytes of each diagnostic artifact stored (logs and run-dir files; never the
    /// result, envelope or cassette); a longer one is cut with a note. Default
    /// [`DEFAULT_UPLOAD_LIMIT_BYTES`].
    pub upload_limit_bytes: usize,
}

impl HarnessConfig {
    /// The defaults with another program, e.g. a pinned install path.
    pub fn new(program: &Path) -> HarnessConfig {
        HarnessConfig {
            program: program.to_path_buf(),
            ..HarnessConfig::default()
        }
    }
}

impl Default for HarnessConfig {
    fn default() -> Self {
        HarnessConfig {
            program: PathBuf::from("cowork-harness"),
            passthrough_env: DEFAULT_PASSTHROUGH_ENV
                .iter()
                .map(|name| (*name).to_owned())
                .collect(),
            extra_env: Vec::new(),
            stdout_limit_bytes: DEFAULT_STDOUT_LIMIT_BYTES,
            guard: None,
            stop_grace: DEFAULT_STOP_GRACE,
            upload_limit_bytes: DEFAULT_UPLOAD_LIMIT_BYTES,
        }
    }
}
