//! `gantry node mig-manager`: make the node's GPUs match a named layout of a mig-parted config
//! (flags and env: `gantry_node::mig::args`). With `--config NAME` it applies (or, with
//! `--dry-run`, prints) that layout once; without it it runs as the daemon that follows the
//! Node's `nvidia.com/mig.config` label.

use std::process::ExitCode;

use anyhow::Context;
use gantry_api::mig_parted::MigPartedConfig;
use gantry_node::args::HostPaths;
use gantry_node::mig::{self, ConfigSource, ReadOnly, args::MigManagerArgs, daemon};

pub fn run(args: MigManagerArgs) -> anyhow::Result<ExitCode> {
    let paths = HostPaths::identity();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let Some(name) = args.config.clone() else {
        let opts = args.daemon_options(&paths)?;
        let backend = args.gpu.open().map_err(anyhow::Error::msg)?;
        rt.block_on(async move {
            let client = gantry_node::discovery::client_from_env()
                .await
                .context("connecting to the Kubernetes API")?;
            mig::run(opts, backend, client, gantry_runtime::shutdown::signal())
                .await
                .context("gantry node mig-manager")
        })?;
        return Ok(ExitCode::SUCCESS);
    };
    let source = args.source(&paths)?;
    let custom = args.custom_layouts(&source)?;
    let backend = args.gpu.open().map_err(anyhow::Error::msg)?;
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
