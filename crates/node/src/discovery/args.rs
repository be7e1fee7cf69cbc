//! `gantry node discovery`'s flags and env (GFD's names), and the [`DiscoveryOptions`] they
//! make on a host.

use std::path::PathBuf;

use super::{DiscoveryOptions, MigStrategy};
use crate::args::{ArgsError, GpuArgs, HostPaths, mig_strategy_parser};

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
            mig_strategy: self.mig_strategy,
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
        let a = parse_d(&[], &[("GFD_SLEEP_INTERVAL", "often")]).unwrap();
        assert_eq!(
            a.options(&HostPaths::identity())
                .expect_err("rejected")
                .flag,
            "--sleep-interval"
        );
    }
}
