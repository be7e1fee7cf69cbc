//! `gantry node validator`: per-component node validation and its ready files.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use gantry_node::validator::{self, KubeView, Mode, Seams, ValidatorOptions};

use super::gpu_source::{self, GpuSourceArgs};

#[derive(clap::Args)]
pub struct ValidatorArgs {
    #[command(flatten)]
    gpu: GpuSourceArgs,
    /// Component to validate: driver, toolkit, cuda, plugin; `metrics` serves the node's
    /// validation state. Without it (and without --wait-for) the validator idles and removes
    /// the ready files when stopped.
    #[arg(short = 'c', long, env = "COMPONENT")]
    component: Option<String>,
    /// Retry the check until it passes.
    #[arg(long, visible_alias = "with-wait", env = "WITH_WAIT")]
    wait: bool,
    /// Block until `<output-dir>/<COMPONENT>-ready` exists.
    #[arg(long, value_name = "COMPONENT")]
    wait_for: Option<String>,
    /// Directory of the ready files.
    #[arg(long, env = "OUTPUT_DIR", default_value = gantry_api::names::VALIDATIONS_DIR)]
    output_dir: PathBuf,
    /// Where the host's `/` is mounted (runtime configs, CDI specs, the driver root).
    #[arg(long, env = "GANTRY_HOST_ROOT", default_value = "/")]
    host_root: PathBuf,
    /// The node this runs on (for the plugin check and the device count).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// Namespace of the operator's DaemonSets (where a managed driver is looked for;
    /// default: every namespace).
    #[arg(long, env = "OPERATOR_NAMESPACE")]
    namespace: Option<String>,
    /// Seconds between attempts of --wait and --wait-for.
    #[arg(long, default_value_t = 5)]
    retry_interval: u64,
    /// Address of the metrics server (`--component metrics`); `:PORT` = all interfaces.
    #[arg(long, default_value = ":8000")]
    metrics_address: String,
    /// Name of the NVIDIA runtime in the container runtime's config.
    #[arg(long, default_value = gantry_node::toolkit::DEFAULT_RUNTIME_NAME)]
    runtime_name: String,
    /// Kubeconfig (default: in-cluster, else KUBECONFIG / ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

pub fn run(args: ValidatorArgs) -> anyhow::Result<ExitCode> {
    let mode = Mode::from_flags(
        args.component.as_deref(),
        args.wait,
        args.wait_for.as_deref(),
    )?;
    let metrics_address: std::net::SocketAddr = match args.metrics_address.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}").parse(),
        None => args.metrics_address.parse(),
    }
    .with_context(|| {
        format!(
            "--metrics-address {:?}: want HOST:PORT or :PORT",
            args.metrics_address
        )
    })?;
    let mut opts = ValidatorOptions::new(mode.clone());
    opts.output_dir = args.output_dir.clone();
    opts.host_root = args.host_root.clone();
    opts.driver_root = args.gpu.driver_root.clone();
    opts.node_name = args.node_name.clone();
    opts.retry_interval = Duration::from_secs(args.retry_interval.max(1));
    opts.metrics_address = metrics_address;
    opts.runtime_name = args.runtime_name.clone();
    // NVML is opened per attempt: under --wait the driver may still be loading.
    let gpu = args.gpu.clone();
    let backend: validator::BackendSource =
        Arc::new(move || gpu_source::open(&gpu).map_err(|e| format!("{e:#}")));
    let needs_api = !matches!(mode, Mode::WaitFor(_) | Mode::Idle);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let cluster = if needs_api {
            match validator::cluster::client(args.kubeconfig.as_deref()).await {
                Ok(c) => Some(Arc::new(KubeView {
                    client: c,
                    namespace: args.namespace.clone(),
                }) as Arc<dyn validator::ClusterView>),
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
            gpu_source::shutdown_signal(),
        )
        .await
    })
    .context("gantry node validator")?;
    Ok(ExitCode::SUCCESS)
}
