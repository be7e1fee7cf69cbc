//! Discovery's errors ([`DiscoveryError`]), each naming what is wrong.

use gantry_gpu::GpuError;
use thiserror::Error;

/// Failures of discovery, each naming what is wrong.
#[derive(Debug, Error)]
pub enum DiscoveryError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("sharing strategy mps cannot be used with MIG: GPU {0} has MIG enabled")]
    MpsWithMig(u32),
    #[error("config file {path}: {message}")]
    Config { path: String, message: String },
    #[error("no node name: set --node-name or NODE_NAME")]
    NoNodeName,
    #[error("connecting to the Kubernetes API (in-cluster config or KUBECONFIG): {0}")]
    Client(#[source] kube::Error),
    #[error("applying labels to Node {node}: {source}")]
    Apply {
        node: String,
        #[source]
        source: kube::Error,
    },
}
