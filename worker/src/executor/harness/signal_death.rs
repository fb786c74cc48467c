//! Saying what is known about a harness killed by a signal before it printed an envelope: the
//! missing agent binary, the OOM killer, the last lines of its stderr.

use std::path::Path;

use cowork_schema::job::Tier;
use cowork_schema::layout::names;

use super::HarnessExecutor;
use crate::capabilities::{AGENT_BINARY, find_on_path};
use crate::executor::{ArtifactSource, Classified, ExecOutput};

/// Lines of the harness's stderr quoted when it died by a signal without an envelope.
const STDERR_TAIL_LINES: usize = 3;

impl HarnessExecutor {
    /// Replaces the bare `killed by signal N` of a harness that died before it printed an
    /// envelope with what is known about why; `oom_kills_before` is [`oom_kills`] before the job.
    pub(super) fn explain_signal_death(
        &self,
        output: &mut ExecOutput,
        tier: Tier,
        oom_kills_before: Option<u64>,
    ) {
        if let Classified::Error { message, .. } = &mut output.classified
            && output.exit_code.is_none()
            && output.spawned
            && message.starts_with("killed by signal")
        {
            let stderr_tail = output
                .artifacts
                .iter()
                .find(|artifact| artifact.name == names::HARNESS_STDERR)
                .and_then(|artifact| match &artifact.source {
                    ArtifactSource::Bytes(bytes) => Some(last_lines(bytes, STDERR_TAIL_LINES)),
                    ArtifactSource::File(_) => None,
                })
                .unwrap_or_default();
            let oom = matches!((oom_kills_before, oom_kills()), (Some(before), Some(after)) if after > before);
            *message = describe_signal_death(&SignalDeath {
                message,
                tier,
                agent_on_path: find_on_path(AGENT_BINARY, self.child_path().as_deref()).is_some(),
                stderr_tail: &stderr_tail,
                oom,
            });
        }
    }
}

/// What is known about a harness that died by a signal before it printed an envelope.
struct SignalDeath<'a> {
    /// The classifier's message (`killed by signal N`).
    message: &'a str,
    tier: Tier,
    /// Whether the agent binary the CLI spawns at protocol is on the harness's `PATH`.
    agent_on_path: bool,
    /// The last lines of its stderr.
    stderr_tail: &'a str,
    /// Whether the kernel's OOM killer acted in this process's cgroup during the job.
    oom: bool,
}

/// A message that says what is known about a death by signal, never only its number.
fn describe_signal_death(death: &SignalDeath<'_>) -> String {
    let mut parts = vec![format!("{} before it printed an envelope", death.message)];
    if death.tier == Tier::Protocol && !death.agent_on_path {
        parts.push(format!(
            "the agent binary `{AGENT_BINARY}` is not on the PATH the harness gets: at fidelity \
             protocol cowork-harness spawns it from PATH and, when it cannot, kills its own \
             process group"
        ));
    }
    if death.oom {
        parts.push(
            "the kernel's out-of-memory killer killed a process of this worker's cgroup meanwhile"
                .to_owned(),
        );
    }
    if death.stderr_tail.is_empty() {
        parts.push("it wrote nothing to stderr".to_owned());
    } else {
        parts.push(format!("last stderr: {}", death.stderr_tail));
    }
    parts.join("; ")
}

/// The last `n` non-empty lines of `bytes`, joined with ` | `.
fn last_lines(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("[cowork-fleet:"))
        .collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// The `oom_kill` count of this process's cgroup (v2), when the system exposes it.
pub(super) fn oom_kills() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cgroup.lines().find_map(|line| line.strip_prefix("0::"))?;
    let events = std::fs::read_to_string(
        Path::new("/sys/fs/cgroup")
            .join(path.trim_start_matches('/'))
            .join("memory.events"),
    )
    .ok()?;
    events
        .lines()
        .find_map(|line| line.strip_prefix("oom_kill "))
        .and_then(|count| count.trim().parse().ok())
}
