//! `gantry bench operator`: helpers that measure a bare cluster becoming a GPU cluster under
//! the operator — every node allocatable, the policy `ready` — and the operator's memory.
//! The caller starts the cluster and runs the operator as a child process, so the RSS read
//! here is the operator's own.

use std::time::{Duration, Instant};

use crate::tally::Tally;

use kube::api::{Api, DynamicObject, PostParams};

use gantry_operator::reconcile::cluster_policy_resource;

/// The policy the bench applies: upstream's defaults (the nine required sections, empty).
pub const DEFAULT_POLICY: &str = "apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata:
  name: cluster-policy
spec:
  operator: {}
  daemonsets: {}
  driver: {}
  toolkit: {}
  devicePlugin: {}
  dcgmExporter: {}
  dcgm: {}
  nodeStatusExporter: {}
  gfd: {}
";

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("bench policy: {0}")]
    Policy(String),
    #[error("bench: {0}")]
    Api(#[from] kube::Error),
    #[error("bench: timed out after {secs} s: {progress}")]
    Timeout { secs: u64, progress: String },
}

/// Milestones after the policy was created.
#[derive(Debug, Default, Clone)]
pub struct Progress {
    pub nodes: usize,
    pub allocatable_nodes: usize,
    pub allocatable_gpus: u64,
    pub to_allocatable: Option<Duration>,
    pub to_ready: Option<Duration>,
    /// The policy's `status.state` is `ready` now.
    pub ready: bool,
    /// The policy's last `Error` condition message.
    pub message: String,
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} nodes allocatable ({} GPUs), policy ready: {} {}",
            self.allocatable_nodes, self.nodes, self.allocatable_gpus, self.ready, self.message
        )
    }
}

/// Install every CRD Gantry serves (existing ones are left alone).
pub async fn install_crds(client: &kube::Client) -> Result<(), BenchError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crds = gantry_api::crds::all_crds().map_err(|e| BenchError::Policy(e.to_string()))?;
    for crd in crds {
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Create the ClusterPolicy from YAML; returns its name.
pub async fn create_policy(client: &kube::Client, yaml: &str) -> Result<String, BenchError> {
    let obj: DynamicObject =
        serde_yaml::from_str(yaml).map_err(|e| BenchError::Policy(e.to_string()))?;
    let name = obj
        .metadata
        .name
        .clone()
        .ok_or_else(|| BenchError::Policy("metadata.name is missing".into()))?;
    Api::<DynamicObject>::all_with(client.clone(), &cluster_policy_resource())
        .create(&PostParams::default(), &obj)
        .await?;
    Ok(name)
}

fn allocatable(node: &serde_json::Value) -> u64 {
    node.pointer("/status/allocatable")
        .and_then(|a| a.get(gantry_api::names::RESOURCE_GPU))
        .and_then(serde_json::Value::as_str)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Each node's allocatable GPUs, from the store's events ([`Tally`]).
pub struct NodeGpus(Tally<u64>);

impl NodeGpus {
    pub fn new(store: &gantry_sim::store::Store) -> Self {
        NodeGpus(Tally::new(store, "/nodes", None, allocatable))
    }

    /// (nodes with GPUs allocatable, their GPUs)
    fn counts(&self) -> (usize, u64) {
        self.0.read(|g| {
            let with = g.values().filter(|c| **c > 0);
            (with.clone().count(), with.sum())
        })
    }
}

/// Where the run stands, read from the API server's store (not over HTTPS, which would load
/// the server the bench measures).
pub fn progress(
    store: &gantry_sim::store::Store,
    nodes: &NodeGpus,
    policy: &str,
    p: &mut Progress,
) {
    (p.allocatable_nodes, p.allocatable_gpus) = nodes.counts();
    let res = cluster_policy_resource();
    let gr = format!("{}/{}", res.group, res.plural);
    let cp = store.get(&gr, "", policy);
    let status = cp.as_ref().and_then(|c| c.get("status"));
    p.message = status
        .and_then(|s| s.get("conditions"))
        .and_then(|c| c.as_array())
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Error"))
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    p.ready = status.and_then(|s| s.get("state")).and_then(|s| s.as_str()) == Some("ready");
}

/// Poll until every node in `gpu_nodes` reports `nvidia.com/gpu` allocatable and then the
/// policy is `ready`; times are measured from `t0`. `on_tick` runs every poll (to sample memory and
/// print progress).
pub async fn wait_ready(
    store: &gantry_sim::store::Store,
    policy: &str,
    gpu_nodes: usize,
    t0: Instant,
    timeout: Duration,
    mut on_tick: impl FnMut(&Progress),
) -> Result<Progress, BenchError> {
    let mut p = Progress {
        nodes: gpu_nodes,
        ..Default::default()
    };
    let nodes = NodeGpus::new(store);
    loop {
        progress(store, &nodes, policy, &mut p);
        if p.to_allocatable.is_none() && p.allocatable_nodes >= gpu_nodes {
            p.to_allocatable = Some(t0.elapsed());
        }
        // Ready counts once every node is allocatable: with nodes that register while the
        // clock runs (`--kubelet-processes`), a policy with no GPU node yet is trivially ready.
        if p.to_ready.is_none() && p.ready && p.to_allocatable.is_some() {
            p.to_ready = Some(t0.elapsed());
        }
        on_tick(&p);
        if p.to_allocatable.is_some() && p.to_ready.is_some() {
            return Ok(p);
        }
        if t0.elapsed() > timeout {
            return Err(BenchError::Timeout {
                secs: timeout.as_secs(),
                progress: p.to_string(),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_parses() {
        let v: gantry_api::cluster_policy::ClusterPolicy =
            serde_yaml::from_str(DEFAULT_POLICY).unwrap();
        assert_eq!(v.metadata.name.as_deref(), Some("cluster-policy"));
    }
}
