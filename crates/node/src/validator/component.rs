//! The layers the validator checks ([`Component`]), and its errors ([`ValidatorError`]),
//! which name them.

use std::net::SocketAddr;
use std::path::PathBuf;

use gantry_api::names::{self, ready_file};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ValidatorError {
    #[error("{component} validation: {reason}")]
    NotReady {
        component: Component,
        reason: String,
    },
    #[error(
        "validator component {0:?} is not supported (gantry validates driver, toolkit, cuda, plugin; `metrics` serves their state)"
    )]
    UnknownComponent(String),
    #[error("{what} needs the node's name: set NODE_NAME (or --node-name)")]
    NoNodeName { what: &'static str },
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error("Kubernetes API: {what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("validator metrics on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("no Kubernetes API access (in-cluster config, KUBECONFIG or ~/.kube/config): {0}")]
    NoApi(String),
    #[error("stopped while waiting for {0}")]
    Interrupted(String),
}

impl ValidatorError {
    /// Worth another attempt under `--wait` (the layer below may still be coming up).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ValidatorError::NotReady { .. } | ValidatorError::Api { .. }
        )
    }
}

/// The layers the validator checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Component {
    Driver,
    Toolkit,
    Cuda,
    Plugin,
}

impl Component {
    pub const ALL: [Component; 4] = [
        Component::Driver,
        Component::Toolkit,
        Component::Cuda,
        Component::Plugin,
    ];

    pub fn name(self) -> &'static str {
        use names::validator_component as c;
        match self {
            Component::Driver => c::DRIVER,
            Component::Toolkit => c::TOOLKIT,
            Component::Cuda => c::CUDA,
            Component::Plugin => c::PLUGIN,
        }
    }

    /// The file this component's validation writes.
    pub fn ready_file(self) -> &'static str {
        match self {
            Component::Driver => ready_file::DRIVER,
            Component::Toolkit => ready_file::TOOLKIT,
            Component::Cuda => ready_file::CUDA,
            Component::Plugin => ready_file::PLUGIN,
        }
    }
}

impl std::fmt::Display for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Component {
    type Err = ValidatorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Component::ALL
            .into_iter()
            .find(|c| c.name() == s.trim())
            .ok_or_else(|| ValidatorError::UnknownComponent(s.to_string()))
    }
}
