//! `gantry node mig-manager`: make the node's GPUs match a named layout of a mig-parted config.
//! With `--config NAME` it applies (or, with `--dry-run`, prints) that layout once; without it
//! it runs as the daemon that follows the Node's `nvidia.com/mig.config` label.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gantry_api::mig_parted::MigPartedConfig;
use gantry_node::mig::{self, ConfigSource, DaemonOptions, ReadOnly, daemon};

use super::gpu_source::{self, GpuSourceArgs};

#[derive(clap::Args)]
pub struct MigManagerArgs {
    /// mig-parted config file (v1).
    #[arg(long, env = "CONFIG_FILE", conflicts_with = "config_map")]
    config_file: Option<PathBuf>,
    /// mig-parted config in a ConfigMap, `NAMESPACE/NAME` (key `config.yaml`).
    #[arg(long, env = "CONFIG_MAP")]
    config_map: Option<String>,
    /// Gantry's ConfigMap of MigClusterPolicy inline layouts, `NAMESPACE/NAME`, merged in
    /// (default: `gantry-mig-custom-layouts` beside --config-map, else in POD_NAMESPACE).
    #[arg(long, env = "CUSTOM_CONFIG_MAP")]
    custom_config_map: Option<String>,
    /// Name of the config to apply once (the `nvidia.com/mig.config` label value). Without it
    /// the daemon follows the label of the Node NODE_NAME.
    #[arg(long, env = "MIG_PARTED_SELECTED_CONFIG")]
    config: Option<String>,
    /// Print the plan (per GPU: current layout -> wanted, steps) and change nothing.
    #[arg(long, requires = "config")]
    dry_run: bool,
    /// The Node to follow (daemon mode).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    #[arg(long, env = "POD_NAMESPACE", hide = true)]
    pod_namespace: Option<String>,
    #[command(flatten)]
    gpu: GpuSourceArgs,
}

fn namespaced(flag: &str, v: &str) -> anyhow::Result<(String, String)> {
    daemon::parse_namespaced(v).with_context(|| format!("{flag} {v:?}: write NAMESPACE/NAME"))
}

pub fn run(args: MigManagerArgs) -> anyhow::Result<ExitCode> {
    let source = match (&args.config_file, &args.config_map) {
        (Some(f), _) => ConfigSource::File(f.clone()),
        (None, Some(m)) => {
            let (namespace, name) = namespaced("--config-map", m)?;
            ConfigSource::ConfigMap { namespace, name }
        }
        (None, None) => anyhow::bail!("set --config-file or --config-map (the mig-parted config)"),
    };
    let custom = match &args.custom_config_map {
        Some(m) => Some(namespaced("--custom-config-map", m)?),
        None => daemon::default_custom_layouts(&source, args.pod_namespace.as_deref()),
    };
    let backend = gpu_source::open(&args.gpu)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let Some(name) = args.config.clone() else {
        let node = args
            .node_name
            .clone()
            .context("daemon mode (no --config) needs the Node: set NODE_NAME or --node-name")?;
        let mut opts = DaemonOptions::new(node, source);
        opts.custom_layouts = custom;
        rt.block_on(async move {
            let client = gantry_node::discovery::client_from_env()
                .await
                .context("connecting to the Kubernetes API")?;
            mig::run(opts, backend, client, gpu_source::shutdown_signal())
                .await
                .context("gantry node mig-manager")
        })?;
        return Ok(ExitCode::SUCCESS);
    };
    let config: MigPartedConfig = match &source {
        // A plain file needs no cluster (the dry run on a bare machine).
        ConfigSource::File(p) => {
            let path = p.display().to_string();
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading mig-parted config {path}"))?;
            serde_yaml::from_str(&text)
                .with_context(|| format!("parsing mig-parted config {path}"))?
        }
        ConfigSource::ConfigMap { .. } => rt.block_on(async {
            let client = gantry_node::discovery::client_from_env()
                .await
                .context("connecting to the Kubernetes API")?;
            daemon::load_config(&client, &source, custom.as_ref())
                .await
                .map_err(anyhow::Error::msg)
        })?,
    };
    if args.dry_run {
        // Only a read-only view reaches the planner: a dry run cannot change a GPU.
        let facts = mig::observe(ReadOnly::new(backend.as_ref())).context("reading the GPUs")?;
        let plan = mig::plan(&config, &name, &facts).with_context(|| source.to_string())?;
        print!("{}", mig::render::render(&plan));
        return Ok(ExitCode::SUCCESS);
    }
    let report = mig::reconcile(backend.as_ref(), &config, &name)
        .with_context(|| format!("applying MIG config {name:?} from {source}"))?;
    if report.changed.is_empty() {
        println!("MIG config {name:?} already applied");
    } else {
        println!("MIG config {name:?} applied to GPU(s) {:?}", report.changed);
    }
    Ok(ExitCode::SUCCESS)
}
