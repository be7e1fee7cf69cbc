//! `gantry node mig-manager`'s flags and env (upstream mig-manager's names where they exist),
//! and the config source and [`DaemonOptions`] they make on a host.

use std::path::PathBuf;

use super::daemon::{self, ConfigSource, DaemonOptions};
use crate::args::{ArgsError, GpuArgs, namespaced};
use crate::host::HostPaths;

#[derive(clap::Args, Clone, Debug)]
pub struct MigManagerArgs {
    /// mig-parted config file (v1).
    #[arg(long, env = "CONFIG_FILE", conflicts_with = "config_map")]
    pub config_file: Option<PathBuf>,
    /// mig-parted config in a ConfigMap, `NAMESPACE/NAME` (key `config.yaml`).
    #[arg(long, env = "CONFIG_MAP")]
    pub config_map: Option<String>,
    /// Gantry's ConfigMap of MigClusterPolicy inline layouts, `NAMESPACE/NAME`, merged in
    /// (default: `gantry-mig-custom-layouts` beside --config-map, else in POD_NAMESPACE).
    #[arg(long, env = "CUSTOM_CONFIG_MAP")]
    pub custom_config_map: Option<String>,
    /// Name of the config to apply once (the `nvidia.com/mig.config` label value). Without it
    /// the daemon follows the label of the Node NODE_NAME.
    #[arg(long, env = "MIG_PARTED_SELECTED_CONFIG")]
    pub config: Option<String>,
    /// Print the plan (per GPU: current layout -> wanted, steps) and change nothing.
    #[arg(long, requires = "config")]
    pub dry_run: bool,
    /// The Node to follow (daemon mode).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    #[arg(long, env = "POD_NAMESPACE", hide = true)]
    pub pod_namespace: Option<String>,
    /// Upstream's namespace of the GPU client pods to wait for. Accepted without effect:
    /// Gantry waits for the client pods on the node in every namespace.
    #[arg(long, env = "DEFAULT_GPU_CLIENTS_NAMESPACE", hide = true)]
    pub default_gpu_clients_namespace: Option<String>,
    /// Upstream's list of host systemd services to stop around a MIG change. Accepted without
    /// effect: Gantry changes MIG with the GPU clients' pods gone and stops no host service.
    #[arg(long, env = "GPU_CLIENTS_FILE", hide = true)]
    pub gpu_clients_file: Option<PathBuf>,
    /// Upstream reboots the node when a MIG mode change needs it. Gantry never reboots a node:
    /// `true` is accepted and says so at start.
    #[arg(long, env = "WITH_REBOOT", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", hide = true)]
    pub with_reboot: bool,
    /// Where the host's `/` is mounted. Accepted without effect: MIG is changed through NVML
    /// and the API only, no host file is read.
    #[arg(long, env = "GANTRY_HOST_ROOT", default_value = "/", hide = true)]
    pub host_root: PathBuf,
    #[command(flatten)]
    pub gpu: GpuArgs,
}

impl MigManagerArgs {
    /// Where the mig-parted config comes from (a file path resolved on the host).
    pub fn source(&self, paths: &HostPaths) -> Result<ConfigSource, ArgsError> {
        match (&self.config_file, &self.config_map) {
            (Some(f), _) => Ok(ConfigSource::File(paths.resolve(f))),
            (None, Some(m)) => {
                let (namespace, name) = namespaced("--config-map", m)?;
                Ok(ConfigSource::ConfigMap { namespace, name })
            }
            (None, None) => Err(ArgsError::new(
                "--config-file/--config-map",
                "",
                "set one (the mig-parted config)",
            )),
        }
    }

    /// The ConfigMap of MigClusterPolicy layouts merged into `source`.
    pub fn custom_layouts(
        &self,
        source: &ConfigSource,
    ) -> Result<Option<(String, String)>, ArgsError> {
        match &self.custom_config_map {
            Some(m) => Ok(Some(namespaced("--custom-config-map", m)?)),
            None => Ok(daemon::default_custom_layouts(
                source,
                self.pod_namespace.as_deref(),
            )),
        }
    }

    /// The daemon's options (daemon mode: no `--config`) on a host whose paths are `paths`.
    pub fn daemon_options(&self, paths: &HostPaths) -> Result<DaemonOptions, ArgsError> {
        let source = self.source(paths)?;
        let node = self.node_name.clone().ok_or_else(|| {
            ArgsError::new(
                "--node-name",
                "",
                "daemon mode (no --config) needs the Node: set NODE_NAME or --node-name",
            )
        })?;
        let custom = self.custom_layouts(&source)?;
        if self.with_reboot {
            tracing::warn!("WITH_REBOOT=true accepted: Gantry never reboots the node");
        }
        let mut opts = DaemonOptions::new(node, source);
        opts.custom_layouts = custom;
        Ok(opts)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::args::parse;

    fn parse_m(argv: &[&str], e: &[(&str, &str)]) -> Result<MigManagerArgs, clap::Error> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let env: BTreeMap<String, String> = e
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse("gantry node mig-manager", &argv, &env)
    }

    #[test]
    fn operator_command_and_env() {
        let a = parse_m(
            &["--config-map", "gpu-operator/default-mig-parted-config"],
            &[
                ("NODE_NAME", "n1"),
                ("OPERATOR_NAMESPACE", "gpu-operator"),
                ("DEFAULT_GPU_CLIENTS_NAMESPACE", "gpu-operator"),
                ("GPU_CLIENTS_FILE", "/gpu-clients/clients.yaml"),
                ("WITH_REBOOT", "false"),
                ("NVIDIA_DRIVER_ROOT", "/run/nvidia/driver"),
                ("GANTRY_HOST_ROOT", "/host"),
            ],
        )
        .unwrap();
        let o = a.daemon_options(&HostPaths::identity()).unwrap();
        assert_eq!(o.node_name, "n1");
        assert_eq!(
            o.source,
            ConfigSource::ConfigMap {
                namespace: "gpu-operator".into(),
                name: "default-mig-parted-config".into()
            }
        );
        assert_eq!(
            o.custom_layouts.map(|(ns, _)| ns).as_deref(),
            Some("gpu-operator")
        );
    }

    #[test]
    fn rejections() {
        for (argv, e) in [
            (&["--bogus"][..], &[][..]),
            (&["--dry-run"][..], &[][..]),
            (&[][..], &[("WITH_REBOOT", "maybe")][..]),
            (&["--config-file", "/a", "--config-map", "a/b"][..], &[][..]),
        ] {
            let err = parse_m(argv, e).expect_err(&format!("{argv:?} {e:?}"));
            assert_eq!(err.exit_code(), 2, "{err}");
        }
        let a = parse_m(&["--config-map", "nope"], &[("NODE_NAME", "n")]).unwrap();
        assert_eq!(
            a.daemon_options(&HostPaths::identity())
                .expect_err("rejected")
                .flag,
            "--config-map"
        );
        let a = parse_m(&[], &[("NODE_NAME", "n")]).unwrap();
        assert!(a.daemon_options(&HostPaths::identity()).is_err());
        let a = parse_m(&["--config-file", "/c.yaml"], &[]).unwrap();
        assert_eq!(
            a.daemon_options(&HostPaths::identity())
                .expect_err("rejected")
                .flag,
            "--node-name"
        );
    }
}
