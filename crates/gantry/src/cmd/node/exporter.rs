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
    #[arg(long, env = "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME")]
    replace_blanks_in_model_name: bool,
    /// dcgm-exporter's `-k`: map metrics to pods. Accepted for compatibility; pod attribution
    /// is on unless `--no-kubernetes`.
    #[arg(short = 'k', long = "kubernetes", env = "DCGM_EXPORTER_KUBERNETES", num_args = 0..=1, default_missing_value = "true")]
    kubernetes: Option<String>,
    #[command(flatten)]
    upstream: super::exporter_compat::UpstreamFlags,
}

pub fn run(args: ExporterArgs) -> anyhow::Result<ExitCode> {
    let address: std::net::SocketAddr = match args.address.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}").parse(),
        None => args.address.parse(),
    }
    .with_context(|| format!("--address {:?}: want HOST:PORT or :PORT", args.address))?;
    for line in args.upstream.report() {
        tracing::info!("{line}");
    }
    if let Some(k) = &args.kubernetes {
        let on = !matches!(k.as_str(), "false" | "0");
        tracing::info!(
            "dcgm-exporter flag --kubernetes={k} accepted: pod attribution is {} (Gantry attributes unless --no-kubernetes)",
            if on && !args.no_kubernetes {
                "on"
            } else {
                "off"
            }
        );
    }
    let metrics = exporter::load_metric_set(args.collectors.as_deref())?;
    let backend = gpu_source::open(&args.gpu)?;
    let opts = ExporterOptions {
        address,
        collect_interval: Duration::from_millis(args.collect_interval.max(100)),
        metrics,
        pod_resources_socket: (!args.no_kubernetes
            && !matches!(args.kubernetes.as_deref(), Some("false" | "0")))
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

#[cfg(test)]
mod tests {
    use super::super::exporter_compat::normalize;
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: ExporterArgs,
    }

    /// dcgm-exporter's whole flag set, the way a GPU Operator `dcgmExporter.args` list may give
    /// it: every flag parses (never clap's exit 2) and each one Gantry does not use is reported.
    #[test]
    fn every_dcgm_exporter_flag_is_accepted() {
        let argv = [
            "gantry",
            "node",
            "exporter",
            "-f",
            "/etc/dcgm-exporter/dcp-metrics-included.csv",
            "--config-file",
            "/c.yaml",
            "-a",
            ":9400",
            "--web-read-timeout",
            "10s",
            "--web-write-timeout",
            "10s",
            "-c",
            "30000",
            "-k",
            "-o",
            "-p",
            "f",
            "-m",
            "none",
            "-r",
            "localhost:5555",
            "--kubernetes-enable-pod-labels",
            "--kubernetes-enable-pod-uid",
            "--kubernetes-gpu-id-type",
            "uid",
            "--kubernetes-pod-label-allowlist-regex",
            "app.*",
            "-d",
            "f",
            "-n",
            "-s",
            "f",
            "--fake-gpus",
            "--web-config-file",
            "/w.yaml",
            "-x",
            "300000",
            "-rbmn",
            "--debug",
            "--clock-events-count-window-size",
            "300000",
            "--enable-dcgm-log",
            "--dcgm-log-level",
            "NONE",
            "--log-format",
            "json",
            "--pod-resources-kubelet-socket",
            "/var/lib/kubelet/pod-resources/kubelet.sock",
            "--hpc-job-mapping-dir",
            "/h",
            "--container-labels",
            "--container-runtime-socket",
            "/run/containerd/containerd.sock",
            "--nvidia-resource-names",
            "nvidia.com/a100",
            "--kubernetes-virtual-gpus",
            "--dump-enabled",
            "--dump-directory",
            "/tmp/d",
            "--dump-retention",
            "24",
            "--dump-compression=false",
            "--kubernetes-enable-dra",
            "--disable-startup-validate",
            "--enable-gpu-bind-unbind-watch",
            "--gpu-bind-unbind-poll-interval",
            "1s",
            "--enable-pprof",
            "--web-systemd-socket",
        ];
        let argv = normalize(argv.iter().map(std::ffi::OsString::from).collect());
        let cmd = Cmd::try_parse_from(&argv[2..]).unwrap_or_else(|e| panic!("{e}"));
        let a = cmd.args;
        assert!(a.replace_blanks_in_model_name && a.no_hostname && a.use_old_namespace);
        assert_eq!(a.kubernetes.as_deref(), Some("true"));
        let report = a.upstream.report();
        assert_eq!(report.len(), 33, "{report:#?}");
        assert!(
            report.iter().any(|l| l.starts_with(
                "dcgm-exporter flag --web-config-file=/w.yaml accepted: ignored: TLS"
            )),
            "{report:#?}"
        );
    }
}
