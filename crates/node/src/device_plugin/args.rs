//! `gantry node device-plugin`'s flags and env (upstream k8s-device-plugin's names), and the
//! [`Options`] they make on a host.
//!
//! The operator renders `NVIDIA_VISIBLE_DEVICES` and `NVIDIA_DRIVER_CAPABILITIES` too: those are
//! read by the NVIDIA container runtime when it starts the container, not by the agent.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use super::named::{DEFAULT_FALLBACKS, Fallback};
use super::settings::{AllocationPolicy, DeviceIdStrategy, DeviceListStrategy, MigStrategy};
use super::{ConfigSource, HealthPolicy, Options, Overrides, health};
use crate::args::{ArgsError, GpuArgs, mig_strategy_parser};
use crate::host::HostPaths;

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ListStrategyArg {
    Envvar,
    VolumeMounts,
    CdiAnnotations,
    CdiCri,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum IdStrategyArg {
    Uuid,
    Index,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum PolicyArg {
    Distributed,
    Packed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DiscoveryStrategyArg {
    Auto,
    Nvml,
    Tegra,
}

#[derive(clap::Args, Clone, Debug)]
pub struct DevicePluginArgs {
    /// Config file v1 (YAML or JSON); re-read when it changes.
    #[arg(long, env = "CONFIG_FILE", conflicts_with = "config_dir")]
    pub config_file: Option<PathBuf>,
    /// Directory of named configs (a mounted ConfigMap); the node label
    /// `nvidia.com/device-plugin.config` picks one.
    #[arg(long, env = "CONFIG_FILE_SRCDIR")]
    pub config_dir: Option<PathBuf>,
    /// ConfigMap `namespace/name` of named configs, read through the API (instead of a
    /// mounted directory); the node label picks the key.
    #[arg(long, env = "CONFIG_MAP", conflicts_with_all = ["config_file", "config_dir"])]
    pub config_map: Option<String>,
    /// Named config used when the node label is empty.
    #[arg(long, env = "DEFAULT_CONFIG")]
    pub default_config: Option<String>,
    /// Fallbacks when neither label nor default names a config: named, single, empty.
    #[arg(long, env = "FALLBACK_STRATEGIES", value_delimiter = ',')]
    pub fallback_strategies: Vec<String>,
    /// This node (for the config label and Node events; needs API access).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// The kubelet's device-plugins directory.
    #[arg(long, default_value = "/var/lib/kubelet/device-plugins")]
    pub plugin_dir: PathBuf,
    /// The kubelet registration socket; empty = serve without registering.
    #[arg(long, env = "KUBELET_SOCKET")]
    pub kubelet_socket: Option<String>,
    #[arg(long, env = "MIG_STRATEGY", value_parser = mig_strategy_parser())]
    pub mig_strategy: Option<MigStrategy>,
    /// Fail (exit non-zero) when the GPUs cannot be read at start; `false`: log it and idle
    /// until stopped, as upstream does.
    #[arg(long, env = "FAIL_ON_INIT_ERROR", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub fail_on_init_error: bool,
    #[arg(long, env = "DEVICE_LIST_STRATEGY", value_enum, value_delimiter = ',')]
    pub device_list_strategy: Vec<ListStrategyArg>,
    #[arg(long, env = "DEVICE_ID_STRATEGY", value_enum)]
    pub device_id_strategy: Option<IdStrategyArg>,
    #[arg(long, env = "PASS_DEVICE_SPECS", num_args = 0..=1, default_missing_value = "true")]
    pub pass_device_specs: Option<bool>,
    #[arg(long, env = "SHARED_DEVICES_ALLOCATION_POLICY", value_enum)]
    pub shared_devices_allocation_policy: Option<PolicyArg>,
    /// Host root of `/dev` (default: the driver root).
    #[arg(long = "dev-root", alias = "nvidia-dev-root", env = "NVIDIA_DEV_ROOT")]
    pub dev_root: Option<String>,
    #[arg(long, env = "MPS_ROOT")]
    pub mps_root: Option<String>,
    /// Prefix of the `cdi-annotations` device list's annotation key.
    #[arg(long, env = "CDI_ANNOTATION_PREFIX")]
    pub cdi_annotation_prefix: Option<String>,
    /// Tell the container runtime to expose GDRCopy (`NVIDIA_GDRCOPY=enabled`).
    #[arg(long, env = "GDRCOPY_ENABLED", num_args = 0..=1, default_missing_value = "true")]
    pub gdrcopy_enabled: Option<bool>,
    /// Tell the container runtime to expose GPUDirect Storage (`NVIDIA_GDS=enabled`).
    #[arg(long, env = "GDS_ENABLED", num_args = 0..=1, default_missing_value = "true")]
    pub gds_enabled: Option<bool>,
    /// Tell the container runtime to expose MOFED (`NVIDIA_MOFED=enabled`).
    #[arg(long, env = "MOFED_ENABLED", num_args = 0..=1, default_missing_value = "true")]
    pub mofed_enabled: Option<bool>,
    /// IMEX channels every container gets (only `0` is supported, as upstream).
    #[arg(long, env = "IMEX_CHANNEL_IDS", value_delimiter = ',')]
    pub imex_channel_ids: Vec<u32>,
    /// Serve nothing unless every IMEX channel exists on the node.
    #[arg(long, env = "IMEX_REQUIRED", num_args = 0..=1, default_missing_value = "true")]
    pub imex_required: Option<bool>,
    /// How GPUs are found: `auto` and `nvml` both use NVML; `tegra` is refused.
    #[arg(long, env = "DEVICE_DISCOVERY_STRATEGY", value_enum)]
    pub device_discovery_strategy: Option<DiscoveryStrategyArg>,
    /// Upstream's CDI-spec options: accepted; the CDI spec is `gantry node toolkit`'s, so
    /// they change nothing here (said once in the log).
    #[command(flatten)]
    pub cdi_spec: CdiSpecArgs,
    /// XIDs (comma-separated, or `all` / `xids`) that do not make a device Unhealthy.
    #[arg(long, env = health::ENV_DISABLE, hide = true)]
    pub disable_healthchecks: Option<String>,
    /// XIDs (comma-separated, or `all`) that always make a device Unhealthy.
    #[arg(long, env = health::ENV_ENABLE, hide = true)]
    pub enable_healthchecks: Option<String>,
    /// Quiet period after a fatal XID (other than a lost GPU or a memory error, which have
    /// their own evidence): seconds of clean probes with no new XID before the GPU's
    /// devices are Healthy again.
    #[arg(long, env = "XID_RECOVERY_HOLD", value_name = "SECONDS",
          default_value_t = health::DEFAULT_QUIET_PERIOD.as_secs())]
    pub xid_recovery_hold: u64,
    /// One-shot, read-only: listen to GPU health events for SECONDS, probe every GPU with
    /// the plugin's health logic, print each GPU's verdict and exit (1 if any is unhealthy).
    #[arg(long, value_name = "SECONDS")]
    pub health_check: Option<u64>,
    /// Serve /metrics (devices withdrawn and recovered, Unhealthy now), /healthz and /readyz.
    #[arg(long, env = "METRICS_ADDRESS", value_name = "ADDRESS")]
    pub metrics_address: Option<std::net::SocketAddr>,
    /// How often to check the kubelet socket, config, inventory and faulted GPUs (ms).
    #[arg(long, default_value_t = 500)]
    pub poll_interval_ms: u64,
    #[command(flatten)]
    pub gpu: GpuArgs,
}

/// Options of upstream's own CDI spec generation (the plugin writes
/// `/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json` upstream; Gantry's plugin names the
/// devices of the toolkit's spec instead).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct CdiSpecArgs {
    #[arg(long, alias = "nvidia-ctk-path", env = "NVIDIA_CDI_HOOK_PATH")]
    pub nvidia_cdi_hook_path: Option<String>,
    /// `NVIDIA_CTK_PATH`, upstream's older name for `NVIDIA_CDI_HOOK_PATH`.
    #[arg(long, env = "NVIDIA_CTK_PATH", hide = true)]
    pub nvidia_ctk_path_env: Option<String>,
    #[arg(long, alias = "container-driver-root", env = "DRIVER_ROOT_CTR_PATH")]
    pub driver_root_ctr_path: Option<String>,
    /// `CONTAINER_DRIVER_ROOT`, upstream's older name for `DRIVER_ROOT_CTR_PATH`.
    #[arg(long, env = "CONTAINER_DRIVER_ROOT", hide = true)]
    pub container_driver_root_env: Option<String>,
    #[arg(long, env = "CDI_FEATURE_FLAGS", value_delimiter = ',')]
    pub cdi_feature_flags: Vec<String>,
    #[arg(long, env = "CDI_DISABLE_HOOKS", value_delimiter = ',')]
    pub cdi_disable_hooks: Vec<String>,
}

impl CdiSpecArgs {
    /// What was set, for the one log line that says it changes nothing.
    pub fn given(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.nvidia_cdi_hook_path.is_some() || self.nvidia_ctk_path_env.is_some() {
            out.push("--nvidia-cdi-hook-path");
        }
        if self.driver_root_ctr_path.is_some() || self.container_driver_root_env.is_some() {
            out.push("--driver-root-ctr-path");
        }
        if !self.cdi_feature_flags.is_empty() {
            out.push("--cdi-feature-flags");
        }
        if !self.cdi_disable_hooks.is_empty() {
            out.push("--cdi-disable-hooks");
        }
        out
    }
}

impl DevicePluginArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            mig_strategy: self.mig_strategy,
            device_list_strategies: (!self.device_list_strategy.is_empty()).then(|| {
                self.device_list_strategy
                    .iter()
                    .map(|s| match s {
                        ListStrategyArg::Envvar => DeviceListStrategy::Envvar,
                        ListStrategyArg::VolumeMounts => DeviceListStrategy::VolumeMounts,
                        ListStrategyArg::CdiAnnotations => DeviceListStrategy::CdiAnnotations,
                        ListStrategyArg::CdiCri => DeviceListStrategy::CdiCri,
                    })
                    .collect::<BTreeSet<_>>()
            }),
            device_id_strategy: self.device_id_strategy.map(|s| match s {
                IdStrategyArg::Uuid => DeviceIdStrategy::Uuid,
                IdStrategyArg::Index => DeviceIdStrategy::Index,
            }),
            pass_device_specs: self.pass_device_specs,
            dev_root: self.dev_root.clone(),
            mps_root: self.mps_root.clone(),
            allocation_policy: self.shared_devices_allocation_policy.map(|p| match p {
                PolicyArg::Distributed => AllocationPolicy::Distributed,
                PolicyArg::Packed => AllocationPolicy::Packed,
            }),
            cdi_annotation_prefix: self.cdi_annotation_prefix.clone(),
            gdrcopy_enabled: self.gdrcopy_enabled,
            gds_enabled: self.gds_enabled,
            mofed_enabled: self.mofed_enabled,
            imex_channel_ids: (!self.imex_channel_ids.is_empty())
                .then(|| self.imex_channel_ids.clone()),
            imex_required: self.imex_required,
        }
    }

    /// The health policy of the env and `--xid-recovery-hold`, with the warnings of the env.
    pub fn health(&self) -> (HealthPolicy, Vec<String>) {
        let (mut policy, warnings) = HealthPolicy::from_env(
            self.disable_healthchecks.as_deref(),
            self.enable_healthchecks.as_deref(),
        );
        policy.quiet_period = Duration::from_secs(self.xid_recovery_hold);
        (policy, warnings)
    }

    /// The plugin's options on a host whose paths are `paths` (the API client is the
    /// caller's: it needs a runtime).
    pub fn options(&self, paths: &HostPaths) -> Result<Options, ArgsError> {
        if self.device_discovery_strategy == Some(DiscoveryStrategyArg::Tegra) {
            return Err(ArgsError::new(
                "--device-discovery-strategy",
                "tegra",
                "Gantry finds GPUs through NVML only (auto or nvml); Tegra iGPUs are not supported",
            ));
        }
        if let Some(bad) = self.imex_channel_ids.iter().find(|&&c| c != 0) {
            return Err(ArgsError::new(
                "--imex-channel-ids",
                &bad.to_string(),
                "only channel 0 is supported",
            ));
        }
        let ignored = self.cdi_spec.given();
        if !ignored.is_empty() {
            tracing::info!(
                flags = %ignored.join(", "),
                "CDI spec options change nothing here: the CDI spec is written by gantry node toolkit"
            );
        }
        let plugin_dir = paths.resolve(&self.plugin_dir);
        let mut opts = Options::new(&plugin_dir);
        opts.kubelet_socket = match self.kubelet_socket.as_deref() {
            None => Some(plugin_dir.join(crate::proto::deviceplugin::KUBELET_SOCKET_NAME)),
            Some("") => None,
            Some(path) => Some(paths.resolve(std::path::Path::new(path))),
        };
        let fallbacks: Vec<Fallback> = if self.fallback_strategies.is_empty() {
            DEFAULT_FALLBACKS.to_vec()
        } else {
            self.fallback_strategies
                .iter()
                .map(|s| {
                    s.parse::<Fallback>()
                        .map_err(|e| ArgsError::new("--fallback-strategies", s, e))
                })
                .collect::<Result<_, _>>()?
        };
        let default = self.default_config.clone();
        opts.config = match (&self.config_file, &self.config_dir, &self.config_map) {
            (Some(file), _, _) => ConfigSource::File(paths.resolve(file)),
            (None, Some(dir), _) => ConfigSource::Named {
                dir: paths.resolve(dir),
                default,
                fallbacks,
            },
            (None, None, Some(cm)) => {
                let (namespace, name) = cm
                    .split_once('/')
                    .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
                    .ok_or_else(|| ArgsError::new("--config-map", cm, "expected namespace/name"))?;
                ConfigSource::ConfigMap {
                    namespace: namespace.into(),
                    name: name.into(),
                    default,
                    fallbacks,
                }
            }
            (None, None, None) => ConfigSource::Defaults,
        };
        opts.overrides = self.overrides();
        let (policy, warnings) = self.health();
        for w in warnings {
            tracing::warn!("{w}");
        }
        opts.health = policy;
        opts.node_name = self.node_name.clone();
        opts.metrics_address = self.metrics_address;
        opts.poll_interval = Duration::from_millis(self.poll_interval_ms.max(50));
        opts.imex_channel_dir = paths.resolve(std::path::Path::new(super::imex::CHANNEL_DIR));
        // The driver's file, where the host keeps it (a simulated node has none: the fixed
        // layout).
        opts.mig_minors_file = opts.mig_minors_file.as_deref().map(|p| paths.resolve(p));
        Ok(opts)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;
    use crate::args::parse;

    fn env(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn parse_dp(argv: &[&str], e: &[(&str, &str)]) -> Result<DevicePluginArgs, clap::Error> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        parse("gantry node device-plugin", &argv, &env(e))
    }

    /// What the operator renders for the device plugin, honoured.
    #[test]
    fn operator_env_becomes_overrides() {
        let a = parse_dp(
            &["--config-map", "gpu-operator/plugin-configs"],
            &[
                ("NODE_NAME", "n1"),
                ("OPERATOR_NAMESPACE", "gpu-operator"),
                ("MIG_STRATEGY", "mixed"),
                ("PASS_DEVICE_SPECS", "true"),
                ("FAIL_ON_INIT_ERROR", "true"),
                ("DEVICE_LIST_STRATEGY", "envvar,cdi-cri"),
                ("DEVICE_ID_STRATEGY", "index"),
                ("NVIDIA_VISIBLE_DEVICES", "all"),
                ("NVIDIA_DRIVER_CAPABILITIES", "all"),
                ("MPS_ROOT", "/run/nvidia/mps"),
                ("NVIDIA_DRIVER_ROOT", "/run/nvidia/driver"),
                ("DEFAULT_CONFIG", "a100"),
                ("DP_DISABLE_HEALTHCHECKS", "109"),
            ],
        )
        .unwrap();
        let paths = HostPaths::new(
            Vec::new(),
            vec![
                ("/".into(), "/sim/n1".into()),
                ("/var/lib/kubelet/device-plugins".into(), "/sim/dp".into()),
            ],
        );
        let o = a.options(&paths).unwrap();
        assert_eq!(o.plugin_dir, Path::new("/sim/dp"));
        assert_eq!(
            o.kubelet_socket.as_deref(),
            Some(Path::new("/sim/dp/kubelet.sock"))
        );
        assert_eq!(o.node_name.as_deref(), Some("n1"));
        assert_eq!(o.overrides.mig_strategy, Some(MigStrategy::Mixed));
        assert_eq!(o.overrides.pass_device_specs, Some(true));
        assert_eq!(
            o.overrides.device_list_strategies,
            Some([DeviceListStrategy::Envvar, DeviceListStrategy::CdiCri].into())
        );
        assert_eq!(
            o.overrides.device_id_strategy,
            Some(DeviceIdStrategy::Index)
        );
        assert_eq!(o.overrides.mps_root.as_deref(), Some("/run/nvidia/mps"));
        assert!(o.health.ignored.contains(&109));
        assert!(a.fail_on_init_error);
        assert_eq!(
            a.gpu.driver_root.as_deref(),
            Some(Path::new("/run/nvidia/driver"))
        );
        match o.config {
            ConfigSource::ConfigMap {
                namespace,
                name,
                default,
                ..
            } => assert_eq!(
                (namespace.as_str(), name.as_str(), default.as_deref()),
                ("gpu-operator", "plugin-configs", Some("a100"))
            ),
            other => panic!("{other:?}"),
        }
    }

    /// Every flag of upstream's `nvidia-device-plugin` is accepted; those with a meaning
    /// here take effect.
    #[test]
    fn upstream_flags_are_accepted() {
        let a = parse_dp(
            &[
                "--mig-strategy=single",
                "--fail-on-init-error=false",
                "--nvidia-driver-root=/run/nvidia/driver",
                "--nvidia-dev-root=/",
                "--pass-device-specs",
                "--device-list-strategy=envvar,cdi-annotations",
                "--device-id-strategy=uuid",
                "--cdi-annotation-prefix=cdi.example.com/",
                "--nvidia-cdi-hook-path=/usr/local/nvidia/toolkit/nvidia-cdi-hook",
                "--driver-root-ctr-path=/driver-root",
                "--gdrcopy-enabled",
                "--gds-enabled=true",
                "--mofed-enabled=false",
                "--device-discovery-strategy=auto",
                "--imex-channel-ids=0",
                "--imex-required",
                "--cdi-feature-flags=disable-multiple-csv-devices",
                "--cdi-disable-hooks=enable-cuda-compat",
                "--kubelet-socket=/var/lib/kubelet/device-plugins/kubelet.sock",
                "--config-file=/config/config.yaml",
                "--shared-devices-allocation-policy=packed",
            ],
            &[
                ("NVIDIA_CTK_PATH", "/usr/bin/nvidia-ctk"),
                ("MPS_ROOT", "/run/nvidia/mps"),
            ],
        )
        .unwrap();
        assert!(!a.fail_on_init_error);
        let o = a.options(&HostPaths::identity()).unwrap();
        let ov = &o.overrides;
        assert_eq!(ov.mig_strategy, Some(MigStrategy::Single));
        assert_eq!(ov.pass_device_specs, Some(true));
        assert_eq!(ov.dev_root.as_deref(), Some("/"));
        assert_eq!(
            ov.cdi_annotation_prefix.as_deref(),
            Some("cdi.example.com/")
        );
        assert_eq!(
            (ov.gdrcopy_enabled, ov.gds_enabled, ov.mofed_enabled),
            (Some(true), Some(true), Some(false))
        );
        assert_eq!(ov.imex_channel_ids, Some(vec![0]));
        assert_eq!(ov.imex_required, Some(true));
        assert_eq!(ov.allocation_policy, Some(AllocationPolicy::Packed));
        assert_eq!(
            a.gpu.driver_root.as_deref(),
            Some(Path::new("/run/nvidia/driver"))
        );
        assert_eq!(
            a.cdi_spec.given(),
            [
                "--nvidia-cdi-hook-path",
                "--driver-root-ctr-path",
                "--cdi-feature-flags",
                "--cdi-disable-hooks"
            ]
        );
        // The env names of the same flags.
        let a = parse_dp(
            &[],
            &[
                ("GDS_ENABLED", "true"),
                ("CDI_ANNOTATION_PREFIX", "x/"),
                ("IMEX_CHANNEL_IDS", "0"),
                ("IMEX_REQUIRED", "false"),
                ("DEVICE_DISCOVERY_STRATEGY", "nvml"),
                ("CONTAINER_DRIVER_ROOT", "/driver-root"),
            ],
        )
        .unwrap();
        let ov = a.options(&HostPaths::identity()).unwrap().overrides;
        assert_eq!(ov.gds_enabled, Some(true));
        assert_eq!(ov.cdi_annotation_prefix.as_deref(), Some("x/"));
        assert_eq!(
            (ov.imex_channel_ids, ov.imex_required),
            (Some(vec![0]), Some(false))
        );
    }

    #[test]
    fn rejections() {
        for (argv, e) in [
            (&["--bogus"][..], &[][..]),
            (&[][..], &[("DEVICE_LIST_STRATEGY", "carrier-pigeon")][..]),
            (&[][..], &[("DEVICE_ID_STRATEGY", "serial")][..]),
            (&[][..], &[("PASS_DEVICE_SPECS", "yes please")][..]),
            (&[][..], &[("MIG_STRATEGY", "weird")][..]),
            (&[][..], &[("DEVICE_DISCOVERY_STRATEGY", "vfio")][..]),
            (&[][..], &[("GDS_ENABLED", "maybe")][..]),
            (&["--config-file", "/a", "--config-dir", "/b"][..], &[][..]),
        ] {
            let err = parse_dp(argv, e).expect_err(&format!("{argv:?} {e:?}"));
            assert_eq!(err.exit_code(), 2, "{err}");
        }
        for (argv, flag) in [
            (
                &["--device-discovery-strategy=tegra"][..],
                "--device-discovery-strategy",
            ),
            (&["--imex-channel-ids=1"][..], "--imex-channel-ids"),
        ] {
            let a = parse_dp(argv, &[]).unwrap();
            let e = a.options(&HostPaths::identity()).err().expect("rejected");
            assert_eq!(e.flag, flag);
        }
        let bad_cm = parse_dp(&["--config-map", "nope"], &[]).unwrap();
        let err = bad_cm
            .options(&HostPaths::identity())
            .err()
            .expect("rejected");
        assert_eq!(err.flag, "--config-map");
    }
}
