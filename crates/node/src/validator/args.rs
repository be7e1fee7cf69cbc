//! `gantry node validator`'s flags and env (upstream nvidia-validator's names), and the
//! [`ValidatorOptions`] they make on a host.

use std::path::PathBuf;
use std::time::Duration;

use super::{Mode, ValidatorOptions};
use crate::args::{GpuArgs, listen_address, mig_strategy_parser};
use crate::host::HostPaths;
use gantry_k8s_rules::MigStrategy;

#[derive(clap::Args, Clone, Debug)]
pub struct ValidatorArgs {
    #[command(flatten)]
    pub gpu: GpuArgs,
    /// Component to validate: driver, toolkit, cuda, plugin; `metrics` serves the node's
    /// validation state. Without it (and without --wait-for) the validator idles and removes
    /// the ready files when stopped.
    #[arg(short = 'c', long, env = "COMPONENT")]
    pub component: Option<String>,
    /// Retry the check until it passes.
    #[arg(long, visible_alias = "with-wait", env = "WITH_WAIT")]
    pub wait: bool,
    /// Block until `<output-dir>/<COMPONENT>-ready` exists.
    #[arg(long, value_name = "COMPONENT")]
    pub wait_for: Option<String>,
    /// Directory of the ready files.
    #[arg(long, env = "OUTPUT_DIR", default_value = gantry_api::names::VALIDATIONS_DIR)]
    pub output_dir: PathBuf,
    /// Where the host's `/` is mounted (runtime configs, CDI specs, the driver root).
    #[arg(long, env = "GANTRY_HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// The node this runs on (for the plugin check and the device count).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Namespace of the operator's DaemonSets (where a managed driver is looked for;
    /// default: every namespace).
    #[arg(long, env = "OPERATOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// The cluster's MIG strategy (the operator passes it). Accepted without effect: the
    /// plugin check counts `nvidia.com/gpu` and `nvidia.com/mig-*` alike, which covers every
    /// strategy's resource names.
    #[arg(long, env = "MIG_STRATEGY", value_parser = mig_strategy_parser(), hide = true)]
    pub mig_strategy: Option<MigStrategy>,
    /// Seconds between attempts of --wait and --wait-for.
    #[arg(long, default_value_t = 5)]
    pub retry_interval: u64,
    /// Address of the metrics server (`--component metrics`); `:PORT` = all interfaces.
    #[arg(long, default_value = ":8000")]
    pub metrics_address: String,
    /// Name of the NVIDIA runtime in the container runtime's config.
    #[arg(long, default_value = crate::toolkit::DEFAULT_RUNTIME_NAME)]
    pub runtime_name: String,
    /// Kubeconfig (default: in-cluster, else KUBECONFIG / ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

impl ValidatorArgs {
    /// The validator's options on a host whose paths are `paths`.
    pub fn options(&self, paths: &HostPaths) -> Result<ValidatorOptions, String> {
        let mode = Mode::from_flags(
            self.component.as_deref(),
            self.wait,
            self.wait_for.as_deref(),
        )
        .map_err(|e| e.to_string())?;
        let mut opts = ValidatorOptions::new(mode);
        opts.output_dir = paths.resolve(&self.output_dir);
        opts.host_root = paths.resolve(&self.host_root);
        opts.driver_root = self.gpu.driver_root.clone();
        opts.node_name = self.node_name.clone();
        opts.retry_interval = Duration::from_secs(self.retry_interval.max(1));
        opts.metrics_address = listen_address("--metrics-address", &self.metrics_address)
            .map_err(|e| e.to_string())?;
        opts.runtime_name = self.runtime_name.clone();
        Ok(opts)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;
    use crate::args::parse;
    use crate::validator::Component;

    fn parse_v(argv: &[&str], e: &[(&str, &str)]) -> Result<ValidatorArgs, clap::Error> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let env: BTreeMap<String, String> = e
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse("gantry node validator", &argv, &env)
    }

    #[test]
    fn operator_command_and_env() {
        let a = parse_v(
            &[
                "--component",
                "toolkit",
                "--wait",
                "--host-root",
                "/host",
                "--driver-root",
                "/run/nvidia/driver",
                "--runtime-name",
                "nvidia",
            ],
            &[
                ("NODE_NAME", "n1"),
                ("OPERATOR_NAMESPACE", "gpu-operator"),
                ("MIG_STRATEGY", "mixed"),
            ],
        )
        .unwrap();
        let paths = HostPaths::new(
            vec![
                ("/host".into(), "/".into()),
                (
                    "/run/nvidia/validations".into(),
                    "/run/nvidia/validations".into(),
                ),
            ],
            vec![("/".into(), "/sim/n1".into())],
        );
        let o = a.options(&paths).unwrap();
        assert_eq!(
            o.mode,
            Mode::Check {
                component: Component::Toolkit,
                wait: true
            }
        );
        assert_eq!(o.host_root, Path::new("/sim/n1"));
        assert_eq!(o.output_dir, Path::new("/sim/n1/run/nvidia/validations"));
        assert_eq!(o.node_name.as_deref(), Some("n1"));
        assert_eq!(a.namespace.as_deref(), Some("gpu-operator"));
        // The sandbox validators' env form.
        let a = parse_v(&[], &[("COMPONENT", "cuda"), ("WITH_WAIT", "true")]).unwrap();
        assert_eq!(
            a.options(&HostPaths::identity()).unwrap().mode,
            Mode::Check {
                component: Component::Cuda,
                wait: true
            }
        );
    }

    #[test]
    fn rejections() {
        for (argv, e) in [
            (&["--bogus"][..], &[][..]),
            (&["--retry-interval", "-1"][..], &[][..]),
            (&[][..], &[("WITH_WAIT", "1")][..]),
            (&[][..], &[("MIG_STRATEGY", "weird")][..]),
        ] {
            let err = parse_v(argv, e).expect_err(&format!("{argv:?} {e:?}"));
            assert_eq!(err.exit_code(), 2, "{err}");
        }
        let a = parse_v(&["--component", "flux-capacitor"], &[]).unwrap();
        assert!(a.options(&HostPaths::identity()).is_err());
        let a = parse_v(&["--metrics-address", "here"], &[]).unwrap();
        assert!(
            a.options(&HostPaths::identity())
                .expect_err("rejected")
                .contains("--metrics-address")
        );
    }
}
