//! End to end in the sim, from upstream-shaped KAI manifests applied with the real kubectl:
//! default queues, two fractional pods sharing one GPU through one reservation pod, a Job
//! running as a gang, a gang that cannot fit staying Pending with an Event, and bad input
//! reported through Events while the scheduler keeps going.

use crate::cluster;

use cluster::{Cluster, Look, Result, annotation, eventually_secs, node_of};
use gantry_api::names;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams};
use std::collections::BTreeSet;
use std::time::Duration;

const QUEUES: &str = r#"
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: default-parent-queue
spec:
  resources:
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    gpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: default-queue
spec:
  parentQueue: default-parent-queue
  resources:
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    gpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: capped
spec:
  parentQueue: default-parent-queue
  resources:
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    gpu: {quota: 0, limit: 0, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
"#;

const BAD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: bad-fraction
  labels: {kai.scheduler/queue: default-queue}
  annotations: {gpu-fraction: "1.5"}
spec:
  schedulerName: kai-scheduler
  containers: [{name: main, image: ubuntu, args: ["sleep", "infinity"]}]
---
apiVersion: v1
kind: Pod
metadata:
  name: lost-queue
  labels: {kai.scheduler/queue: no-such-queue}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: ubuntu
    resources: {limits: {nvidia.com/gpu: 1}}
---
apiVersion: v1
kind: Pod
metadata:
  name: over-limit
  labels: {kai.scheduler/queue: capped}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: ubuntu
    resources: {limits: {nvidia.com/gpu: 1}}
"#;

const SHARING: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: gpu-sharing-fraction
  labels: {kai.scheduler/queue: default-queue}
  annotations: {gpu-fraction: "0.5"}
spec:
  schedulerName: kai-scheduler
  containers: [{name: ubuntu, image: ubuntu, args: ["sleep", "infinity"]}]
---
apiVersion: v1
kind: Pod
metadata:
  name: gpu-sharing-memory
  labels: {kai.scheduler/queue: default-queue}
  annotations: {gpu-memory: "2000"}
spec:
  schedulerName: kai-scheduler
  containers: [{name: ubuntu, image: ubuntu, args: ["sleep", "infinity"]}]
"#;

fn job(name: &str, parallelism: u32) -> String {
    format!(
        r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  labels: {{kai.scheduler/queue: default-queue}}
spec:
  parallelism: {parallelism}
  completions: {parallelism}
  template:
    metadata:
      labels: {{kai.scheduler/queue: default-queue}}
    spec:
      schedulerName: kai-scheduler
      restartPolicy: Never
      containers:
      - name: main
        image: ubuntu
        resources: {{limits: {{nvidia.com/gpu: 1}}}}
"#
    )
}

async fn cm_env(c: &Cluster, p: &Pod) -> Option<String> {
    let prefix = annotation(p, names::ANNOTATION_SHARED_GPU_CONFIGMAP)?;
    let ns = p.metadata.namespace.as_deref()?;
    let cm = Api::<ConfigMap>::namespaced(c.client.clone(), ns)
        .get_opt(&format!("{prefix}-0"))
        .await
        .ok()??;
    cm.data?.get("NVIDIA_VISIBLE_DEVICES").cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kai_manifests_end_to_end() -> Result {
    let c = Cluster::start("2xH100-80GB:2").await?;
    let (stop, handle) = c.scheduler(c.options());
    // The scheduler installs the CRDs and KAI's default queues; kubectl applies the upstream
    // quickstart queues over them.
    eventually_secs("Queue CRD served", 60, || async {
        c.kubectl(&["get", "queues"]).await.ok()
    })
    .await?;
    c.apply("queues.yaml", QUEUES).await?;

    // Bad input: each gets an Event with a clear reason; nothing stops the scheduler.
    c.apply("bad.yaml", BAD).await?;
    let m = c
        .wait_event("default", "bad-fraction", "InvalidRequest")
        .await?;
    assert!(m.contains("gpu-fraction") && m.contains("1.5"), "{m}");
    let m = c
        .wait_event("default", "lost-queue", "FailedScheduling")
        .await?;
    assert!(
        m.contains("no-such-queue") && m.contains("does not exist"),
        "{m}"
    );
    let m = c
        .wait_event("default", "over-limit", "FailedScheduling")
        .await?;
    assert!(m.contains("OverLimit") && m.contains("capped"), "{m}");

    // Two fractions share one GPU through one reservation pod.
    c.apply("sharing.yaml", SHARING).await?;
    let a = c.wait_running("default", "gpu-sharing-fraction").await?;
    let b = c.wait_running("default", "gpu-sharing-memory").await?;
    assert_eq!(node_of(&a), node_of(&b));
    let ga = a
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(names::LABEL_GPU_GROUP))
        .cloned();
    let gb = b
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(names::LABEL_GPU_GROUP))
        .cloned();
    assert!(ga.is_some() && ga == gb, "{ga:?} {gb:?}");
    assert_eq!(
        annotation(&a, names::ANNOTATION_RECEIVED_RESOURCE_TYPE).as_deref(),
        Some("Fraction")
    );
    let ua = eventually_secs("a ConfigMap env for the fraction pod", 60, || {
        cm_env(&c, &a)
    })
    .await?;
    let ub = eventually_secs("a ConfigMap env for the gpu-memory pod", 60, || {
        cm_env(&c, &b)
    })
    .await?;
    assert_eq!(ua, ub);
    assert!(ua.starts_with("GPU-"), "{ua}");
    let res = c
        .pods(
            names::DEFAULT_RESERVATION_NAMESPACE,
            &format!("{}={}", names::LABEL_APP, names::RESERVATION_APP),
        )
        .await;
    assert_eq!(res.len(), 1, "one reservation pod per shared GPU");
    let r = c
        .wait_running(
            names::DEFAULT_RESERVATION_NAMESPACE,
            res[0].metadata.name.as_deref().unwrap_or_default(),
        )
        .await?;
    let alloc = annotation(&r, names::ANNOTATION_SIM_ALLOCATED)
        .ok_or("reservation pod has no allocation")?;
    assert!(
        alloc.contains(&ua),
        "reservation allocation {alloc} lacks {ua}"
    );
    assert_eq!(node_of(&r), node_of(&a));
    // The fraction pods requested no nvidia.com/gpu: only the reservation pod holds a device.
    assert!(annotation(&a, names::ANNOTATION_SIM_ALLOCATED).is_none());

    // A Job with parallelism 2 runs as a gang of 2.
    c.apply("train.yaml", &job("train", 2)).await?;
    let pods = eventually_secs("both train pods Running", 60, || async {
        let ps = c.pods("default", "job-name=train").await;
        let running = ps
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (running == 2).then_some(ps)
    })
    .await?;
    let groups: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| annotation(p, names::ANNOTATION_POD_GROUP_NAME))
        .collect();
    assert_eq!(groups.len(), 1, "{groups:?}");
    let pg = c
        .kubectl(&[
            "get",
            "podgroups",
            groups.first().map(String::as_str).unwrap_or(""),
            "-o",
            "jsonpath={.spec.minMember}",
        ])
        .await?;
    assert_eq!(pg.trim(), "2");

    // A gang of 4 cannot fit (1 GPU left): Pending, an Event saying why, nothing bound.
    c.apply("big.yaml", &job("big", 4)).await?;
    let big = eventually_secs("4 big pods", 60, || async {
        let ps = c.pods("default", "job-name=big").await;
        (ps.len() == 4).then_some(ps)
    })
    .await?;
    let first = big[0].metadata.name.clone().unwrap_or_default();
    let m = c.wait_event("default", &first, "FailedScheduling").await?;
    assert!(!m.is_empty(), "an Unschedulable event explains the gang");
    tokio::time::sleep(Duration::from_secs(2)).await;
    for p in c.pods("default", "job-name=big").await {
        assert_eq!(
            node_of(&p),
            None,
            "no pod of the gang may be bound: {:?}",
            p.metadata.name
        );
    }
    let cond = eventually_secs("podgroup condition", 60, || async {
        let out = c
            .kubectl(&[
                "get",
                "podgroups",
                "-o",
                "jsonpath={.items[*].status.schedulingConditions[*].type}",
            ])
            .await
            .ok()?;
        out.contains("UnschedulableOnNodePool").then_some(out)
    })
    .await?;
    assert!(!cond.is_empty());

    // The scheduler is still going: the earlier bad pods stay Pending, nothing crashed.
    for n in ["bad-fraction", "lost-queue", "over-limit"] {
        let p = c.pod("default", n).await.ok_or("pod vanished")?;
        assert_eq!(node_of(&p), None, "{n} must not be bound");
    }
    assert!(!handle.is_finished(), "scheduler exited");

    // Queue status: default-queue holds 2 whole GPUs and the two shares.
    // The queue status is written on the scheduler's own schedule: wait for the final figure.
    eventually_secs(
        "queue status: more than 2 and less than 3 GPUs",
        60,
        || async {
            let v = c
                .kubectl(&[
                    "get",
                    "queue",
                    "default-queue",
                    "-o",
                    "jsonpath={.status.allocated.nvidia\\.com/gpu}",
                ])
                .await?;
            Result::Ok(match v.trim().parse::<f64>() {
                Ok(gpus) if gpus > 2.0 && gpus < 3.0 => Look::Done(()),
                _ => Look::Seen(format!("allocated {v:?}")),
            })
        },
    )
    .await?;

    // explain: the gang pod's queue and per-node verdicts.
    let text = gantry_scheduler::k8s::explain::explain_pod(
        &c.client,
        "default",
        &first,
        "kai-scheduler",
        "gantry-reservation",
    )
    .await?;
    assert!(text.contains("Queue:      default-queue"), "{text}");
    assert!(text.contains("fair share"), "{text}");
    assert!(
        text.contains("h100-80gb-0:") && text.contains("h100-80gb-1:"),
        "{text}"
    );

    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
    let left = Api::<Pod>::all(c.client.clone())
        .list(&ListParams::default())
        .await?;
    assert!(!left.items.is_empty());
    Ok(())
}
