//! What can go wrong in a simulated kubelet.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("node {node}: device plugin registration for {resource:?} refused: {reason}")]
    Registration {
        node: String,
        resource: String,
        reason: String,
    },
    #[error("cannot dial device plugin socket {socket}: {reason}")]
    Dial { socket: PathBuf, reason: String },
    #[error("device plugin for {resource}: {call} failed: {status}")]
    Plugin {
        resource: String,
        call: &'static str,
        status: String,
    },
    #[error("pod {pod} container {container}: cannot allocate {resource}: {reason}")]
    Allocate {
        pod: String,
        container: String,
        resource: String,
        reason: String,
    },
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error("node {node}: API call failed: {source}")]
    Api {
        node: String,
        #[source]
        source: kube::Error,
    },
}
