//! One stored pod a typed client cannot decode (a label that is not a string, stored before the
//! API server checked labels) must not stop the operator's loops that list pods: the
//! MigClusterPolicy round (every pod, for its eviction rules) and the driver upgrade round (the
//! driver pods of the operator namespace). Before they read pods as `Lenient`, each of those
//! lists failed as a whole, every round.

use gantry_api::cluster_policy::ClusterPolicy;
use gantry_api::mig_cluster_policy::MigClusterPolicy;
use gantry_api::names;
use gantry_operator::migpolicy::{self, MigPolicyOptions};
use gantry_operator::node_watch::NodeWatch;
use gantry_operator::upgrade::{self, UpgradeOptions};
use gantry_sim::ControlPlane;
use gantry_sim::store::{Mutation, ObjKey, StoreError};
use gantry_testkit::{Cluster, eventually_secs};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{NS, Res};

/// Store a pod the way an earlier API server let it in: labels that are not strings.
fn store_undecodable_pod(cp: &ControlPlane, name: &str, owner_uid: &str) -> Res {
    let key = ObjKey {
        gr: "/pods".into(),
        namespace: NS.into(),
        name: name.into(),
    };
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid"),
                     "creationTimestamp": "2026-12-01T00:00:00Z", "labels": {"tier": 1},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                         "name": "nvidia-driver-daemonset", "uid": owner_uid, "controller": true}]},
        "spec": {"nodeName": "gone-node",
                 "containers": [{"name": "c", "image": "i",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"}
    });
    cp.api()
        .store
        .mutate::<StoreError>(&key, |_, _| Ok(Mutation::Put(pod.clone())))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_pod_does_not_stop_the_mig_policy_or_upgrade_rounds() -> Res {
    let c = Cluster::builder().crds().namespace(NS).start().await?;
    let client = c.client().clone();
    let policies: Api<ClusterPolicy> = Api::all(client.clone());
    eventually_secs("the CRDs to serve", 60, || async {
        policies.list(&ListParams::default()).await.is_ok()
    })
    .await?;

    // A driver DaemonSet that has placed every pod it wants (none: there are no nodes), so the
    // upgrade round goes on to read the driver pods.
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "nvidia-driver-daemonset", "namespace": NS,
                     "labels": {names::LABEL_APP_COMPONENT: names::COMPONENT_NVIDIA_DRIVER}},
        "spec": {"selector": {"matchLabels": {names::LABEL_APP: names::app::DRIVER}},
                 "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {names::LABEL_APP: names::app::DRIVER}},
                              "spec": {"containers": [{"name": "d", "image": "nvcr.io/nvidia/driver:550"}]}}}
    }))?;
    let ds = dss.create(&PostParams::default(), &ds).await?;
    let status = json!({"status": {"desiredNumberScheduled": 0, "currentNumberScheduled": 0,
                                   "numberMisscheduled": 0, "numberReady": 0}});
    dss.patch_status(
        "nvidia-driver-daemonset",
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await?;
    let cp_obj: ClusterPolicy = serde_json::from_value(json!({
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"operator": {}, "daemonsets": {}, "toolkit": {}, "devicePlugin": {}, "dcgmExporter": {},
                 "dcgm": {}, "nodeStatusExporter": {}, "gfd": {},
                 "driver": {"version": "550", "upgradePolicy": {"autoUpgrade": true, "maxParallelUpgrades": 1}}}
    }))?;
    policies.create(&PostParams::default(), &cp_obj).await?;
    let mig: Api<MigClusterPolicy> = Api::all(client.clone());
    let mcp: MigClusterPolicy = serde_json::from_value(json!({
        "apiVersion": "nvidia.com/v1alpha1", "kind": "MigClusterPolicy",
        "metadata": {"name": "a100-slices"},
        "spec": {"gpuProducts": ["NVIDIA-A100-SXM4-80GB"], "layout": {"config": "all-1g.10gb"},
                 "maxUnavailable": 1}
    }))?;
    mig.create(&PostParams::default(), &mcp).await?;

    store_undecodable_pod(
        c.cp(),
        "legacy",
        ds.metadata.uid.as_deref().unwrap_or_default(),
    )?;
    // What a typed list does with it (what these rounds did before).
    let typed: Api<Pod> = Api::namespaced(client.clone(), NS);
    assert!(
        typed.list(&ListParams::default()).await.is_err(),
        "a typed list of the pods decodes the bad pod"
    );

    let nodes = NodeWatch::start(client.clone());
    migpolicy::reconcile_once(&client, &MigPolicyOptions::new(NS), &nodes).await?;
    // The round went on past the pod list to the policy's status.
    let got = mig.get("a100-slices").await?;
    assert!(
        got.status.is_some(),
        "the MigClusterPolicy round did not write the status"
    );
    upgrade::reconcile_once(&client, &UpgradeOptions::new(NS), &nodes).await?;
    Ok(())
}
