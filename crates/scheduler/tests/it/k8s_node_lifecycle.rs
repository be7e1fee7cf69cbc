//! A deleted node's pods are deleted (the sim's pod GC, as kube-controller-manager's), and the
//! scheduler gives back what they held of their queue: a pod waiting over its queue's limit
//! then runs on the node that is left.

use crate::cluster;

use cluster::{Cluster, Result, eventually_secs, node_of};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};

/// A parent with no limits and a child queue held to one GPU.
fn queues() -> String {
    let parent = super::k8s_kai::queue("parent", None, -1, -1);
    let child = super::k8s_kai::queue("one-gpu", Some("parent"), 1, 1);
    format!("{parent}---{child}")
}

fn gpu_pod(name: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{kai.scheduler/queue: one-gpu}}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: ubuntu
    resources: {{limits: {{nvidia.com/gpu: 1}}}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_nodes_pods_free_their_queue_quota() -> Result {
    let c = Cluster::start("2xL4:1").await?;
    let (_stop, _scheduler) = c.scheduler(c.options());
    eventually_secs("Queue CRD served", 60, || async {
        c.kubectl(&["get", "queues"]).await.ok()
    })
    .await?;
    c.apply("queues.yaml", &queues()).await?;
    c.apply("first.yaml", &gpu_pod("first")).await?;
    let first = c.wait_running("default", "first").await?;
    let lost = node_of(&first).ok_or("first pod not bound")?;
    // The queue's one GPU is taken: the second pod waits, and says why.
    c.apply("second.yaml", &gpu_pod("second")).await?;
    let m = c
        .wait_event("default", "second", "FailedScheduling")
        .await?;
    assert!(m.contains("one-gpu"), "{m}");

    Api::<Node>::all(c.client.clone())
        .delete(&lost, &DeleteParams::default())
        .await?;
    eventually_secs("the deleted node's pod gone", 60, || async {
        c.pod("default", "first").await.is_none()
    })
    .await?;
    let second = c.wait_running("default", "second").await?;
    let now_on = node_of(&second).ok_or("second pod not bound")?;
    assert_ne!(now_on, lost, "bound to the deleted node");
    Ok(())
}
