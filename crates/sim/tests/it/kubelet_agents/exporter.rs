//! The exporter DaemonSet: per-node metrics with workload attribution.

use super::*;

/// An exporter DaemonSet: each node's exporter serves on its own loopback port, published on
/// its pod; a scrape shows the node's GPUs and attributes a GPU to the workload pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporter_daemonset_serves_per_node_with_attribution() -> Res<()> {
    let env = Cluster::builder()
        .nodes("2xL4:2")
        .controllers()
        .namespace("gpu-operator")
        .start()
        .await?;
    let client = env.client().clone();
    let ds_api = Api::<DaemonSet>::namespaced(client.clone(), "gpu-operator");
    ds_api
        .create(
            &PostParams::default(),
            &daemonset(
                "nvidia-device-plugin-daemonset",
                json!({}),
                json!({"containers": [gantry("nvidia-device-plugin", &["device-plugin"])]}),
            )?,
        )
        .await?;
    ds_api
        .create(
            &PostParams::default(),
            &daemonset(
                "nvidia-dcgm-exporter",
                json!({}),
                json!({"containers": [gantry("nvidia-dcgm-exporter", &["exporter", "-a", ":9400"])]}),
            )?,
        )
        .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    eventually_secs("GPUs allocatable", 60, || async {
        allocatable(&nodes_api, "l4-1").await.as_deref() == Some("2")
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "trainer", "namespace": "default"},
        "spec": {"nodeName": "l4-1", "containers": [{"name": "main", "image": "cuda",
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let mut addrs = Vec::new();
    for node in ["l4-0", "l4-1"] {
        let addr = metrics_address(
            &client,
            "nvidia-dcgm-exporter",
            node,
            "a metrics address on the exporter pod",
        )
        .await?;
        addrs.push(addr);
    }
    assert_ne!(addrs[0], addrs[1]);
    let body = scrape(&addrs[0]).await?;
    assert!(body.contains("DCGM_FI_DEV_GPU_TEMP{"), "{body}");
    assert!(body.contains("Hostname=\"l4-0\""), "{body}");
    assert!(body.contains("gpu=\"1\""), "{body}");
    assert!(!body.contains("trainer"));
    let attributed = eventually_secs("the workload pod attributed", 60, || async {
        scrape(&addrs[1])
            .await
            .is_ok_and(|b| b.contains("pod=\"trainer\"") && b.contains("namespace=\"default\""))
    })
    .await;
    if let Err(e) = attributed {
        return Err(format!("{e}: {}", scrape(&addrs[1]).await?).into());
    }
    Ok(())
}
