//! dcgm-exporter's flags that have no Gantry counterpart (or need a word on what they do here):
//! every one is accepted, and [`UpstreamFlags::report`] logs what each one set does in Gantry,
//! so an upstream `dcgmExporter.args` list never stops the exporter.
//!
//! dcgm-exporter parses with urfave/cli, which also takes Go-style single-dash long names
//! (`-web-config-file`, `-rbmn`); [`normalize`] rewrites those to clap's `--name` first.

use std::ffi::OsString;

/// (long name, takes a value, what it does in Gantry).
const ACCEPTED: &[(&str, bool, &str)] = &[
    (
        "config-file",
        true,
        "ignored: Gantry takes its settings from flags and env only",
    ),
    (
        "web-read-timeout",
        true,
        "ignored: the metrics server reads requests without a deadline",
    ),
    (
        "web-write-timeout",
        true,
        "ignored: the metrics server writes without a deadline",
    ),
    (
        "web-config-file",
        true,
        "ignored: TLS and basic auth for /metrics are not served by Gantry; put them in front (a Service mesh or kube-rbac-proxy)",
    ),
    (
        "web-systemd-socket",
        false,
        "ignored: Gantry listens on --address itself",
    ),
    ("cpu-devices", true, "ignored: Gantry exports GPUs only"),
    (
        "switch-devices",
        true,
        "ignored: Gantry exports GPUs only (no NvSwitch metrics)",
    ),
    (
        "devices",
        true,
        "ignored: every GPU and MIG device of the node is exported (dcgm-exporter's default 'f')",
    ),
    (
        "configmap-data",
        true,
        "ignored: give the metrics CSV with -f/--collectors (mount the ConfigMap as a file)",
    ),
    (
        "remote-hostengine-info",
        true,
        "ignored: Gantry reads NVML directly, there is no DCGM host engine",
    ),
    (
        "kubernetes-enable-pod-labels",
        false,
        "ignored: pod labels are not copied onto metrics",
    ),
    (
        "kubernetes-enable-pod-uid",
        false,
        "ignored: the pod UID label is not added",
    ),
    (
        "kubernetes-gpu-id-type",
        true,
        "ignored: pods are matched to GPUs by UUID and MIG device id alike",
    ),
    (
        "kubernetes-pod-label-allowlist-regex",
        true,
        "ignored: pod labels are not copied onto metrics",
    ),
    (
        "kubernetes-enable-dra",
        false,
        "ignored: DRA-allocated GPUs are not attributed",
    ),
    ("fake-gpus", false, "ignored: use --sim for simulated GPUs"),
    (
        "xid-count-window-size",
        true,
        "ignored: XID errors are exported as DCGM_FI_DEV_XID_ERRORS (last XID)",
    ),
    (
        "clock-events-count-window-size",
        true,
        "ignored: clock events are exported as reasons, not windowed counts",
    ),
    ("debug", false, "use RUST_LOG=debug for debug logs"),
    (
        "enable-dcgm-log",
        false,
        "ignored: there is no DCGM library to log",
    ),
    (
        "dcgm-log-level",
        true,
        "ignored: there is no DCGM library to log",
    ),
    ("log-format", true, "ignored: logs are text"),
    (
        "hpc-job-mapping-dir",
        true,
        "ignored: HPC job mapping is not supported",
    ),
    (
        "container-labels",
        false,
        "ignored: container runtime labels are not added",
    ),
    (
        "container-runtime-socket",
        true,
        "ignored: container runtime labels are not added",
    ),
    ("dump-enabled", false, "ignored: no debug dumps"),
    ("dump-directory", true, "ignored: no debug dumps"),
    ("dump-retention", true, "ignored: no debug dumps"),
    ("dump-compression", false, "ignored: no debug dumps"),
    (
        "disable-startup-validate",
        false,
        "ignored: Gantry's startup checks are the GPU backend opening",
    ),
    (
        "enable-gpu-bind-unbind-watch",
        false,
        "ignored: GPUs are re-read on every sample",
    ),
    (
        "gpu-bind-unbind-poll-interval",
        true,
        "ignored: GPUs are re-read on every sample",
    ),
    ("enable-pprof", false, "ignored: no pprof endpoints"),
];

/// dcgm-exporter's single-letter aliases that are not Gantry's own short flags.
const SHORT: &[(&str, &str)] = &[
    ("p", "cpu-devices"),
    ("m", "configmap-data"),
    ("r", "remote-hostengine-info"),
    ("d", "devices"),
    ("s", "switch-devices"),
    ("x", "xid-count-window-size"),
    ("rbmn", "replace-blanks-in-model-name"),
];

/// The flags clap must accept besides Gantry's own: one `Vec<String>` option per name, so
/// any number of uses and any value parse.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct UpstreamFlags {
    #[arg(long = "config-file", env = "DCGM_EXPORTER_CONFIG_FILE", hide = true)]
    config_file: Option<String>,
    #[arg(
        long = "web-read-timeout",
        env = "DCGM_EXPORTER_WEB_READ_TIMEOUT",
        hide = true
    )]
    web_read_timeout: Option<String>,
    #[arg(
        long = "web-write-timeout",
        env = "DCGM_EXPORTER_WEB_WRITE_TIMEOUT",
        hide = true
    )]
    web_write_timeout: Option<String>,
    #[arg(
        long = "web-config-file",
        env = "DCGM_EXPORTER_WEB_CONFIG_FILE",
        hide = true
    )]
    web_config_file: Option<String>,
    #[arg(long = "web-systemd-socket", env = "DCGM_EXPORTER_SYSTEMD_SOCKET", hide = true, num_args = 0..=1, default_missing_value = "true")]
    web_systemd_socket: Option<String>,
    #[arg(
        long = "cpu-devices",
        env = "DCGM_EXPORTER_CPU_DEVICES_STR",
        hide = true
    )]
    cpu_devices: Option<String>,
    #[arg(
        long = "switch-devices",
        env = "DCGM_EXPORTER_OTHER_DEVICES_STR",
        hide = true
    )]
    switch_devices: Option<String>,
    #[arg(long = "devices", env = "DCGM_EXPORTER_DEVICES_STR", hide = true)]
    devices: Option<String>,
    #[arg(
        long = "configmap-data",
        env = "DCGM_EXPORTER_CONFIGMAP_DATA",
        hide = true
    )]
    configmap_data: Option<String>,
    #[arg(
        long = "remote-hostengine-info",
        env = "DCGM_REMOTE_HOSTENGINE_INFO",
        hide = true
    )]
    remote_hostengine_info: Option<String>,
    #[arg(long = "kubernetes-enable-pod-labels", env = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", hide = true, num_args = 0..=1, default_missing_value = "true")]
    kubernetes_enable_pod_labels: Option<String>,
    #[arg(long = "kubernetes-enable-pod-uid", env = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", hide = true, num_args = 0..=1, default_missing_value = "true")]
    kubernetes_enable_pod_uid: Option<String>,
    #[arg(
        long = "kubernetes-gpu-id-type",
        env = "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",
        hide = true
    )]
    kubernetes_gpu_id_type: Option<String>,
    #[arg(
        long = "kubernetes-pod-label-allowlist-regex",
        env = "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
        hide = true
    )]
    kubernetes_pod_label_allowlist_regex: Option<String>,
    #[arg(long = "kubernetes-enable-dra", env = "KUBERNETES_ENABLE_DRA", hide = true, num_args = 0..=1, default_missing_value = "true")]
    kubernetes_enable_dra: Option<String>,
    #[arg(long = "fake-gpus", env = "DCGM_EXPORTER_USE_FAKE_GPUS", hide = true, num_args = 0..=1, default_missing_value = "true")]
    fake_gpus: Option<String>,
    #[arg(
        long = "xid-count-window-size",
        env = "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",
        hide = true
    )]
    xid_count_window_size: Option<String>,
    #[arg(
        long = "clock-events-count-window-size",
        env = "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",
        hide = true
    )]
    clock_events_count_window_size: Option<String>,
    #[arg(long = "debug", env = "DCGM_EXPORTER_DEBUG", hide = true, num_args = 0..=1, default_missing_value = "true")]
    debug: Option<String>,
    #[arg(long = "enable-dcgm-log", env = "DCGM_EXPORTER_ENABLE_DCGM_LOG", hide = true, num_args = 0..=1, default_missing_value = "true")]
    enable_dcgm_log: Option<String>,
    #[arg(
        long = "dcgm-log-level",
        env = "DCGM_EXPORTER_DCGM_LOG_LEVEL",
        hide = true
    )]
    dcgm_log_level: Option<String>,
    #[arg(long = "log-format", env = "DCGM_EXPORTER_LOG_FORMAT", hide = true)]
    log_format: Option<String>,
    #[arg(
        long = "hpc-job-mapping-dir",
        env = "DCGM_HPC_JOB_MAPPING_DIR",
        hide = true
    )]
    hpc_job_mapping_dir: Option<String>,
    #[arg(long = "container-labels", env = "DCGM_EXPORTER_CONTAINER_LABELS", hide = true, num_args = 0..=1, default_missing_value = "true")]
    container_labels: Option<String>,
    #[arg(
        long = "container-runtime-socket",
        env = "DCGM_CONTAINER_RUNTIME_SOCKET",
        hide = true
    )]
    container_runtime_socket: Option<String>,
    #[arg(long = "dump-enabled", env = "DCGM_EXPORTER_DUMP_ENABLED", hide = true, num_args = 0..=1, default_missing_value = "true")]
    dump_enabled: Option<String>,
    #[arg(
        long = "dump-directory",
        env = "DCGM_EXPORTER_DUMP_DIRECTORY",
        hide = true
    )]
    dump_directory: Option<String>,
    #[arg(
        long = "dump-retention",
        env = "DCGM_EXPORTER_DUMP_RETENTION",
        hide = true
    )]
    dump_retention: Option<String>,
    #[arg(long = "dump-compression", env = "DCGM_EXPORTER_DUMP_COMPRESSION", hide = true, num_args = 0..=1, default_missing_value = "true")]
    dump_compression: Option<String>,
    #[arg(long = "disable-startup-validate", env = "DISABLE_STARTUP_VALIDATE", hide = true, num_args = 0..=1, default_missing_value = "true")]
    disable_startup_validate: Option<String>,
    #[arg(long = "enable-gpu-bind-unbind-watch", env = "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH", hide = true, num_args = 0..=1, default_missing_value = "true")]
    enable_gpu_bind_unbind_watch: Option<String>,
    #[arg(
        long = "gpu-bind-unbind-poll-interval",
        env = "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL",
        hide = true
    )]
    gpu_bind_unbind_poll_interval: Option<String>,
    #[arg(long = "enable-pprof", env = "DCGM_EXPORTER_ENABLE_PPROF", hide = true, num_args = 0..=1, default_missing_value = "true")]
    enable_pprof: Option<String>,
}

impl UpstreamFlags {
    fn set(&self) -> Vec<(&'static str, &str)> {
        let v = [
            &self.config_file,
            &self.web_read_timeout,
            &self.web_write_timeout,
            &self.web_config_file,
            &self.web_systemd_socket,
            &self.cpu_devices,
            &self.switch_devices,
            &self.devices,
            &self.configmap_data,
            &self.remote_hostengine_info,
            &self.kubernetes_enable_pod_labels,
            &self.kubernetes_enable_pod_uid,
            &self.kubernetes_gpu_id_type,
            &self.kubernetes_pod_label_allowlist_regex,
            &self.kubernetes_enable_dra,
            &self.fake_gpus,
            &self.xid_count_window_size,
            &self.clock_events_count_window_size,
            &self.debug,
            &self.enable_dcgm_log,
            &self.dcgm_log_level,
            &self.log_format,
            &self.hpc_job_mapping_dir,
            &self.container_labels,
            &self.container_runtime_socket,
            &self.dump_enabled,
            &self.dump_directory,
            &self.dump_retention,
            &self.dump_compression,
            &self.disable_startup_validate,
            &self.enable_gpu_bind_unbind_watch,
            &self.gpu_bind_unbind_poll_interval,
            &self.enable_pprof,
        ];
        ACCEPTED
            .iter()
            .zip(v)
            .filter_map(|((name, _, _), val)| Some((*name, val.as_deref()?)))
            .collect()
    }

    /// One line per dcgm-exporter flag given: accepted, and what it does here.
    pub fn report(&self) -> Vec<String> {
        self.set()
            .into_iter()
            .map(|(name, value)| {
                let what = ACCEPTED
                    .iter()
                    .find(|(n, _, _)| *n == name)
                    .map_or("", |(_, _, w)| *w);
                format!("dcgm-exporter flag --{name}={value} accepted: {what}")
            })
            .collect()
    }
}

/// Rewrite Go-style single-dash long flags (`-web-config-file`, `-rbmn`, `-collectors`) and
/// dcgm-exporter's own short aliases to `--name`, for the arguments after `node exporter`.
pub fn normalize(args: Vec<OsString>) -> Vec<OsString> {
    let is_exporter = args.len() > 2 && args[1] == "node" && args[2] == "exporter";
    if !is_exporter {
        return args;
    }
    let mut args = args;
    let rest = args.split_off(3);
    args.extend(
        normalize_args(rest.iter().map(|a| a.to_string_lossy().into_owned()))
            .into_iter()
            .map(OsString::from),
    );
    args
}

/// [`normalize`] for the arguments after `node exporter` alone (the simulated kubelet's view).
pub fn normalize_args(args: impl IntoIterator<Item = String>) -> Vec<String> {
    args.into_iter()
        .map(|a| {
            let s = a.as_str();
            let Some(rest) = s.strip_prefix('-').filter(|r| !r.starts_with('-')) else {
                return a;
            };
            let (name, value) = match rest.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (rest, None),
            };
            let long = SHORT
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, l)| *l)
                .or_else(|| (name.len() > 1).then_some(name));
            match (long, value) {
                (Some(l), Some(v)) => format!("--{l}={v}"),
                (Some(l), None) => format!("--{l}"),
                (None, _) => a,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn go_style_flags_become_long_flags() {
        let got = normalize(os(&[
            "gantry",
            "node",
            "exporter",
            "-rbmn",
            "-web-config-file=/w.yaml",
            "-k",
            "-d",
            "g",
            "-f",
            "/c.csv",
            "--address",
            ":9400",
        ]));
        assert_eq!(
            got,
            os(&[
                "gantry",
                "node",
                "exporter",
                "--replace-blanks-in-model-name",
                "--web-config-file=/w.yaml",
                "-k",
                "--devices",
                "g",
                "-f",
                "/c.csv",
                "--address",
                ":9400",
            ])
        );
        let other = os(&["gantry", "node", "device-plugin", "-rbmn"]);
        assert_eq!(normalize(other.clone()), other);
    }
}
