//! The node-lifecycle controller's shell: every second, from the controllers' caches, keep
//! the condition taints on the Nodes, evict the pods [`node_lifecycle::plan`] says must go
//! (a `DisruptionTarget` condition, a `TaintManagerEviction` Event, a graceful delete), and
//! force-delete the pods of nodes that no longer exist (pod GC: phase Failed, then a delete
//! with grace 0 — nobody is left to finish a graceful one).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use gantry_runtime::events::{Recorder, Said, object_ref};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tokio::task::JoinHandle;

use super::cache;
use super::node_lifecycle::{self, PodId};

const TICK: Duration = Duration::from_secs(1);
/// How long a pod's node must be missing from the cache before the node's absence is
/// confirmed with a read and its pods are collected. Upstream's pod GC waits 40 s for an
/// informer that may lag behind; the sim's watches are local, so a short wait covers a Node
/// and its pods arriving in either order.
const QUARANTINE: Duration = Duration::from_secs(2);
/// How often the pods are walked for orphans while no node has a NoExecute taint, no node
/// left the cache and none is in quarantine. Walking every pod each second was a tenth of the
/// API server process's CPU at rest with 35,000 pods (docs/benchmarks.md, issue #42);
/// upstream's pod GC looks every 20 s.
const ORPHAN_SCAN: Duration = Duration::from_secs(5);
/// A pod acted on is not acted on again this soon (the watch may not show the delete yet).
const RECENT: Duration = Duration::from_secs(30);
const COMPONENT: &str = "taint-eviction-controller";

/// Start the controller on the shared caches.
pub fn start(client: kube::Client, caches: cache::Shared) -> JoinHandle<()> {
    let events = Recorder::new(client.clone(), COMPONENT, COMPONENT);
    tokio::spawn(async move {
        let mut missing_since: HashMap<String, Instant> = HashMap::new();
        let mut recent: HashMap<String, Instant> = HashMap::new();
        let mut tick = tokio::time::interval(TICK);
        let (mut nodes_seen, mut scanned) = (0, None::<Instant>);
        loop {
            tick.tick().await;
            let now = Utc::now();
            let (taints, plan) = {
                let c = cache::lock(&caches);
                if !c.synced() {
                    continue;
                }
                let taints: Vec<(Arc<Node>, Vec<Taint>)> = c
                    .nodes
                    .values()
                    .filter_map(|n| Some((n.clone(), node_lifecycle::reconcile_taints(n, now)?)))
                    .collect();
                // The pods are walked when a pod may have to go: a node with a NoExecute
                // taint, a node gone from the cache or one in quarantine; else now and then
                // for pods bound to a node that never existed.
                let walk = node_lifecycle::any_no_execute(c.nodes.values().map(|n| &**n))
                    || !missing_since.is_empty()
                    || c.nodes.len() < nodes_seen
                    || scanned.is_none_or(|at| at.elapsed() >= ORPHAN_SCAN);
                nodes_seen = c.nodes.len();
                let plan = if walk {
                    scanned = Some(Instant::now());
                    node_lifecycle::plan(&c.nodes, c.pods.values().map(|p| &**p), now)
                } else {
                    node_lifecycle::Plan::default()
                };
                (taints, plan)
            };
            for (node, t) in taints {
                set_taints(&client, &node, t).await;
            }
            recent.retain(|_, at| at.elapsed() < RECENT);
            for (pod, why) in plan.evict {
                if recent.insert(pod.uid.clone(), Instant::now()).is_none() {
                    evict(&client, &events, &pod, &why).await;
                }
            }
            missing_since.retain(|n, _| plan.orphaned.contains_key(n));
            for (node, pods) in plan.orphaned {
                let since = *missing_since
                    .entry(node.clone())
                    .or_insert_with(Instant::now);
                if since.elapsed() < QUARANTINE || !node_gone(&client, &node).await {
                    continue;
                }
                for pod in pods {
                    if recent.insert(pod.uid.clone(), Instant::now()).is_none() {
                        collect_orphan(&client, &pod, &node).await;
                    }
                }
            }
        }
    })
}

/// Replace the node's taints, guarded by its resourceVersion (a conflict waits for the next
/// pass, with the fresher Node).
async fn set_taints(client: &kube::Client, node: &Node, taints: Vec<Taint>) {
    let name = node.metadata.name.clone().unwrap_or_default();
    let patch = json!({"metadata": {"resourceVersion": node.metadata.resource_version},
                       "spec": {"taints": taints}});
    let api: Api<Node> = Api::all(client.clone());
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => tracing::info!(node = %name, "node condition taints updated"),
        Err(e) => tracing::debug!(node = %name, error = %e, "node taint update failed"),
    }
}

/// The node is not in the API (not merely missing from a lagging cache).
async fn node_gone(client: &kube::Client, node: &str) -> bool {
    matches!(
        Api::<Node>::all(client.clone()).get_opt(node).await,
        Ok(None)
    )
}

fn api(client: &kube::Client, pod: &PodId) -> Api<Pod> {
    Api::namespaced(client.clone(), &pod.namespace)
}

fn delete_params(pod: &PodId, grace: Option<u32>) -> DeleteParams {
    DeleteParams {
        grace_period_seconds: grace,
        preconditions: Some(Preconditions {
            uid: Some(pod.uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    }
}

/// The `DisruptionTarget` condition upstream's controllers set before deleting a pod.
async fn mark(client: &kube::Client, pod: &PodId, reason: &str, message: &str, failed: bool) {
    let now = Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut status = json!({"conditions": [{"type": "DisruptionTarget", "status": "True",
        "reason": reason, "message": message, "lastTransitionTime": now}]});
    if failed {
        status["phase"] = json!("Failed");
    }
    if let Err(e) = api(client, pod)
        .patch_status(
            &pod.name,
            &PatchParams::default(),
            &Patch::Strategic(json!({ "status": status })),
        )
        .await
    {
        tracing::debug!(pod = %pod.name, error = %e, "disruption condition not set");
    }
}

async fn evict(client: &kube::Client, events: &Recorder, pod: &PodId, why: &str) {
    tracing::info!(pod = %pod.name, namespace = %pod.namespace, %why, "evicting pod from its node");
    mark(
        client,
        pod,
        "DeletionByTaintManager",
        "Taint manager: deleting due to NoExecute taint",
        false,
    )
    .await;
    let said = Said::normal(
        "TaintManagerEviction",
        format!("Marking for deletion Pod {}/{}", pod.namespace, pod.name),
    );
    let regarding = object_ref("Pod", Some(&pod.namespace), &pod.name, Some(&pod.uid));
    events.publish(&regarding, &said, None).await;
    if let Err(e) = api(client, pod)
        .delete(&pod.name, &delete_params(pod, None))
        .await
    {
        tracing::debug!(pod = %pod.name, error = %e, "eviction delete failed");
    }
}

async fn collect_orphan(client: &kube::Client, pod: &PodId, node: &str) {
    tracing::info!(pod = %pod.name, namespace = %pod.namespace, %node, "deleting pod of a deleted node");
    // As upstream's pod GC: a pod still running is marked Failed first.
    if !pod.terminal {
        mark(
            client,
            pod,
            "DeletionByPodGC",
            "PodGC: node no longer exists",
            true,
        )
        .await;
    }
    if let Err(e) = api(client, pod)
        .delete(&pod.name, &delete_params(pod, Some(0)))
        .await
    {
        tracing::debug!(pod = %pod.name, error = %e, "orphaned pod delete failed");
    }
}
