//! End to end in the sim: three GPU nodes run driver v1 under an `OnDelete` driver DaemonSet,
//! GPU Jobs run on them; the driver version changes and the upgrade controller walks the nodes
//! one at a time through the state labels, evicting the GPU pods (the Jobs bring them back and
//! this test, standing in for a scheduler, binds them to schedulable nodes), restarting the
//! driver and validator pods, and uncordoning. An injected driver failure parks one node in
//! `upgrade-failed` while the others finish.
//!
//! The test plays the reconcile loop's part for the driver DaemonSet (render + apply): it
//! writes the DaemonSet itself, in the rendered shape, so this exercises the upgrade controller
//! alone.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use gantry_api::cluster_policy::ClusterPolicy;
use gantry_api::names;
use gantry_gpu::Backend;
use gantry_operator::upgrade::{self, Config, UpgradeOptions, UpgradeState};
use gantry_sim::cluster::Fault;
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use tokio::task::JoinHandle;

pub(crate) type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub(crate) const NS: &str = "gpu-operator";
pub(crate) const GPU_NODES: [&str; 3] = ["h100-80gb-0", "h100-80gb-1", "h100-80gb-2"];
pub(crate) const V1: &str = "570.172.08";
pub(crate) const V2: &str = "580.95.05";

pub(crate) struct Env {
    pub(crate) client: kube::Client,
    pub(crate) tasks: Vec<JoinHandle<()>>,
    pub(crate) cluster: Cluster,
}

impl Drop for Env {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

pub(crate) fn driver_image(version: &str) -> String {
    format!("nvcr.io/nvidia/driver:{version}-ubuntu24.04")
}

/// The driver DaemonSet in the shape the render produces (OnDelete, upstream image).
fn driver_ds(version: &str) -> Res<DaemonSet> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "nvidia-driver-daemonset", "namespace": NS,
                     "labels": {names::LABEL_APP_COMPONENT: names::COMPONENT_NVIDIA_DRIVER}},
        "spec": {"selector": {"matchLabels": {names::LABEL_APP: names::app::DRIVER}},
                 "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {names::LABEL_APP: names::app::DRIVER,
                                                      names::LABEL_APP_COMPONENT: names::COMPONENT_NVIDIA_DRIVER}},
                              "spec": {"nodeSelector": {names::NFD_GPU_LABELS[0]: "true"},
                                       "containers": [{"name": "nvidia-driver-ctr", "image": driver_image(version)}]}}}
    }))?)
}

fn plain_ds(name: &str, app: &str, args: Option<&[&str]>) -> Res<DaemonSet> {
    let container = match args {
        Some(a) => {
            json!({"name": "c", "image": "ghcr.io/gantry/gantry:dev", "command": ["gantry"], "args": a})
        }
        None => json!({"name": "c", "image": "ghcr.io/gantry/gantry:dev"}),
    };
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"matchLabels": {names::LABEL_APP: app}},
                 "template": {"metadata": {"labels": {names::LABEL_APP: app}},
                              "spec": {"nodeSelector": {names::NFD_GPU_LABELS[0]: "true"},
                                       "containers": [container]}}}
    }))?)
}

pub(crate) async fn start(max_parallel: i32, max_unavailable: serde_json::Value) -> Res<Env> {
    let cluster = Cluster::builder()
        .nodes("3xH100-80GB:8,1xcpu")
        .controllers()
        .crds()
        .namespace(NS)
        .start()
        .await?;
    let client = cluster.client().clone();
    let cp_obj: ClusterPolicy = serde_json::from_value(json!({
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"operator": {}, "daemonsets": {}, "toolkit": {}, "devicePlugin": {}, "dcgmExporter": {},
                 "dcgm": {}, "nodeStatusExporter": {}, "gfd": {},
                 "driver": {"version": V1,
                            "upgradePolicy": {"autoUpgrade": true, "maxParallelUpgrades": max_parallel,
                                              "maxUnavailable": max_unavailable,
                                              "podDeletion": {"timeoutSeconds": 60}}}}
    }))?;
    let policies: Api<ClusterPolicy> = Api::all(client.clone());
    eventually_secs("the ClusterPolicy CRD to serve", 60, || async {
        policies.list(&ListParams::default()).await.is_ok()
    })
    .await?;
    policies.create(&PostParams::default(), &cp_obj).await?;
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    dss.create(&PostParams::default(), &driver_ds(V1)?).await?;
    dss.create(
        &PostParams::default(),
        &plain_ds(
            "nvidia-device-plugin-daemonset",
            names::app::DEVICE_PLUGIN,
            Some(&["node", "device-plugin"]),
        )?,
    )
    .await?;
    dss.create(
        &PostParams::default(),
        &plain_ds(
            "nvidia-operator-validator",
            names::app::OPERATOR_VALIDATOR,
            None,
        )?,
    )
    .await?;
    Ok(Env {
        client,
        tasks: Vec::new(),
        cluster,
    })
}

pub(crate) fn state_of(n: &Node) -> UpgradeState {
    UpgradeState::parse(
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::LABEL_UPGRADE_STATE))
            .map(String::as_str)
            .unwrap_or(""),
    )
}

pub(crate) fn unschedulable(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

#[derive(Default)]
pub(crate) struct Record {
    /// Each node's state labels in the order seen (repeats collapsed).
    pub(crate) walks: BTreeMap<String, Vec<UpgradeState>>,
    pub(crate) now: BTreeMap<String, UpgradeState>,
    pub(crate) max_in_flight: usize,
}

/// Watch the nodes and record every state label change.
pub(crate) fn record(client: &kube::Client) -> (Arc<Mutex<Record>>, JoinHandle<()>) {
    let rec = Arc::new(Mutex::new(Record::default()));
    let r = rec.clone();
    let api: Api<Node> = Api::all(client.clone());
    let t = tokio::spawn(async move {
        let mut s = watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = s.next().await {
            let (Ok(watcher::Event::Apply(n)) | Ok(watcher::Event::InitApply(n))) = ev else {
                continue;
            };
            let Some(name) = n.metadata.name.clone() else {
                continue;
            };
            let st = state_of(&n);
            let Ok(mut rec) = r.lock() else { return };
            let walk = rec.walks.entry(name.clone()).or_default();
            if walk.last() != Some(&st) {
                walk.push(st);
            }
            rec.now.insert(name, st);
            let flying = rec.now.values().filter(|s| s.in_flight()).count();
            rec.max_in_flight = rec.max_in_flight.max(flying);
        }
    });
    (rec, t)
}

fn gpus_wanted(p: &Pod) -> i64 {
    p.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| {
            c.resources
                .as_ref()?
                .limits
                .as_ref()?
                .get(names::RESOURCE_GPU)
        })
        .filter_map(|q| q.0.parse::<i64>().ok())
        .sum()
}

/// A stand-in scheduler: binds pending GPU pods in `default` to a schedulable GPU node with
/// room, the emptiest first.
fn binder(client: &kube::Client) -> JoinHandle<()> {
    let client = client.clone();
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let nodes: Api<Node> = Api::all(client.clone());
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let (Ok(pl), Ok(nl)) = (
                pods.list(&ListParams::default()).await,
                nodes.list(&ListParams::default()).await,
            ) else {
                continue;
            };
            let mut used: BTreeMap<String, i64> = BTreeMap::new();
            for p in &pl.items {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone())
                    && !matches!(phase, Some("Succeeded" | "Failed"))
                {
                    *used.entry(n).or_default() += gpus_wanted(p);
                }
            }
            for p in pl.items.iter().filter(|p| {
                p.spec.as_ref().is_some_and(|s| s.node_name.is_none())
                    && p.metadata.deletion_timestamp.is_none()
            }) {
                let want = gpus_wanted(p);
                let target = nl
                    .items
                    .iter()
                    .filter(|n| !unschedulable(n))
                    .filter_map(|n| {
                        let name = n.metadata.name.clone()?;
                        let cap: i64 = n
                            .status
                            .as_ref()?
                            .allocatable
                            .as_ref()?
                            .get(names::RESOURCE_GPU)?
                            .0
                            .parse()
                            .ok()?;
                        let free = cap - used.get(&name).copied().unwrap_or(0);
                        (free >= want).then_some((free, name))
                    })
                    .max();
                let (Some((_, node)), Some(name)) = (target, p.metadata.name.clone()) else {
                    continue;
                };
                let binding = json!({"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name}, "target": {"kind": "Node", "name": node}});
                if pods
                    .create_subresource::<_, serde_json::Value>(
                        "binding",
                        &name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await
                    .is_ok()
                {
                    *used.entry(node).or_default() += want;
                }
            }
        }
    })
}

/// GPU Jobs, two per GPU node, 2 GPUs each; each Job pod bound round-robin at first.
async fn gpu_jobs(client: &kube::Client) -> Res<()> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    for i in 0..6 {
        let job: Job = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("train-{i}"), "namespace": "default"},
            "spec": {"backoffLimit": 100,
                     "template": {"metadata": {"labels": {"app": "train"}},
                                  "spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "c", "image": "cuda",
                                                           "resources": {"limits": {names::RESOURCE_GPU: "2"}}}]}}}
        }))?;
        jobs.create(&PostParams::default(), &job).await?;
    }
    Ok(())
}

pub(crate) async fn running_gpu_pods(client: &kube::Client) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Change `driver.version` the way the reconcile loop would: the ClusterPolicy and the
/// rendered driver DaemonSet's image.
pub(crate) async fn change_driver_version(client: &kube::Client, version: &str) -> Res<()> {
    let pp = PatchParams::default();
    Api::<ClusterPolicy>::all(client.clone())
        .patch(
            "cluster-policy",
            &pp,
            &Patch::Merge(json!({"spec": {"driver": {"version": version}}})),
        )
        .await?;
    Api::<DaemonSet>::namespaced(client.clone(), NS)
        .patch(
            "nvidia-driver-daemonset",
            &pp,
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "nvidia-driver-ctr", "image": driver_image(version)}]}}}})),
        )
        .await?;
    Ok(())
}

pub(crate) async fn driver_images(client: &kube::Client) -> BTreeMap<String, String> {
    let lp = ListParams::default().labels(&format!("{}={}", names::LABEL_APP, names::app::DRIVER));
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&lp)
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| {
                    let s = p.spec?;
                    Some((s.node_name?, s.containers.first()?.image.clone()?))
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn spawn_controller(env: &mut Env, max_driver_restarts: i32) {
    let opts = UpgradeOptions {
        namespace: NS.into(),
        // Long enough that only events and the in-flight re-plan move the walk.
        requeue: Duration::from_secs(300),
        busy_requeue: Duration::from_millis(500),
        min_interval: Duration::from_millis(150),
        driver_min_ready: Duration::from_secs(2),
        config: Config {
            validation_timeout_s: 600,
            max_driver_restarts,
        },
    };
    let client = env.client.clone();
    let nodes = gantry_operator::node_watch::NodeWatch::start(client.clone());
    env.tasks.push(tokio::spawn(upgrade::run(
        client,
        opts,
        nodes,
        std::future::pending(),
    )));
}

/// Wait until every GPU node runs a Ready driver pod of `version` and the GPUs are allocatable.
pub(crate) async fn settled_on(env: &Env, version: &str) -> Res<()> {
    let want = driver_image(version);
    let nodes: Api<Node> = Api::all(env.client.clone());
    eventually_secs("driver pods on every GPU node", 60, || async {
        let imgs = driver_images(&env.client).await;
        GPU_NODES.iter().all(|n| imgs.get(*n) == Some(&want))
    })
    .await?;
    eventually_secs("8 allocatable GPUs on each node", 60, || async {
        let mut seen = Vec::new();
        for n in GPU_NODES {
            let a = nodes
                .get(n)
                .await
                .ok()
                .and_then(|n| Some(n.status?.allocatable?.get(names::RESOURCE_GPU)?.0.clone()));
            seen.push(a);
        }
        if seen.iter().all(|a| a.as_deref() == Some("8")) {
            Look::Done(())
        } else {
            Look::Seen(format!("allocatable {seen:?}"))
        }
    })
    .await?;
    Ok(())
}

/// The driver version each GPU node's simulated NVML reports.
pub(crate) fn sim_driver_versions(env: &Env) -> Vec<String> {
    GPU_NODES
        .iter()
        .map(|n| {
            env.cluster
                .sim()
                .ok()
                .and_then(|s| s.node(n))
                .and_then(|n| n.backend.as_ref())
                .and_then(|b| b.driver_version().ok())
                .unwrap_or_default()
        })
        .collect()
}

/// Record the nodes' walks from now on, once every GPU node is `upgrade-done`.
pub(crate) async fn record_from_done(env: &mut Env) -> Res<Arc<Mutex<Record>>> {
    let (rec, t) = record(&env.client);
    env.tasks.push(t);
    eventually_secs("GPU nodes labelled upgrade-done", 60, || async {
        GPU_NODES
            .iter()
            .all(|n| node_state(&rec, n) == Some(UpgradeState::UpgradeDone))
    })
    .await?;
    Ok(rec)
}

pub(crate) fn node_state(rec: &Arc<Mutex<Record>>, node: &str) -> Option<UpgradeState> {
    rec.lock().ok()?.now.get(node).copied()
}

mod failure;
mod walk;
