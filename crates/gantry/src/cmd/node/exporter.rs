//! `gantry node exporter`: dcgm-exporter-compatible GPU metrics on :9400.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use gantry_node::exporter::{self, ExporterOptions, RenderOptions, ResourceFilter};

use super::gpu_source::{self, GpuSourceArgs};

#[derive(clap::Args)]
pub struct ExporterArgs {
    #[command(flatten)]
    gpu: GpuSourceArgs,
    /// Address to serve /metrics and /health on (`:PORT` = all interfaces).
    #[arg(
        short = 'a',
        long,
        env = "DCGM_EXPORTER_LISTEN",
        default_value = ":9400"
    )]
    address: String,
    /// Sampling period in milliseconds.
    #[arg(
        short = 'c',
        long,
        env = "DCGM_EXPORTER_INTERVAL",
        default_value_t = 30000
    )]
    collect_interval: u64,
    /// Metrics CSV in dcgm-exporter's format (default: the built-in default set).
    #[arg(short = 'f', long, env = "DCGM_EXPORTER_COLLECTORS")]
    collectors: Option<PathBuf>,
    /// Kubelet PodResources socket, for the pod/namespace/container labels.
    #[arg(
        long,
        env = "DCGM_POD_RESOURCES_KUBELET_SOCKET",
        default_value = gantry_node::proto::podresources::POD_RESOURCES_SOCKET
    )]
    pod_resources_kubelet_socket: PathBuf,
    /// Turn pod attribution off.
    #[arg(long)]
    no_kubernetes: bool,
    /// How often to refresh pod attribution, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    pod_resources_interval: u64,
    /// Extra resource names whose devices get pod labels (comma-separated).
    #[arg(long, env = "NVIDIA_RESOURCE_NAMES", value_delimiter = ',')]
    nvidia_resource_names: Vec<String>,
    /// One series per pod sharing a GPU, with a `vgpu` label (default: last pod wins).
    #[arg(long, env = "KUBERNETES_VIRTUAL_GPUS")]
    kubernetes_virtual_gpus: bool,
    /// Leave out the Hostname label.
    #[arg(short = 'n', long)]
    no_hostname: bool,
    /// Old label names: uuid, pod_name, pod_namespace, container_name.
    #[arg(short = 'o', long)]
    use_old_namespace: bool,
    /// Replace spaces in modelName with `-`.
    #[arg(long)]
    replace_blanks_in_model_name: bool,
}

pub fn run(args: ExporterArgs) -> anyhow::Result<ExitCode> {
    let address: std::net::SocketAddr = match args.address.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}").parse(),
        None => args.address.parse(),
    }
    .with_context(|| format!("--address {:?}: want HOST:PORT or :PORT", args.address))?;
    let metrics = exporter::load_metric_set(args.collectors.as_deref())?;
    let backend = gpu_source::open(&args.gpu)?;
    let opts = ExporterOptions {
        address,
        collect_interval: Duration::from_millis(args.collect_interval.max(100)),
        metrics,
        pod_resources_socket: (!args.no_kubernetes)
            .then(|| args.pod_resources_kubelet_socket.clone()),
        pod_resources_interval: Duration::from_millis(args.pod_resources_interval.max(100)),
        resource_filter: ResourceFilter {
            extra: args.nvidia_resource_names.clone(),
        },
        render: RenderOptions {
            hostname: (!args.no_hostname).then(exporter::hostname_from_env),
            virtual_gpus: args.kubernetes_virtual_gpus,
            old_namespace: args.use_old_namespace,
            replace_blanks: args.replace_blanks_in_model_name,
        },
    };
    // One thread serves; sampling has its own thread, so a scrape never waits on NVML.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(exporter::run(opts, backend, gpu_source::shutdown_signal()))
        .context("gantry node exporter")?;
    Ok(ExitCode::SUCCESS)
}
