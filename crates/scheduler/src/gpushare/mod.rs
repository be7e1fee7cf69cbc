//! GPU-sharing placement on plain values: the FGD paper's policies and baselines, Gantry's
//! fragmentation policy, and a class-based fast path that makes exactly the straightforward
//! choice. The paper's evaluation protocol that measures them lives in `crates/bench`.

pub mod cluster;
pub mod fast;
pub mod fgd;
pub mod fill;
mod fill_tables;
pub mod model;
pub mod policy;

pub use cluster::{Cluster, Decision, choose_simple};
pub use fast::FastChooser;
pub use fgd::TaskMix;
pub use model::{ModelSet, Models, NodeFree, NodeSpec, PodShape};
pub use policy::SharePolicy;
