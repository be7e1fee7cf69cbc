//! The bench crate's integration tests: the workload readers and generators, and the
//! scheduler's fragmentation policy measured on clusters they build.

mod frag_index;
mod placement;
mod trace_layouts;
