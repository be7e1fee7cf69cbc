//! Issue #24, release before reuse, at the level where the race lives: the scheduler's cache
//! and core against a model of the kubelet's device accounting. A one-GPU node; a fractional
//! pod leaves its GPU (terminating, then gone), the scheduler collects the idle reservation
//! pod (Terminating until the kubelet has released the device, then gone), and a whole-GPU
//! pod waits. Every interleaving of those watch events with scheduling cycles is tried at
//! random over 1,000 rounds; the kubelet model fails the whole-GPU pod if it is bound while
//! the reservation still holds the device. The full-sim version (a few rounds through the
//! real kubelet) is in `k8s_e2e::fraction_then_whole_handover_never_fails_a_pod`.

use gantry_api::kai::{PodGroup, Queue};
use gantry_scheduler::k8s::cache::Cache;
use gantry_scheduler::{Config, Snapshot, schedule};
use k8s_openapi::api::core::v1::{Node, Pod};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

const RES_NS: &str = "gantry-reservation";

fn node() -> Node {
    node_with(1)
}

fn node_with(gpus: u32) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110",
                                   "nvidia.com/gpu": gpus.to_string()},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

pub(crate) fn pod(
    name: &str,
    ns: &str,
    node: Option<&str>,
    ann: Value,
    labels: Value,
    gpu: bool,
) -> Value {
    let mut spec = json!({"schedulerName": "kai-scheduler",
        "containers": [{"name": "c", "resources": {}}]});
    if gpu {
        spec["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": "1"}});
    }
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    json!({"metadata": {"name": name, "namespace": ns, "uid": name, "annotations": ann,
                        "labels": labels, "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": spec})
}

pub(crate) fn terminating(mut p: Value) -> Value {
    p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:10Z");
    p
}

pub(crate) fn apply(c: &mut Cache, p: &Value) {
    let p: Pod = serde_json::from_value(p.clone()).unwrap();
    c.apply_pod(&p);
}

/// One scheduling cycle; whether the whole-GPU pod `w` got a bind the shell would send now.
fn cycle_binds_whole(c: &mut Cache, cfg: &Config) -> bool {
    let snap = Snapshot::build(&c.input);
    let d = schedule(&snap, cfg);
    d.binds.iter().any(|b| b.name == "w" && !b.pipelined)
}

pub(crate) fn cache(n: Node) -> Cache {
    let mut c = Cache::new("kai-scheduler", RES_NS);
    c.apply_node(&n);
    let q: Queue = serde_json::from_value(json!({"apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue", "metadata": {"name": "q"}, "spec": {"resources": {
        "gpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}}))
    .unwrap();
    c.apply_queue(&q);
    for g in ["gf", "gw"] {
        let pg: PodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": g, "namespace": "ns"}, "spec": {"queue": "q"}}))
        .unwrap();
        c.apply_pod_group(&pg);
    }
    c
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    FractionTerminating,
    FractionGone,
    ReservationTerminating,
    ReservationGone,
    WholeArrives,
}

#[test]
fn thousand_fraction_to_whole_handovers_fail_no_pod() {
    let cfg = Config::default();
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    let (mut failed, mut bound, mut early_cycles) = (0u32, 0u32, 0u32);
    let rounds = 1000;
    for _ in 0..rounds {
        let mut c = cache(node());
        let group = json!({"runai-gpu-group": "g0"});
        let fraction = pod(
            "f",
            "ns",
            Some("n1"),
            json!({"pod-group-name": "gf", "gpu-fraction": "0.5",
                   "scheduler.gantry.dev/gpu-indices": "0"}),
            group.clone(),
            false,
        );
        let reservation = pod(
            "r",
            RES_NS,
            Some("n1"),
            json!({"scheduler.gantry.dev/gpu-indices": "0"}),
            json!({"app": "kai-resource-reservation", "runai-gpu-group": "g0"}),
            true,
        );
        let whole = pod(
            "w",
            "ns",
            None,
            json!({"pod-group-name": "gw"}),
            json!({}),
            true,
        );
        apply(&mut c, &fraction);
        apply(&mut c, &reservation);

        // Causal order: the fraction ends before the reservation is collected, and the
        // reservation is gone only after it was deleted. The whole-GPU pod comes any time.
        let mut chain = vec![
            Ev::FractionTerminating,
            Ev::FractionGone,
            Ev::ReservationTerminating,
            Ev::ReservationGone,
        ];
        let at = rng.random_range(0..=chain.len());
        chain.insert(at, Ev::WholeArrives);
        // What the kubelet holds: the reservation's device until it is gone.
        let mut kubelet_holds = true;
        let (mut w_present, mut w_bound) = (false, false);
        for ev in chain {
            match ev {
                Ev::FractionTerminating => apply(&mut c, &terminating(fraction.clone())),
                Ev::FractionGone => c.delete_pod("ns", "f"),
                Ev::ReservationTerminating => apply(&mut c, &terminating(reservation.clone())),
                Ev::ReservationGone => {
                    kubelet_holds = false;
                    c.delete_pod(RES_NS, "r");
                }
                Ev::WholeArrives => {
                    w_present = true;
                    apply(&mut c, &whole);
                }
            }
            for _ in 0..rng.random_range(0..3) {
                if !w_bound && cycle_binds_whole(&mut c, &cfg) {
                    w_bound = true;
                    if kubelet_holds {
                        failed += 1; // OutOfnvidia.com/gpu
                    }
                    let mut b = whole.clone();
                    b["spec"]["nodeName"] = json!("n1");
                    apply(&mut c, &b);
                } else if w_present && !w_bound && !kubelet_holds {
                    early_cycles += 1;
                }
            }
        }
        // No stall: the first cycle after the release binds it.
        if !w_bound {
            assert!(
                cycle_binds_whole(&mut c, &cfg),
                "the whole-GPU pod is not bound once the GPU is released"
            );
        }
        bound += 1;
    }
    println!(
        "fraction->whole handover: {rounds} rounds, {bound} whole-GPU pods bound, {failed} Failed"
    );
    assert_eq!(
        failed, 0,
        "{failed} whole-GPU pods bound onto a GPU the node still held"
    );
    assert_eq!(
        early_cycles, 0,
        "a cycle after the release did not bind the pod"
    );
    assert_eq!(bound, rounds);
}

/// Issue #24's off-bus case: a 2-GPU node, an idle reservation pod on GPU 1, then GPU 1
/// falls off the bus (allocatable 2 -> 1). The kubelet still counts the reservation's device,
/// so a whole-GPU pod must wait for it to be gone, then runs on the healthy GPU 0; before the
/// fix it was bound at once and refused (`OutOfnvidia.com/gpu`).
#[test]
fn whole_gpu_pod_runs_on_the_healthy_gpu_after_the_other_falls_off_the_bus() {
    let cfg = Config::default();
    let mut c = cache(node_with(2));
    let reservation = pod(
        "r",
        RES_NS,
        Some("n1"),
        json!({"scheduler.gantry.dev/gpu-indices": "1"}),
        json!({"app": "kai-resource-reservation", "runai-gpu-group": "g1"}),
        true,
    );
    apply(&mut c, &reservation);
    c.apply_node(&node_with(1)); // GPU 1 off the bus
    apply(
        &mut c,
        &pod(
            "w",
            "ns",
            None,
            json!({"pod-group-name": "gw"}),
            json!({}),
            true,
        ),
    );
    assert!(
        !cycle_binds_whole(&mut c, &cfg),
        "bound while the kubelet still holds the reservation's device"
    );
    apply(&mut c, &terminating(reservation));
    assert!(!cycle_binds_whole(&mut c, &cfg));
    c.delete_pod(RES_NS, "r");
    let snap = Snapshot::build(&c.input);
    let d = schedule(&snap, &cfg);
    let b = d
        .binds
        .iter()
        .find(|b| b.name == "w")
        .expect("a bind for w");
    assert!(!b.pipelined, "not bound once the reservation is gone");
    assert_eq!(b.node, "n1");
}

/// The same handover through the full sim (real kubelet admission, real reservation pods,
/// the device plugin): a few rounds, none may leave a pod Failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fraction_then_whole_handover_in_the_sim_fails_no_pod() -> crate::cluster::Result {
    use crate::cluster::{Cluster, eventually_secs};
    use kube::api::{Api, DeleteParams};
    let c = Cluster::start("1xL4:1").await?;
    let (stop, handle) = c.scheduler(c.options());
    eventually_secs("default queue", 60, || async {
        c.kubectl(&["get", "queue", "default-queue"]).await.ok()
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let rounds = 3;
    let mut failed = 0;
    for i in 0..rounds {
        let yaml = format!(
            r#"
apiVersion: v1
kind: Pod
metadata:
  name: f{i}
  labels: {{kai.scheduler/queue: default-queue}}
  annotations: {{gpu-fraction: "0.5"}}
spec:
  schedulerName: kai-scheduler
  containers: [{{name: main, image: ubuntu}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: w{i}
  labels: {{kai.scheduler/queue: default-queue}}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: ubuntu
    resources: {{limits: {{nvidia.com/gpu: 1}}}}
"#
        );
        c.apply(&format!("round{i}.yaml"), &yaml).await?;
        c.wait_running("default", &format!("f{i}")).await?;
        pods.delete(&format!("f{i}"), &DeleteParams::default())
            .await?;
        let phase = eventually_secs("the whole-GPU pod Running or Failed", 90, || async {
            let p = pods.get(&format!("w{i}")).await?;
            let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
            Ok::<_, kube::Error>((phase == "Running" || phase == "Failed").then_some(phase))
        })
        .await?;
        if phase == "Failed" {
            failed += 1;
        }
        pods.delete(&format!("w{i}"), &DeleteParams::default())
            .await?;
        eventually_secs("the whole-GPU pod gone", 60, || async {
            pods.get_opt(&format!("w{i}")).await.map(|p| p.is_none())
        })
        .await?;
    }
    println!("sim fraction->whole handover: {rounds} rounds, {failed} pods Failed");
    assert_eq!(failed, 0);
    stop.send(true)?;
    let _ = handle.await;
    Ok(())
}
