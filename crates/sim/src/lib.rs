//! Gantry sim: an embedded Kubernetes control plane (API server over HTTPS, in memory or
//! on SQLite, plus the garbage collector and namespace controller), started in-process
//! by `gantry up`, `gantry demo` and the end-to-end tests. See `docs/sim.md`.

pub mod apiserver;
pub mod client;
pub mod cluster;
pub mod control_plane;
pub mod controllers;
pub mod gc;
pub mod kubeconfig;
pub mod kubelet;
pub mod logs;
pub mod node_topology;
pub mod nodes;
pub mod serve;
pub mod store;
pub mod strip;
pub mod tls;
pub mod ui;
pub mod written;

pub use apiserver::ApiServer;
pub use control_plane::{ControlPlane, ControlPlaneOptions};

/// Errors starting or running the control plane.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("TLS material in {path}: {message}")]
    Tls { path: String, message: String },
    // The io::Error is part of the message, not a `source`: shown once in `{:#}` chains.
    #[error("{what} {path}: {error}")]
    Io {
        what: &'static str,
        path: String,
        error: std::io::Error,
    },
    #[error("binding 127.0.0.1:{port}: {error}")]
    Bind { port: u16, error: std::io::Error },
    #[error("building a client for {url}: {message}")]
    Client { url: String, message: String },
}
