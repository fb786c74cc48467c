//! Notes the worker adds to a job's `harness.stderr.log`: what it removed or kept from the store,
//! and the log itself built from the captured stderr.

use std::path::Path;

use cowork_schema::job::JobSpec;
use cowork_schema::layout::names;

use super::capture::Captured;
use super::collect::sorted_entries;
use crate::executor::job_temp::Removed;
use crate::executor::{Artifact, ArtifactSource, ExecOutput};

/// Appends `note` as its own line to the job's `harness.stderr.log`, creating it if needed.
pub(super) fn append_stderr_note(output: &mut ExecOutput, note: &str) {
    match output
        .artifacts
        .iter_mut()
        .find(|artifact| artifact.name == names::HARNESS_STDERR)
    {
        Some(Artifact {
            source: ArtifactSource::Bytes(bytes),
            ..
        }) => bytes.extend_from_slice(format!("\n{note}\n").as_bytes()),
        _ => output.artifacts.push(Artifact {
            name: names::HARNESS_STDERR.to_owned(),
            source: ArtifactSource::Bytes(format!("{note}\n").into_bytes()),
        }),
    }
}

/// Says so when the CLI quarantined a recording (it carries host inventory and its target was
/// repo-visible): the quarantined file is never stored, since host inventory is what the
/// quarantine keeps from spreading, and it goes with the job's work dir.
pub(super) fn note_quarantined(output: &mut ExecOutput, runs_root: &Path) {
    let names: Vec<String> = sorted_entries(&runs_root.join("quarantine"))
        .iter()
        .filter_map(|path| path.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        return;
    }
    append_stderr_note(
        output,
        &format!(
            "[cowork-fleet: the harness quarantined {} (a recording carrying host inventory); \
             not stored, and removed with the job's work dir]",
            names.join(", ")
        ),
    );
}

/// Reports what was removed with the job's temp root: in the log, and, when the harness left
/// something there, in the job's stored `harness.stderr.log`.
pub(crate) fn note_removed(output: &mut ExecOutput, job: &JobSpec, removed: &Removed) {
    if let Some(error) = &removed.error {
        tracing::warn!(job_id = %job.job_id, dir = %removed.root.display(), error, "removing the job's temp dir failed");
    }
    if removed.leftovers.is_empty() {
        tracing::debug!(job_id = %job.job_id, dir = %removed.root.display(), "removed the job's temp dir");
        return;
    }
    tracing::info!(job_id = %job.job_id, dir = %removed.root.display(), left = ?removed.leftovers, "removed what the harness left in its temp dir");
    let note = format!(
        "[cowork-fleet: removed the job's TMPDIR {}, where the harness left: {}]",
        removed.root.join("tmp").display(),
        removed.leftovers.join(", ")
    );
    append_stderr_note(output, &note);
}

/// `harness.stderr.log`: the CLI's own stderr, with a note when it was cut.
pub(super) fn stderr_artifact(stderr: Captured) -> Artifact {
    let mut bytes = stderr.bytes;
    if stderr.dropped_bytes > 0 {
        bytes.extend_from_slice(
            format!(
                "\n[cowork-fleet: {} more bytes of stderr were dropped]\n",
                stderr.dropped_bytes
            )
            .as_bytes(),
        );
    }
    Artifact {
        name: names::HARNESS_STDERR.to_owned(),
        source: ArtifactSource::Bytes(bytes),
    }
}
