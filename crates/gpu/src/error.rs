//! The one error type of the GPU seam.

use thiserror::Error;

/// Everything a [`crate::Backend`] call can fail with. Messages name the GPU / instance / profile.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GpuError {
    /// NVML could not be loaded from any candidate path.
    #[error(
        "NVML library not found: {}; is the NVIDIA driver installed? set --driver-root",
        tried.join(", ")
    )]
    LibraryNotFound {
        /// Every path (or soname) that was tried, in order.
        tried: Vec<String>,
        /// The loader's message for the last attempt.
        last_error: String,
    },
    /// The library loaded but `nvmlInit` failed (driver/library mismatch, no permission, ...).
    #[error("NVML initialisation failed: {0}")]
    Init(String),
    /// The device / driver does not support this query or operation.
    #[error("{what} is not supported on GPU {gpu}")]
    NotSupported { gpu: u32, what: String },
    /// No such GPU, instance, profile or device.
    #[error("{0} not found")]
    NotFound(String),
    /// The GPU fell off the bus (XID 79) or is otherwise unreachable until reset.
    #[error("GPU {gpu} is lost (fallen off the bus); reset the GPU or reboot the node")]
    GpuLost { gpu: u32 },
    /// A MIG operation the hardware refuses (placement taken, count exceeded, MIG off, ...).
    #[error("GPU {gpu}: {reason}")]
    MigRefused { gpu: u32, reason: String },
    /// The GPU is in use and the operation needs it idle.
    #[error("GPU {gpu} is in use: {reason}")]
    InUse { gpu: u32, reason: String },
    /// An argument is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The caller lacks permission (NVML `NO_PERMISSION`).
    #[error("no permission: {0}")]
    NoPermission(String),
    /// Anything else NVML reported, with the call that failed.
    #[error("NVML call {call} failed: {message}")]
    Nvml { call: String, message: String },
}

/// Result alias of this crate.
pub type Result<T, E = GpuError> = std::result::Result<T, E>;
