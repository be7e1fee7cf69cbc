//! Reclaim across queues and preemption by priority, end to end in the sim; the evicted pods'
//! Events name the reason.

use crate::cluster;

use cluster::{Cluster, Result, eventually_secs, node_of};
use std::time::Duration;

const SETUP: &str = r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: train}
value: 50
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: inference}
value: 125
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: research}
spec:
  resources:
    gpu: {quota: 2, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a}
spec:
  parentQueue: research
  resources:
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-b}
spec:
  parentQueue: research
  resources:
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
"#;

pub(crate) fn pod(name: &str, queue: &str, class: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{kai.scheduler/queue: {queue}}}
spec:
  schedulerName: kai-scheduler
  priorityClassName: {class}
  containers:
  - name: main
    image: ubuntu
    resources: {{limits: {{nvidia.com/gpu: 1}}}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_across_queues_then_preempt_by_priority() -> Result {
    let c = Cluster::start("1xH100-80GB:2").await?;
    let (stop, handle) = c.scheduler(c.options());
    eventually_secs("Queue CRD served", 60, || async {
        c.kubectl(&["get", "queues"]).await.ok()
    })
    .await?;
    c.apply("setup.yaml", SETUP).await?;

    // team-a takes both GPUs: one in quota, one over quota.
    c.apply(
        "a.yaml",
        &format!(
            "{}---{}",
            pod("a-1", "team-a", "train"),
            pod("a-2", "team-a", "train")
        ),
    )
    .await?;
    c.wait_running("default", "a-1").await?;
    c.wait_running("default", "a-2").await?;

    // team-b asks for its quota: one of team-a's pods is reclaimed.
    c.apply("b.yaml", &pod("b-1", "team-b", "train")).await?;
    c.wait_running("default", "b-1").await?;
    // The Reclaimed event is a separate write from the binding: wait for one, then check that
    // there is only one.
    let reclaimed = || async {
        let mut victims = Vec::new();
        for n in ["a-1", "a-2"] {
            if let Some(m) = c
                .events("default", n)
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("Reclaimed"))
                .and_then(|e| e.message)
            {
                victims.push((n, m));
            }
        }
        victims
    };
    eventually_secs("a Reclaimed event on a team-a pod", 60, || async {
        !reclaimed().await.is_empty()
    })
    .await?;
    let mut victims = Vec::new();
    for (n, m) in reclaimed().await {
        assert!(m.contains("team-b") && m.contains("team-a"), "{m}");
        victims.push(n);
    }
    assert_eq!(
        victims.len(),
        1,
        "exactly one team-a pod reclaimed: {victims:?}"
    );
    let survivor = if victims[0] == "a-1" { "a-2" } else { "a-1" };
    assert!(node_of(&c.wait_running("default", survivor).await?).is_some());

    // A higher-priority pod of team-a preempts team-a's remaining train pod.
    c.apply("a-hi.yaml", &pod("a-hi", "team-a", "inference"))
        .await?;
    c.wait_running("default", "a-hi").await?;
    let m = c.wait_event("default", survivor, "Preempted").await?;
    assert!(m.contains("priority 125 > 50"), "{m}");
    // team-b's pod is untouched by team-a's preemption.
    let b = c.pod("default", "b-1").await.ok_or("b-1 vanished")?;
    assert_eq!(b.status.and_then(|s| s.phase).as_deref(), Some("Running"));

    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
    Ok(())
}
