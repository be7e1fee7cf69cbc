//! Gantry scheduler core: a pure function from a cluster snapshot to decisions
//! (binds, evictions, unschedulable reasons), following KAI Scheduler's behaviour.

pub mod input;
pub mod request;
pub mod snapshot;
