//! `gantry bench nodes`: bring up an in-memory control plane with simulated nodes, deploy the
//! device plugin as a DaemonSet (as the operator would), and time how long until every node is
//! Ready and every GPU is allocatable; report the process's memory.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use super::{ClusterError, start};
use crate::kubelet::node_status::is_ready;
use crate::kubelet::runners::default_registry;
use crate::{ControlPlane, ControlPlaneOptions, controllers, nodes};

/// What `bench nodes` measured.
#[derive(Debug, Clone)]
pub struct NodesReport {
    pub nodes: usize,
    pub gpus: u64,
    pub ready_nodes: usize,
    pub allocatable_gpus: u64,
    /// From start until every node was Ready.
    pub to_ready: Option<Duration>,
    /// From start until every GPU was allocatable (device plugins registered).
    pub to_gpus: Option<Duration>,
    /// Resident memory at the end and its peak (`VmRSS`, `VmHWM`), bytes.
    pub rss_bytes: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Spec(#[from] nodes::SpecError),
    #[error(transparent)]
    Sim(#[from] crate::SimError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("bench: {0}")]
    Api(#[from] kube::Error),
    #[error("bench: {0}")]
    Io(#[from] std::io::Error),
}

fn proc_status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()
        .map(|k| k * 1024)
}

/// The device plugin DaemonSet the bench deploys (GPU nodes only, like the operator's).
fn plugin_daemonset() -> Result<DaemonSet, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "bench-device-plugin", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "bench-device-plugin"}},
            "template": {
                "metadata": {"labels": {"app": "bench-device-plugin"}},
                "spec": {
                    "nodeSelector": {gantry_api::names::NFD_GPU_LABELS[0]: "true"},
                    "containers": [{"name": "device-plugin", "image": "gantry",
                                    "command": ["gantry", "node", "device-plugin"]}]
                }
            }
        }
    }))
}

/// Run the benchmark for `spec`, waiting at most `timeout`.
pub async fn nodes_bench(spec: &str, timeout: Duration) -> Result<NodesReport, BenchError> {
    let plan = nodes::plan(spec)?;
    let want_nodes = plan.len();
    let want_gpus: u64 = plan.iter().map(|p| u64::from(p.gpus)).sum();
    let t0 = Instant::now();
    let cp = ControlPlane::start(ControlPlaneOptions::default()).await?;
    let client = cp.client()?;
    let tmp = tempfile::Builder::new().prefix("gb").tempdir_in("/tmp")?;
    let _ctl = controllers::start(client.clone());
    super::ensure_namespace(&client, "kube-system").await?;
    let cluster = start(client.clone(), tmp.path(), plan, default_registry()).await?;
    if want_gpus > 0 {
        let ds = plugin_daemonset().map_err(|e| std::io::Error::other(e.to_string()))?;
        Api::<DaemonSet>::namespaced(client.clone(), "kube-system")
            .create(&PostParams::default(), &ds)
            .await?;
    }
    let api: Api<Node> = Api::all(client.clone());
    let mut report = NodesReport {
        nodes: want_nodes,
        gpus: want_gpus,
        ready_nodes: 0,
        allocatable_gpus: 0,
        to_ready: None,
        to_gpus: None,
        rss_bytes: None,
        peak_rss_bytes: None,
    };
    while t0.elapsed() < timeout {
        let list = api.list(&ListParams::default()).await?;
        report.ready_nodes = list.items.iter().filter(|n| is_ready(n)).count();
        report.allocatable_gpus = list
            .items
            .iter()
            .filter_map(|n| {
                n.status
                    .as_ref()?
                    .allocatable
                    .as_ref()?
                    .get(gantry_api::names::RESOURCE_GPU)
            })
            .filter_map(|q| q.0.parse::<u64>().ok())
            .sum();
        if report.to_ready.is_none() && report.ready_nodes >= want_nodes {
            report.to_ready = Some(t0.elapsed());
        }
        if report.to_gpus.is_none() && report.allocatable_gpus >= want_gpus {
            report.to_gpus = Some(t0.elapsed());
        }
        if report.to_ready.is_some() && report.to_gpus.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    report.rss_bytes = proc_status_kib("VmRSS:");
    report.peak_rss_bytes = proc_status_kib("VmHWM:");
    drop(cluster);
    drop(cp);
    Ok(report)
}
