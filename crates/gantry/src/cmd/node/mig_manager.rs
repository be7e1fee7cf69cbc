//! `gantry node mig-manager`: make the node's GPUs match a named layout of a mig-parted config.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gantry_api::mig_parted::MigPartedConfig;
use gantry_node::mig::{self, ReadOnly};

use super::gpu_source::{self, GpuSourceArgs};

#[derive(clap::Args)]
pub struct MigManagerArgs {
    /// mig-parted config file (v1).
    #[arg(long, env = "CONFIG_FILE")]
    config_file: PathBuf,
    /// Name of the config to apply (the `nvidia.com/mig.config` label value).
    #[arg(long, env = "MIG_PARTED_SELECTED_CONFIG")]
    config: String,
    /// Print the plan (per GPU: current layout -> wanted, steps) and change nothing.
    /// Without it the plan is applied once, now, and checked.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    gpu: GpuSourceArgs,
}

pub fn run(args: MigManagerArgs) -> anyhow::Result<ExitCode> {
    let path = args.config_file.display().to_string();
    let text = std::fs::read_to_string(&args.config_file)
        .with_context(|| format!("reading mig-parted config {path}"))?;
    let config: MigPartedConfig =
        serde_yaml::from_str(&text).with_context(|| format!("parsing mig-parted config {path}"))?;
    let backend = gpu_source::open(&args.gpu)?;
    if args.dry_run {
        // Only a read-only view reaches the planner: a dry run cannot change a GPU.
        let facts = mig::observe(ReadOnly::new(backend.as_ref())).context("reading the GPUs")?;
        let plan = mig::plan(&config, &args.config, &facts).with_context(|| path.clone())?;
        print!("{}", mig::render::render(&plan));
        return Ok(ExitCode::SUCCESS);
    }
    let report = mig::reconcile(backend.as_ref(), &config, &args.config)
        .with_context(|| format!("applying MIG config {:?} from {path}", args.config))?;
    if report.changed.is_empty() {
        println!("MIG config {:?} already applied", args.config);
    } else {
        println!(
            "MIG config {:?} applied to GPU(s) {:?}",
            args.config, report.changed
        );
    }
    Ok(ExitCode::SUCCESS)
}
