//! `gantry node <agent>`: the node agents, one subcommand each.

mod device_plugin;
mod discovery;
mod exporter;
pub mod exporter_compat;
mod gpu_source;
mod mig_manager;
mod toolkit;
mod validator;

use std::process::ExitCode;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use gantry_k8s_rules::MigStrategy;

/// `--mig-strategy` / `MIG_STRATEGY` for every agent: the shared type, its names in `--help`.
fn mig_strategy_parser() -> impl TypedValueParser<Value = MigStrategy> {
    PossibleValuesParser::new(MigStrategy::ALL.map(MigStrategy::as_str))
        .try_map(|s| s.parse::<MigStrategy>())
}

#[derive(clap::Subcommand)]
pub enum NodeCommand {
    /// Configure the container runtime for the `nvidia` runtime and write the CDI spec.
    Toolkit(toolkit::ToolkitArgs),
    /// Kubelet device plugin: advertise GPUs, MIG devices and shared replicas; allocate them.
    DevicePlugin(device_plugin::DevicePluginArgs),
    /// GPU Feature Discovery: compute the `nvidia.com/gpu.*` node labels and apply them.
    Discovery(discovery::DiscoveryArgs),
    /// GPU metrics under dcgm-exporter's names and labels, on :9400.
    Exporter(Box<exporter::ExporterArgs>),
    /// MIG manager: plan and apply a named layout of a mig-parted config (`--dry-run` prints it).
    MigManager(mig_manager::MigManagerArgs),
    /// Validate a layer of the node's GPU stack and write its ready file (or wait for one,
    /// serve the state as metrics, or idle and clean up on stop).
    Validator(validator::ValidatorArgs),
}

pub fn run(cmd: NodeCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        NodeCommand::Toolkit(args) => toolkit::run(args),
        NodeCommand::DevicePlugin(args) => device_plugin::run(args),
        NodeCommand::Discovery(args) => discovery::run(args),
        NodeCommand::Exporter(args) => exporter::run(*args),
        NodeCommand::MigManager(args) => mig_manager::run(args),
        NodeCommand::Validator(args) => validator::run(args),
    }
}
