//! The names the toolkit gives things on the host: where it installs, the runtime it
//! registers, and the suffix of the backups it keeps.

/// Where the operator-style toolkit installs `nvidia-container-runtime` and `nvidia-cdi-hook`.
pub const DEFAULT_TOOLKIT_DIR: &str = "/usr/local/nvidia/toolkit";
/// The runtime name registered with the container runtime.
pub const DEFAULT_RUNTIME_NAME: &str = "nvidia";
/// Suffix of the backup kept next to every file we modify.
pub const BACKUP_SUFFIX: &str = ".gantry-backup";
