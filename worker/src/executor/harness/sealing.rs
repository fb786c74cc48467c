//! A job's output as it may reach the store ([`crate::executor::seal`]): credential values
//! scrubbed from every artifact and the result, diagnostic files cut at the upload limit.

use std::io;
use std::path::Path;

use super::HarnessExecutor;
use super::config::SECRET_ENV;
use crate::executor::{Artifact, ArtifactSource, Classified, ExecOutput};

impl HarnessExecutor {
    /// The credential values this worker passes to the harness (see [`SECRET_ENV`]).
    fn secret_values(&self) -> Vec<String> {
        SECRET_ENV
            .iter()
            .filter(|name| self.config.passthrough_env.iter().any(|kept| kept == *name))
            .filter_map(|name| std::env::var(name).ok())
            .chain(
                self.config
                    .extra_env
                    .iter()
                    .filter(|(name, _)| SECRET_ENV.contains(&name.as_str()))
                    .map(|(_, value)| value.clone()),
            )
            .collect()
    }

    /// `output` as it may reach the store ([`super::seal`]): every artifact read into memory
    /// scrubbed of this worker's credential values, diagnostic ones cut at the upload limit,
    /// and the result value scrubbed alike.
    pub(super) async fn seal(&self, mut output: ExecOutput) -> ExecOutput {
        let forms = crate::executor::seal::secret_forms(&self.secret_values());
        let limit = self.config.upload_limit_bytes;
        let artifacts = std::mem::take(&mut output.artifacts);
        let sealed = tokio::task::spawn_blocking(move || {
            let mut n_scrubbed = 0;
            let artifacts: Vec<Artifact> = artifacts
                .into_iter()
                .map(|artifact| {
                    let (artifact, n_replaced) = seal_artifact(artifact, &forms, limit);
                    n_scrubbed += n_replaced;
                    artifact
                })
                .collect();
            (artifacts, n_scrubbed, forms)
        })
        .await;
        let forms = match sealed {
            Ok((artifacts, n_scrubbed, forms)) => {
                if n_scrubbed > 0 {
                    tracing::info!(
                        n_scrubbed,
                        "scrubbed credential values from the job's artifacts"
                    );
                }
                output.artifacts = artifacts;
                forms
            }
            Err(err) => {
                // Nothing unscrubbed may be stored: without the sealed copies, nothing is.
                tracing::error!(error = %err, "sealing the job's artifacts failed; none are stored");
                return output;
            }
        };
        if let Classified::Completed { result } = &mut output.classified
            && !forms.is_empty()
        {
            let bytes = cowork_schema::json_number::to_vec(result)
                .expect("serializing a json value to memory cannot fail");
            let (scrubbed, n_replaced) = crate::executor::seal::scrub(&bytes, &forms);
            if n_replaced > 0
                && let Ok(value) = serde_json::from_slice(&scrubbed)
            {
                *result = value;
            }
        }
        output
    }
}

/// One artifact as it may be stored: in memory, scrubbed and, unless the fleet parses it back,
/// cut at `limit` bytes. An unreadable file is stored as a note saying why.
fn seal_artifact(artifact: Artifact, forms: &[Vec<u8>], limit: usize) -> (Artifact, usize) {
    let cuttable = !crate::executor::seal::NEVER_CUT.contains(&artifact.name.as_str());
    let (bytes, total) = match artifact.source {
        ArtifactSource::Bytes(bytes) => {
            let total = bytes.len() as u64;
            (bytes, total)
        }
        ArtifactSource::File(path) => match read_head(&path, cuttable.then_some(limit)) {
            Ok(read) => read,
            Err(err) => (
                format!(
                    "[cowork-fleet: {} could not be read: {err}]\n",
                    path.display()
                )
                .into_bytes(),
                0,
            ),
        },
    };
    let (bytes, n_replaced) = if forms.is_empty() {
        (bytes, 0)
    } else {
        crate::executor::seal::scrub(&bytes, forms)
    };
    let bytes = if cuttable {
        crate::executor::seal::cut(bytes, limit, total)
    } else {
        bytes
    };
    (
        Artifact {
            name: artifact.name,
            source: ArtifactSource::Bytes(bytes),
        },
        n_replaced,
    )
}

/// The first `limit` bytes of the file (all of it without a limit) and its length.
fn read_head(path: &Path, limit: Option<usize>) -> io::Result<(Vec<u8>, u64)> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    let total = file.metadata()?.len();
    let mut bytes = Vec::new();
    match limit {
        Some(limit) => {
            file.take(limit as u64).read_to_end(&mut bytes)?;
        }
        None => {
            let mut file = file;
            file.read_to_end(&mut bytes)?;
        }
    }
    Ok((bytes, total))
}
