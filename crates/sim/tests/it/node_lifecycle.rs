//! The node-lifecycle controller and the kubelet's refusals, against simulated nodes: a
//! deleted node's pods are deleted; an unreachable node is tainted and its pods are evicted
//! when their toleration runs out (the default 300 s, a pod's own shorter one, never for a
//! DaemonSet-style toleration); a pod asking for `cpu: 1e100` is refused with a reason and
//! an Event — by the default scheduler (Pending, `FailedScheduling`) or, bound straight to a
//! node, by its kubelet (Failed, `OutOfcpu`).

use gantry_sim::cluster::Fault;
use gantry_sim::controllers::node_lifecycle::{TAINT_NOT_READY, TAINT_UNREACHABLE};
use gantry_sim::kubelet::AgentRegistry;
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

async fn setup(spec: &str) -> Res<Cluster> {
    Ok(Cluster::builder()
        .nodes(spec)
        .agents(AgentRegistry::new())
        .controllers()
        .start()
        .await?)
}

fn pod(name: &str, node: &str, tolerations: serde_json::Value) -> Res<Pod> {
    let mut spec = json!({"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]});
    if !tolerations.is_null() {
        spec["tolerations"] = tolerations;
    }
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": spec}),
    )?)
}

async fn running(pods: &Api<Pod>, name: &str) -> Res {
    eventually_secs(&format!("pod {name} Running"), 60, || async {
        let p = pods.get(name).await?;
        let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
        anyhow::Ok(if phase == "Running" {
            Look::Done(())
        } else {
            Look::Seen(format!("phase {phase}"))
        })
    })
    .await?;
    Ok(())
}

/// Events about `pod` with `reason`, by message.
async fn events(client: &kube::Client, pod: &str, reason: &str) -> Res<Vec<String>> {
    let evs: Api<Event> = Api::namespaced(client.clone(), "default");
    Ok(evs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| {
            format!(
                "{}: {}",
                e.type_.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_nodes_pods_and_lease_are_deleted() -> Res {
    let env = setup("2xcpu").await?;
    let client = env.client().clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, node) in [("on-0", "cpu-0"), ("on-1", "cpu-1")] {
        pods.create(&PostParams::default(), &pod(name, node, json!(null))?)
            .await?;
        running(&pods, name).await?;
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    eventually_secs("cpu-0's lease", 60, || async {
        anyhow::Ok(leases.get_opt("cpu-0").await?.is_some())
    })
    .await?;
    Api::<Node>::all(client.clone())
        .delete("cpu-0", &DeleteParams::default())
        .await?;
    eventually_secs("the deleted node's pod gone", 60, || async {
        let p = pods.get_opt("on-0").await?;
        anyhow::Ok(match p {
            None => Look::Done(()),
            Some(p) => Look::Seen(format!("{:?}", p.status.and_then(|s| s.phase))),
        })
    })
    .await?;
    eventually_secs("the deleted node's lease gone", 60, || async {
        anyhow::Ok(leases.get_opt("cpu-0").await?.is_none())
    })
    .await?;
    assert!(
        pods.get_opt("on-1").await?.is_some(),
        "a pod of a live node was deleted"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_nodes_pods_go_when_their_toleration_ends() -> Res {
    let env = setup("1xcpu").await?;
    let client = env.client().clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let short = json!([{"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute",
                        "tolerationSeconds": 2}]);
    let forever = json!([{"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute"},
                         {"key": TAINT_NOT_READY, "operator": "Exists", "effect": "NoExecute"}]);
    for (name, t) in [
        ("short", short),
        ("default", json!(null)),
        ("daemon", forever),
    ] {
        pods.create(&PostParams::default(), &pod(name, "cpu-0", t)?)
            .await?;
        running(&pods, name).await?;
    }
    // DefaultTolerationSeconds gave the plain pod 300 s for both taints.
    let defaults = pods.get("default").await?.spec.unwrap_or_default();
    let tolerated: Vec<(String, Option<i64>)> = defaults
        .tolerations
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.toleration_seconds))
        .collect();
    assert_eq!(
        tolerated,
        [
            (TAINT_NOT_READY.to_string(), Some(300)),
            (TAINT_UNREACHABLE.to_string(), Some(300))
        ]
    );

    env.sim()?.fault("cpu-0", &Fault::PowerOff).await?;
    eventually_secs("the unreachable taint", 60, || async {
        let n = nodes.get("cpu-0").await?;
        let taints = n.spec.and_then(|s| s.taints).unwrap_or_default();
        anyhow::Ok(
            taints
                .iter()
                .any(|t| t.key == TAINT_UNREACHABLE && t.effect == "NoExecute"),
        )
    })
    .await?;
    eventually_secs("the 2 s pod evicted", 60, || async {
        anyhow::Ok(
            pods.get("short")
                .await?
                .metadata
                .deletion_timestamp
                .is_some(),
        )
    })
    .await?;
    let evs = eventually_secs("the eviction Event", 60, || async {
        let e = events(&client, "short", "TaintManagerEviction").await?;
        Res::Ok((!e.is_empty()).then_some(e))
    })
    .await?;
    assert!(
        evs[0].contains("Marking for deletion Pod default/short"),
        "{evs:?}"
    );
    // 300 s and forever are still to come.
    for name in ["default", "daemon"] {
        let p = pods.get(name).await?;
        assert!(p.metadata.deletion_timestamp.is_none(), "{name} evicted");
    }

    // Power returns: the taint goes, and the kubelet finishes the evicted pod.
    env.sim()?.fault("cpu-0", &Fault::PowerOn).await?;
    eventually_secs("the taint removed", 60, || async {
        let n = nodes.get("cpu-0").await?;
        let taints = n.spec.and_then(|s| s.taints).unwrap_or_default();
        anyhow::Ok(!taints.iter().any(|t| t.key == TAINT_UNREACHABLE))
    })
    .await?;
    eventually_secs("the evicted pod gone", 60, || async {
        anyhow::Ok(pods.get_opt("short").await?.is_none())
    })
    .await?;
    Ok(())
}

fn huge(name: &str, node: Option<&str>) -> Res<Pod> {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox",
                                          "resources": {"requests": {"cpu": "1e100"}}}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": spec}),
    )?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_asking_for_1e100_cpus_is_refused_with_an_event() -> Res {
    let env = Cluster::builder()
        .nodes("1xcpu")
        .agents(AgentRegistry::new())
        .start()
        .await?;
    let client = env.client().clone();
    let _controllers = gantry_sim::controllers::start_with(
        client.clone(),
        gantry_sim::controllers::Options {
            default_scheduler: true,
        },
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // Bound straight to the node: its kubelet refuses it.
    pods.create(&PostParams::default(), &huge("bound", Some("cpu-0"))?)
        .await?;
    let status = eventually_secs("the bound pod Failed", 60, || async {
        let s = pods.get("bound").await?.status.unwrap_or_default();
        anyhow::Ok(if s.phase.as_deref() == Some("Failed") {
            Look::Done(s)
        } else {
            Look::Seen(format!("phase {:?}", s.phase))
        })
    })
    .await?;
    assert_eq!(status.reason.as_deref(), Some("OutOfcpu"));
    let msg = status.message.unwrap_or_default();
    assert!(
        msg.starts_with("Pod was rejected: Node didn't have enough resource: cpu"),
        "{msg}"
    );
    let evs = eventually_secs("the kubelet's Warning", 60, || async {
        let e = events(&client, "bound", "OutOfcpu").await?;
        Res::Ok((!e.is_empty()).then_some(e))
    })
    .await?;
    assert!(
        evs[0].starts_with("Warning: Node didn't have enough resource: cpu"),
        "{evs:?}"
    );

    // Left to the default scheduler: it fits no node, and the pod says so.
    pods.create(&PostParams::default(), &huge("unbound", None)?)
        .await?;
    let evs = eventually_secs("FailedScheduling", 60, || async {
        let e = events(&client, "unbound", "FailedScheduling").await?;
        Res::Ok((!e.is_empty()).then_some(e))
    })
    .await?;
    assert_eq!(
        evs,
        ["Warning: 0/1 nodes are available: 1 Insufficient cpu."]
    );
    let p = pods.get("unbound").await?;
    let st = p.status.unwrap_or_default();
    assert_eq!(st.phase.as_deref(), Some("Pending"));
    assert_eq!(p.spec.and_then(|s| s.node_name), None);
    let cond = st
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled")
        .ok_or("no PodScheduled condition")?;
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_deref()),
        ("False", Some("Unschedulable"))
    );
    Ok(())
}
