//! Where each completed run's `result.json` is, and its digest, as the folded `finished` event
//! recorded them — kept compactly, so the envelope can be assembled at the end by reading each
//! result once and checking it is the one that was folded.
//!
//! A slot is 44 bytes: the sha256 and the attempt that stored the file. The key itself is not
//! kept when it follows the storage layout (the usual case), only rebuilt from the job id and
//! the attempt; a key in another shape is kept whole beside the slots.

use std::collections::HashMap;

use cowork_schema::event::ArtifactRef;
use cowork_schema::ids::JobId;
use cowork_schema::layout;

/// The file of a completed run the envelope lists.
pub const RESULT_FILE: &str = layout::names::RESULT;

/// Where a folded run's result is and what its bytes must hash to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultLocation {
    pub key: String,
    /// The sha256 the `finished` event recorded; `None` for an event that recorded no
    /// `result.json` (a worker older than digests in events), read from the job's directory
    /// unverified.
    pub sha256: Option<[u8; 32]>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum KeyShape {
    /// No result recorded (yet).
    #[default]
    Empty,
    /// The event recorded no `result.json`: the job's directory, unverified.
    Unrecorded,
    /// `layout::AttemptKey::result` of the slot's generation and attempt.
    Layout,
    /// `<job dir>/result.json`, whatever the attempt (a worker that writes every attempt there).
    JobDir,
    /// Any other key: kept in [`ResultIndex::other_keys`].
    Other,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    sha256: [u8; 32],
    generation: u32,
    attempt: u32,
    shape: KeyShape,
}

/// The recorded results of a batch, per unit and run.
#[derive(Clone, Debug, Default)]
pub struct ResultIndex {
    /// Per unit, one slot per run up to the highest completed one.
    slots: Vec<Vec<Slot>>,
    other_keys: HashMap<(u32, u32), ResultLocation>,
}

impl ResultIndex {
    pub fn new(n_units: usize) -> ResultIndex {
        ResultIndex {
            slots: vec![Vec::new(); n_units],
            other_keys: HashMap::new(),
        }
    }

    /// Records the result of the completed run `run` of `unit` from its `finished` event.
    pub fn record(
        &mut self,
        (unit, run): (u32, u32),
        job: &JobId,
        (generation, attempt): (u32, u32),
        artifacts: &[ArtifactRef],
    ) {
        let Some(unit_slots) = self.slots.get_mut(unit as usize) else {
            return;
        };
        let needed = run as usize + 1;
        if unit_slots.len() < needed {
            unit_slots.resize(needed, Slot::default());
        }
        let slot = &mut unit_slots[run as usize];
        let Some(result) = artifacts
            .iter()
            .find(|artifact| artifact.key.rsplit('/').next() == Some(RESULT_FILE))
        else {
            slot.shape = KeyShape::Unrecorded;
            return;
        };
        let sha256 = parse_sha256(&result.sha256);
        let shape = if result.key
            == layout::JobKey::new(job)
                .attempt(generation, attempt)
                .result()
                .as_str()
        {
            KeyShape::Layout
        } else if result.key == layout::JobKey::new(job).result().as_str() {
            KeyShape::JobDir
        } else {
            KeyShape::Other
        };
        match (shape, sha256) {
            (KeyShape::Layout | KeyShape::JobDir, Some(sha256)) => {
                *slot = Slot {
                    sha256,
                    generation,
                    attempt,
                    shape,
                };
            }
            _ => {
                slot.shape = KeyShape::Other;
                self.other_keys.insert(
                    (unit, run),
                    ResultLocation {
                        key: result.key.clone(),
                        sha256,
                    },
                );
            }
        }
    }

    /// Where the result of run `run` of `unit` (job `job`) is; `None` when no completed run was
    /// recorded for it.
    pub fn location(&self, (unit, run): (u32, u32), job: &JobId) -> Option<ResultLocation> {
        let slot = self.slots.get(unit as usize)?.get(run as usize)?;
        let job_dir_key = || layout::JobKey::new(job).result().into_string();
        match slot.shape {
            KeyShape::Empty => None,
            KeyShape::Unrecorded => Some(ResultLocation {
                key: job_dir_key(),
                sha256: None,
            }),
            KeyShape::Layout => Some(ResultLocation {
                key: layout::JobKey::new(job)
                    .attempt(slot.generation, slot.attempt)
                    .result()
                    .into_string(),
                sha256: Some(slot.sha256),
            }),
            KeyShape::JobDir => Some(ResultLocation {
                key: job_dir_key(),
                sha256: Some(slot.sha256),
            }),
            KeyShape::Other => self.other_keys.get(&(unit, run)).cloned(),
        }
    }

    /// Whether the result recorded for run `run` of `unit` (job `job`) is the one `artifacts`
    /// name: the same `result.json` key and sha256, or no `result.json` in either.
    pub fn holds(&self, (unit, run): (u32, u32), job: &JobId, artifacts: &[ArtifactRef]) -> bool {
        let Some(recorded) = self.location((unit, run), job) else {
            return false;
        };
        let reported = match artifacts
            .iter()
            .find(|artifact| artifact.key.rsplit('/').next() == Some(RESULT_FILE))
        {
            Some(result) => ResultLocation {
                key: result.key.clone(),
                sha256: parse_sha256(&result.sha256),
            },
            None => ResultLocation {
                key: layout::JobKey::new(job).result().into_string(),
                sha256: None,
            },
        };
        recorded == reported
    }
}

/// Lowercase or uppercase hex of 32 bytes.
fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (index, pair) in bytes.chunks_exact(2).enumerate() {
        let digit = |byte: u8| (byte as char).to_digit(16);
        out[index] = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
    }
    Some(out)
}

/// Lowercase hex of a digest, for messages.
pub fn sha256_hex(sha256: &[u8; 32]) -> String {
    sha256.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_schema::BatchId;
    use cowork_schema::ids::UnitRef;

    const DIGEST: &str = "00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff";

    fn artifact(key: &str, sha256: &str) -> ArtifactRef {
        ArtifactRef {
            key: key.into(),
            size: 1,
            sha256: sha256.into(),
        }
    }

    #[test]
    fn keys_in_the_layout_are_rebuilt_and_others_kept() {
        let batch = BatchId::new("b1").expect("valid literal");
        let job = |run| JobId::new(&batch, UnitRef::Cell(1), Some(run));
        let mut index = ResultIndex::new(2);
        let flat = "batches/b1/jobs/c1/r0/result.json";
        index.record((1, 0), &job(0), (0, 1), &[artifact(flat, DIGEST)]);
        let second = "batches/b1/jobs/c1/r2/g0a2/result.json";
        index.record((1, 2), &job(2), (0, 2), &[artifact(second, DIGEST)]);
        // A worker that writes every attempt to the job's directory.
        let same_dir = "batches/b1/jobs/c1/r3/result.json";
        index.record((1, 3), &job(3), (0, 3), &[artifact(same_dir, DIGEST)]);
        index.record(
            (1, 4),
            &job(4),
            (0, 1),
            &[artifact("elsewhere/result.json", "xyz")],
        );
        index.record((1, 5), &job(5), (0, 1), &[]);

        let at = |run| index.location((1, run), &job(run)).expect("recorded");
        assert_eq!(at(0).key, flat);
        assert_eq!(
            at(0).sha256.map(|d| sha256_hex(&d)).as_deref(),
            Some(DIGEST)
        );
        assert_eq!(at(2).key, second);
        assert_eq!(at(3).key, same_dir);
        assert_eq!(
            at(4),
            ResultLocation {
                key: "elsewhere/result.json".into(),
                sha256: None
            }
        );
        assert_eq!(at(5).key, "batches/b1/jobs/c1/r5/result.json");
        assert_eq!(at(5).sha256, None);
        assert_eq!(
            index.location((1, 1), &job(1)),
            None,
            "an error, not recorded"
        );
        assert_eq!(index.location((0, 0), &job(0)), None);
    }
}
