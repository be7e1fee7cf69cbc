//! `gantry bench nodes`: bring up a control plane (in memory, or SQLite with a data dir) with
//! simulated nodes, deploy the device plugin as a DaemonSet (as the operator would), and time
//! how long until every node is Ready and every GPU is allocatable; report the process's memory
//! and, every few seconds, where the run is (for finding what is slow).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::{ClusterError, start};
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

/// What `bench nodes` runs.
#[derive(Debug, Clone)]
pub struct NodesBenchOpts {
    /// Node spec (`nodes::plan`), e.g. `5000xH100-80GB:8`.
    pub spec: String,
    /// Give up after this long.
    pub timeout: Duration,
    /// Keep the API's state in SQLite here (None: in memory). Must not hold an earlier run.
    pub data_dir: Option<PathBuf>,
    /// Print a progress line this often (None: quiet).
    pub progress: Option<Duration>,
}

/// Where the run stands, read from the API server's store (a list over HTTPS of thousands of
/// Nodes several times a second would load the server it measures).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Progress {
    nodes: usize,
    ready: usize,
    gpus: u64,
    pods: usize,
    running: usize,
}

fn allocatable_gpus(n: &Value) -> u64 {
    n.pointer("/status/allocatable")
        .and_then(|a| a.get(gantry_api::names::RESOURCE_GPU))
        .and_then(Value::as_str)
        .and_then(|q| q.parse::<u64>().ok())
        .unwrap_or(0)
}

fn node_ready(n: &Value) -> bool {
    n.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn progress(cp: &ControlPlane) -> Progress {
    let store = &cp.api().store;
    let (nodes, _) = store.list("/nodes", None, None);
    let (pods, _) = store.list("/pods", Some("kube-system"), None);
    Progress {
        nodes: nodes.len(),
        ready: nodes.iter().filter(|n| node_ready(n)).count(),
        gpus: nodes.iter().map(|n| allocatable_gpus(n)).sum(),
        pods: pods.len(),
        running: pods
            .iter()
            .filter(|p| p.pointer("/status/phase") == Some(&json!("Running")))
            .count(),
    }
}

/// Run the benchmark.
pub async fn nodes_bench(opts: &NodesBenchOpts) -> Result<NodesReport, BenchError> {
    let plan = nodes::plan(&opts.spec)?;
    let want_nodes = plan.len();
    let want_gpus: u64 = plan.iter().map(|p| u64::from(p.gpus)).sum();
    let timeout = opts.timeout;
    let t0 = Instant::now();
    let cp = ControlPlane::start(ControlPlaneOptions {
        data_dir: opts.data_dir.clone(),
        ..Default::default()
    })
    .await?;
    let client = cp.client()?;
    let tmp = tempfile::Builder::new().prefix("gb").tempdir_in("/tmp")?;
    let _ctl = controllers::start(client.clone());
    super::ensure_namespace(&client, "kube-system").await?;
    let cluster = start(client.clone(), tmp.path(), plan, default_registry()).await?;
    let say = |what: &str| {
        if opts.progress.is_some() {
            println!("{:>7.1} s  {what}", t0.elapsed().as_secs_f64());
        }
    };
    say(&format!("{want_nodes} simulated kubelets started"));
    if want_gpus > 0 {
        let ds = plugin_daemonset().map_err(|e| std::io::Error::other(e.to_string()))?;
        Api::<DaemonSet>::namespaced(client.clone(), "kube-system")
            .create(&PostParams::default(), &ds)
            .await?;
    }
    say("device plugin DaemonSet created");
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
    let mut next_say = Instant::now();
    while t0.elapsed() < timeout {
        let p = progress(&cp);
        report.ready_nodes = p.ready;
        report.allocatable_gpus = p.gpus;
        if let Some(every) = opts.progress
            && Instant::now() >= next_say
        {
            let rss = proc_status_kib("VmRSS:").unwrap_or(0) >> 20;
            say(&format!(
                "nodes {}/{want_nodes} registered, {} Ready; plugin pods {} created, {} Running; GPUs {}/{want_gpus}; RSS {rss} MiB",
                p.nodes, p.ready, p.pods, p.running, p.gpus
            ));
            next_say = Instant::now() + every;
        }
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
