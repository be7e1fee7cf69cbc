//! Test harness: a `gantry_testkit::Cluster` with the CRDs, simulated nodes with the sim's
//! DaemonSet/Job controllers and agent runners, and the operator running in-process.

#![allow(dead_code)]

use std::ops::Deref;
use std::path::Path;
use std::time::Duration;

use gantry_operator::metrics::Metrics;
use gantry_operator::run::{RunOptions, run};
use gantry_testkit::{Cluster, Recorder};
pub use gantry_testkit::{Look, eventually_secs};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, PostParams};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub type Res<T = ()> = anyhow::Result<T>;

pub const NS: &str = "gpu-operator";
pub const IMAGE: &str = "ghcr.io/gantry/gantry:test";

/// A test cluster (`env.client()`, `env.cp()`, `env.sim()?`, `env.dir()` through `Deref`).
pub struct Env {
    cluster: Cluster,
}

impl Deref for Env {
    type Target = Cluster;

    fn deref(&self) -> &Cluster {
        &self.cluster
    }
}

/// A running operator; stops when dropped or on [`Operator::stop`].
pub struct Operator {
    pub metrics: Metrics,
    /// Its client: records the non-GET requests it sent (lease excluded: leader election is off).
    pub recorder: Recorder,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Operator {
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }

    pub fn api_writes(&self) -> u64 {
        self.recorder.count()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

impl Env {
    pub async fn start(spec: &str) -> Res<Env> {
        let cluster = Cluster::builder()
            .crds()
            .nodes(spec)
            .controllers()
            .start()
            .await?;
        Ok(Env { cluster })
    }

    /// Start the operator with a client that records the writes it sends.
    pub fn operator(&self) -> Res<Operator> {
        let recorder = self.recorder()?;
        let client = recorder.client();
        let mut opts = RunOptions::new(NS, IMAGE);
        opts.leader_elect = false;
        let metrics = opts.metrics.clone();
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(async move {
            if let Err(e) = run(client, opts, async move {
                let _ = rx.await;
            })
            .await
            {
                eprintln!("operator: {e}");
            }
        });
        Ok(Operator {
            metrics,
            recorder,
            stop: Some(tx),
            task: Some(task),
        })
    }

    /// Apply a ClusterPolicy (or any object) given as JSON, creating it.
    pub async fn create_policy(&self, v: serde_json::Value) -> Res<DynamicObject> {
        let api = policies(self.client());
        let obj: DynamicObject = serde_json::from_value(v)?;
        Ok(api.create(&PostParams::default(), &obj).await?)
    }
}

pub fn policies(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &gantry_operator::reconcile::cluster_policy_resource(),
    )
}

/// A fixture from crates/api/tests/fixtures as JSON.
pub fn fixture(name: &str) -> Res<serde_json::Value> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../api/tests/fixtures")
        .join(name);
    Ok(serde_yaml::from_str(&std::fs::read_to_string(p)?)?)
}

/// `status.allocatable["nvidia.com/gpu"]` of every node that has one, in node-name order (what
/// `kubectl get nodes -o jsonpath='{.items[*].status.allocatable.nvidia\.com/gpu}'` prints).
pub async fn allocatable(client: &kube::Client) -> Res<String> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await?;
    let mut items: Vec<&Node> = nodes.items.iter().collect();
    items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(items
        .iter()
        .filter_map(|n| {
            n.status
                .as_ref()?
                .allocatable
                .as_ref()?
                .get(gantry_api::names::RESOURCE_GPU)
                .map(|q| q.0.clone())
        })
        .collect::<Vec<_>>()
        .join(" "))
}

/// The policy's `status.state`.
pub async fn policy_state(client: &kube::Client, name: &str) -> Option<String> {
    let p = policies(client).get(name).await.ok()?;
    p.data
        .pointer("/status/state")
        .and_then(|s| s.as_str())
        .map(str::to_string)
}

/// The policy's condition of `type_`, as (status, reason, message).
pub async fn condition(
    client: &kube::Client,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let p = policies(client).get(name).await.ok()?;
    let conds = p.data.pointer("/status/conditions")?.as_array()?.clone();
    conds.iter().find(|c| c["type"] == type_).map(|c| {
        let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        (s("status"), s("reason"), s("message"))
    })
}

/// Waits until `count` (a write counter) has not changed for `quiet_secs` seconds, for at most
/// `limit_secs` in all; returns its value then.
pub async fn wait_quiet(
    what: &str,
    quiet_secs: u64,
    limit_secs: u64,
    count: impl Fn() -> u64,
) -> Res<u64> {
    let quiet = Duration::from_secs(quiet_secs);
    let mut last = (count(), tokio::time::Instant::now());
    let what = format!("{what} unchanged for {quiet_secs} s");
    Ok(eventually_secs(&what, limit_secs, || {
        let now = count();
        if now != last.0 {
            last = (now, tokio::time::Instant::now());
        }
        let still = last.1.elapsed();
        std::future::ready(if still >= quiet {
            Look::Done(now)
        } else {
            Look::Seen(format!("{now}, unchanged for {:.1} s", still.as_secs_f64()))
        })
    })
    .await?)
}

pub use gantry_testkit::{KUBECTL, Kubectl};
