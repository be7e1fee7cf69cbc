//! Containers the kubelet runs in-process instead of as processes: what a runner gets
//! ([`AgentContext`]), how it ends ([`AgentExit`]), and the registry of runners by name
//! ([`AgentRegistry`]). A container is matched to a runner by its command: `gantry node
//! <agent> …` (the node agents, see [`super::node_agents`]), `gantry <component> …` of
//! Gantry's image (see [`super::component_pods`]), or the driver container's image (see
//! [`super::driver`]). The sim does not hard-wire which runners exist.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use gantry_gpu::SimBackend;
use gantry_node::agent::AgentError;
use gantry_node::host::HostPaths;
use k8s_openapi::api::core::v1::Container;
use tokio::sync::watch;

/// What an in-process agent gets instead of a container.
#[derive(Clone)]
pub struct AgentContext {
    pub node_name: String,
    /// `<root>/<node>`: stands in for `/` on the host.
    pub host_root: PathBuf,
    /// Where the container's paths are: its hostPath mounts into the node's host dir, the
    /// kubelet's directories where the node keeps them.
    pub paths: HostPaths,
    /// The kubelet's device plugin directory (kubelet.sock lives here).
    pub device_plugin_dir: PathBuf,
    pub kubelet_socket: PathBuf,
    pub pod_resources_socket: PathBuf,
    /// The node's simulated GPUs (`None` on a CPU node).
    pub backend: Option<Arc<SimBackend>>,
    pub client: kube::Client,
    /// Everything after `node <agent>` in the container's command + args.
    pub args: Vec<String>,
    /// The container's literal env (`value` entries; `valueFrom` resolved for the downward
    /// API fields `spec.nodeName`, `metadata.name`, `metadata.namespace`).
    pub env: BTreeMap<String, String>,
    pub pod_name: String,
    pub pod_namespace: String,
    /// Flips to `true` when the pod is stopping; the agent should return promptly.
    pub shutdown: watch::Receiver<bool>,
    /// The container's image.
    pub image: String,
    /// The node's `driver-fail` fault (see [`crate::cluster::Fault::DriverFail`]).
    pub driver_fail: watch::Receiver<bool>,
}

/// How an in-process agent's container ended badly: the process's exit code and the error it
/// printed on its way out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentExit {
    pub code: i32,
    pub message: String,
}

/// An agent's error: exit code 1, as `gantry` exits on an error.
impl From<String> for AgentExit {
    fn from(message: String) -> Self {
        AgentExit { code: 1, message }
    }
}

impl From<&str> for AgentExit {
    fn from(message: &str) -> Self {
        message.to_string().into()
    }
}

/// A command line clap rejects: its exit code (2 for a usage error) and its message.
impl From<clap::Error> for AgentExit {
    fn from(e: clap::Error) -> Self {
        AgentExit {
            code: e.exit_code(),
            message: e.render().to_string().trim_end().to_string(),
        }
    }
}

/// How a node agent ended: a rejected command line as clap exits, a failure with code 1.
impl From<AgentError> for AgentExit {
    fn from(e: AgentError) -> Self {
        match e {
            AgentError::Usage(e) => e.into(),
            AgentError::Options(e) | AgentError::Failed(e) => e.to_string().into(),
        }
    }
}

pub type AgentFuture = Pin<Box<dyn Future<Output = Result<(), AgentExit>> + Send>>;

/// Runs one agent in-process until it ends or `ctx.shutdown` flips.
/// `Err` is how a failed container ended (exit code and message).
pub trait AgentRunner: Send + Sync {
    fn run(&self, ctx: AgentContext) -> AgentFuture;
}

impl<F> AgentRunner for F
where
    F: Fn(AgentContext) -> AgentFuture + Send + Sync,
{
    fn run(&self, ctx: AgentContext) -> AgentFuture {
        self(ctx)
    }
}

/// Agent name → runner.
#[derive(Clone, Default)]
pub struct AgentRegistry {
    runners: BTreeMap<String, Arc<dyn AgentRunner>>,
}

impl AgentRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, agent: &str, runner: Arc<dyn AgentRunner>) -> &mut Self {
        self.runners.insert(agent.to_string(), runner);
        self
    }

    pub fn get(&self, agent: &str) -> Option<Arc<dyn AgentRunner>> {
        self.runners.get(agent).cloned()
    }

    pub fn names(&self) -> Vec<String> {
        self.runners.keys().cloned().collect()
    }
}

/// Registry key of the driver container's runner (containers are matched by image, see
/// [`driver_image`]).
pub const DRIVER: &str = "driver";

/// Is this an NVIDIA driver container (image path ending in `/driver`, e.g.
/// `nvcr.io/nvidia/driver:580.95.05-ubuntu24.04`)? Returns the image.
pub fn driver_image(c: &Container) -> Option<&str> {
    let image = c.image.as_deref()?;
    let name = image.split('@').next().unwrap_or(image);
    // Drop a tag (a `:` after the last `/`; an earlier one is a registry port).
    let last_slash = name.rfind('/')?;
    let path = match name[last_slash..].find(':') {
        Some(i) => &name[..last_slash + i],
        None => name,
    };
    path.ends_with("/driver").then_some(image)
}

/// If the container runs `… node <agent> [args]` (any binary path; `sh -c "gantry node x"`
/// too), the agent and its args.
pub fn agent_command(c: &Container) -> Option<(String, Vec<String>)> {
    let mut words: Vec<String> = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .cloned()
        .collect();
    // `sh -c "gantry node device-plugin --x"`: split the script on whitespace.
    if let Some(pos) = words.iter().position(|w| w == "-c")
        && let Some(script) = words.get(pos + 1)
        && words.first().is_some_and(|w| w.ends_with("sh"))
    {
        words = script.split_whitespace().map(str::to_string).collect();
    }
    let node = words.iter().position(|w| w == "node")?;
    let binary_ok = node == 0 || words[node - 1].ends_with("gantry");
    let agent = words.get(node + 1)?;
    if !binary_ok || gantry_node::agent::get(agent).is_none() {
        return None;
    }
    Some((agent.clone(), words[node + 2..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(command: &[&str], args: &[&str]) -> Container {
        let v = |xs: &[&str]| (!xs.is_empty()).then(|| xs.iter().map(|s| s.to_string()).collect());
        Container {
            name: "c".into(),
            command: v(command),
            args: v(args),
            ..Default::default()
        }
    }

    #[test]
    fn detects_agent_commands() {
        assert_eq!(
            agent_command(&c(&["gantry"], &["node", "device-plugin", "--config", "x"])),
            Some(("device-plugin".into(), vec!["--config".into(), "x".into()]))
        );
        assert_eq!(
            agent_command(&c(&["/usr/bin/gantry", "node", "exporter"], &[])),
            Some(("exporter".into(), vec![]))
        );
        assert_eq!(
            agent_command(&c(
                &["sh", "-c", "gantry node validator --component=cuda"],
                &[]
            )),
            Some(("validator".into(), vec!["--component=cuda".into()]))
        );
        assert_eq!(
            agent_command(&c(&["node", "discovery"], &[])).map(|a| a.0),
            Some("discovery".into())
        );
        assert_eq!(
            agent_command(&c(&["gantry"], &["node", "frobnicate"])),
            None
        );
        assert_eq!(agent_command(&c(&["python"], &["node", "toolkit"])), None);
        assert_eq!(agent_command(&c(&["sleep", "infinity"], &[])), None);
        assert_eq!(agent_command(&c(&[], &[])), None);
    }

    #[test]
    fn detects_driver_images() {
        let img = |i: &str| Container {
            name: "d".into(),
            image: Some(i.into()),
            ..Default::default()
        };
        for yes in [
            "nvcr.io/nvidia/driver:580.95.05-ubuntu24.04",
            "registry.local:5000/nvidia/driver",
            "nvcr.io/nvidia/driver@sha256:0123abcd",
        ] {
            assert_eq!(driver_image(&img(yes)), Some(yes));
        }
        for no in [
            "nvcr.io/nvidia/k8s-device-plugin:v0.17",
            "driver:580",
            "nvcr.io/nvidia/driver-manager:1",
            "nvcr.io/nvidia/gpu-driver:1",
        ] {
            assert_eq!(driver_image(&img(no)), None, "{no}");
        }
    }
}
