//! One contract for every node agent, and one registry of them.
//!
//! An agent is its flags and env ([`Agent::Args`], a clap type), the options they make on a
//! host ([`Agent::options`]) and a run on those options ([`Agent::run`]) until its shutdown
//! future resolves. Where it runs is a [`Host`]: the machine itself ([`LocalHost`], for
//! `gantry node <agent>`) or a simulated node (the sim kubelet's). [`AGENTS`] lists them: the
//! `gantry node` subcommands and the sim kubelet's in-process operand containers are both
//! built from it, so adding an agent is one entry there.

pub mod contract;
mod device_plugin;
mod discovery;
mod exporter;
mod mig_manager;
pub mod registry;
mod toolkit;
mod validator;

pub use contract::{Agent, AgentError, Host, LocalHost, Run, Shutdown};
pub use registry::{AGENTS, Entry, get};
