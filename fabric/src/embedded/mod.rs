//! In-process implementations of the ports, for `cowork run` (decisions.md#product: an in-process
//! queue and event log and a local directory store). They keep the delivery semantics of the
//! distributed ones where a single process can observe them: deduplication by job id, redelivery of
//! a job whose delivery was dropped unsettled, nak with delay, and replay of a batch's events.

mod artifacts;
mod events;
mod lease;
mod queue;
mod registry;

pub use artifacts::DirArtifactStore;
pub use events::MemEventLog;
pub use lease::MemLease;
pub use queue::MemJobQueue;
pub use registry::{MemBatchRegistry, MemWorkerRegistry};
