//! `gantry demo`: the whole story on one machine. It starts the embedded control plane with
//! simulated GPU nodes, runs the real operator and scheduler against it, installs a
//! ClusterPolicy, queues and a workload mix, walks through reclaim, a MIG re-slice, a driver
//! upgrade and a GPU fault, and ends with a summary computed from the cluster's state.

pub mod apply;
pub mod components;
pub mod frames;
pub mod manifests;
pub mod scenario;
mod steps;
mod story;
pub mod summary;
pub mod view;
pub mod wait;

use std::path::PathBuf;
use std::time::Duration;

pub use scenario::{Demo, run};
pub use summary::Summary;

/// The default mixed cluster.
pub const DEFAULT_NODES: &str = "4xH100-80GB:8,2xA100-80GB:8,2xL4:1,2xcpu";

#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Simulated nodes (`gantry up --nodes` syntax).
    pub nodes: String,
    /// Redraw a live view (a terminal); otherwise print plain lines.
    pub live: bool,
    /// API server port (0: any free port).
    pub port: u16,
    pub kubeconfig: PathBuf,
    /// Port of the read-only web page on 127.0.0.1 (0: any free port); `None`: no page.
    pub ui_port: Option<u16>,
    /// Longest any one phase may take before the demo fails.
    pub phase_timeout: Duration,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            nodes: DEFAULT_NODES.to_string(),
            live: false,
            port: 0,
            kubeconfig: PathBuf::from("gantry-demo.kubeconfig"),
            ui_port: Some(0),
            phase_timeout: Duration::from_secs(120),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("{0}")]
    Start(String),
    #[error("manifest {file}: {reason}")]
    Manifest { file: String, reason: String },
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("timed out after {secs} s waiting for {what}; last seen: {last}")]
    Timeout {
        what: String,
        secs: u64,
        last: String,
    },
}

impl DemoError {
    pub fn kube(what: &str, e: kube::Error) -> Self {
        DemoError::Kube {
            what: what.to_string(),
            source: Box::new(e),
        }
    }
}
