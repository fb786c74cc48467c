//! How supervision of a batch ended: decided (with what it stored) or cancelled.

use cowork_core::reduce::BatchReduction;
use cowork_schema::api::ProgressSnapshot;
use cowork_schema::envelope::Envelope;
use cowork_schema::fleet::FleetMeta;

use super::documents::copy_envelope;

/// What a supervised batch produced.
#[derive(Debug)]
pub struct BatchOutcome {
    pub reduction: BatchReduction,
    /// The bytes stored as `batches/<id>/rollup.json` (deterministic).
    pub rollup_json: Vec<u8>,
    /// The envelope's `fleet` key.
    pub fleet: FleetMeta,
    /// The envelope without `results[]` (kept where they are its units): what a
    /// summary table needs.
    pub envelope_head: Envelope,
    /// The store key of the envelope (`batches/<id>/envelope.json`).
    pub envelope_key: String,
    pub exit_code: i32,
    pub progress: ProgressSnapshot,
    /// The batch's `stats.json`: per-unit runs, passes and cost.
    pub stats: cowork_schema::history::BatchStats,
    /// The stored envelope's bytes in a local temporary file.
    pub(super) envelope_spool: tempfile::TempPath,
}

impl BatchOutcome {
    /// Writes the whole envelope (one line and a newline) to `writer`, from the local copy of
    /// what was stored, without holding it in memory.
    pub fn copy_envelope_to(&self, writer: &mut dyn std::io::Write) -> std::io::Result<()> {
        copy_envelope(&self.envelope_spool, writer)
    }
}

/// How supervision of a batch ended.
#[derive(Debug)]
pub enum SuperviseEnd {
    /// The batch was decided; `rollup.json` and `envelope.json` are stored.
    Decided(Box<BatchOutcome>),
    /// The batch was cancelled before it was decided; nothing was stored.
    Cancelled { progress: Box<ProgressSnapshot> },
}
