//! `gantry node <agent>`: the node agents, one subcommand each.

mod device_plugin;
mod toolkit;

use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum NodeCommand {
    /// Configure the container runtime for the `nvidia` runtime and write the CDI spec.
    Toolkit(toolkit::ToolkitArgs),
    /// Kubelet device plugin: advertise GPUs, MIG devices and shared replicas; allocate them.
    DevicePlugin(device_plugin::DevicePluginArgs),
}

pub fn run(cmd: NodeCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        NodeCommand::Toolkit(args) => toolkit::run(args),
        NodeCommand::DevicePlugin(args) => device_plugin::run(args),
    }
}
