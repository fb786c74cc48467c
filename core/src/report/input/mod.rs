//! What a report reads: one stored batch as its loader hands it over ([`ReportInput`]), every
//! stored run in brief and the runs the page details in full.

mod brief;
mod detailed;
mod eval;
mod result;
mod run;

use std::sync::OnceLock;

use cowork_schema::batch::StoredBatch;
use cowork_schema::envelope::Envelope;
use cowork_schema::rollup::RollupDoc;

pub use brief::{RunBrief, RunFindings, SingleRunFacts, sort_briefs};
pub use detailed::{DetailedRuns, MAX_RUN_SECTIONS, SECTIONS_OF_A_BIG_BATCH};
pub use eval::{EvalArm, EvalRow, EvalSection, RankedArm, whole_cost_sentence};
pub(crate) use run::unit_id;
pub use run::{RunOutcome, RunRecord, RunState, StoredRun};

/// Everything a report is rendered from: the stored documents of one decided batch.
#[derive(Clone, Debug)]
pub struct ReportInput {
    /// `batches/<id>/spec.json`: the submitted spec and the planner's layout.
    pub stored: StoredBatch,
    /// `batches/<id>/rollup.json`: rollups and verdict.
    pub rollup: RollupDoc,
    /// `batches/<id>/envelope.json`: harness version, `error` and the `fleet` key.
    pub envelope: Envelope,
    /// The stored runs the report details (a `result.json`, or a job record whose outcome was
    /// an error), in (unit, repeat index) order: every stored run of a batch of up to
    /// [`MAX_RUN_SECTIONS`] runs; above that, the ones [`DetailedRuns`] picks. The rest are
    /// known only by their [`RunBrief`].
    pub runs: Vec<StoredRun>,
    /// Every stored run of the batch in brief, in (unit, repeat index) order. Left unset, it is
    /// made from `runs` (which must then hold every stored run); a loader of a big batch sets
    /// it, so that nothing holds every result.
    pub briefs: OnceLock<Vec<RunBrief>>,
    /// Eval A/B statistics, when the batch is an eval and they were computed.
    pub eval: Option<EvalSection>,
    /// Wall time of the batch, from first admission to decision (`stats.json`, or the
    /// envelope's `fleet` key); `None` when neither recorded it.
    pub wall_ms: Option<u64>,
    /// Set when the batch never finished: the rollup judges only the runs that did.
    pub incomplete: Option<Incomplete>,
}

/// What an unfinished batch is missing.
#[derive(Clone, Debug, PartialEq)]
pub struct Incomplete {
    /// Why the batch has no decided rollup, in words.
    pub reason: String,
    /// The jobs that never finished and that the verdicts needed, as `c<k>/r<i>` (the job ids'
    /// local parts), in unit and repeat order.
    pub never_ran: Vec<String>,
}

impl ReportInput {
    /// Every stored run in brief (made from [`ReportInput::runs`] when the loader left them
    /// unset).
    pub fn run_briefs(&self) -> &[RunBrief] {
        self.briefs.get_or_init(|| {
            let mut briefs: Vec<RunBrief> = self.runs.iter().map(RunBrief::of).collect();
            sort_briefs(&mut briefs);
            briefs
        })
    }
}
