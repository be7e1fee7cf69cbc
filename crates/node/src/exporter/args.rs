//! `gantry node exporter`'s flags and env (dcgm-exporter's names, its Go-style spellings first
//! rewritten by [`normalize_args`]), and the [`ExporterOptions`] they make on a host.

use std::path::PathBuf;
use std::time::Duration;

use super::upstream_flags::UpstreamFlags;
pub use super::upstream_flags::{normalize, normalize_args};
use super::{ExporterOptions, RenderOptions, ResourceFilter};
use crate::args::{GpuArgs, listen_address};
use crate::host::HostPaths;

/// Where NVIDIA's dcgm-exporter image keeps its metrics CSVs.
const UPSTREAM_CSV_DIR: &str = "/etc/dcgm-exporter/";

#[derive(clap::Args, Clone, Debug)]
pub struct ExporterArgs {
    #[command(flatten)]
    pub gpu: GpuArgs,
    /// Address to serve /metrics and /health on (`:PORT` = all interfaces).
    #[arg(
        short = 'a',
        long,
        env = "DCGM_EXPORTER_LISTEN",
        default_value = ":9400"
    )]
    pub address: String,
    /// Sampling period in milliseconds.
    #[arg(
        short = 'c',
        long,
        env = "DCGM_EXPORTER_INTERVAL",
        default_value_t = 30000
    )]
    pub collect_interval: u64,
    /// Metrics CSV in dcgm-exporter's format (default: the built-in default set). A path under
    /// /etc/dcgm-exporter/ that is not there names a file of NVIDIA's image: the built-in set
    /// is that default set.
    #[arg(short = 'f', long, env = "DCGM_EXPORTER_COLLECTORS")]
    pub collectors: Option<PathBuf>,
    /// Kubelet PodResources socket, for the pod/namespace/container labels.
    #[arg(
        long,
        env = "DCGM_POD_RESOURCES_KUBELET_SOCKET",
        default_value = crate::proto::podresources::POD_RESOURCES_SOCKET
    )]
    pub pod_resources_kubelet_socket: PathBuf,
    /// Turn pod attribution off.
    #[arg(long)]
    pub no_kubernetes: bool,
    /// How often to refresh pod attribution, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    pub pod_resources_interval: u64,
    /// Extra resource names whose devices get pod labels (comma-separated).
    #[arg(long, env = "NVIDIA_RESOURCE_NAMES", value_delimiter = ',')]
    pub nvidia_resource_names: Vec<String>,
    /// One series per pod sharing a GPU, with a `vgpu` label (default: last pod wins).
    #[arg(long, env = "KUBERNETES_VIRTUAL_GPUS")]
    pub kubernetes_virtual_gpus: bool,
    /// Leave out the Hostname label.
    #[arg(short = 'n', long)]
    pub no_hostname: bool,
    /// Old label names: uuid, pod_name, pod_namespace, container_name.
    #[arg(short = 'o', long)]
    pub use_old_namespace: bool,
    /// Replace spaces in modelName with `-`.
    #[arg(long, env = "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME")]
    pub replace_blanks_in_model_name: bool,
    /// dcgm-exporter's `-k`: map metrics to pods. Accepted for compatibility; pod attribution
    /// is on unless `--no-kubernetes` (or `-k=false`).
    #[arg(short = 'k', long = "kubernetes", env = "DCGM_EXPORTER_KUBERNETES", num_args = 0..=1, default_missing_value = "true")]
    pub kubernetes: Option<String>,
    #[command(flatten)]
    pub upstream: UpstreamFlags,
}

impl ExporterArgs {
    /// What the flags that Gantry takes without a use do here, one line each (to log).
    pub fn report(&self) -> Vec<String> {
        let mut lines = self.upstream.report();
        if let Some(k) = &self.kubernetes {
            lines.push(format!(
                "dcgm-exporter flag --kubernetes={k} accepted: pod attribution is {} (Gantry attributes unless --no-kubernetes)",
                if self.attributes_pods() { "on" } else { "off" }
            ));
        }
        lines
    }

    fn attributes_pods(&self) -> bool {
        !self.no_kubernetes && !matches!(self.kubernetes.as_deref(), Some("false" | "0"))
    }

    /// The exporter's options on a host whose paths are `paths`; `hostname` is the node's
    /// name for the Hostname label.
    pub fn options(&self, paths: &HostPaths, hostname: &str) -> Result<ExporterOptions, String> {
        let address = listen_address("--address", &self.address).map_err(|e| e.to_string())?;
        let csv = self.collectors.as_deref().and_then(|p| {
            let at = paths.resolve(p);
            if !at.exists() && p.starts_with(UPSTREAM_CSV_DIR) {
                tracing::info!(file = %p.display(), "metrics CSV of NVIDIA's image not here; serving the built-in default set");
                return None;
            }
            Some(at)
        });
        let metrics = super::load_metric_set(csv.as_deref()).map_err(|e| e.to_string())?;
        Ok(ExporterOptions {
            address,
            collect_interval: Duration::from_millis(self.collect_interval.max(100)),
            metrics,
            pod_resources_socket: self
                .attributes_pods()
                .then(|| paths.resolve(&self.pod_resources_kubelet_socket)),
            pod_resources_interval: Duration::from_millis(self.pod_resources_interval.max(100)),
            pod_resources_max_age: None,
            resource_filter: ResourceFilter {
                extra: self.nvidia_resource_names.clone(),
            },
            render: RenderOptions {
                hostname: (!self.no_hostname).then(|| hostname.to_string()),
                virtual_gpus: self.kubernetes_virtual_gpus,
                old_namespace: self.use_old_namespace,
                replace_blanks: self.replace_blanks_in_model_name,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::args::parse;

    fn parse_e(argv: &[&str], e: &[(&str, &str)]) -> Result<ExporterArgs, clap::Error> {
        let argv = normalize_args(argv.iter().map(|s| s.to_string()));
        let env: BTreeMap<String, String> = e
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse("gantry node exporter", &argv, &env)
    }

    /// dcgm-exporter's whole flag set, the way a GPU Operator `dcgmExporter.args` list may give
    /// it: every flag parses (never clap's exit 2) and each one Gantry does not use is reported.
    #[test]
    fn every_dcgm_exporter_flag_is_accepted() {
        let argv = [
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
        let a = parse_e(&argv, &[]).unwrap_or_else(|e| panic!("{e}"));
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
        let o = a.options(&HostPaths::identity(), "n1").unwrap();
        assert!(o.render.hostname.is_none() && o.render.old_namespace);
        assert_eq!(o.resource_filter.extra, ["nvidia.com/a100"]);
    }

    /// The operator's env for the exporter (`spec.dcgmExporter`), honoured.
    #[test]
    fn operator_env_is_honoured() {
        let a = parse_e(
            &["-a", ":9400"],
            &[
                ("NODE_NAME", "n1"),
                ("OPERATOR_NAMESPACE", "gpu-operator"),
                ("DCGM_REMOTE_HOSTENGINE_INFO", "nvidia-dcgm:5555"),
                (
                    "DCGM_EXPORTER_COLLECTORS",
                    "/etc/dcgm-exporter/dcgm-metrics.csv",
                ),
                ("DCGM_EXPORTER_INTERVAL", "1000"),
                ("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", "true"),
                ("KUBERNETES_VIRTUAL_GPUS", "true"),
            ],
        )
        .unwrap();
        let o = a.options(&HostPaths::identity(), "n1").unwrap();
        assert_eq!(o.collect_interval, Duration::from_millis(1000));
        assert!(o.render.virtual_gpus);
        assert_eq!(o.render.hostname.as_deref(), Some("n1"));
        assert_eq!(o.address.port(), 9400);
        assert!(
            a.report()
                .iter()
                .any(|l| l.contains("remote-hostengine-info=nvidia-dcgm:5555"))
        );
    }

    #[test]
    fn rejections() {
        for (argv, e) in [
            (&["--bogus"][..], &[][..]),
            (&["-c", "often"][..], &[][..]),
            (&[][..], &[("KUBERNETES_VIRTUAL_GPUS", "sure")][..]),
        ] {
            let err = parse_e(argv, e).expect_err(&format!("{argv:?} {e:?}"));
            assert_eq!(err.exit_code(), 2, "{err}");
        }
        let a = parse_e(&["-a", "nowhere"], &[]).unwrap();
        assert!(
            a.options(&HostPaths::identity(), "n1")
                .expect_err("rejected")
                .contains("--address")
        );
        let a = parse_e(&["-f", "/no/such.csv"], &[]).unwrap();
        assert!(a.options(&HostPaths::identity(), "n1").is_err());
        assert!(std::path::Path::new(UPSTREAM_CSV_DIR).is_absolute());
    }
}
