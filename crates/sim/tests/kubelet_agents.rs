//! Operand pods: a DaemonSet running `gantry node device-plugin` makes the sim kubelet run the
//! real device plugin in-process on each GPU node; it registers over the node's kubelet socket
//! and the GPUs become allocatable. A GPU fault then shows up as an unhealthy device. A GFD
//! DaemonSet runs the real discovery agent, which labels its own Node.

use std::time::Duration;

use gantry_api::names;
use gantry_sim::cluster::{self, Fault};
use gantry_sim::kubelet::runners::default_registry;
use gantry_sim::{ControlPlane, ControlPlaneOptions, controllers, nodes};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

async fn eventually<F, Fut>(what: &str, mut f: F) -> Res<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..300 {
        if f().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("timed out waiting for {what}").into())
}

async fn allocatable(api: &Api<Node>, node: &str) -> Option<String> {
    let n = api.get(node).await.ok()?;
    Some(n.status?.allocatable?.get(names::RESOURCE_GPU)?.0.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_plugin_daemonset_makes_gpus_allocatable() -> Res<()> {
    let cp = ControlPlane::start(ControlPlaneOptions::default()).await?;
    let client = cp.client()?;
    let tmp = tempfile::Builder::new().prefix("ga").tempdir_in("/tmp")?;
    let sim = cluster::start(
        client.clone(),
        tmp.path(),
        nodes::plan("2xH100-80GB:8,1xcpu")?,
        default_registry(),
    )
    .await?;
    let _ctl = controllers::start(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "gpu-operator"}}))?;
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator"},
        "spec": {"selector": {"matchLabels": {"app": "nvidia-device-plugin-daemonset"}},
                 "template": {"metadata": {"labels": {"app": "nvidia-device-plugin-daemonset"}},
                              "spec": {"nodeSelector": {names::NFD_GPU_LABELS[0]: "true"},
                                       "containers": [{"name": "nvidia-device-plugin", "image": "ghcr.io/gantry/gantry:dev",
                                                       "command": ["gantry"], "args": ["node", "device-plugin"]}]}}}
    }))?;
    Api::<DaemonSet>::namespaced(client.clone(), "gpu-operator")
        .create(&PostParams::default(), &ds)
        .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    for n in ["h100-80gb-0", "h100-80gb-1"] {
        eventually("8 GPUs from the real plugin", || async {
            allocatable(&nodes_api, n).await.as_deref() == Some("8")
        })
        .await?;
    }
    assert_eq!(allocatable(&nodes_api, "cpu-0").await, None);

    // A 2-GPU pod gets two real device IDs and the plugin's env.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "cuda", "namespace": "default"},
        "spec": {"nodeName": "h100-80gb-0", "containers": [{"name": "c", "image": "cuda",
                 "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    eventually("pod running", || async {
        pods.get("cuda")
            .await
            .is_ok_and(|p| p.status.and_then(|s| s.phase).as_deref() == Some("Running"))
    })
    .await?;
    let p = pods.get("cuda").await?;
    let rec: serde_json::Value = serde_json::from_str(
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(names::ANNOTATION_SIM_ALLOCATED))
            .ok_or("no allocation")?,
    )?;
    let ids = rec["c"]["nvidia.com/gpu"]["deviceIDs"]
        .as_array()
        .ok_or("no ids")?
        .clone();
    assert_eq!(ids.len(), 2);
    assert!(
        ids.iter()
            .all(|i| i.as_str().is_some_and(|s| s.starts_with("GPU-"))),
        "{ids:?}"
    );

    // A GPU falls off the bus: the plugin marks it unhealthy, allocatable drops.
    sim.fault("h100-80gb-1", &Fault::OffBus { gpu: 2 }).await?;
    eventually("7 allocatable after XID 79", || async {
        allocatable(&nodes_api, "h100-80gb-1").await.as_deref() == Some("7")
    })
    .await?;
    Ok(())
}

/// A GFD DaemonSet: the sim kubelet runs the real discovery agent in-process, which labels its
/// own Node through server-side apply; the CPU node gets no GPU labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_daemonset_labels_gpu_nodes() -> Res<()> {
    let cp = ControlPlane::start(ControlPlaneOptions::default()).await?;
    let client = cp.client()?;
    let tmp = tempfile::Builder::new().prefix("gd").tempdir_in("/tmp")?;
    let _sim = cluster::start(
        client.clone(),
        tmp.path(),
        nodes::plan("1xH100-80GB:8,1xL4:1,1xcpu")?,
        default_registry(),
    )
    .await?;
    let _ctl = controllers::start(client.clone());
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "gpu-feature-discovery", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "gpu-feature-discovery"}},
                 "template": {"metadata": {"labels": {"app": "gpu-feature-discovery"}},
                              "spec": {"nodeSelector": {names::NFD_GPU_LABELS[0]: "true"},
                                       "containers": [{"name": "gfd", "image": "ghcr.io/gantry/gantry:dev",
                                                       "command": ["gantry"],
                                                       "args": ["node", "discovery", "--mig-strategy", "mixed"]}]}}}
    }))?;
    Api::<DaemonSet>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &ds)
        .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let label = |node: Node, key: &str| node.metadata.labels.and_then(|l| l.get(key).cloned());
    for (node, product, count) in [
        ("h100-80gb-0", "NVIDIA-H100-80GB-HBM3", "8"),
        ("l4-0", "NVIDIA-L4", "1"),
    ] {
        eventually("GFD labels on the GPU node", || async {
            nodes_api.get(node).await.is_ok_and(|n| {
                label(n.clone(), names::LABEL_GPU_PRODUCT).as_deref() == Some(product)
                    && label(n, names::LABEL_GPU_COUNT).as_deref() == Some(count)
            })
        })
        .await?;
    }
    let h100 = nodes_api.get("h100-80gb-0").await?;
    assert_eq!(
        label(h100.clone(), names::LABEL_MIG_CAPABLE).as_deref(),
        Some("true")
    );
    assert_eq!(
        label(h100.clone(), names::LABEL_MIG_STRATEGY).as_deref(),
        Some("mixed")
    );
    // The kubelet's own labels survive the agent's apply.
    assert_eq!(
        label(h100, names::NFD_GPU_LABELS[0]).as_deref(),
        Some("true")
    );
    let cpu = nodes_api.get("cpu-0").await?;
    assert_eq!(label(cpu, names::LABEL_GPU_PRODUCT), None);
    Ok(())
}
