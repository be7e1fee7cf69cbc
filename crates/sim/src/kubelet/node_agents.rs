//! The node agents on a simulated node: a container whose command runs `gantry node <agent> …`
//! is started through the agent registry (`gantry_node::agent::AGENTS`, the one `gantry node`
//! is built from) on the node as its [`Host`]: the container's hostPath mounts into the node's
//! host directory, the node's simulated GPUs, the kubelet's API client, and a loopback port of
//! its own for a server, published as the pod annotation `sim.gantry.dev/metrics-address`.
//! The command line is parsed with the agent's own flag type, env from the container, so a
//! command line the binary rejects ends the container as the binary would.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use gantry_api::names;
use gantry_gpu::{Backend, SimBackend};
use gantry_node::agent::{AGENTS, Entry, Host};
use gantry_node::args::GpuArgs;
use gantry_node::host::HostPaths;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;

use super::driver::DriverRunner;
use super::in_process::{AgentContext, AgentExit, AgentFuture, AgentRegistry, AgentRunner, DRIVER};

/// Every runner the sim knows: the node agents and the driver container.
pub fn default_registry() -> AgentRegistry {
    let mut r = AgentRegistry::new();
    for agent in AGENTS {
        r.register(agent.name, Arc::new(NodeAgent(agent)));
    }
    r.register(DRIVER, Arc::new(DriverRunner::default()));
    r
}

/// Runs one registered agent in-process on the container's node.
struct NodeAgent(&'static Entry);

impl AgentRunner for NodeAgent {
    fn run(&self, ctx: AgentContext) -> AgentFuture {
        let host = Arc::new(SimNode {
            node_name: ctx.node_name,
            paths: ctx.paths,
            backend: ctx.backend,
            client: ctx.client,
            pod_name: ctx.pod_name,
            pod_namespace: ctx.pod_namespace,
        });
        let run = self
            .0
            .start_argv(ctx.args, &ctx.env, host, Box::pin(stopped(ctx.shutdown)));
        Box::pin(async move { run.await.map_err(AgentExit::from) })
    }
}

/// A simulated node as an agent's host.
struct SimNode {
    node_name: String,
    paths: HostPaths,
    backend: Option<Arc<SimBackend>>,
    client: kube::Client,
    pod_name: String,
    pod_namespace: String,
}

const LOOPBACK_ANY_PORT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

impl Host for SimNode {
    fn paths(&self) -> &HostPaths {
        &self.paths
    }

    fn hostname(&self) -> String {
        self.node_name.clone()
    }

    /// The node's own GPUs, whatever `--sim-model` says.
    fn gpus(&self, _args: &GpuArgs, for_what: &str) -> Result<Arc<dyn Backend>, String> {
        self.simulated_gpus()
            .ok_or_else(|| format!("node {} has no GPUs {for_what}", self.node_name))
    }

    fn client(
        &self,
        _kubeconfig: Option<&Path>,
    ) -> BoxFuture<'static, Result<kube::Client, String>> {
        let client = self.client.clone();
        Box::pin(async move { Ok(client) })
    }

    /// Many nodes share one machine: every server gets a loopback port of its own.
    fn listen_address(&self, _configured: SocketAddr) -> SocketAddr {
        LOOPBACK_ANY_PORT
    }

    /// Put the address onto the pod, where a scrape finds it.
    fn serving(&self, address: SocketAddr) -> BoxFuture<'static, Result<(), String>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.pod_namespace);
        let (namespace, pod) = (self.pod_namespace.clone(), self.pod_name.clone());
        Box::pin(async move {
            let patch = json!({"metadata": {"annotations": {
                names::ANNOTATION_SIM_METRICS_ADDRESS: address.to_string()}}});
            api.patch(&pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| {
                    format!(
                        "publishing {} on pod {namespace}/{pod}: {e}",
                        names::ANNOTATION_SIM_METRICS_ADDRESS
                    )
                })
        })
    }

    /// The container's log.
    fn print(&self, line: &str) {
        tracing::info!(node = %self.node_name, "{line}");
    }

    fn simulated(&self) -> bool {
        true
    }

    fn simulated_gpus(&self) -> Option<Arc<dyn Backend>> {
        self.backend.clone().map(|b| b as Arc<dyn Backend>)
    }
}

/// Resolves once the pod's shutdown flag flips (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_has_every_agent_and_the_driver() {
        assert_eq!(
            default_registry().names(),
            [
                "device-plugin",
                "discovery",
                "driver",
                "exporter",
                "mig-manager",
                "toolkit",
                "validator"
            ]
        );
    }
}
