//! MigClusterPolicy end to end in the sim, through the real kubectl: the reconciler turns the
//! policy into node labels one node at a time, the MIG manager DaemonSet repartitions each node,
//! and the policy's status follows; a layout the GPU cannot hold ends in a per-node error with
//! that node unchanged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{KUBECTL, Kubectl};
use futures::StreamExt;
use gantry_api::mig_cluster_policy::MigClusterPolicy;
use gantry_api::mig_parted::default_config_yaml;
use gantry_api::names;
use gantry_gpu::layout::{self, MigLayout};
use gantry_operator::migpolicy::{self, MigPolicyOptions};
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

type Result<T = ()> = anyhow::Result<T>;

const NS: &str = "gpu-operator";
const A100: &str = "NVIDIA-A100-SXM4-80GB";
const H100: &str = "NVIDIA-H100-80GB-HBM3";
const A100_NODES: [&str; 3] = ["a100-80gb-0", "a100-80gb-1", "a100-80gb-2"];
const H100_NODE: &str = "h100-80gb-0";

fn label(n: &Node, key: &str) -> Option<String> {
    n.metadata.labels.as_ref()?.get(key).cloned()
}

async fn create<K>(api: &Api<K>, v: serde_json::Value) -> Result
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v)?;
    api.create(&PostParams::default(), &obj).await?;
    Ok(())
}

/// The MigClusterPolicy loop with its own node watch, requeued every `requeue`, until aborted.
fn start_loop(client: &kube::Client, requeue: Duration) -> tokio::task::JoinHandle<()> {
    let mut opts = MigPolicyOptions::new(NS);
    opts.requeue = requeue;
    let nodes = gantry_operator::node_watch::NodeWatch::start(client.clone());
    tokio::spawn(migpolicy::run(
        client.clone(),
        opts,
        nodes,
        std::future::pending(),
    ))
}

/// Per-node status entry of a policy: (state, error).
async fn node_status(
    api: &Api<MigClusterPolicy>,
    policy: &str,
    node: &str,
) -> Option<(Option<String>, Option<String>)> {
    let p = api.get(policy).await.ok()?;
    let n = p.status?.nodes?.into_iter().find(|n| n.name == node)?;
    Some((n.state, n.error))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applied_policy_repartitions_a100_nodes_one_at_a_time() -> Result {
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return Ok(());
    }
    let c = Cluster::builder()
        .nodes("3xA100-80GB:2,1xH100-80GB:2,1xcpu")
        .controllers()
        .namespace(NS)
        .start()
        .await?;
    let (client, sim) = (c.client().clone(), c.sim()?);
    let k = Kubectl {
        kubeconfig: c.kubeconfig_path(),
        dir: c.dir(),
    };
    let nodes_api: Api<Node> = Api::all(client.clone());
    // The kubelets register their Nodes asynchronously: label them only once all exist.
    eventually_secs("every simulated node to register", 60, || async {
        nodes_api
            .list(&Default::default())
            .await
            .is_ok_and(|l| l.items.len() == 5)
    })
    .await?;
    // What GFD would label (it is not part of this test).
    for (node, product) in A100_NODES
        .iter()
        .map(|n| (*n, A100))
        .chain([(H100_NODE, H100)])
    {
        nodes_api
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(
                    &json!({"metadata": {"labels": {names::LABEL_GPU_PRODUCT: product}}}),
                ),
            )
            .await?;
    }

    let crds = c.dir().join("crds.yaml");
    std::fs::write(&crds, gantry_api::crds::all_crds_yaml()?)?;
    k.run(&["apply", "-f", &crds.display().to_string()]).await?;
    k.run(&[
        "wait",
        "--for=condition=Established",
        "crd/migclusterpolicies.nvidia.com",
        "--timeout=60s",
    ])
    .await?;

    create(
        &Api::<ConfigMap>::namespaced(client.clone(), NS),
        json!({"metadata": {"name": names::CONFIG_MAP_DEFAULT_MIG_PARTED, "namespace": NS},
               "data": {names::MIG_PARTED_CONFIG_KEY: default_config_yaml()}}),
    )
    .await?;
    let cm_ref = format!("{NS}/{}", names::CONFIG_MAP_DEFAULT_MIG_PARTED);
    create(
        &Api::<DaemonSet>::namespaced(client.clone(), NS),
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": names::app::MIG_MANAGER, "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": names::app::MIG_MANAGER}},
                     "template": {"metadata": {"labels": {"app": names::app::MIG_MANAGER}},
                                  "spec": {"nodeSelector": {names::NFD_GPU_LABELS[0]: "true"},
                                           "containers": [{"name": "mig-manager", "image": "ghcr.io/gantry/gantry:dev",
                                                           "command": ["gantry"],
                                                           "args": ["node", "mig-manager", "--config-map", cm_ref],
                                                           "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]}}}
        }),
    )
    .await?;

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut opts = MigPolicyOptions::new(NS);
    opts.requeue = Duration::from_secs(1);
    let nodes = gantry_operator::node_watch::NodeWatch::start(client.clone());
    let reconciler = tokio::spawn(migpolicy::run(client.clone(), opts, nodes, async {
        let _ = stop_rx.await;
    }));

    // Watch every node: the most A100 nodes pending at once, the order they went pending, and
    // every mig.config value the other nodes ever had.
    #[derive(Default)]
    struct Seen {
        state: BTreeMap<String, String>,
        max_pending: usize,
        pending_order: Vec<String>,
        others: BTreeSet<(String, String)>,
    }
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let recorder = {
        let seen = seen.clone();
        let api = nodes_api.clone();
        tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(n)) = s.next().await {
                let name = n.metadata.name.clone().unwrap_or_default();
                let mut seen = seen.lock().unwrap();
                if !A100_NODES.contains(&name.as_str()) {
                    if let Some(c) = label(&n, names::LABEL_MIG_CONFIG) {
                        seen.others.insert((name, c));
                    }
                    continue;
                }
                let st = label(&n, names::LABEL_MIG_CONFIG_STATE).unwrap_or_default();
                if st == "pending" && seen.state.get(&name) != Some(&st) {
                    seen.pending_order.push(name.clone());
                }
                seen.state.insert(name, st);
                let pending = seen.state.values().filter(|s| *s == "pending").count();
                seen.max_pending = seen.max_pending.max(pending);
            }
        })
    };

    // The recorder must be watching before the first change, or it could miss a `pending`.
    eventually_secs("the recorder sees every A100 node", 60, || async {
        let seen = seen.lock().unwrap();
        if seen.state.len() == A100_NODES.len() {
            Look::Done(())
        } else {
            Look::Seen(format!("states {:?}", seen.state))
        }
    })
    .await?;

    let out = k
        .apply(
            "a100.yaml",
            &format!(
                "apiVersion: nvidia.com/v1alpha1\nkind: MigClusterPolicy\nmetadata:\n  name: a100-slices\nspec:\n  gpuProducts: [{A100}]\n  layout:\n    config: all-1g.10gb\n  maxUnavailable: 1\n"
            ),
        )
        .await?;
    assert!(out.contains("a100-slices created"), "{out}");

    let policies: Api<MigClusterPolicy> = Api::all(client.clone());
    eventually_secs(
        "every A100 node at success in the policy status",
        60,
        || async {
            let Ok(p) = policies.get("a100-slices").await else {
                return false;
            };
            let Some(st) = p.status else { return false };
            st.ready_nodes == Some(3)
                && st.selected_nodes == Some(3)
                && st.nodes.iter().flatten().count() == 3
                && st
                    .nodes
                    .iter()
                    .flatten()
                    .all(|n| n.state.as_deref() == Some("success") && n.error.is_none())
        },
    )
    .await?;
    let got = k
        .run(&[
            "get",
            "migclusterpolicy",
            "a100-slices",
            "-o",
            "jsonpath={.status.nodes[*].state}",
        ])
        .await?;
    assert_eq!(got, "success success success");

    let seven = MigLayout::enabled([("1g.10gb", 7)]);
    for n in A100_NODES {
        let b = sim
            .node(n)
            .and_then(|s| s.backend.clone())
            .ok_or_else(|| anyhow::anyhow!("no backend on {n}"))?;
        for gpu in 0..2 {
            assert_eq!(layout::current(b.as_ref(), gpu)?, seven, "{n} GPU {gpu}");
        }
        let node = nodes_api.get(n).await?;
        assert_eq!(
            label(&node, names::LABEL_MIG_CONFIG).as_deref(),
            Some("all-1g.10gb")
        );
    }
    let h100 = sim
        .node(H100_NODE)
        .and_then(|s| s.backend.clone())
        .ok_or_else(|| anyhow::anyhow!("no H100 backend"))?;
    // The recorder's watch may lag the reads above: wait until it saw every node at success.
    let all_success = |seen: &Seen| {
        seen.state.len() == A100_NODES.len() && seen.state.values().all(|s| s == "success")
    };
    eventually_secs(
        "the recorder sees every A100 node at success",
        60,
        || async {
            let seen = seen.lock().unwrap();
            if all_success(&seen) {
                Look::Done(())
            } else {
                Look::Seen(format!("states {:?}", seen.state))
            }
        },
    )
    .await?;
    {
        let seen = seen.lock().unwrap();
        assert!(
            seen.max_pending <= 1,
            "{} A100 nodes pending at once",
            seen.max_pending
        );
        let mut order = seen.pending_order.clone();
        order.sort();
        order.dedup();
        assert_eq!(order, A100_NODES, "every A100 node went through pending");
        assert!(
            seen.others.is_empty(),
            "other nodes were labelled: {:?}",
            seen.others
        );
    }
    assert_eq!(layout::current(h100.as_ref(), 0)?, MigLayout::disabled());

    // A layout the H100 cannot hold (8 slices' worth on a 7-slice GPU), inline.
    let out = k
        .apply(
            "h100.yaml",
            &format!(
                "apiVersion: nvidia.com/v1alpha1\nkind: MigClusterPolicy\nmetadata:\n  name: h100-too-much\nspec:\n  gpuProducts: [{H100}]\n  layout:\n    custom:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        4g.40gb: 1\n        3g.40gb: 1\n        1g.10gb: 1\n"
            ),
        )
        .await?;
    assert!(out.contains("h100-too-much created"), "{out}");
    eventually_secs("a per-node error for the H100", 60, || async {
        matches!(
            node_status(&policies, "h100-too-much", H100_NODE).await,
            Some((Some(s), Some(e))) if s == "failed" && e.contains("cannot hold")
        )
    })
    .await?;
    for gpu in 0..2 {
        assert_eq!(
            layout::current(h100.as_ref(), gpu)?,
            MigLayout::disabled(),
            "the H100 was not touched"
        );
    }
    let node = nodes_api.get(H100_NODE).await?;
    assert_eq!(
        label(&node, names::LABEL_MIG_CONFIG).as_deref(),
        Some("gantry-mcp-h100-too-much")
    );
    // The A100 policy is still done.
    let p = policies.get("a100-slices").await?;
    assert_eq!(p.status.and_then(|s| s.ready_nodes), Some(3));

    // Deleting a policy without resetOnDelete changes nothing; its inline layout stays
    // available while the node still names it.
    k.run(&["delete", "migclusterpolicy", "h100-too-much"])
        .await?;
    eventually_secs("the H100 policy gone", 60, || async {
        policies
            .get_opt("h100-too-much")
            .await
            .is_ok_and(|p| p.is_none())
    })
    .await?;
    let node = nodes_api.get(H100_NODE).await?;
    assert_eq!(
        label(&node, names::LABEL_MIG_CONFIG).as_deref(),
        Some("gantry-mcp-h100-too-much")
    );
    let custom = Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get(names::CONFIG_MAP_MIG_CUSTOM_LAYOUTS)
        .await?;
    let text = custom
        .data
        .and_then(|d| d.get(names::MIG_PARTED_CONFIG_KEY).cloned())
        .unwrap_or_default();
    assert!(text.contains("gantry-mcp-h100-too-much"), "{text}");

    // With resetOnDelete the finalizer holds the policy until its nodes are back at
    // all-disabled, again one at a time.
    k.run(&[
        "patch",
        "migclusterpolicy",
        "a100-slices",
        "--type=merge",
        "-p",
        r#"{"spec":{"resetOnDelete":true}}"#,
    ])
    .await?;
    eventually_secs("the finalizer on the policy", 60, || async {
        policies.get("a100-slices").await.is_ok_and(|p| {
            p.metadata
                .finalizers
                .is_some_and(|f| f.iter().any(|f| f == names::FINALIZER_MIG_CLUSTER_POLICY))
        })
    })
    .await?;
    seen.lock().unwrap().pending_order.clear();
    k.run(&["delete", "migclusterpolicy", "a100-slices", "--wait=false"])
        .await?;
    eventually_secs("the A100 nodes reset and the policy gone", 60, || async {
        let gone = policies
            .get_opt("a100-slices")
            .await
            .is_ok_and(|p| p.is_none());
        let mut reset = true;
        for n in A100_NODES {
            reset &= nodes_api.get(n).await.is_ok_and(|node| {
                label(&node, names::LABEL_MIG_CONFIG).as_deref() == Some("all-disabled")
                    && label(&node, names::LABEL_MIG_CONFIG_STATE).as_deref() == Some("success")
            });
        }
        gone && reset
    })
    .await?;
    for n in A100_NODES {
        let b = sim
            .node(n)
            .and_then(|s| s.backend.clone())
            .ok_or_else(|| anyhow::anyhow!("no backend on {n}"))?;
        assert_eq!(
            layout::current(b.as_ref(), 0)?,
            MigLayout::disabled(),
            "{n}"
        );
    }
    eventually_secs(
        "the recorder sees three more pendings and every A100 node at success",
        60,
        || async {
            let seen = seen.lock().unwrap();
            if seen.pending_order.len() >= 3 && all_success(&seen) {
                Look::Done(())
            } else {
                Look::Seen(format!(
                    "pending order {:?}, states {:?}",
                    seen.pending_order, seen.state
                ))
            }
        },
    )
    .await?;
    {
        let seen = seen.lock().unwrap();
        assert!(
            seen.max_pending <= 1,
            "{} A100 nodes pending at once",
            seen.max_pending
        );
        assert_eq!(seen.pending_order.len(), 3, "{:?}", seen.pending_order);
    }

    recorder.abort();
    let _ = stop_tx.send(());
    reconciler.await?;
    Ok(())
}

/// `Ready` condition of a policy: (status, reason).
async fn ready_of(api: &Api<MigClusterPolicy>, policy: &str) -> Option<(String, String)> {
    let p = api.get(policy).await.ok()?;
    let c = p
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status, c.reason))
}

/// Issue #44: an invalid MigClusterPolicy owns no node, so it does not keep a valid one off
/// the nodes both select; and a policy whose nodes all belong to an older one is not Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_policy_blocks_nothing_and_a_blocked_one_is_not_ready() -> Result {
    let c = Cluster::builder()
        .nodes("1xA100-80GB:1")
        .crds()
        .namespace(NS)
        .start()
        .await?;
    let client = c.client().clone();
    let reconciler = start_loop(&client, Duration::from_secs(1));
    let api: Api<MigClusterPolicy> = Api::all(client.clone());
    let node = A100_NODES[0];
    let policy = |name: &str, config: &str, max: i32| {
        json!({"apiVersion": "nvidia.com/v1alpha1", "kind": "MigClusterPolicy",
               "metadata": {"name": name},
               "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}},
                        "layout": {"config": config}, "maxUnavailable": max}})
    };
    // The older one (names break creation-time ties) is invalid: maxUnavailable 0.
    create(&api, policy("a-broken", "all-1g.10gb", 0)).await?;
    create(&api, policy("b-slices", "all-balanced", 1)).await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    eventually_secs("the valid policy's layout on the node", 60, || async {
        let n = nodes_api.get(node).await.ok()?;
        (label(&n, names::LABEL_MIG_CONFIG).as_deref() == Some("all-balanced")).then_some(())
    })
    .await?;
    eventually_secs("the invalid one says so", 60, || async {
        (ready_of(&api, "a-broken").await == Some(("False".into(), "InvalidSpec".into())))
            .then_some(())
    })
    .await?;
    // A third, valid but newer: the node is b-slices'; c-late is not Ready and says why.
    create(&api, policy("c-late", "all-3g.40gb", 1)).await?;
    let seen = eventually_secs("the blocked policy not Ready", 60, || async {
        match ready_of(&api, "c-late").await {
            Some((s, r)) if s == "False" && r == "OwnedByOlderPolicy" => Look::Done(()),
            other => Look::Seen(format!("Ready {other:?}")),
        }
    })
    .await;
    let n = nodes_api.get(node).await?;
    reconciler.abort();
    seen?;
    assert_eq!(
        label(&n, names::LABEL_MIG_CONFIG).as_deref(),
        Some("all-balanced")
    );
    Ok(())
}

/// Without a MigClusterPolicy the loop holds no pod watch: at thousands of nodes operand pods
/// change many times a second, and every pod watch gets each change. A policy starts one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_watched_only_while_a_policy_exists() -> Result {
    let c = Cluster::builder().crds().namespace(NS).start().await?;
    let client = c.client().clone();
    // Requests served, by verb and resource (a watcher lists pods before it watches them).
    let served = |which: &str, resource: &str| -> u64 {
        c.cp()
            .api()
            .requests
            .sorted_with_cpu()
            .into_iter()
            .filter(|((verb, res, sub), _, _)| *verb == which && res == resource && sub.is_empty())
            .map(|(_, n, _)| n)
            .sum()
    };
    let pod_reads = || (served("list", "pods"), served("watch", "pods"));
    let before = pod_reads();
    let rounds = served("list", "migclusterpolicies");
    let reconciler = start_loop(&client, Duration::from_millis(200));
    // Pods change while the loop runs several rounds (each lists the policies).
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NS);
    for i in 0..3 {
        create(
            &pods,
            json!({"metadata": {"name": format!("p{i}")},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await?;
    }
    eventually_secs("three rounds after the pods were created", 20, || async {
        served("list", "migclusterpolicies") >= rounds + 3
    })
    .await?;
    assert_eq!(
        pod_reads(),
        before,
        "no policy: pods are neither listed nor watched"
    );

    let api: Api<MigClusterPolicy> = Api::all(client.clone());
    create(
        &api,
        json!({"apiVersion": "nvidia.com/v1alpha1", "kind": "MigClusterPolicy",
               "metadata": {"name": "p"},
               "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": "none"}},
                        "layout": {"config": "all-disabled"}, "maxUnavailable": 1}}),
    )
    .await?;
    eventually_secs("a policy starts the pod watch", 20, || async {
        pod_reads().1 > before.1
    })
    .await?;
    reconciler.abort();
    c.shutdown().await;
    Ok(())
}
