//! Issue #24, device identity end to end, through the full sim: the device plugin publishes
//! the node's GPUs (`node.gantry.dev/gpu-devices`), the scheduler places onto physical GPUs.
//! A 2-GPU node; a fraction's reservation holds one GPU; that GPU falls off the bus. No share
//! may join the dead GPU, and while its reservation lives the kubelet still counts it (it
//! admits by count against allocatable 1), so nothing is bound that it would refuse; once the
//! fraction leaves, a whole-GPU pod runs on the healthy GPU — the one the kubelet allocates.

use crate::cluster::{Cluster, Look, Result, annotation, eventually_secs, node_of};
use gantry_api::gpu_devices;
use gantry_api::names;
use gantry_scheduler::k8s::cache::Cache;
use gantry_sim::cluster::Fault;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};

const RES_NS: &str = names::DEFAULT_RESERVATION_NAMESPACE;

// ---- cache + core: the node's published GPUs decide where work goes -----------------------

use crate::handover::{apply, cache, pod};
use gantry_scheduler::{Config, Snapshot, schedule};
use serde_json::json;

/// A 2-GPU node publishing its GPUs; `allocatable` as the kubelet advertises.
fn published_node(devices: &str, allocatable: u32) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n1", "annotations": {names::ANNOTATION_GPU_DEVICES: devices}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110",
                                   "nvidia.com/gpu": allocatable.to_string()},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn reservation_on(group: u32, uuid: &str) -> serde_json::Value {
    pod(
        &format!("r{group}"),
        RES_NS,
        Some("n1"),
        json!({"scheduler.gantry.dev/gpu-indices": group.to_string(),
               "run.ai/reserve_for_gpu_index": uuid}),
        json!({"app": "kai-resource-reservation", "runai-gpu-group": format!("g{group}")}),
        true,
    )
}

fn share(name: &str, group: u32, fraction: &str, bound: bool) -> serde_json::Value {
    let mut ann = json!({"pod-group-name": "gf", "gpu-fraction": fraction});
    let mut labels = json!({});
    if bound {
        ann["scheduler.gantry.dev/gpu-indices"] = json!(group.to_string());
        labels = json!({"runai-gpu-group": format!("g{group}")});
    }
    pod(name, "ns", bound.then_some("n1"), ann, labels, false)
}

fn whole_pending() -> serde_json::Value {
    pod(
        "w",
        "ns",
        None,
        json!({"pod-group-name": "gw"}),
        json!({}),
        true,
    )
}

/// The binds of one cycle: (pod, GPU binding) for those the shell would send now.
fn binds(c: &Cache) -> Vec<(String, gantry_scheduler::decisions::GpuBinding)> {
    let snap = Snapshot::build(&c.input);
    schedule(&snap, &Config::default())
        .binds
        .into_iter()
        .filter(|b| !b.pipelined)
        .map(|b| (b.name, b.gpu))
        .collect()
}

#[test]
fn withdrawn_gpu_takes_no_work_and_its_holders_keep_the_kubelets_count() {
    use gantry_scheduler::decisions::GpuBinding;
    // GPU 1 off the bus, nothing on it: the whole-GPU pod goes to GPU 0, not slot "0 of 1".
    let mut c = cache(published_node("0:GPU-a:Healthy,1:GPU-b:Unhealthy", 1));
    apply(&mut c, &whole_pending());
    assert_eq!(
        binds(&c),
        vec![("w".into(), GpuBinding::Whole { indices: vec![0] })]
    );
    // GPU 0 off the bus instead: GPU 1, which slots 0..allocatable-1 would never name.
    let mut c = cache(published_node("0:GPU-a:Unhealthy,1:GPU-b:Healthy", 1));
    apply(&mut c, &whole_pending());
    assert_eq!(
        binds(&c),
        vec![("w".into(), GpuBinding::Whole { indices: vec![1] })]
    );
    // A fraction's reservation (group 0) sits on GPU 1, which falls off the bus. A new share
    // must not join group 0, and nothing may take GPU 0: the reservation still counts
    // against allocatable 1, so the kubelet would refuse it.
    let mut c = cache(published_node("0:GPU-a:Healthy,1:GPU-b:Unhealthy", 1));
    apply(&mut c, &reservation_on(0, "GPU-b"));
    apply(&mut c, &share("f1", 0, "0.5", true));
    apply(&mut c, &share("f2", 0, "0.25", false));
    apply(&mut c, &whole_pending());
    assert_eq!(binds(&c), vec![], "nothing the kubelet would refuse");
    // Both GPUs healthy again: the new share joins group 0 on GPU 1; the whole-GPU pod
    // takes GPU 0, which the slot model would have given to group 0.
    c.apply_node(&published_node("0:GPU-a:Healthy,1:GPU-b:Healthy", 2));
    let mut got = binds(&c);
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            (
                "f2".into(),
                GpuBinding::Fraction {
                    indices: vec![0],
                    milli: 250
                }
            ),
            ("w".into(), GpuBinding::Whole { indices: vec![0] }),
        ]
    );
}

fn fraction(name: &str, share: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{kai.scheduler/queue: default-queue}}
  annotations: {{gpu-fraction: "{share}"}}
spec:
  schedulerName: kai-scheduler
  containers: [{{name: main, image: ubuntu}}]
"#
    )
}

const WHOLE: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: whole
  labels: {kai.scheduler/queue: default-queue}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: ubuntu
    resources: {limits: {nvidia.com/gpu: 1}}
"#;

/// The node's published GPUs and its allocatable `nvidia.com/gpu`.
async fn node_gpus(c: &Cluster, node: &str) -> Result<(Vec<gpu_devices::GpuDevice>, String)> {
    let n = Api::<Node>::all(c.client.clone()).get(node).await?;
    let published = n
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_GPU_DEVICES))
        .map(|v| gpu_devices::parse(v))
        .transpose()?
        .unwrap_or_default();
    let alloc = n
        .status
        .and_then(|s| s.allocatable)
        .and_then(|a| a.get(names::RESOURCE_GPU).map(|q| q.0.clone()))
        .unwrap_or_default();
    Ok((published, alloc))
}

async fn failed_pods(c: &Cluster) -> Vec<String> {
    let mut out = Vec::new();
    for ns in ["default", RES_NS] {
        let pods = Api::<Pod>::namespaced(c.client.clone(), ns)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for p in pods {
            let s = p.status.as_ref();
            if s.and_then(|s| s.phase.as_deref()) == Some("Failed") {
                out.push(format!(
                    "{ns}/{}: {:?}",
                    p.metadata.name.unwrap_or_default(),
                    s.and_then(|s| s.message.clone())
                ));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_bus_gpu_takes_no_share_and_a_whole_pod_runs_on_the_healthy_gpu() -> Result {
    let c = Cluster::start("1xH100-80GB:2").await?;
    let (stop, handle) = c.scheduler(c.options());
    eventually_secs("default queue", 60, || async {
        c.kubectl(&["get", "queue", "default-queue"]).await.ok()
    })
    .await?;
    let node = Api::<Node>::all(c.client.clone())
        .list(&ListParams::default())
        .await?
        .items[0]
        .metadata
        .name
        .clone()
        .unwrap_or_default();
    eventually_secs(
        "the device plugin publishes two healthy GPUs",
        60,
        || async {
            let (d, _) = node_gpus(&c, &node).await.ok()?;
            (d.len() == 2 && d.iter().all(|g| g.healthy)).then_some(())
        },
    )
    .await?;

    // A fraction: its reservation pod holds one GPU, whichever the kubelet picks.
    c.apply("f1.yaml", &fraction("f1", "0.5")).await?;
    c.wait_running("default", "f1").await?;
    let reserved = eventually_secs("the reservation pod reports its GPU", 60, || async {
        let pods = Api::<Pod>::namespaced(c.client.clone(), RES_NS)
            .list(&ListParams::default())
            .await
            .ok()?;
        let p = pods.items.first()?;
        gantry_scheduler::k8s::convert::reserved_uuid(p)
    })
    .await?;
    let (devices, _) = node_gpus(&c, &node).await?;
    let bad = devices
        .iter()
        .find(|d| d.uuid == reserved)
        .expect("the reservation's GPU is published")
        .clone();
    let good = devices.iter().find(|d| d.uuid != reserved).unwrap().clone();
    println!(
        "reservation on GPU {} ({}), healthy GPU {} ({})",
        bad.index, bad.uuid, good.index, good.uuid
    );

    c.sim()?
        .fault(&node, &Fault::OffBus { gpu: bad.index })
        .await?;
    eventually_secs(
        "GPU withdrawn: published Unhealthy, allocatable 1",
        60,
        || async {
            let (d, alloc) = match node_gpus(&c, &node).await {
                Ok(x) => x,
                Err(e) => return Look::Seen(e.to_string()),
            };
            let withdrawn = d.iter().any(|g| g.index == bad.index && !g.healthy);
            if withdrawn && alloc == "1" {
                Look::Done(())
            } else {
                Look::Seen(format!("{d:?}, allocatable {alloc}"))
            }
        },
    )
    .await?;

    // A new share must not join the dead GPU's group; a whole-GPU pod must not be bound
    // while the reservation there still counts against allocatable 1.
    c.apply("f2.yaml", &fraction("f2", "0.25")).await?;
    c.apply("whole.yaml", WHOLE).await?;
    let why_f2 = c.wait_event("default", "f2", "FailedScheduling").await?;
    let why_whole = c.wait_event("default", "whole", "FailedScheduling").await?;
    println!("f2 pending: {why_f2}\nwhole pending: {why_whole}");
    for name in ["f2", "whole"] {
        let p = c.pod("default", name).await.expect("pod");
        assert_eq!(
            node_of(&p),
            None,
            "{name} bound while the node has no GPU free"
        );
    }

    // The fraction leaves: its reservation is collected, and the whole-GPU pod runs on the
    // healthy GPU, which is also the one the kubelet allocated.
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    pods.delete("f2", &DeleteParams::default()).await?;
    pods.delete("f1", &DeleteParams::default()).await?;
    let whole = c.wait_running("default", "whole").await?;
    assert_eq!(
        annotation(&whole, names::ANNOTATION_SCHEDULER_GPU_INDICES).as_deref(),
        Some(good.index.to_string().as_str()),
        "the scheduler chose the healthy GPU"
    );
    let allocated = gantry_scheduler::k8s::convert::allocated_uuids(&whole);
    assert_eq!(
        allocated,
        vec![good.uuid.clone()],
        "the kubelet allocated the healthy GPU"
    );
    let failed = failed_pods(&c).await;
    println!(
        "2-GPU off-bus: whole-GPU pod on GPU {} ({}), {} pods Failed",
        good.index,
        good.uuid,
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:?}");
    stop.send(true)?;
    let _ = handle.await;
    Ok(())
}
