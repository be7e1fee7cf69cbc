//! `gantry node toolkit`'s flags and env, and the [`AgentConfig`] they make on a host.
//!
//! Upstream's `CONTAINERD_CONFIG` (k3s, RKE2 paths) reaches the agent as `--config`: the
//! operator renders it so, and mounts the file's directory.

use std::path::PathBuf;

use super::Runtime;
use super::agent::AgentConfig;
use super::cdi;
use super::reload::{CommandReloader, NoReload, Reloader, SignalReloader};
use crate::args::ArgsError;
use crate::host::HostPaths;

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum RuntimeArg {
    Auto,
    Containerd,
    Docker,
    Crio,
}

#[derive(clap::Args, Clone, Debug)]
pub struct ToolkitArgs {
    /// Where the host's `/` is mounted; every host path below is resolved under it.
    #[arg(long, env = "GANTRY_HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// Container runtime to configure.
    #[arg(long, env = "RUNTIME", value_enum, default_value = "auto")]
    pub runtime: RuntimeArg,
    /// The runtime's main config file (default: /etc/containerd/config.toml,
    /// /etc/docker/daemon.json or /etc/crio/crio.conf).
    #[arg(long, env = "RUNTIME_CONFIG")]
    pub config: Option<PathBuf>,
    /// containerd: write /etc/containerd/conf.d/99-nvidia.toml plus an `imports` line instead
    /// of editing config.toml in place.
    #[arg(long)]
    pub drop_in: bool,
    /// Path of the drop-in (containerd with --drop-in; CRI-O always uses one).
    #[arg(long)]
    pub drop_in_path: Option<PathBuf>,
    /// Make `nvidia` the default runtime.
    #[arg(long)]
    pub set_as_default: bool,
    /// Also turn on CDI in the runtime (containerd `enable_cdi`, Docker `features.cdi`).
    #[arg(long, alias = "cdi-enabled", env = "CDI_ENABLED")]
    pub enable_cdi: bool,
    /// Where nvidia-container-runtime and nvidia-cdi-hook are installed on the host.
    #[arg(long, default_value = super::DEFAULT_TOOLKIT_DIR)]
    pub toolkit_dir: PathBuf,
    /// Name of the runtime to register (upstream's `CONTAINERD_RUNTIME_CLASS`).
    #[arg(long, env = "CONTAINERD_RUNTIME_CLASS", default_value = super::DEFAULT_RUNTIME_NAME)]
    pub runtime_name: String,
    /// Undo: restore the runtime config (byte for byte when unchanged since) and remove the spec.
    #[arg(long)]
    pub uninstall: bool,
    /// Only write the CDI spec.
    #[arg(long, conflicts_with = "no_cdi")]
    pub cdi_only: bool,
    /// Do not write the CDI spec.
    #[arg(long)]
    pub no_cdi: bool,
    /// Host path of the driver installation (`/run/nvidia/driver` with the driver container).
    #[arg(long, env = "NVIDIA_DRIVER_ROOT", default_value = "/")]
    pub driver_root: PathBuf,
    /// Host path the /dev nodes live under (default: the driver root).
    #[arg(long)]
    pub dev_root: Option<PathBuf>,
    /// Driver version (default: from /proc/driver/nvidia/version or the library names).
    #[arg(long)]
    pub driver_version: Option<String>,
    /// CDI spec directory (host path).
    #[arg(long, env = "CDI_OUTPUT_DIR", default_value = cdi::DEFAULT_CDI_DIR)]
    pub cdi_dir: PathBuf,
    /// CDI kind.
    #[arg(long, env = "CDI_KIND", default_value = "nvidia.com/gpu")]
    pub cdi_kind: String,
    /// Print what would be written; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not signal the runtime after changing its config.
    #[arg(long)]
    pub no_signal: bool,
    /// Pid file of the runtime daemon (host path) to send SIGHUP to.
    #[arg(long, conflicts_with_all = ["no_signal", "reload_command"])]
    pub pid_file: Option<PathBuf>,
    /// Command that reloads the runtime instead of SIGHUP, e.g. "systemctl restart containerd".
    #[arg(long, conflicts_with = "no_signal")]
    pub reload_command: Option<String>,
    /// Keep running and rewrite the CDI spec when the devices change, checking every N seconds.
    #[arg(long, value_name = "SECONDS")]
    pub watch: Option<u64>,
}

impl ToolkitArgs {
    /// The agent's config on a host whose paths are `paths` (`--host-root` resolved; the other
    /// paths are host paths, read under it by the agent).
    pub fn config(&self, paths: &HostPaths) -> Result<AgentConfig, ArgsError> {
        if let Some(c) = &self.reload_command
            && c.trim().is_empty()
        {
            return Err(ArgsError::new("--reload-command", c, "is empty"));
        }
        let mut cfg = AgentConfig::new(paths.resolve(&self.host_root));
        cfg.runtime = match self.runtime {
            RuntimeArg::Auto => None,
            RuntimeArg::Containerd => Some(Runtime::Containerd),
            RuntimeArg::Docker => Some(Runtime::Docker),
            RuntimeArg::Crio => Some(Runtime::Crio),
        };
        cfg.config = self.config.clone();
        cfg.drop_in = self.drop_in;
        cfg.drop_in_path = self.drop_in_path.clone();
        cfg.toolkit_dir = self.toolkit_dir.clone();
        cfg.runtime_name = self.runtime_name.clone();
        cfg.set_as_default = self.set_as_default;
        cfg.enable_cdi = self.enable_cdi;
        cfg.uninstall = self.uninstall;
        cfg.cdi_only = self.cdi_only;
        cfg.no_cdi = self.no_cdi;
        cfg.driver_root = self.driver_root.clone();
        cfg.dev_root = self.dev_root.clone();
        cfg.driver_version = self.driver_version.clone();
        cfg.cdi_dir = self.cdi_dir.clone();
        cfg.cdi.kind = self.cdi_kind.clone();
        cfg.cdi.hook_path = self
            .toolkit_dir
            .join("nvidia-cdi-hook")
            .to_string_lossy()
            .into_owned();
        cfg.dry_run = self.dry_run;
        Ok(cfg)
    }

    /// How the runtime is told to reload on a real host.
    pub fn reloader(&self, cfg: &AgentConfig) -> Box<dyn Reloader> {
        if self.no_signal || self.dry_run {
            Box::new(NoReload)
        } else if let Some(cmd) = &self.reload_command {
            Box::new(CommandReloader {
                argv: cmd.split_whitespace().map(str::to_string).collect(),
            })
        } else {
            Box::new(SignalReloader {
                host: cfg.host.clone(),
                pid_file: self.pid_file.clone(),
            })
        }
    }

    /// `--watch` period, unless the run is one that must not keep going.
    pub fn watch(&self) -> Option<u64> {
        self.watch
            .filter(|_| !self.uninstall && !self.dry_run && !self.no_cdi)
            .map(|s| s.max(1))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;
    use crate::args::parse;

    fn parse_t(argv: &[&str], e: &[(&str, &str)]) -> Result<ToolkitArgs, clap::Error> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let env: BTreeMap<String, String> = e
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse("gantry node toolkit", &argv, &env)
    }

    #[test]
    fn operator_command_and_env() {
        let a = parse_t(
            &[
                "--host-root",
                "/host",
                "--runtime",
                "containerd",
                "--runtime-name",
                "nvidia",
                "--toolkit-dir",
                "/usr/local/nvidia/toolkit",
                "--driver-root",
                "/run/nvidia/driver",
                "--enable-cdi",
                "--watch",
                "10",
            ],
            &[
                ("NODE_NAME", "n1"),
                ("OPERATOR_NAMESPACE", "gpu-operator"),
                ("CONTAINERD_RUNTIME_CLASS", "nvidia-legacy"),
            ],
        )
        .unwrap();
        let paths = HostPaths::new(
            vec![("/host".into(), "/".into())],
            vec![("/".into(), "/sim/n1".into())],
        );
        let c = a.config(&paths).unwrap();
        assert_eq!(c.host.root(), Path::new("/sim/n1"));
        assert_eq!(c.runtime, Some(Runtime::Containerd));
        // The flag beats the env.
        assert_eq!(c.runtime_name, "nvidia");
        assert_eq!(c.driver_root, Path::new("/run/nvidia/driver"));
        assert!(c.enable_cdi);
        assert_eq!(a.watch(), Some(10));
        let a = parse_t(&[], &[("CONTAINERD_RUNTIME_CLASS", "nvidia-legacy")]).unwrap();
        assert_eq!(
            a.config(&HostPaths::identity()).unwrap().runtime_name,
            "nvidia-legacy"
        );
    }

    #[test]
    fn rejections() {
        for (argv, e) in [
            (&["--bogus"][..], &[][..]),
            (&["--runtime", "podman"][..], &[][..]),
            (&["--cdi-only", "--no-cdi"][..], &[][..]),
            (&["--watch", "soon"][..], &[][..]),
            (&[][..], &[("CDI_ENABLED", "1")][..]),
        ] {
            let err = parse_t(argv, e).expect_err(&format!("{argv:?} {e:?}"));
            assert_eq!(err.exit_code(), 2, "{err}");
        }
        let a = parse_t(&["--reload-command", " "], &[]).unwrap();
        assert!(a.config(&HostPaths::identity()).is_err());
    }
}
