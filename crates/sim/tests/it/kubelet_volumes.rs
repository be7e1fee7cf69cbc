//! The kubelet's pre-start checks on a simulated node: a pod mounting a ConfigMap that does
//! not exist stays `ContainerCreating` with `FailedMount` events and starts once it exists;
//! a pod bound with `spec.nodeName` to a node its affinity excludes fails `NodeAffinity`.

use gantry_sim::kubelet::AgentRegistry;
use gantry_testkit::{Cluster, eventually_secs};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

type Result<T = ()> = anyhow::Result<T>;

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_configmap_blocks_start_until_created() -> Result {
    let env = Cluster::builder()
        .nodes("1xcpu")
        .agents(AgentRegistry::new())
        .start()
        .await?;
    let client = env.client().clone();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "needs-cm"},
        "spec": {"nodeName": "cpu-0", "containers": [{"name": "c", "image": "busybox",
                 "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
                 "volumes": [{"name": "cfg", "configMap": {"name": "late"}}]}}))?;
    pods.create(&PostParams::default(), &pod).await?;
    let events: Api<Event> = Api::default_namespaced(client.clone());
    let msg = eventually_secs("a FailedMount event for needs-cm", 30, || async {
        let l = events.list(&ListParams::default()).await?;
        anyhow::Ok(
            l.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedMount"))
                .and_then(|e| e.message),
        )
    })
    .await?;
    assert!(msg.contains("configmap \"late\" not found"), "{msg}");
    // The event and the status are separate writes: wait for the status too.
    let (phase_now, waiting) = eventually_secs("needs-cm's status while it waits", 30, || async {
        let p = pods.get("needs-cm").await?;
        let waiting = p
            .status
            .clone()
            .and_then(|s| s.container_statuses)
            .and_then(|c| c.into_iter().next())
            .and_then(|c| c.state)
            .and_then(|s| s.waiting)
            .and_then(|w| w.reason);
        anyhow::Ok(waiting.is_some().then(|| (phase(&p), waiting)))
    })
    .await?;
    assert_eq!(phase_now, "Pending");
    assert_eq!(waiting.as_deref(), Some("ContainerCreating"));
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "late"}, "data": {"a": "1"}}))?;
    Api::<ConfigMap>::default_namespaced(client.clone())
        .create(&PostParams::default(), &cm)
        .await?;
    eventually_secs("needs-cm runs once its ConfigMap exists", 60, || async {
        let p = pods.get("needs-cm").await?;
        anyhow::Ok(phase(&p) == "Running")
    })
    .await?;
    // Every failed attempt said the same: one Event object, its repeats counted on it (the
    // kubelet writes through the one recorder, as client-go's does).
    let failed_mounts = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("FailedMount")
                && e.involved_object.name.as_deref() == Some("needs-cm")
        })
        .count();
    assert_eq!(failed_mounts, 1);

    let wrong: Pod = serde_json::from_value(json!({
        "metadata": {"name": "wrong-node"},
        "spec": {"nodeName": "cpu-0", "nodeSelector": {"gpu": "yes"},
                 "containers": [{"name": "c", "image": "busybox"}]}}))?;
    pods.create(&PostParams::default(), &wrong).await?;
    let reason = eventually_secs("wrong-node fails admission", 30, || async {
        let p = pods.get("wrong-node").await?;
        anyhow::Ok(
            (phase(&p) == "Failed").then(|| p.status.and_then(|s| s.reason).unwrap_or_default()),
        )
    })
    .await?;
    assert_eq!(reason, "NodeAffinity");
    Ok(())
}
