//! One stored pod a typed client cannot decode (a label that is not a string, stored before the
//! API server checked labels) must not stop the scheduler: its pod watch reads pods as
//! `Lenient`, so the relist does not fail, and the bad pod still counts on its node (what of it
//! decodes: node, requests, phase), so its GPU is not handed out twice.

use crate::cluster;

use cluster::{Cluster, Result, node_of};
use gantry_sim::store::{Mutation, ObjKey, StoreError};
use serde_json::json;
use std::time::Duration;

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: fits
  labels: {kai.scheduler/queue: default-queue}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: ubuntu
    resources: {limits: {nvidia.com/gpu: 1}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_pod_neither_stops_the_scheduler_nor_frees_its_gpu() -> Result {
    let c = Cluster::start("2xH100-80GB:1").await?;
    // Running on node 0 and holding its one GPU, with labels a typed client cannot decode.
    let legacy = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "legacy", "namespace": "default", "uid": "legacy-uid",
                     "creationTimestamp": "2026-12-01T00:00:00Z", "labels": {"tier": 1}},
        "spec": {"nodeName": "h100-80gb-0",
                 "containers": [{"name": "main", "image": "ubuntu",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"},
                                               "requests": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"}
    });
    let key = ObjKey {
        gr: "/pods".into(),
        namespace: "default".into(),
        name: "legacy".into(),
    };
    c.cp()
        .api()
        .store
        .mutate::<StoreError>(&key, |_, _| Ok(Mutation::Put(legacy.clone())))?;

    let (stop, handle) = c.scheduler(c.options());
    c.wait("default queue", Duration::from_secs(30), || async {
        c.kubectl(&["get", "queue", "default-queue"]).await.ok()
    })
    .await?;
    c.apply("fits.yaml", POD).await?;
    let p = c.wait_running("default", "fits").await?;
    assert_eq!(
        node_of(&p).as_deref(),
        Some("h100-80gb-1"),
        "the GPU the undecodable pod holds was handed out again"
    );
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
    Ok(())
}
