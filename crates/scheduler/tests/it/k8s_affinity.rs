//! Required node affinity end to end, through the scheduler and the sim, from manifests
//! applied with kubectl: `matchFields: metadata.name` pins a pod to its node (`In`) or keeps
//! it off one (`NotIn`), `Gt` compares a GFD label as an integer, and a term no node meets
//! leaves the pod Pending with the reason in an Event and its PodGroup's condition.

use crate::cluster;

use cluster::{Cluster, Result, node_of};
use std::time::Duration;

fn pod(name: &str, gpus: u32, terms: &str) -> String {
    let resources = if gpus > 0 {
        format!("resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}")
    } else {
        "resources: {}".to_string()
    };
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{kai.scheduler/queue: default-queue}}
spec:
  schedulerName: kai-scheduler
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: {terms}
  containers:
  - name: main
    image: ubuntu
    {resources}
"#
    )
}

fn pin(op: &str, node: &str) -> String {
    format!(r#"[{{matchFields: [{{key: metadata.name, operator: {op}, values: ["{node}"]}}]}}]"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn match_fields_and_gt_place_pods_and_unsatisfiable_terms_explain_why() -> Result {
    let c = Cluster::start("2xH100-80GB:2").await?;
    let (stop, handle) = c.scheduler(c.options());
    c.wait("Queue CRD served", Duration::from_secs(20), || async {
        c.kubectl(&["get", "queues"]).await.ok()
    })
    .await?;
    c.wait("default queue", Duration::from_secs(20), || async {
        c.kubectl(&["get", "queue", "default-queue"]).await.ok()
    })
    .await?;

    // Each node has two GPUs: both pods pinned to a node fit there, and only there.
    let manifests = [
        pod("pinned-1", 1, &pin("In", "h100-80gb-1")),
        pod("pinned-0", 1, &pin("In", "h100-80gb-0")),
        pod("not-on-0", 1, &pin("NotIn", "h100-80gb-0")),
        // GFD labels an H100 80GB with nvidia.com/gpu.memory=81559: Gt is numeric, not In.
        pod(
            "big-memory",
            0,
            r#"[{matchExpressions: [{key: nvidia.com/gpu.memory, operator: Gt, values: ["80000"]}]}]"#,
        ),
        pod("nowhere", 1, &pin("In", "no-such-node")),
    ]
    .join("---\n");
    c.apply("affinity.yaml", &manifests).await?;

    for (name, want) in [
        ("pinned-1", Some("h100-80gb-1")),
        ("pinned-0", Some("h100-80gb-0")),
        ("not-on-0", Some("h100-80gb-1")),
        ("big-memory", None),
    ] {
        let p = c.wait_running("default", name).await?;
        let on = node_of(&p);
        if let Some(want) = want {
            assert_eq!(on.as_deref(), Some(want), "{name}");
        } else {
            assert!(on.is_some(), "{name} is bound");
        }
    }

    let m = c
        .wait_event("default", "nowhere", "FailedScheduling")
        .await?;
    assert!(m.contains("node affinity mismatch"), "{m}");
    let p = c.pod("default", "nowhere").await.ok_or("pod vanished")?;
    assert_eq!(node_of(&p), None, "an unsatisfiable pod stays unbound");
    assert_eq!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    let cond = c
        .wait("podgroup condition", Duration::from_secs(20), || async {
            let out = c
                .kubectl(&[
                    "get",
                    "podgroups",
                    "-o",
                    "jsonpath={.items[*].status.schedulingConditions[*].message}",
                ])
                .await
                .ok()?;
            out.contains("node affinity mismatch").then_some(out)
        })
        .await?;
    assert!(cond.contains("2 node affinity mismatch"), "{cond}");

    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
    Ok(())
}
