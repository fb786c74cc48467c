//! Removing containers: a job's own when it ends (or its future is dropped), and the leftovers
//! of this worker's jobs that no longer run; never a container without our labels.

use std::collections::{HashMap, HashSet};

use bollard::Docker;
use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use cowork_fabric::error_chain;

use super::{ContainerError, LABEL_JOB, LABEL_OWNER};

/// Removes the containers of `owner` (by the `cowork.fleet/owner` label) whose
/// `cowork.fleet/job` label is not in `running_job_ids`, running or not. Containers without our
/// labels, or of another owner, are never touched. Returns the ids of the removed containers;
/// a container that cannot be removed is logged and left for the next reap.
pub async fn reap_leftovers(
    docker: &Docker,
    owner: &str,
    running_job_ids: &HashSet<String>,
) -> Result<Vec<String>, ContainerError> {
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![format!("{LABEL_OWNER}={owner}"), LABEL_JOB.to_owned()],
    )]);
    let options = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..ListContainersOptions::default()
    };
    let containers = docker
        .list_containers(Some(options))
        .await
        .map_err(ContainerError::engine("list leftover containers"))?;
    let mut removed = Vec::new();
    for container in containers {
        let Some(id) = container.id else { continue };
        let labels = container.labels.unwrap_or_default();
        // The filter already asked for both labels; checking again keeps a misbehaving engine
        // from making us remove something that is not ours.
        if labels.get(LABEL_OWNER).map(String::as_str) != Some(owner) {
            continue;
        }
        let Some(job_id) = labels.get(LABEL_JOB) else {
            continue;
        };
        if running_job_ids.contains(job_id) {
            continue;
        }
        match remove_container(docker, &id).await {
            Ok(()) => {
                tracing::info!(job_id = %job_id, container_id = %id, "leftover container removed");
                removed.push(id);
            }
            // One stuck container must not keep the others: it is tried again next time.
            Err(err) => {
                tracing::warn!(job_id = %job_id, container_id = %id, error = %error_chain(&err), "removing a leftover container failed")
            }
        }
    }
    Ok(removed)
}

/// Kills (if needed) and removes a container; one that is already gone, or already being
/// removed by someone else, counts as removed.
pub(super) async fn remove_container(docker: &Docker, id: &str) -> Result<(), ContainerError> {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..RemoveContainerOptions::default()
    };
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404 | 409,
            ..
        }) => Ok(()),
        Err(source) => Err(ContainerError::Engine {
            operation: "remove a container",
            source,
        }),
    }
}

/// Removes its container when dropped without [`ContainerGuard::remove`], e.g. when the job's
/// future is dropped mid-run.
pub(super) struct ContainerGuard {
    docker: Docker,
    id: String,
    removed: bool,
}

impl ContainerGuard {
    pub(super) fn new(docker: &Docker, id: &str) -> ContainerGuard {
        ContainerGuard {
            docker: docker.clone(),
            id: id.to_owned(),
            removed: false,
        }
    }

    /// Kills and removes the container now. A failure is logged; the reaper retries later.
    pub(super) async fn remove(&mut self) {
        self.removed = true;
        if let Err(err) = remove_container(&self.docker, &self.id).await {
            tracing::warn!(container_id = %self.id, error = %error_chain(&err), "removing the job's container failed; it is reaped later");
        }
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let docker = self.docker.clone();
        let id = std::mem::take(&mut self.id);
        // Detached on purpose: nobody awaits a dropped job. The runtime owns the task; if it
        // shuts down first, the reaper removes the container at the next job or start.
        runtime.spawn(async move {
            if let Err(err) = remove_container(&docker, &id).await {
                tracing::warn!(container_id = %id, error = %error_chain(&err), "removing an abandoned container failed");
            }
        });
    }
}
