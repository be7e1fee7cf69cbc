//! `gantry node <agent>`: the node agents, one subcommand each. Each agent's flags and env are
//! its library `args` type (`gantry_node::<agent>::args`), which the simulated kubelet parses
//! from a container's command line too.

mod device_plugin;
mod discovery;
mod exporter;
mod mig_manager;
mod toolkit;
mod validator;

use std::process::ExitCode;

use gantry_node as agents;

#[derive(clap::Subcommand)]
pub enum NodeCommand {
    /// Configure the container runtime for the `nvidia` runtime and write the CDI spec.
    Toolkit(agents::toolkit::args::ToolkitArgs),
    /// Kubelet device plugin: advertise GPUs, MIG devices and shared replicas; allocate them.
    DevicePlugin(Box<agents::device_plugin::args::DevicePluginArgs>),
    /// GPU Feature Discovery: compute the `nvidia.com/gpu.*` node labels and apply them.
    Discovery(agents::discovery::args::DiscoveryArgs),
    /// GPU metrics under dcgm-exporter's names and labels, on :9400.
    Exporter(Box<agents::exporter::args::ExporterArgs>),
    /// MIG manager: plan and apply a named layout of a mig-parted config (`--dry-run` prints it).
    MigManager(agents::mig::args::MigManagerArgs),
    /// Validate a layer of the node's GPU stack and write its ready file (or wait for one,
    /// serve the state as metrics, or idle and clean up on stop).
    Validator(agents::validator::args::ValidatorArgs),
}

pub fn run(cmd: NodeCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        NodeCommand::Toolkit(args) => toolkit::run(args),
        NodeCommand::DevicePlugin(args) => device_plugin::run(*args),
        NodeCommand::Discovery(args) => discovery::run(args),
        NodeCommand::Exporter(args) => exporter::run(*args),
        NodeCommand::MigManager(args) => mig_manager::run(args),
        NodeCommand::Validator(args) => validator::run(args),
    }
}
