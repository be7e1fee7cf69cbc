//! What can go wrong starting, driving or faulting the simulated nodes.

use std::path::PathBuf;

use crate::kubelet::KubeletError;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Kubelet(#[from] KubeletError),
    #[error("no simulated node named {0:?}")]
    NoSuchNode(String),
    #[error("node {node}: {reason}")]
    Fault { node: String, reason: String },
    #[error("creating namespace {namespace}: {source}")]
    Namespace {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("sim control socket {path}: {reason}")]
    Control { path: PathBuf, reason: String },
}
