//! `gantry node toolkit`: configure the node's container runtime (containerd, Docker, CRI-O)
//! to know the `nvidia` runtime, and write the CDI spec describing the node's GPUs.
//!
//! Pure cores edit documents in memory (`containerd`, `docker`, `crio`, `cdi::generate`);
//! the only file writes happen in `hostfs` (atomic, with backups) and `install`, and the only
//! process interaction in `reload`. Every host path goes through a [`hostfs::HostRoot`] so the
//! same code edits `/host/etc/...` in a pod and a temp dir in tests.

pub mod agent;
pub mod args;
pub mod cdi;
pub mod containerd;
pub mod crio;
pub mod docker;
mod error;
pub mod hostfs;
pub mod install;
mod jsonedit;
mod names;
pub mod reload;
mod runtime;
mod tomlutil;

pub use error::ToolkitError;
pub use install::{Outcome, Report, Runtime, RuntimeConfig};
pub use names::{BACKUP_SUFFIX, DEFAULT_RUNTIME_NAME, DEFAULT_TOOLKIT_DIR};
