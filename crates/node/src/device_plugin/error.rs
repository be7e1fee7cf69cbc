//! Errors of the device plugin. Each names the resource, device, file or field at fault.

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum DevicePluginError {
    // ---- turning devices + config into resources ----
    #[error(
        "migStrategy single: GPUs disagree on MIG mode (enabled on {enabled:?}, disabled on {disabled:?}); use migStrategy mixed or make them alike"
    )]
    SingleMixedModes {
        enabled: Vec<u32>,
        disabled: Vec<u32>,
    },
    #[error(
        "migStrategy single: GPU {gpu} has MIG enabled but no MIG devices; apply a MIG layout first"
    )]
    SingleNoMigDevices { gpu: u32 },
    #[error(
        "migStrategy single: MIG devices differ ({first} on GPU {first_gpu}, {other} on GPU {other_gpu}); use migStrategy mixed"
    )]
    SingleUnlike {
        first: String,
        first_gpu: u32,
        other: String,
        other_gpu: u32,
    },
    #[error(
        "sharing.mps: resource {resource} includes MIG device {device}; MPS cannot share MIG devices"
    )]
    MpsOnMig { resource: String, device: String },
    #[error("sharing.mps needs flags.mpsRoot (the host directory for MPS pipes and logs)")]
    MpsWithoutRoot,
    #[error("sharing.mps cannot be combined with migStrategy mixed")]
    MpsWithMixed,
    #[error(
        "IMEX channel {channel} is required (imex.required / --imex-required) but {path} does not exist on this node"
    )]
    ImexChannelMissing { channel: u32, path: String },
    #[error(
        "IMEX channels need the envvar or volume-mounts device list strategy: Gantry's CDI spec (gantry node toolkit) has no IMEX channel devices"
    )]
    ImexWithCdiOnly,
    #[error(
        "sharing resource {resource}: devices entry {entry:?} matches no device of that resource"
    )]
    UnknownDeviceSelector { resource: String, entry: String },
    #[error("resource name {name:?} is invalid: {reason}")]
    BadResourceName { name: String, reason: String },
    #[error("sharing: device {device} is selected by two entries ({first} and {second})")]
    DeviceSharedTwice {
        device: String,
        first: String,
        second: String,
    },

    // ---- config loading ----
    #[error("device plugin config {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("device plugin config: {0}")]
    ConfigSelection(String),

    // ---- runtime ----
    #[error("GPU backend: {0}")]
    Gpu(#[from] gantry_gpu::GpuError),
    #[error("{0}")]
    Metrics(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("registering {resource} with the kubelet at {socket}: {message}")]
    Register {
        resource: String,
        socket: PathBuf,
        message: String,
    },
    #[error("serving {resource} on {socket}: {message}")]
    Serve {
        resource: String,
        socket: PathBuf,
        message: String,
    },
}

impl DevicePluginError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DevicePluginError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Why one Allocate / GetPreferredAllocation request is refused (sent as a gRPC status).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    #[error("resource {resource}: unknown device ID {id:?}")]
    UnknownDevice { resource: String, id: String },
    #[error(
        "resource {resource}: request for {count} devices; maximum request size for shared resources is 1"
    )]
    SharedRequestTooLarge { resource: String, count: usize },
    #[error(
        "resource {resource}: allocation size {size} is larger than the {available} available devices"
    )]
    NotEnoughDevices {
        resource: String,
        size: usize,
        available: usize,
    },
}
