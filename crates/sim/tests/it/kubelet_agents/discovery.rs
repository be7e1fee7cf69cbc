//! The GFD DaemonSet labels its own Node, and reads its config from a ConfigMap.

use super::*;

/// A GFD DaemonSet: the sim kubelet runs the real discovery agent in-process, which labels its
/// own Node through server-side apply; the CPU node gets no GPU labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_daemonset_labels_gpu_nodes() -> Res<()> {
    let env = Cluster::builder()
        .nodes("1xH100-80GB:8,1xL4:1,1xcpu")
        .controllers()
        .start()
        .await?;
    let client = env.client().clone();
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "gpu-feature-discovery", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "gpu-feature-discovery"}},
                 "template": {"metadata": {"labels": {"app": "gpu-feature-discovery"}},
                              "spec": {"nodeSelector": {names::NFD_GPU_LABELS[0]: "true"},
                                       "containers": [{"name": "gfd", "image": "ghcr.io/gantry/gantry:dev",
                                                       "command": ["gantry"],
                                                       "args": ["node", "discovery", "--mig-strategy", "mixed"],
                                                       // As on a node: GFD learns its Node from the downward API.
                                                       "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]}}}
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
        eventually_secs("GFD labels on the GPU node", 60, || async {
            let n = nodes_api.get(node).await?;
            let now = (
                label(n.clone(), names::LABEL_GPU_PRODUCT),
                label(n.clone(), names::LABEL_GPU_COUNT),
                label(n.clone(), names::LABEL_MIG_CAPABLE),
                label(n, names::LABEL_MIG_STRATEGY),
            );
            let mig_ok = node != "h100-80gb-0"
                || (now.2.as_deref() == Some("true") && now.3.as_deref() == Some("mixed"));
            Ok::<_, kube::Error>(
                if now.0.as_deref() == Some(product) && now.1.as_deref() == Some(count) && mig_ok {
                    Look::Done(())
                } else {
                    Look::Seen(format!(
                        "(product, count, mig.capable, mig.strategy) = {now:?}"
                    ))
                },
            )
        })
        .await?;
    }
    let h100 = nodes_api.get("h100-80gb-0").await?;
    // The kubelet's own labels survive the agent's apply.
    assert_eq!(
        label(h100, names::NFD_GPU_LABELS[0]).as_deref(),
        Some("true")
    );
    let cpu = nodes_api.get("cpu-0").await?;
    assert_eq!(label(cpu, names::LABEL_GPU_PRODUCT), None);
    Ok(())
}

/// GFD with `--config-map NS/NAME --default-config NAME`, as the operator renders it with a
/// device plugin config: the node label picks the key, else the default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_reads_its_config_from_a_config_map() -> Res<()> {
    let env = Cluster::builder()
        .nodes("2xL4:1")
        .controllers()
        .namespace("gpu-operator")
        .start()
        .await?;
    let client = env.client().clone();
    let sliced = |n: u32| {
        format!(
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {n}\n"
        )
    };
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "plugin-config", "namespace": "gpu-operator"},
        "data": {"shared-4": sliced(4), "shared-2": sliced(2)}
    }))?;
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "gpu-operator")
        .create(&PostParams::default(), &cm)
        .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let patch = json!({"metadata": {"labels": {names::LABEL_DEVICE_PLUGIN_CONFIG: "shared-2"}}});
    nodes_api
        .patch(
            "l4-1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    Api::<DaemonSet>::namespaced(client.clone(), "gpu-operator")
        .create(
            &PostParams::default(),
            &daemonset(
                "gpu-feature-discovery",
                json!({}),
                json!({"containers": [gantry("gfd", &["discovery", "--config-map", "gpu-operator/plugin-config",
                                                       "--default-config", "shared-4"])]}),
            )?,
        )
        .await?;
    let replicas = |n: Node| {
        n.metadata
            .labels
            .and_then(|l| l.get(names::LABEL_GPU_REPLICAS).cloned())
    };
    for (node, want) in [("l4-0", "4"), ("l4-1", "2")] {
        eventually_secs("replicas label from the ConfigMap", 60, || async {
            nodes_api
                .get(node)
                .await
                .is_ok_and(|n| replicas(n).as_deref() == Some(want))
        })
        .await?;
    }
    Ok(())
}
