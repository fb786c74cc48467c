//! Removing the Docker containers and networks a harness job left behind (chosen by
//! [`crate::executor::leftovers`]), with the harness's own environment and a bounded wait.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use cowork_schema::job::{JobCommand, JobSpec, Tier};
use tokio::process::Command;

use super::HarnessExecutor;
use super::notes::append_stderr_note;
use crate::capabilities::find_on_path;
use crate::executor::{ExecOutput, JobContext};

/// Whether the job's tier starts Docker containers and networks the CLI may leave behind.
pub(super) fn leaves_docker_resources(job: &JobSpec) -> bool {
    job.command != JobCommand::Replay && matches!(job.tier, Tier::Container | Tier::Hostloop)
}

/// How long one `docker` call of the leftover sweep may take before it is given up (a hung
/// daemon must not hold the slot).
const DOCKER_CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl HarnessExecutor {
    /// Removes the CLI's containers and networks that mount this job's work dir (see
    /// `leftovers`), and says what it removed in the log and the job's `harness.stderr.log`.
    pub(super) async fn remove_docker_leftovers(&self, output: &mut ExecOutput, ctx: &JobContext) {
        let Ok(work_dir) = std::path::absolute(&ctx.work_dir) else {
            return;
        };
        let Some(docker) = find_on_path("docker", self.child_path().as_deref()) else {
            return;
        };
        let mut list = vec!["ps".to_owned(), "-aq".to_owned()];
        for prefix in crate::executor::leftovers::CONTAINER_PREFIXES {
            list.extend(["--filter".to_owned(), format!("name={prefix}")]);
        }
        let Some(ids) = self.docker(&docker, &list).await else {
            return;
        };
        let ids: Vec<String> = ids.split_whitespace().map(str::to_owned).collect();
        if ids.is_empty() {
            return;
        }
        let mut inspect = vec![
            "inspect".to_owned(),
            "--format".to_owned(),
            "{{.Name}} {{range .Mounts}}{{.Source}} {{end}}".to_owned(),
        ];
        inspect.extend(ids);
        let Some(lines) = self.docker(&docker, &inspect).await else {
            return;
        };
        let leftovers = crate::executor::leftovers::select(&lines, &work_dir);
        if leftovers.containers.is_empty() {
            return;
        }
        let mut removed = Vec::new();
        let mut rm = vec!["rm".to_owned(), "-f".to_owned()];
        rm.extend(leftovers.containers.iter().cloned());
        if self.docker(&docker, &rm).await.is_some() {
            removed.extend(
                leftovers
                    .containers
                    .iter()
                    .map(|name| format!("container {name}")),
            );
        }
        for network in &leftovers.networks {
            let rm_network = vec!["network".to_owned(), "rm".to_owned(), network.clone()];
            if self.docker(&docker, &rm_network).await.is_some() {
                removed.push(format!("network {network}"));
            }
        }
        if removed.is_empty() {
            return;
        }
        tracing::info!(job_id = %ctx.job.job_id, removed = ?removed, "removed what the harness left in Docker");
        append_stderr_note(
            output,
            &format!(
                "[cowork-fleet: removed what the harness left in Docker: {}]",
                removed.join(", ")
            ),
        );
    }

    /// Runs `docker <args>` with the harness's environment; its stdout when it succeeded.
    async fn docker(&self, docker: &Path, args: &[String]) -> Option<String> {
        let mut command = Command::new(docker);
        command
            .args(args)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        for name in &self.config.passthrough_env {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        for (name, value) in &self.config.extra_env {
            command.env(name, value);
        }
        match tokio::time::timeout(DOCKER_CALL_TIMEOUT, command.output()).await {
            Ok(Ok(out)) if out.status.success() => {
                Some(String::from_utf8_lossy(&out.stdout).into_owned())
            }
            Ok(Ok(_)) => None,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "running docker for the leftover sweep failed");
                None
            }
            Err(_) => {
                tracing::warn!(args = ?args, "docker did not answer within 30 s; leftovers not removed");
                None
            }
        }
    }
}
