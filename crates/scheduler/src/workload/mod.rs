//! Workloads for the core: synthetic clusters ([`synth`]) and published trace files
//! ([`trace`]) as [`crate::ClusterInput`]. The tests and `gantry bench schedule`
//! (crates/bench) build their clusters with them.

pub mod synth;
pub mod trace;
