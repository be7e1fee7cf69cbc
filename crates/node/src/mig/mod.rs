//! The MIG manager: make a node's GPUs match a named layout of a mig-parted config.
//!
//! - [`state`]: a read-only view of the GPU backend and the per-GPU facts read through it.
//! - [`plan`]: the pure core — (config, config name, GPU facts) → per-GPU steps, refusing
//!   layouts a GPU cannot hold before anything is touched.
//! - [`apply`]: carries a plan out through [`gantry_gpu::Backend`] and checks the result.
//! - [`labels`]: the Node labels read and written around a change (pure).
//! - [`render`]: the plan as text (`gantry node mig-manager --dry-run`).
//! - [`clients`]: which pods on the node are GPU clients to wait for (pure).
//! - [`daemon`]: the shell — watches the Node's `nvidia.com/mig.config` label and carries
//!   changes out, reporting `nvidia.com/mig.config.state`.

pub mod apply;
pub mod args;
pub mod clients;
pub mod daemon;
pub mod labels;
pub mod plan;
pub mod render;
pub mod state;

pub use apply::{ApplyError, ApplyReport, apply, reconcile};
pub use daemon::{ConfigSource, DaemonError, DaemonOptions, run};
pub use plan::{GpuAction, GpuPlan, MigPlan, PlanError, plan};
pub use state::{GpuFacts, ReadOnly, observe};
