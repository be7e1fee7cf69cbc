//! The agent contract: `Args → Options → run(options, host, shutdown)`, and the [`Host`] an
//! agent runs on.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use gantry_gpu::Backend;

use crate::args::GpuArgs;
use crate::host::{HostPaths, hostname_from_env};

/// An agent's error, whatever its type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Resolves when the agent must stop (SIGTERM, or the simulated pod stopping).
pub type Shutdown = BoxFuture<'static, ()>;
/// One run of an agent. Boxed: the body compiles once, in this crate, not again in every
/// crate that awaits it (docs/benchmarks.md, "Build time").
pub type Run = BoxFuture<'static, Result<(), AgentError>>;

/// How an agent ended badly.
#[derive(Debug)]
pub enum AgentError {
    /// Its command line was rejected, or asked for `--help`: clap's message and exit code.
    Usage(clap::Error),
    /// Its flags and env parse but make no options on this host (exit code 1).
    Options(BoxError),
    /// It failed: the error it prints on its way out (exit code 1).
    Failed(BoxError),
}

impl AgentError {
    pub fn failed(e: impl Into<BoxError>) -> Self {
        AgentError::Failed(e.into())
    }
}

impl From<clap::Error> for AgentError {
    fn from(e: clap::Error) -> Self {
        AgentError::Usage(e)
    }
}

impl From<String> for AgentError {
    fn from(message: String) -> Self {
        AgentError::Failed(message.into())
    }
}

impl std::fmt::Display for AgentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentError::Usage(e) => write!(f, "{}", e.render().to_string().trim_end()),
            AgentError::Options(e) | AgentError::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// Where an agent runs: what differs between the machine itself ([`LocalHost`]) and a
/// simulated node (the sim kubelet's host).
pub trait Host: Send + Sync + 'static {
    /// Where the agent's paths are on this machine.
    fn paths(&self) -> &HostPaths;
    /// The node's name, for labels (dcgm-exporter's `Hostname`).
    fn hostname(&self) -> String;
    /// The GPUs the agent reads (NVML, or `--sim-model`), or why there are none; `for_what`
    /// says what the agent wanted them for.
    fn gpus(&self, args: &GpuArgs, for_what: &str) -> Result<Arc<dyn Backend>, String>;
    /// A Kubernetes API client (`kubeconfig`, else in-cluster config or `KUBECONFIG`).
    fn client(&self, kubeconfig: Option<&Path>)
    -> BoxFuture<'static, Result<kube::Client, String>>;
    /// The address a server configured on `configured` listens on.
    fn listen_address(&self, configured: SocketAddr) -> SocketAddr {
        configured
    }
    /// A server of the agent listens on `address` now.
    fn serving(&self, _address: SocketAddr) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
    /// A line of what a one-shot run reports (stdout on the machine).
    fn print(&self, line: &str);
    /// A simulated node: no driver or container runtime process, and periods that keep a
    /// thousand such nodes cheap (each agent says which in its `options`).
    fn simulated(&self) -> bool {
        false
    }
    /// The GPUs of a simulated node, whose devices no driver can list (`None`: a machine, or
    /// a simulated node without GPUs).
    fn simulated_gpus(&self) -> Option<Arc<dyn Backend>> {
        None
    }
}

/// The machine the process runs on: `gantry node <agent>` in a container of a DaemonSet, its
/// paths the host's through its mounts.
#[derive(Default)]
pub struct LocalHost {
    paths: HostPaths,
}

impl Host for LocalHost {
    fn paths(&self) -> &HostPaths {
        &self.paths
    }

    fn hostname(&self) -> String {
        hostname_from_env()
    }

    fn gpus(&self, args: &GpuArgs, _for_what: &str) -> Result<Arc<dyn Backend>, String> {
        args.open()
    }

    fn client(
        &self,
        kubeconfig: Option<&Path>,
    ) -> BoxFuture<'static, Result<kube::Client, String>> {
        let kubeconfig = kubeconfig.map(Path::to_path_buf);
        Box::pin(async move {
            gantry_runtime::client(kubeconfig.as_deref())
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn print(&self, line: &str) {
        println!("{line}");
    }
}

/// A node agent (`gantry node <NAME>`).
pub trait Agent: 'static {
    /// The subcommand: `gantry node <NAME>`.
    const NAME: &'static str;
    /// One line for `gantry node --help`.
    const ABOUT: &'static str;
    /// `gantry node <NAME>` runs it on a runtime with worker threads (else on one thread).
    const WORKER_THREADS: bool = false;
    /// Its flags and env.
    type Args: clap::Args + clap::FromArgMatches + Send + 'static;
    /// What one run needs, from the args on a host.
    type Options: Send + 'static;

    /// The command line after `gantry node <NAME>` as the agent reads it.
    fn normalize(argv: Vec<String>) -> Vec<String> {
        argv
    }

    /// The args made into options on `host`: its paths resolved, its periods applied.
    fn options(args: Self::Args, host: &dyn Host) -> Result<Self::Options, AgentError>;

    /// Run until done or until `shutdown` resolves.
    fn run(options: Self::Options, host: Arc<dyn Host>, shutdown: Shutdown) -> Run;
}
