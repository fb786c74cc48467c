//! The one way every command finds the batch it was given.
//!
//! A batch is named by its id, by its directory (`<store>/batches/<id>`), by `latest` (the
//! newest batch) or by `latest~N` (N batches before the newest). [`resolve`] turns any of those
//! into an id and the store that holds the batch: the local store (`--store`, default
//! `.cowork`) or a coordinator's API. `cowork report`, `rollup`, `diff`, `trend`, `status`,
//! `watch`, `cancel`, `resume` and `results` all go through it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::anyhow;
use cowork_client::{ApiArtifactReader, CoordinatorClient};
use cowork_coordinator::catalog::batch_ids;
use cowork_fabric::ArtifactStore;
use cowork_fabric::embedded::DirArtifactStore;
use cowork_schema::BatchId;
use cowork_schema::layout::{BatchDir, BatchKey, StoreRoot, names};

use crate::args::BatchSourceArgs;
use crate::connect::{client, client_error};
use crate::exit::CliError;
use crate::fleet_args::ClientArgs;
use crate::text::count_of;

/// Where batches are read from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A local store directory (`<dir>/batches/<id>/…`).
    Local(PathBuf),
    /// A coordinator's API.
    Remote(CoordinatorClient),
}

impl Source {
    /// The source `args` name: the coordinator when given, else the local store.
    pub fn from_args(args: &BatchSourceArgs) -> Result<Source, CliError> {
        match &args.coordinator {
            Some(coordinator) => Ok(Source::Remote(client(&ClientArgs {
                coordinator: coordinator.clone(),
                token_file: args.token_file.clone(),
                // These commands take no --coordinator-ca flag; the variable still applies.
                coordinator_ca: std::env::var_os("COWORK_COORDINATOR_CA").map(PathBuf::from),
            })?)),
            None => Ok(Source::Local(args.store.clone())),
        }
    }

    /// Where the source is, for messages.
    pub fn describe(&self) -> String {
        match self {
            Source::Local(dir) => format!("store {}", dir.display()),
            Source::Remote(_) => "the coordinator".to_owned(),
        }
    }

    /// A reader of `batch_id`'s stored files.
    pub fn store_of(&self, batch_id: &BatchId) -> Arc<dyn ArtifactStore> {
        match self {
            Source::Local(dir) => Arc::new(DirArtifactStore::new(dir)),
            Source::Remote(client) => {
                Arc::new(ApiArtifactReader::new(client.clone(), batch_id.clone()))
            }
        }
    }

    /// The ids of the source's batches, newest first.
    pub async fn batch_ids(&self) -> Result<Vec<BatchId>, CliError> {
        match self {
            Source::Local(dir) => {
                if !dir.is_dir() {
                    return Ok(Vec::new());
                }
                let store = DirArtifactStore::new(dir);
                let mut ids = batch_ids(&store)
                    .await
                    .map_err(|e| CliError::Failed(anyhow!(e).context("listing batches")))?;
                // Ids tell time to the second; batches started within one second are ordered
                // by when their spec was written (stable: it is written once).
                let written = |batch_id: &BatchId| {
                    std::fs::metadata(StoreRoot::new(dir).batch_dir(batch_id).spec_file())
                        .and_then(|metadata| metadata.modified())
                        .ok()
                };
                let mut keyed: Vec<_> = ids
                    .drain(..)
                    .map(|id| {
                        (
                            id.as_str().get(..15).unwrap_or(id.as_str()).to_owned(),
                            written(&id),
                            id,
                        )
                    })
                    .collect();
                keyed.sort_by(|a, b| (&b.0, b.1, b.2.as_str()).cmp(&(&a.0, a.1, a.2.as_str())));
                Ok(keyed.into_iter().map(|(_, _, id)| id).collect())
            }
            Source::Remote(client) => {
                let mut records = client
                    .list()
                    .await
                    .map_err(|e| client_error(e, "listing batches"))?;
                records.sort_by(|a, b| {
                    (b.created_at_ms, b.batch_id.as_str())
                        .cmp(&(a.created_at_ms, a.batch_id.as_str()))
                });
                Ok(records.into_iter().map(|record| record.batch_id).collect())
            }
        }
    }
}

/// A batch named on the command line, found.
pub struct Resolved {
    pub batch_id: BatchId,
    /// The source holding it: for a batch dir, the store two levels above it.
    pub source: Source,
}

/// How many batches before the newest `text` names: `latest` is 0, `latest~N` is N.
fn latest_offset(text: &str) -> Option<Result<usize, String>> {
    let rest = text.strip_prefix("latest")?;
    if rest.is_empty() {
        return Some(Ok(0));
    }
    let digits = rest.strip_prefix('~')?;
    Some(
        digits
            .parse::<usize>()
            .map_err(|_| format!("{text:?}: `latest~N` needs a whole number N, e.g. latest~1")),
    )
}

/// The store and id of a stored batch dir (`<store>/batches/<id>` holding `spec.json`).
fn batch_dir(path: &Path) -> Option<(PathBuf, BatchId)> {
    if !BatchDir::new(path).spec_file().is_file() {
        return None;
    }
    let dir = std::fs::canonicalize(path).ok()?;
    let batch_id = BatchId::new(dir.file_name()?.to_str()?).ok()?;
    let batches = dir.parent()?;
    if batches.file_name()? != names::BATCHES_DIR {
        return None;
    }
    Some((batches.parent()?.to_path_buf(), batch_id))
}

/// `true` when `text` names a batch by position (`latest`, `latest~N`) or by its directory
/// rather than by its id: such a name needs [`resolve`] to become an id.
pub fn names_by_position_or_dir(text: &str) -> bool {
    latest_offset(text).is_some() || batch_dir(Path::new(text)).is_some()
}

/// Finds the batch `text` names in `source` (see the module documentation). A batch dir is
/// read where it is, whatever `source` says.
pub async fn resolve(text: &str, source: &Source) -> Result<Resolved, CliError> {
    if let Some((store, batch_id)) = batch_dir(Path::new(text)) {
        return Ok(Resolved {
            batch_id,
            source: Source::Local(store),
        });
    }
    if let Some(offset) = latest_offset(text) {
        let offset = offset.map_err(CliError::usage)?;
        let ids = source.batch_ids().await?;
        let Some(batch_id) = ids.get(offset).cloned() else {
            return Err(CliError::usage(format!(
                "{text}: {} holds {} (`cowork batches` lists them)",
                source.describe(),
                count_of(ids.len() as u64, "batch", "batches"),
            )));
        };
        return Ok(Resolved {
            batch_id,
            source: source.clone(),
        });
    }
    let path = Path::new(text);
    if path.is_dir() {
        return Err(CliError::usage(format!(
            "{}: not a stored batch dir (expected <store>/{}/<id> holding {})",
            path.display(),
            names::BATCHES_DIR,
            names::SPEC
        )));
    }
    let batch_id = match BatchId::new(text) {
        Ok(batch_id) if !text.contains('/') && !path.exists() => batch_id,
        _ => {
            return Err(CliError::usage(format!(
                "{text:?} is neither a stored batch dir nor a batch id, `latest` or `latest~N`"
            )));
        }
    };
    if let Source::Local(dir) = source {
        let key = BatchKey::new(&batch_id).spec();
        if !StoreRoot::new(dir).key_path(&key).is_file() {
            let known = source.batch_ids().await.unwrap_or_default();
            return Err(CliError::usage(not_found_locally(&batch_id, dir, &known)));
        }
    }
    Ok(Resolved {
        batch_id,
        source: source.clone(),
    })
}

/// Why `batch_id` is not in the local store `dir` holding `known`, and what to try instead: the
/// stored id it is closest to (a typo), and `--coordinator` (a batch run on a fleet lives in
/// the fleet's store, not here).
fn not_found_locally(batch_id: &BatchId, dir: &Path, known: &[BatchId]) -> String {
    let known: Vec<&str> = known.iter().map(BatchId::as_str).collect();
    let hint = match cowork_schema::load::closest_key(batch_id.as_str(), &known) {
        Some(closest) => format!("did you mean {closest}? "),
        None => String::new(),
    };
    format!(
        "batch {batch_id} not found in store {}: {hint}`cowork batches --store {}` lists the \
         batches there; a batch submitted to a fleet is read with --coordinator URL (or \
         COWORK_COORDINATOR)",
        dir.display(),
        dir.display()
    )
}

/// The id of the batch `text` names on a coordinator (`status`, `watch`, `cancel`, …).
pub async fn resolve_remote(text: &str, client: &CoordinatorClient) -> Result<BatchId, CliError> {
    let source = Source::Remote(client.clone());
    Ok(resolve(text, &source).await?.batch_id)
}

/// `2026-12-01 00:59` from a batch id, whose first 15 characters are its UTC creation time.
pub fn when(batch_id: &BatchId) -> String {
    let id = batch_id.as_str();
    let digits = |range: std::ops::Range<usize>| {
        id.get(range)
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
    };
    match (
        digits(0..4),
        digits(4..6),
        digits(6..8),
        digits(9..11),
        digits(11..13),
    ) {
        (Some(y), Some(mo), Some(d), Some(h), Some(mi)) if id.as_bytes().get(8) == Some(&b'-') => {
            format!("{y}-{mo}-{d} {h}:{mi}")
        }
        _ => "-".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_and_latest_n() {
        assert_eq!(latest_offset("latest"), Some(Ok(0)));
        assert_eq!(latest_offset("latest~3"), Some(Ok(3)));
        assert!(matches!(latest_offset("latest~x"), Some(Err(_))));
        assert_eq!(latest_offset("20261201-000000-aaaaaa"), None);
        assert_eq!(latest_offset("latestish"), None);
    }

    #[test]
    fn a_missing_batch_suggests_the_closest_id_and_the_coordinator() {
        let id = |text: &str| BatchId::new(text).expect("valid id");
        let known = [id("20261201-005934-153d94"), id("20261201-010000-aaaaaa")];
        let message =
            not_found_locally(&id("20261201-005934-153d95"), Path::new(".cowork"), &known);
        assert_eq!(
            message,
            "batch 20261201-005934-153d95 not found in store .cowork: did you mean \
             20261201-005934-153d94? `cowork batches --store .cowork` lists the batches there; a \
             batch submitted to a fleet is read with --coordinator URL (or COWORK_COORDINATOR)"
        );
        let far = not_found_locally(&id("20250101-000000-zzzzzz"), Path::new(".cowork"), &known);
        assert!(!far.contains("did you mean"), "{far}");
    }

    #[test]
    fn when_reads_the_time_in_the_id() {
        let id = BatchId::new("20261201-005934-153d94").expect("valid id");
        assert_eq!(when(&id), "2026-12-01 00:59");
        assert_eq!(when(&BatchId::new("b1").expect("valid id")), "-");
    }
}
