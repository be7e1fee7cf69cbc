//! The demo's components (`Components::start`, what `gantry demo` starts: operator, scheduler
//! and the scheduler's admission webhook) on a fresh cluster given the demo's ClusterPolicy:
//! a `gpu-fraction: "0.5"` pod and a `gpu-memory` pod created as a user writes them run, and
//! their containers print the share the scheduler gave them (GPU UUID, portion, memory limit).

use gantry_demo::components::Components;
use gantry_demo::{apply, manifests};
use gantry_testkit::share::{self, Share};
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, LogParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};

/// The share a pod printed, once it runs and printed it.
async fn printed(pods: &Api<Pod>, name: &str) -> anyhow::Result<Share> {
    let what = format!("pod {name} running and printing its share");
    Ok(eventually_secs(&what, 120, || async {
        let p = pods.get(name).await?;
        let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
        let log = if phase == "Running" {
            pods.logs(name, &LogParams::default()).await?
        } else {
            String::new()
        };
        let lines: Vec<String> = log.lines().map(str::to_string).collect();
        anyhow::Ok(match share::parse_share(&lines) {
            Ok(s) => Look::Done(s),
            Err(e) => Look::Seen(format!("phase {phase:?}: {e}")),
        })
    })
    .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demos_components_give_fractional_pods_their_share() -> anyhow::Result<()> {
    let env = Cluster::builder()
        .nodes("1xH100-80GB:2")
        .crds()
        .controllers()
        .namespace("gpu-operator")
        .start()
        .await?;
    let client = env.client().clone();
    let components = Components::start(client.clone()).await?;
    for (file, text) in [manifests::TIME_SLICING, manifests::CLUSTER_POLICY] {
        apply::apply_all(&client, file, text).await?;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let node_mib = eventually_secs("the node's 2 GPUs advertised and labelled", 120, || async {
        let n = nodes.list(&ListParams::default()).await?;
        let node = n.items.first().cloned().unwrap_or_default();
        let gpus = node
            .status
            .and_then(|s| s.allocatable)
            .and_then(|a| a.get("nvidia.com/gpu").map(|q| q.0.clone()));
        let mib = node
            .metadata
            .labels
            .and_then(|l| l.get("nvidia.com/gpu.memory").cloned())
            .and_then(|m| share::node_gpu_mib(&m));
        anyhow::Ok((gpus.as_deref() == Some("2")).then_some(mib).flatten())
    })
    .await?;
    let gvk = GroupVersionKind::gvk("scheduling.run.ai", "v2", "Queue");
    let queues: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    eventually_secs("the scheduler's default queue", 60, || async {
        queues.get_opt("default-queue").await.map(|q| q.is_some())
    })
    .await?;
    // Created (POST) as kubectl and the Job controller create pods: the webhook prepares them.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for doc in apply::documents("fractions", &share::fraction_pods_yaml("default-queue"))? {
        let pod: Pod = serde_json::from_value(doc)?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    let half = printed(&pods, "half").await?;
    let mem = printed(&pods, "mem").await?;
    share::check_shares(&half, &mem, node_mib).map_err(anyhow::Error::msg)?;
    components.stop().await;
    env.shutdown().await;
    Ok(())
}
