//! Builders of the wire specs tests publish: [`job_spec`] and [`batch_spec`], each with
//! defaults a test overrides only where it matters. A built job's id always follows its batch,
//! unit and repeat index (`JobId::new`), as the coordinator's would.

use cowork_schema::batch::{
    BATCH_SPEC_VERSION, BatchFlags, BatchMode, BatchSpec, ExecutorKind, SimSpec,
};
use cowork_schema::job::{JobCommand, JobSpec, PROTOCOL_VERSION, Tier};
use cowork_schema::{BatchId, JobId, UnitRef};

/// A job of batch `b1`, file unit 0, no repeat index: `run` of `s.yaml` (scenario `s`) on the
/// container tier by the `sim` executor without a sim spec, bundle `00`, a 60 s timeout.
pub fn job_spec() -> JobSpecBuilder {
    JobSpecBuilder {
        batch: batch_id("b1"),
        unit: UnitRef::File(0),
        repeat_index: None,
        command: JobCommand::Run,
        tier: Tier::Container,
        scenario_file: "s.yaml".to_owned(),
        scenario_name: "s".to_owned(),
        forwarded_flags: Vec::new(),
        bundle_sha256: "00".to_owned(),
        timeout_ms: 60_000,
        executor: ExecutorKind::Sim,
        sim: None,
    }
}

/// The parts of a [`JobSpec`] tests vary; [`JobSpecBuilder::build`] fills in the rest.
#[derive(Clone, Debug)]
pub struct JobSpecBuilder {
    batch: BatchId,
    unit: UnitRef,
    repeat_index: Option<u32>,
    command: JobCommand,
    tier: Tier,
    scenario_file: String,
    scenario_name: String,
    forwarded_flags: Vec<String>,
    bundle_sha256: String,
    timeout_ms: u64,
    executor: ExecutorKind,
    sim: Option<SimSpec>,
}

impl JobSpecBuilder {
    /// The batch, by its id (panics on an invalid literal).
    pub fn batch(self, id: &str) -> Self {
        self.batch_id(batch_id(id))
    }

    pub fn batch_id(mut self, batch: BatchId) -> Self {
        self.batch = batch;
        self
    }

    pub fn unit(mut self, unit: UnitRef) -> Self {
        self.unit = unit;
        self
    }

    pub fn repeat_index(mut self, repeat_index: impl Into<Option<u32>>) -> Self {
        self.repeat_index = repeat_index.into();
        self
    }

    pub fn command(mut self, command: JobCommand) -> Self {
        self.command = command;
        self
    }

    pub fn tier(mut self, tier: Tier) -> Self {
        self.tier = tier;
        self
    }

    /// The scenario's path inside the bundle.
    pub fn scenario_file(mut self, path: impl Into<String>) -> Self {
        self.scenario_file = path.into();
        self
    }

    pub fn scenario_name(mut self, name: impl Into<String>) -> Self {
        self.scenario_name = name.into();
        self
    }

    pub fn forwarded_flags<S: Into<String>>(mut self, flags: impl IntoIterator<Item = S>) -> Self {
        self.forwarded_flags = flags.into_iter().map(Into::into).collect();
        self
    }

    pub fn bundle_sha256(mut self, sha256: impl Into<String>) -> Self {
        self.bundle_sha256 = sha256.into();
        self
    }

    pub fn timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = timeout_ms;
        self
    }

    pub fn executor(mut self, executor: ExecutorKind) -> Self {
        self.executor = executor;
        self
    }

    pub fn sim(mut self, sim: impl Into<Option<SimSpec>>) -> Self {
        self.sim = sim.into();
        self
    }

    /// The job, its id made of its batch, unit and repeat index; first publication (generation,
    /// republication and dispatch epoch 0), no axes, arm or trace parent.
    pub fn build(self) -> JobSpec {
        JobSpec {
            protocol: PROTOCOL_VERSION,
            job_id: JobId::new(&self.batch, self.unit, self.repeat_index),
            batch_id: self.batch,
            command: self.command,
            tier: self.tier,
            unit: self.unit,
            repeat_index: self.repeat_index,
            scenario_file: self.scenario_file,
            scenario_name: self.scenario_name,
            axes: None,
            arm: None,
            forwarded_flags: self.forwarded_flags,
            bundle_sha256: self.bundle_sha256,
            timeout_ms: self.timeout_ms,
            executor: self.executor,
            sim: self.sim,
            generation: 0,
            traceparent: None,
            republished: 0,
            dispatch_epoch: 0,
            leader_term: 0,
        }
    }
}

/// A `run` batch of the one scenario `s.yaml` with default flags, on the `sim` executor without
/// a sim spec, over bundle `00`.
pub fn batch_spec() -> BatchSpecBuilder {
    BatchSpecBuilder {
        spec: BatchSpec {
            schema_version: BATCH_SPEC_VERSION,
            mode: BatchMode::Run,
            target_display: "s.yaml".to_owned(),
            target: "s.yaml".to_owned(),
            scenario_files: vec!["s.yaml".to_owned()],
            matrix_file: None,
            flags: BatchFlags::default(),
            executor: ExecutorKind::Sim,
            sim: None,
            bundle_sha256: "00".to_owned(),
            eval: None,
            notify: Vec::new(),
        },
    }
}

/// A [`BatchSpec`] being set up by [`batch_spec`].
#[derive(Clone, Debug)]
pub struct BatchSpecBuilder {
    spec: BatchSpec,
}

impl BatchSpecBuilder {
    /// The target as given (`target_display`) and as resolved (`target`).
    pub fn target(mut self, display: impl Into<String>, resolved: impl Into<String>) -> Self {
        self.spec.target_display = display.into();
        self.spec.target = resolved.into();
        self
    }

    pub fn scenario_files<S: Into<String>>(mut self, files: impl IntoIterator<Item = S>) -> Self {
        self.spec.scenario_files = files.into_iter().map(Into::into).collect();
        self
    }

    pub fn flags(mut self, flags: BatchFlags) -> Self {
        self.spec.flags = flags;
        self
    }

    pub fn executor(mut self, executor: ExecutorKind) -> Self {
        self.spec.executor = executor;
        self
    }

    pub fn sim(mut self, sim: impl Into<Option<SimSpec>>) -> Self {
        self.spec.sim = sim.into();
        self
    }

    pub fn bundle_sha256(mut self, sha256: impl Into<String>) -> Self {
        self.spec.bundle_sha256 = sha256.into();
        self
    }

    pub fn build(self) -> BatchSpec {
        self.spec
    }
}

fn batch_id(id: &str) -> BatchId {
    BatchId::new(id).unwrap_or_else(|error| panic!("batch id {id:?}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_job_is_named_by_its_batch_unit_and_repeat() {
        let job = job_spec()
            .batch("b7")
            .unit(UnitRef::Cell(2))
            .repeat_index(3)
            .build();
        assert_eq!(job.job_id.as_str(), "b7/c2/r3");
        assert_eq!(job.batch_id.as_str(), "b7");
    }
}
