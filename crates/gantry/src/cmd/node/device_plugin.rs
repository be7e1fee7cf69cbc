//! `gantry node device-plugin`: CLI wiring for `gantry_node::device_plugin`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use gantry_node::device_plugin::named::{DEFAULT_FALLBACKS, Fallback};
use gantry_node::device_plugin::settings::{
    AllocationPolicy, DeviceIdStrategy, DeviceListStrategy, MigStrategy,
};
use gantry_node::device_plugin::{self, ConfigSource, HealthPolicy, Options, Overrides, health};

use super::gpu_source::{self, GpuSourceArgs, shutdown_signal};
use super::mig_strategy_parser;

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ListStrategyArg {
    Envvar,
    VolumeMounts,
    CdiAnnotations,
    CdiCri,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum IdStrategyArg {
    Uuid,
    Index,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum PolicyArg {
    Distributed,
    Packed,
}

#[derive(clap::Args)]
pub struct DevicePluginArgs {
    /// Config file v1 (YAML or JSON); re-read when it changes.
    #[arg(long, env = "CONFIG_FILE", conflicts_with = "config_dir")]
    config_file: Option<PathBuf>,
    /// Directory of named configs (a mounted ConfigMap); the node label
    /// `nvidia.com/device-plugin.config` picks one.
    #[arg(long, env = "CONFIG_FILE_SRCDIR")]
    config_dir: Option<PathBuf>,
    /// ConfigMap `namespace/name` of named configs, read through the API (instead of a
    /// mounted directory); the node label picks the key.
    #[arg(long, conflicts_with_all = ["config_file", "config_dir"])]
    config_map: Option<String>,
    /// Named config used when the node label is empty.
    #[arg(long, env = "DEFAULT_CONFIG")]
    default_config: Option<String>,
    /// Fallbacks when neither label nor default names a config: named, single, empty.
    #[arg(long, env = "FALLBACK_STRATEGIES", value_delimiter = ',')]
    fallback_strategies: Vec<String>,
    /// This node (for the config label and Node events; needs API access).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// The kubelet's device-plugins directory.
    #[arg(long, default_value = "/var/lib/kubelet/device-plugins")]
    plugin_dir: PathBuf,
    /// The kubelet registration socket; empty = serve without registering.
    #[arg(long, env = "KUBELET_SOCKET")]
    kubelet_socket: Option<String>,
    #[arg(long, env = "MIG_STRATEGY", value_parser = mig_strategy_parser())]
    mig_strategy: Option<MigStrategy>,
    #[arg(long, env = "DEVICE_LIST_STRATEGY", value_enum, value_delimiter = ',')]
    device_list_strategy: Vec<ListStrategyArg>,
    #[arg(long, env = "DEVICE_ID_STRATEGY", value_enum)]
    device_id_strategy: Option<IdStrategyArg>,
    #[arg(long, env = "PASS_DEVICE_SPECS")]
    pass_device_specs: Option<bool>,
    #[arg(long, env = "SHARED_DEVICES_ALLOCATION_POLICY", value_enum)]
    shared_devices_allocation_policy: Option<PolicyArg>,
    #[arg(long = "dev-root", env = "NVIDIA_DEV_ROOT")]
    dev_root: Option<String>,
    #[arg(long, env = "MPS_ROOT")]
    mps_root: Option<String>,
    /// Quiet period after a fatal XID (other than a lost GPU or a memory error, which have
    /// their own evidence): seconds of clean probes with no new XID before the GPU's
    /// devices are Healthy again.
    #[arg(long, env = "XID_RECOVERY_HOLD", value_name = "SECONDS",
          default_value_t = health::DEFAULT_QUIET_PERIOD.as_secs())]
    xid_recovery_hold: u64,
    /// One-shot, read-only: listen to GPU health events for SECONDS, probe every GPU with
    /// the plugin's health logic, print each GPU's verdict and exit (1 if any is unhealthy).
    #[arg(long, value_name = "SECONDS")]
    health_check: Option<u64>,
    /// Serve /metrics (devices withdrawn and recovered, Unhealthy now), /healthz and /readyz.
    #[arg(long, value_name = "ADDRESS")]
    metrics_address: Option<std::net::SocketAddr>,
    /// How often to check the kubelet socket, config, inventory and faulted GPUs (ms).
    #[arg(long, default_value_t = 500)]
    poll_interval_ms: u64,
    #[command(flatten)]
    gpu: GpuSourceArgs,
}

fn overrides(args: &DevicePluginArgs) -> Overrides {
    Overrides {
        mig_strategy: args.mig_strategy,
        device_list_strategies: (!args.device_list_strategy.is_empty()).then(|| {
            args.device_list_strategy
                .iter()
                .map(|s| match s {
                    ListStrategyArg::Envvar => DeviceListStrategy::Envvar,
                    ListStrategyArg::VolumeMounts => DeviceListStrategy::VolumeMounts,
                    ListStrategyArg::CdiAnnotations => DeviceListStrategy::CdiAnnotations,
                    ListStrategyArg::CdiCri => DeviceListStrategy::CdiCri,
                })
                .collect::<BTreeSet<_>>()
        }),
        device_id_strategy: args.device_id_strategy.map(|s| match s {
            IdStrategyArg::Uuid => DeviceIdStrategy::Uuid,
            IdStrategyArg::Index => DeviceIdStrategy::Index,
        }),
        pass_device_specs: args.pass_device_specs,
        dev_root: args.dev_root.clone(),
        mps_root: args.mps_root.clone(),
        allocation_policy: args.shared_devices_allocation_policy.map(|p| match p {
            PolicyArg::Distributed => AllocationPolicy::Distributed,
            PolicyArg::Packed => AllocationPolicy::Packed,
        }),
    }
}

pub fn run(args: DevicePluginArgs) -> anyhow::Result<ExitCode> {
    let backend = gpu_source::open(&args.gpu)?;
    let mut opts = Options::new(&args.plugin_dir);
    opts.kubelet_socket = match args.kubelet_socket.as_deref() {
        None => Some(args.plugin_dir.join("kubelet.sock")),
        Some("") => None,
        Some(path) => Some(PathBuf::from(path)),
    };
    let fallbacks: Vec<Fallback> = if args.fallback_strategies.is_empty() {
        DEFAULT_FALLBACKS.to_vec()
    } else {
        args.fallback_strategies
            .iter()
            .map(|s| s.parse::<Fallback>().map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<_>>()
            .context("--fallback-strategies")?
    };
    let default = args.default_config.clone();
    opts.config = match (&args.config_file, &args.config_dir, &args.config_map) {
        (Some(file), _, _) => ConfigSource::File(file.clone()),
        (None, Some(dir), _) => ConfigSource::Named {
            dir: dir.clone(),
            default,
            fallbacks,
        },
        (None, None, Some(cm)) => {
            let Some((namespace, name)) = cm.split_once('/') else {
                anyhow::bail!("--config-map {cm:?}: expected namespace/name");
            };
            ConfigSource::ConfigMap {
                namespace: namespace.into(),
                name: name.into(),
                default,
                fallbacks,
            }
        }
        (None, None, None) => ConfigSource::Defaults,
    };
    opts.overrides = overrides(&args);
    let (mut policy, warnings) = HealthPolicy::from_env(
        std::env::var(health::ENV_DISABLE).ok().as_deref(),
        std::env::var(health::ENV_ENABLE).ok().as_deref(),
    );
    for w in warnings {
        tracing::warn!("{w}");
    }
    policy.quiet_period = Duration::from_secs(args.xid_recovery_hold);
    if let Some(secs) = args.health_check {
        return health_check(backend.as_ref(), &policy, Duration::from_secs(secs));
    }
    opts.health = policy;
    opts.node_name = args.node_name.clone();
    opts.metrics_address = args.metrics_address;
    opts.poll_interval = Duration::from_millis(args.poll_interval_ms.max(50));

    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async move {
        if opts.node_name.is_some() {
            match device_plugin::kube_client().await {
                Ok(client) => opts.kube = Some(client),
                Err(e) => {
                    tracing::warn!("no Kubernetes API access ({e}); node label and events disabled")
                }
            }
        }
        device_plugin::run(opts, backend, shutdown_signal()).await
    })
    .context("gantry node device-plugin")?;
    Ok(ExitCode::SUCCESS)
}

fn health_check(
    backend: &dyn gantry_gpu::Backend,
    policy: &HealthPolicy,
    listen: Duration,
) -> anyhow::Result<ExitCode> {
    let gpus = device_plugin::check::check(backend, policy, listen)
        .context("gantry node device-plugin --health-check: counting GPUs")?;
    println!(
        "health policy: ignored XIDs {:?}, always fatal {:?}, all fatal {}, disabled {}, quiet period {}s",
        policy.ignored,
        policy.fatal,
        policy.all_fatal,
        policy.disabled,
        policy.quiet_period.as_secs()
    );
    for g in &gpus {
        let verdict = if g.healthy { "Healthy" } else { "Unhealthy" };
        println!("gpu {} {}: {verdict} ({})", g.index, g.uuid, g.detail);
    }
    Ok(if gpus.iter().all(|g| g.healthy) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
