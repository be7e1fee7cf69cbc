//! `gantry node discovery`: GPU Feature Discovery labels on the node's own Node object.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gantry_node::discovery::{self, DiscoveryOptions, MigStrategy};

use super::mig_strategy_parser;

use super::gpu_source::{self, GpuSourceArgs};

#[derive(clap::Args)]
pub struct DiscoveryArgs {
    #[command(flatten)]
    gpu: GpuSourceArgs,
    /// Print the labels as sorted `key=value` lines and exit; needs no cluster.
    #[arg(long)]
    print: bool,
    /// Label once and exit.
    #[arg(long, env = "GFD_ONESHOT")]
    oneshot: bool,
    /// The Node to label.
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// Where the host's `/` is mounted (for /sys/class/dmi and /sys/bus/pci).
    #[arg(long, env = "GANTRY_HOST_ROOT", default_value = "/")]
    host_root: PathBuf,
    /// Device plugin config file (v1): MIG strategy, sharing, `flags.gfd`.
    #[arg(long, env = "CONFIG_FILE", conflicts_with = "config_map")]
    config_file: Option<PathBuf>,
    /// ConfigMap `namespace/name` of named device plugin configs, read through the API; the
    /// node label `nvidia.com/device-plugin.config` picks the key.
    #[arg(long)]
    config_map: Option<String>,
    /// Named config used when the node label is empty.
    #[arg(long, env = "DEFAULT_CONFIG")]
    default_config: Option<String>,
    /// MIG strategy (overrides the config file; default none).
    #[arg(long, env = "MIG_STRATEGY", value_parser = mig_strategy_parser())]
    mig_strategy: Option<MigStrategy>,
    /// Re-label period: `60s`, `5m`, or `infinite` (overrides the config file; default 60s).
    #[arg(long, env = "GFD_SLEEP_INTERVAL")]
    sleep_interval: Option<String>,
    /// Leave out `nvidia.com/gfd.timestamp`.
    #[arg(long, env = "GFD_NO_TIMESTAMP")]
    no_timestamp: bool,
}

pub fn run(args: DiscoveryArgs) -> anyhow::Result<ExitCode> {
    let sleep_interval = match &args.sleep_interval {
        Some(s) => Some(
            discovery::config::parse_interval(s)
                .map_err(|e| anyhow::anyhow!("--sleep-interval {e}"))?,
        ),
        None => None,
    };
    let config_map = match &args.config_map {
        Some(cm) => {
            let (ns, name) = cm
                .split_once('/')
                .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                .with_context(|| format!("--config-map {cm:?}: expected namespace/name"))?;
            Some((ns.to_string(), name.to_string()))
        }
        None => None,
    };
    let backend = gpu_source::open(&args.gpu)?;
    let opts = DiscoveryOptions {
        config_map,
        default_config: args.default_config.clone(),
        node_name: args.node_name.clone(),
        host_root: args.host_root.clone(),
        config_file: args.config_file.clone(),
        mig_strategy: args.mig_strategy,
        sleep_interval,
        oneshot: args.oneshot,
        no_timestamp: args.no_timestamp,
    };
    if args.print {
        let labels = discovery::labels_once(&opts, backend.as_ref())?;
        print!("{}", discovery::render(&labels));
        return Ok(ExitCode::SUCCESS);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let client = discovery::client_from_env().await?;
        discovery::run(opts, backend, client, gpu_source::shutdown_signal()).await
    })
    .context("gantry node discovery")?;
    Ok(ExitCode::SUCCESS)
}
