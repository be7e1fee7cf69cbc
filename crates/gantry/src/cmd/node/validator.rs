//! `gantry node validator`: per-component node validation and its ready files (flags and env:
//! `gantry_node::validator::args`).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use gantry_node::args::HostPaths;
use gantry_node::validator::{self, KubeView, Mode, Seams, args::ValidatorArgs};

pub fn run(args: ValidatorArgs) -> anyhow::Result<ExitCode> {
    let opts = args
        .options(&HostPaths::identity())
        .map_err(anyhow::Error::msg)?;
    let mode = opts.mode.clone();
    // NVML is opened per attempt: under --wait the driver may still be loading.
    let gpu = args.gpu.clone();
    let backend: validator::BackendSource = Arc::new(move || gpu.open());
    let needs_api = !matches!(mode, Mode::WaitFor(_) | Mode::Idle);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let cluster = if needs_api {
            match validator::cluster::client(args.kubeconfig.as_deref()).await {
                Ok(c) => Some(Arc::new(KubeView::new(c, args.namespace.clone()))
                    as Arc<dyn validator::ClusterView>),
                // The driver, toolkit and cuda checks work without the API (host driver).
                Err(e) => {
                    tracing::warn!("{e}; validating without the Kubernetes API");
                    None
                }
            }
        } else {
            None
        };
        validator::run(
            opts,
            Seams { backend, cluster },
            gantry_runtime::shutdown::signal(),
        )
        .await
    })
    .context("gantry node validator")?;
    Ok(ExitCode::SUCCESS)
}
