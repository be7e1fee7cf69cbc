//! `gantry node <agent>`: the node agents, one subcommand each, from the agent registry
//! (`gantry_node::agent::AGENTS`), which the simulated kubelet runs its operand containers
//! from too. Each agent's flags and env are its library `args` type.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{ArgMatches, Command, FromArgMatches};
use gantry_node::agent::{self, AgentError, LocalHost};

/// One agent's subcommand, as clap parsed it.
pub struct NodeCommand {
    agent: &'static agent::Entry,
    matches: ArgMatches,
}

impl FromArgMatches for NodeCommand {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let (name, matches) = m
            .subcommand()
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::MissingSubcommand))?;
        let agent = agent::get(name)
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidSubcommand))?;
        Ok(NodeCommand {
            agent,
            matches: matches.clone(),
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Subcommand for NodeCommand {
    fn augment_subcommands(cmd: Command) -> Command {
        agent::AGENTS
            .iter()
            .fold(cmd, |cmd, a| cmd.subcommand(a.command()))
    }

    fn augment_subcommands_for_update(cmd: Command) -> Command {
        Self::augment_subcommands(cmd)
    }

    fn has_subcommand(name: &str) -> bool {
        agent::get(name).is_some()
    }
}

/// Run the agent on this machine until it ends or the process is told to stop.
pub fn run(cmd: NodeCommand) -> anyhow::Result<ExitCode> {
    let name = cmd.agent.name;
    let rt = if cmd.agent.worker_threads {
        tokio::runtime::Runtime::new()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
    .context("starting the async runtime")?;
    let host = Arc::new(LocalHost::default());
    let shutdown = Box::pin(gantry_runtime::shutdown::signal());
    match rt.block_on(cmd.agent.start(&cmd.matches, host, shutdown)) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(AgentError::Usage(e)) => e.exit(),
        // As clap reports a bad flag: the flag and the value, no agent prefix.
        Err(AgentError::Options(e)) => Err(anyhow::Error::from_boxed(e)),
        Err(AgentError::Failed(e)) => {
            Err(anyhow::Error::from_boxed(e).context(format!("gantry node {name}")))
        }
    }
}
