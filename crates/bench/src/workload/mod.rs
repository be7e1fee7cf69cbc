//! Workloads for the scheduler core: synthetic clusters ([`synth`]) and published trace files
//! ([`trace`]) as [`gantry_scheduler::ClusterInput`]. `gantry bench schedule` and the bench's
//! tests build their clusters with them; the scheduler library itself never reads a trace.

pub mod synth;
pub mod trace;
