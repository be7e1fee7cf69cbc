//! How the validator runs: its mode, options and defaults, and its seams to the outside
//! world (the GPU library, the cluster).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gantry_api::names;
use gantry_gpu::Backend;

use super::cluster::ClusterView;
use super::component::{Component, ValidatorError};

/// Upstream retries every 5 s.
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(5);
pub const DEFAULT_METRICS_ADDRESS: &str = "0.0.0.0:8000";

/// What the validator does this run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Check { component: Component, wait: bool },
    WaitFor(Component),
    Metrics,
    Idle,
}

impl Mode {
    /// From `--component` (env `COMPONENT`), `--wait` and `--wait-for`.
    pub fn from_flags(
        component: Option<&str>,
        wait: bool,
        wait_for: Option<&str>,
    ) -> Result<Self, ValidatorError> {
        if let Some(w) = wait_for {
            return Ok(Mode::WaitFor(w.parse()?));
        }
        match component.map(str::trim).filter(|c| !c.is_empty()) {
            None => Ok(Mode::Idle),
            Some(names::validator_component::METRICS) => Ok(Mode::Metrics),
            Some(c) => Ok(Mode::Check {
                component: c.parse()?,
                wait,
            }),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ValidatorOptions {
    pub mode: Mode,
    /// Where the ready files live, as this process sees it.
    pub output_dir: PathBuf,
    /// Where the host's `/` is, as this process sees it (runtime configs, CDI specs, driver root).
    pub host_root: PathBuf,
    /// Host path of the driver root; default `/run/nvidia/driver` with an operator-managed
    /// driver, else `/`.
    pub driver_root: Option<PathBuf>,
    pub node_name: Option<String>,
    /// Retry period of `--wait` and `--wait-for`.
    pub retry_interval: Duration,
    pub metrics_address: SocketAddr,
    /// The container runtime's name for the NVIDIA runtime.
    pub runtime_name: String,
}

impl ValidatorOptions {
    pub fn new(mode: Mode) -> Self {
        ValidatorOptions {
            mode,
            output_dir: PathBuf::from(names::VALIDATIONS_DIR),
            host_root: PathBuf::from("/"),
            driver_root: None,
            node_name: None,
            retry_interval: DEFAULT_RETRY_INTERVAL,
            metrics_address: SocketAddr::from(([0, 0, 0, 0], 8000)),
            runtime_name: crate::toolkit::DEFAULT_RUNTIME_NAME.to_string(),
        }
    }
}

/// Opens the GPU library (NVML); `Err` says why it cannot be loaded.
pub type BackendSource = Arc<dyn Fn() -> Result<Arc<dyn Backend>, String> + Send + Sync>;

/// The outside world of the validator.
#[derive(Clone)]
pub struct Seams {
    pub backend: BackendSource,
    /// `None`: no API access (the driver counts as host-installed; `plugin` cannot be checked).
    pub cluster: Option<Arc<dyn ClusterView>>,
}
