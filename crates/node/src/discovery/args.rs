//! `gantry node discovery`'s flags and env (GFD's names), and the [`DiscoveryOptions`] they
//! make on a host.

use std::path::PathBuf;

use super::{DiscoveryOptions, MigStrategy};
use crate::args::{ArgsError, GpuArgs, mig_strategy_parser};
use crate::host::HostPaths;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DiscoveryStrategy {
    Auto,
    Nvml,
    Tegra,
    Vfio,
}

#[derive(clap::Args, Clone, Debug)]
pub struct DiscoveryArgs {
    #[command(flatten)]
    pub gpu: GpuArgs,
    /// Print the labels as sorted `key=value` lines and exit; needs no cluster.
    #[arg(long)]
    pub print: bool,
    /// Label once and exit.
    #[arg(long, env = "GFD_ONESHOT")]
    pub oneshot: bool,
    /// The Node to label.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Where the host's `/` is mounted (for /sys/class/dmi and /sys/bus/pci).
    #[arg(long, env = "GANTRY_HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// Device plugin config file (v1): MIG strategy, sharing, `flags.gfd`.
    #[arg(long, env = "CONFIG_FILE", conflicts_with = "config_map")]
    pub config_file: Option<PathBuf>,
    /// ConfigMap `namespace/name` of named device plugin configs, read through the API; the
    /// node label `nvidia.com/device-plugin.config` picks the key.
    #[arg(long)]
    pub config_map: Option<String>,
    /// Named config used when the node label is empty.
    #[arg(long, env = "DEFAULT_CONFIG")]
    pub default_config: Option<String>,
    /// MIG strategy (overrides the config file; default none).
    #[arg(long, env = "MIG_STRATEGY", value_parser = mig_strategy_parser())]
    pub mig_strategy: Option<MigStrategy>,
    /// `GFD_MIG_STRATEGY`, GFD's own name for `MIG_STRATEGY` (which wins when both are set).
    #[arg(long, env = "GFD_MIG_STRATEGY", hide = true, value_parser = mig_strategy_parser())]
    pub gfd_mig_strategy: Option<MigStrategy>,
    /// Exit non-zero when the GPUs cannot be read at start; `false`: log it and idle until
    /// stopped, as upstream does.
    #[arg(long, env = "GFD_FAIL_ON_INIT_ERROR", default_value_t = true,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub fail_on_init_error: bool,
    /// Also write the labels as NFD's local feature file (`key=value` lines, replaced
    /// atomically), beside labelling the Node through the API.
    #[arg(long, short = 'o', env = "GFD_OUTPUT_FILE")]
    pub output_file: Option<PathBuf>,
    /// The file the `nvidia.com/gpu.machine` label is read from (default: the host root's
    /// `/sys/class/dmi/id/product_name`).
    #[arg(long, env = "GFD_MACHINE_TYPE_FILE")]
    pub machine_type_file: Option<PathBuf>,
    /// Upstream publishes through NFD's NodeFeature objects when true; Gantry labels the Node
    /// itself either way (said once in the log).
    #[arg(long, env = "GFD_USE_NODE_FEATURE_API", num_args = 0..=1, default_missing_value = "true")]
    pub use_node_feature_api: Option<bool>,
    /// How GPUs are found: `auto` and `nvml` both use NVML; `tegra` and `vfio` are refused.
    #[arg(long, env = "GFD_DEVICE_DISCOVERY_STRATEGY", value_enum)]
    pub device_discovery_strategy: Option<DiscoveryStrategy>,
    /// Re-label period: `60s`, `5m`, or `infinite` (overrides the config file; default 60s).
    #[arg(long, env = "GFD_SLEEP_INTERVAL")]
    pub sleep_interval: Option<String>,
    /// Leave out `nvidia.com/gfd.timestamp`.
    #[arg(long, env = "GFD_NO_TIMESTAMP")]
    pub no_timestamp: bool,
}

impl DiscoveryArgs {
    /// Discovery's options on a host whose paths are `paths`.
    pub fn options(&self, paths: &HostPaths) -> Result<DiscoveryOptions, ArgsError> {
        if let Some(d @ (DiscoveryStrategy::Tegra | DiscoveryStrategy::Vfio)) =
            self.device_discovery_strategy
        {
            return Err(ArgsError::new(
                "--device-discovery-strategy",
                &format!("{d:?}").to_lowercase(),
                "Gantry finds GPUs through NVML only (auto or nvml)",
            ));
        }
        if self.use_node_feature_api == Some(true) {
            tracing::info!(
                "--use-node-feature-api: Gantry applies the labels to the Node itself, no NodeFeature object"
            );
        }
        let sleep_interval = match &self.sleep_interval {
            Some(s) => Some(
                super::config::parse_interval(s)
                    .map_err(|e| ArgsError::new("--sleep-interval", s, e.to_string()))?,
            ),
            None => None,
        };
        let config_map = match &self.config_map {
            Some(cm) => Some(
                cm.split_once('/')
                    .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                    .map(|(ns, name)| (ns.to_string(), name.to_string()))
                    .ok_or_else(|| ArgsError::new("--config-map", cm, "expected namespace/name"))?,
            ),
            None => None,
        };
        Ok(DiscoveryOptions {
            config_map,
            default_config: self.default_config.clone(),
            node_name: self.node_name.clone(),
            host_root: paths.resolve(&self.host_root),
            config_file: self.config_file.as_deref().map(|p| paths.resolve(p)),
            mig_strategy: self.mig_strategy.or(self.gfd_mig_strategy),
            output_file: self.output_file.as_deref().map(|p| paths.resolve(p)),
            machine_type_file: self.machine_type_file.as_deref().map(|p| paths.resolve(p)),
            sleep_interval,
            oneshot: self.oneshot,
            no_timestamp: self.no_timestamp,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::args::parse;

    fn parse_d(argv: &[&str], e: &[(&str, &str)]) -> Result<DiscoveryArgs, clap::Error> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let env: BTreeMap<String, String> = e
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse("gantry node discovery", &argv, &env)
    }

    #[test]
    fn operator_env_is_honoured() {
        let a = parse_d(
            &["--config-map", "gpu-operator/cfg"],
            &[
                ("NODE_NAME", "n1"),
                ("MIG_STRATEGY", "single"),
                ("GFD_SLEEP_INTERVAL", "5m"),
                ("GANTRY_HOST_ROOT", "/host"),
                ("NVIDIA_DRIVER_ROOT", "/run/nvidia/driver"),
                ("DEFAULT_CONFIG", "a"),
                ("GFD_NO_TIMESTAMP", "true"),
            ],
        )
        .unwrap();
        let paths = HostPaths::new(
            vec![("/host".into(), "/".into())],
            vec![("/".into(), "/sim/n1".into())],
        );
        let o = a.options(&paths).unwrap();
        assert_eq!(o.host_root, Path::new("/sim/n1"));
        assert_eq!(o.node_name.as_deref(), Some("n1"));
        assert_eq!(o.mig_strategy, Some(MigStrategy::Single));
        assert_eq!(o.sleep_interval, Some(Some(Duration::from_secs(300))));
        assert_eq!(o.default_config.as_deref(), Some("a"));
        assert_eq!(o.config_map, Some(("gpu-operator".into(), "cfg".into())));
        assert!(o.no_timestamp && !o.oneshot);
    }

    /// GFD's own flags are accepted; those with a meaning here take effect.
    #[test]
    fn upstream_flags_are_accepted() {
        let a = parse_d(
            &[
                "--mig-strategy=mixed",
                "--fail-on-init-error=false",
                "--oneshot",
                "--no-timestamp",
                "--sleep-interval=30s",
                "--output-file=/etc/kubernetes/node-feature-discovery/features.d/gfd",
                "--machine-type-file=/sys/class/dmi/id/product_name",
                "--use-node-feature-api=true",
                "--device-discovery-strategy=auto",
            ],
            &[],
        )
        .unwrap();
        assert!(!a.fail_on_init_error);
        let paths = HostPaths::new(
            vec![("/etc/kubernetes".into(), "/etc/kubernetes".into())],
            vec![("/".into(), "/sim/n1".into())],
        );
        let o = a.options(&paths).unwrap();
        assert_eq!(o.mig_strategy, Some(MigStrategy::Mixed));
        assert!(o.oneshot && o.no_timestamp);
        assert_eq!(o.sleep_interval, Some(Some(Duration::from_secs(30))));
        assert_eq!(
            o.output_file.as_deref(),
            Some(Path::new(
                "/sim/n1/etc/kubernetes/node-feature-discovery/features.d/gfd"
            ))
        );
        assert_eq!(
            o.machine_type_file.as_deref(),
            Some(Path::new("/sim/n1/sys/class/dmi/id/product_name"))
        );
        // GFD's env names; MIG_STRATEGY beats GFD_MIG_STRATEGY.
        let a = parse_d(
            &[],
            &[
                ("GFD_MIG_STRATEGY", "single"),
                ("GFD_OUTPUT_FILE", "/out/gfd"),
                ("GFD_FAIL_ON_INIT_ERROR", "false"),
            ],
        )
        .unwrap();
        let o = a.options(&HostPaths::identity()).unwrap();
        assert_eq!(o.mig_strategy, Some(MigStrategy::Single));
        assert_eq!(o.output_file.as_deref(), Some(Path::new("/out/gfd")));
        assert!(!a.fail_on_init_error);
        let a = parse_d(
            &[],
            &[("GFD_MIG_STRATEGY", "single"), ("MIG_STRATEGY", "mixed")],
        )
        .unwrap();
        assert_eq!(
            a.options(&HostPaths::identity()).unwrap().mig_strategy,
            Some(MigStrategy::Mixed)
        );
    }

    #[test]
    fn rejections() {
        for (argv, e) in [
            (&["--bogus"][..], &[][..]),
            (&[][..], &[("MIG_STRATEGY", "weird")][..]),
            (&[][..], &[("GFD_ONESHOT", "yes")][..]),
            (&["--config-file", "/a", "--config-map", "a/b"][..], &[][..]),
        ] {
            let err = parse_d(argv, e).expect_err(&format!("{argv:?} {e:?}"));
            assert_eq!(err.exit_code(), 2, "{err}");
        }
        for strategy in ["tegra", "vfio"] {
            let a = parse_d(&["--device-discovery-strategy", strategy], &[]).unwrap();
            let e = a.options(&HostPaths::identity()).expect_err("refused");
            assert_eq!(e.flag, "--device-discovery-strategy");
            assert!(e.to_string().contains(strategy), "{e}");
        }
        let a = parse_d(&[], &[("GFD_SLEEP_INTERVAL", "often")]).unwrap();
        assert_eq!(
            a.options(&HostPaths::identity())
                .expect_err("rejected")
                .flag,
            "--sleep-interval"
        );
    }
}
