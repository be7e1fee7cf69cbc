//! Where `discovery` and `exporter` read GPU facts from: NVML, or simulated GPUs.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use gantry_gpu::{Backend, NvmlBackend, SimBackend, SimConfig};

#[derive(clap::Args, Clone)]
pub struct GpuSourceArgs {
    /// Driver installation root to load libnvidia-ml.so.1 from (`/run/nvidia/driver` with the
    /// driver container); the usual library locations are tried as well.
    #[arg(long, env = "NVIDIA_DRIVER_ROOT")]
    pub driver_root: Option<PathBuf>,
    /// Run on simulated GPUs of this model (`H100-80GB`, `A100-40GB`, ...) instead of NVML.
    #[arg(long)]
    pub sim_model: Option<String>,
    /// Number of simulated GPUs.
    #[arg(long, default_value_t = 8)]
    pub sim_gpus: u32,
}

/// Open the backend. Without NVML the error is one line: `NVML library not found: …; is the
/// NVIDIA driver installed? set --driver-root`.
pub fn open(args: &GpuSourceArgs) -> anyhow::Result<Arc<dyn Backend>> {
    if let Some(model) = &args.sim_model {
        let config = SimConfig::for_model(model, args.sim_gpus, 1).context("--sim-model")?;
        return Ok(Arc::new(SimBackend::new(config)));
    }
    let backend =
        NvmlBackend::open(args.driver_root.as_deref()).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Arc::new(backend))
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
