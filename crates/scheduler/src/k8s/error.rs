//! Why a running scheduler stops: the errors [`super::run`] returns.

use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("metrics address {addr}: {source}")]
    Metrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("leader election: {0}")]
    Lease(#[from] gantry_runtime::lease::LeaseError),
    #[error("lost the leader Lease {namespace}/{name} to another replica; stopping")]
    LostLease { namespace: String, name: String },
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error(transparent)]
    Client(#[from] gantry_runtime::ClientError),
}
