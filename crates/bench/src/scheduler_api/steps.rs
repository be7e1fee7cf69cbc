//! `gantry bench scheduler-api`: throughput through the API. Nodes are created with their
//! allocatable set directly (no kubelets or device plugins: 1,000 of those would measure the
//! simulated nodes, not the scheduler); pending one-GPU bare pods go in first, then the
//! scheduler starts and the clock runs until every pod is bound. Every pod goes the whole
//! way: pod grouper (PodGroup + annotation), cycle, `pods/binding`.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct ApiBenchOptions {
    pub nodes: usize,
    pub gpus_per_node: u32,
    pub pods: usize,
    pub namespace: String,
    pub concurrency: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("bench setup: {what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error("bench: starting the scheduler: {0}")]
    Spawn(String),
    #[error("bench: only {bound} of {want} pods bound after {secs}s")]
    Timeout {
        bound: usize,
        want: usize,
        secs: u64,
    },
}

fn api_err(what: &str) -> impl Fn(kube::Error) -> BenchError + '_ {
    move |source| BenchError::Api {
        what: what.to_string(),
        source,
    }
}

fn node(name: &str, gpus: u32) -> Result<Node, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            gantry_api::names::LABEL_GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3",
            gantry_api::names::LABEL_GPU_MEMORY: "81559",
            gantry_api::names::LABEL_GPU_COUNT: gpus.to_string(),
        }},
        "status": {
            "capacity": {"cpu": "128", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": gpus.to_string()},
            "allocatable": {"cpu": "128", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": gpus.to_string()},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }))
}

fn pod(ns: &str, i: usize) -> Result<Pod, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("bench-{i:05}"), "namespace": ns,
                     "labels": {gantry_api::names::LABEL_QUEUE: gantry_api::names::DEFAULT_QUEUE}},
        "spec": {
            "schedulerName": gantry_api::names::DEFAULT_SCHEDULER_NAME,
            "containers": [{"name": "main", "image": "bench",
                            "resources": {"limits": {"nvidia.com/gpu": "1"},
                                          "requests": {"cpu": "1", "memory": "1Gi"}}}],
        },
    }))
}

/// Create the nodes, the namespace and the pending pods.
pub async fn setup(client: &kube::Client, o: &ApiBenchOptions) -> Result<(), BenchError> {
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let nso = serde_json::from_value(json!({"metadata": {"name": o.namespace}}))
        .map_err(|e| api_err("namespace")(kube::Error::SerdeError(e)))?;
    match ns.create(&PostParams::default(), &nso).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(api_err("namespace")(e)),
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let results: Vec<Result<(), BenchError>> = futures::stream::iter(0..o.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            let gpus = o.gpus_per_node;
            async move {
                let n = node(&format!("bench-node-{i:04}"), gpus)
                    .map_err(|e| api_err("node")(kube::Error::SerdeError(e)))?;
                nodes
                    .create(&PostParams::default(), &n)
                    .await
                    .map(|_| ())
                    .map_err(api_err("creating nodes"))
            }
        })
        .buffer_unordered(o.concurrency.max(1))
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &o.namespace);
    let results: Vec<Result<(), BenchError>> = futures::stream::iter(0..o.pods)
        .map(|i| {
            let pods = pods.clone();
            let ns = o.namespace.clone();
            async move {
                let p = pod(&ns, i).map_err(|e| api_err("pod")(kube::Error::SerdeError(e)))?;
                pods.create(&PostParams::default(), &p)
                    .await
                    .map(|_| ())
                    .map_err(api_err("creating pods"))
            }
        })
        .buffer_unordered(o.concurrency.max(1))
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(())
}

impl ApiBenchOptions {
    /// Pods that can be bound at all (one GPU each).
    pub fn bindable(&self) -> usize {
        self.pods.min(self.nodes * self.gpus_per_node as usize)
    }
}

/// Wait until every pod that fits is bound; returns how long it took from `t0`.
pub async fn wait_bound(
    client: &kube::Client,
    o: &ApiBenchOptions,
    t0: Instant,
    timeout: Duration,
) -> Result<Duration, BenchError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &o.namespace);
    loop {
        let list = pods
            .list(&ListParams::default())
            .await
            .map_err(api_err("listing pods"))?;
        let bound = list
            .items
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        if bound >= o.bindable() {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > timeout {
            return Err(BenchError::Timeout {
                bound,
                want: o.bindable(),
                secs: timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether any node holds more GPUs than it has (a double bind would show here).
pub async fn overcommitted_nodes(
    client: &kube::Client,
    o: &ApiBenchOptions,
) -> Result<usize, BenchError> {
    let list = Api::<Pod>::namespaced(client.clone(), &o.namespace)
        .list(&ListParams::default())
        .await
        .map_err(api_err("listing pods"))?;
    let mut per: std::collections::HashMap<String, u32> = Default::default();
    for p in &list.items {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            *per.entry(n).or_default() += 1;
        }
    }
    Ok(per.values().filter(|&&c| c > o.gpus_per_node).count())
}

/// What one run measured.
#[derive(Clone, Debug)]
pub struct ApiBenchReport {
    pub setup: Duration,
    pub to_bound: Duration,
    pub bound: usize,
    pub binds_per_sec: f64,
    pub rss: Option<u64>,
    pub peak_rss: Option<u64>,
    pub overcommitted_nodes: usize,
}

/// Set up the cluster behind `client`, start the scheduler with `scheduler` (a command that
/// runs `gantry scheduler --kubeconfig ...` or equivalent), time the binds, read the child's
/// memory, stop it.
pub async fn drive(
    client: &kube::Client,
    o: &ApiBenchOptions,
    mut scheduler: tokio::process::Command,
    timeout: Duration,
) -> Result<ApiBenchReport, BenchError> {
    let t_setup = Instant::now();
    setup(client, o).await?;
    let setup = t_setup.elapsed();
    let mut child = scheduler
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| BenchError::Spawn(e.to_string()))?;
    let pid = child.id().unwrap_or(0);
    let t0 = Instant::now();
    let took = wait_bound(client, o, t0, timeout).await;
    let (rss, peak_rss) = crate::rss_of(pid);
    let _ = child.start_kill();
    let to_bound = took?;
    Ok(ApiBenchReport {
        setup,
        to_bound,
        bound: o.bindable(),
        binds_per_sec: o.bindable() as f64 / to_bound.as_secs_f64(),
        rss,
        peak_rss,
        overcommitted_nodes: overcommitted_nodes(client, o).await?,
    })
}

/// The report as the table `gantry bench scheduler-api` prints.
pub fn table(o: &ApiBenchOptions, r: &ApiBenchReport) -> String {
    let mib = |b: Option<u64>| b.map_or("n/a".to_string(), |b| format!("{} MiB", b >> 20));
    let rows = [
        (
            "nodes (allocatable set directly)",
            format!("{} x {} GPUs", o.nodes, o.gpus_per_node),
        ),
        ("pending one-GPU pods", o.pods.to_string()),
        ("pods that fit (all bound)", r.bound.to_string()),
        (
            "setup (nodes + pods created)",
            format!("{:.1} s", r.setup.as_secs_f64()),
        ),
        (
            "scheduler start -> all bound",
            format!("{:.2} s", r.to_bound.as_secs_f64()),
        ),
        ("binds/s", format!("{:.0}", r.binds_per_sec)),
        ("scheduler RSS at end", mib(r.rss)),
        ("scheduler peak RSS", mib(r.peak_rss)),
        ("overcommitted nodes", r.overcommitted_nodes.to_string()),
    ];
    rows.iter().map(|(k, v)| format!("{k:<34} {v}\n")).collect()
}
