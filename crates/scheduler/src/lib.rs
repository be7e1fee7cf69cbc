//! Gantry scheduler core: a pure function from a cluster snapshot to decisions
//! (binds, evictions, unschedulable reasons), following KAI Scheduler's behaviour.
//!
//! Flow: the adapter fills a [`ClusterInput`] from its cache; [`Snapshot::build`] indexes it;
//! [`schedule`] runs one cycle (allocate, consolidation, reclaim, preempt, stale-gang
//! eviction) and returns [`Decisions`].

pub mod actions;
pub mod config;
pub mod decisions;
pub mod duration;
pub mod fairshare;
pub mod frag;
pub mod frag_index;
pub mod framework;
pub mod gpushare;
pub mod input;
#[cfg(feature = "k8s")]
pub mod k8s;
pub mod min_runtime;
pub mod placement;
pub mod predicates;
pub mod request;
pub mod sharing;
pub mod snapshot;
pub mod usage;
pub mod workload;

/// The workload generators' former path (`crate::bench::synth`), kept for code that names it.
#[doc(hidden)]
pub mod bench {
    pub use crate::workload::{synth, trace};
}

pub use actions::schedule;
pub use config::{Action, Config, Policy, Strategy};
pub use decisions::{
    Bind, Decisions, EvictReason, Eviction, GpuBinding, NodeReason, Unschedulable,
};
/// The cycle's state and statement under the short paths the placement code names them by.
pub use framework::{state, statement};
pub use input::ClusterInput;
pub use snapshot::Snapshot;

/// Build the snapshot from the cache and run one cycle.
pub fn run_cycle(input: &ClusterInput, cfg: &Config) -> Decisions {
    schedule(&Snapshot::build(input), cfg)
}
