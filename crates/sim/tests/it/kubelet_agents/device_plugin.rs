//! The device plugin DaemonSet: GPUs become allocatable; XID 119 then `--clear` recovers
//! without a plugin restart.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_plugin_daemonset_makes_gpus_allocatable() -> Res<()> {
    let env = Cluster::builder()
        .nodes("2xH100-80GB:8,1xcpu")
        .controllers()
        .namespace("gpu-operator")
        .start()
        .await?;
    let client = env.client().clone();
    let sim = env.sim()?;
    let ds = daemonset(
        "nvidia-device-plugin-daemonset",
        json!({}),
        json!({"containers": [{"name": "nvidia-device-plugin", "image": "ghcr.io/gantry/gantry:dev",
                               "command": ["gantry"], "args": ["node", "device-plugin"]}]}),
    )?;
    Api::<DaemonSet>::namespaced(client.clone(), "gpu-operator")
        .create(&PostParams::default(), &ds)
        .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    for n in ["h100-80gb-0", "h100-80gb-1"] {
        eventually_secs("8 GPUs from the real plugin", 60, || async {
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
    let allocated = eventually_secs("pod running with its allocation recorded", 60, || async {
        let p = pods.get("cuda").await?;
        let phase = p.status.and_then(|s| s.phase);
        let allocated = p
            .metadata
            .annotations
            .and_then(|mut a| a.remove(names::ANNOTATION_SIM_ALLOCATED));
        Ok::<_, kube::Error>(match allocated {
            Some(a) if phase.as_deref() == Some("Running") => Look::Done(a),
            _ => Look::Seen(format!("phase {phase:?}, allocation {allocated:?}")),
        })
    })
    .await?;
    let rec: serde_json::Value = serde_json::from_str(&allocated)?;
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
    eventually_secs("7 allocatable after XID 79", 60, || async {
        allocatable(&nodes_api, "h100-80gb-1").await.as_deref() == Some("7")
    })
    .await?;
    Ok(())
}

/// Issue #24: XID 119 (a GSP timeout; volatile ECC counters stay 0 through a reset) then
/// `gantry sim fault --clear`: the GPU comes back after the quiet period, with no plugin
/// restart. The Node and the pod holding the GPU get a `GPUUnhealthy` event, the Node a
/// `GPUHealthy` one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xid_119_then_clear_recovers_without_a_plugin_restart() -> Res<()> {
    let env = Cluster::builder()
        .nodes("1xL4:2")
        .controllers()
        .namespace("gpu-operator")
        .start()
        .await?;
    let client = env.client().clone();
    let sim = env.sim()?;
    let mut c = gantry("nvidia-device-plugin", &["device-plugin"]);
    c["env"]
        .as_array_mut()
        .ok_or("env")?
        .push(json!({"name": "XID_RECOVERY_HOLD", "value": "3"}));
    let app = "nvidia-device-plugin-daemonset";
    let ds = daemonset(app, json!({}), json!({"containers": [c]}))?;
    Api::<DaemonSet>::namespaced(client.clone(), "gpu-operator")
        .create(&PostParams::default(), &ds)
        .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let node = "l4-0";
    eventually_secs("2 GPUs allocatable", 60, || async {
        allocatable(&nodes_api, node).await.as_deref() == Some("2")
    })
    .await?;
    let plugin = operand_pod(&client, app, node)
        .await
        .ok_or("no plugin pod")?;
    let plugin_uid = plugin.metadata.uid.clone();

    // A pod on both GPUs, so the fault on GPU 0 hits it.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "cuda",
                 "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    eventually_secs("train Running", 60, || async {
        let p = pods.get("train").await?;
        Ok::<_, kube::Error>(p.status.and_then(|s| s.phase).as_deref() == Some("Running"))
    })
    .await?;

    sim.fault(node, &Fault::Xid { gpu: 0, xid: 119 }).await?;
    eventually_secs("1 allocatable after XID 119", 60, || async {
        allocatable(&nodes_api, node).await.as_deref() == Some("1")
    })
    .await?;
    sim.fault(node, &Fault::Clear { gpu: 0 }).await?;
    eventually_secs("2 allocatable again after the reset", 60, || async {
        allocatable(&nodes_api, node).await.as_deref() == Some("2")
    })
    .await?;

    let same = operand_pod(&client, app, node)
        .await
        .ok_or("no plugin pod")?;
    assert_eq!(same.metadata.uid, plugin_uid, "the plugin pod was replaced");
    assert_eq!(restarts(&same), 0, "the plugin restarted");
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::all(client.clone());
    let reasons = |kind: &'static str, name: &'static str| {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await?;
            Ok::<_, kube::Error>(
                list.items
                    .into_iter()
                    .filter(|e| {
                        e.involved_object.kind.as_deref() == Some(kind)
                            && e.involved_object.name.as_deref() == Some(name)
                    })
                    .filter_map(|e| e.reason)
                    .collect::<Vec<_>>(),
            )
        }
    };
    eventually_secs("GPUUnhealthy and GPUHealthy on the Node", 30, || async {
        let r = reasons("Node", node).await?;
        Ok::<_, kube::Error>(
            if r.iter().any(|x| x == "GPUUnhealthy") && r.iter().any(|x| x == "GPUHealthy") {
                Look::Done(())
            } else {
                Look::Seen(format!("{r:?}"))
            },
        )
    })
    .await?;
    eventually_secs("GPUUnhealthy on the pod holding GPU 0", 30, || async {
        let r = reasons("Pod", "train").await?;
        Ok::<_, kube::Error>(if r.iter().any(|x| x == "GPUUnhealthy") {
            Look::Done(())
        } else {
            Look::Seen(format!("{r:?}"))
        })
    })
    .await?;
    Ok(())
}
