//! Owner-reference garbage collection across kinds and scopes, and CRD deletion: a deleted
//! ClusterPolicy (cluster-scoped, a custom resource) takes its namespaced DaemonSets with it
//! in the background, holds them in the foreground, or leaves them in the orphan case; a
//! dependent naming an owner that is gone or was re-created is collected; and a CRD deleted
//! and created again brings none of its old objects back.

use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const NS: &str = "gpu-operator";

fn policies(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("nvidia.com", "v1", "ClusterPolicy"),
        "clusterpolicies",
    );
    Api::all_with(client.clone(), &ar)
}

async fn policy(api: &Api<DynamicObject>, name: &str) -> Res<DynamicObject> {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": name},
        // The components the CRD requires, each left to its defaults.
        "spec": {"daemonsets": {}, "dcgm": {}, "dcgmExporter": {}, "devicePlugin": {}, "driver": {},
                 "gfd": {}, "nodeStatusExporter": {}, "operator": {}, "toolkit": {}}}))?;
    Ok(api.create(&PostParams::default(), &obj).await?)
}

/// A DaemonSet as the operator renders one: controlled by the ClusterPolicy `owner`.
fn operand(name: &str, owner: &DynamicObject, extra_meta: serde_json::Value) -> Res<DaemonSet> {
    let mut ds = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS,
            "ownerReferences": [{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                "name": owner.metadata.name, "uid": owner.metadata.uid,
                "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    });
    if let Some(m) = extra_meta.as_object() {
        for (k, v) in m {
            ds["metadata"][k] = v.clone();
        }
    }
    Ok(serde_json::from_value(ds)?)
}

async fn setup() -> Res<(Cluster, Api<DynamicObject>, Api<DaemonSet>)> {
    let env = Cluster::builder().crds().namespace(NS).start().await?;
    let client = env.client().clone();
    let cps = policies(&client);
    eventually_secs("the ClusterPolicy CRD to serve", 60, || async {
        cps.list(&Default::default()).await.is_ok()
    })
    .await?;
    Ok((env, cps, Api::namespaced(client, NS)))
}

async fn gone(dss: &Api<DaemonSet>, name: &str) -> Res {
    eventually_secs(&format!("DaemonSet {name} collected"), 60, || async {
        anyhow::Ok(dss.get_opt(name).await?.is_none())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_cluster_policy_takes_its_daemonsets() -> Res {
    let (_env, cps, dss) = setup().await?;
    let owner = policy(&cps, "cluster-policy").await?;
    for name in ["nvidia-device-plugin-daemonset", "gpu-feature-discovery"] {
        dss.create(&PostParams::default(), &operand(name, &owner, json!({}))?)
            .await?;
    }
    cps.delete("cluster-policy", &DeleteParams::default())
        .await?;
    gone(&dss, "nvidia-device-plugin-daemonset").await?;
    gone(&dss, "gpu-feature-discovery").await?;

    // Written after its owner went (an operator round that raced the delete): collected too.
    dss.create(&PostParams::default(), &operand("late", &owner, json!({}))?)
        .await?;
    gone(&dss, "late").await?;

    // The policy re-created under the same name is another owner: a DaemonSet naming the old
    // uid goes, one naming the new uid stays.
    let again = policy(&cps, "cluster-policy").await?;
    assert_ne!(again.metadata.uid, owner.metadata.uid);
    dss.create(
        &PostParams::default(),
        &operand("stale", &owner, json!({}))?,
    )
    .await?;
    dss.create(
        &PostParams::default(),
        &operand("current", &again, json!({}))?,
    )
    .await?;
    gone(&dss, "stale").await?;
    assert!(
        dss.get_opt("current").await?.is_some(),
        "a DaemonSet of the live policy was collected"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_waits_for_blocking_dependents_and_orphan_releases_them() -> Res {
    let (_env, cps, dss) = setup().await?;
    // Foreground: the policy stays (deletionTimestamp, foregroundDeletion) while a blocking
    // DaemonSet that a finalizer holds is still there.
    let owner = policy(&cps, "fg").await?;
    dss.create(
        &PostParams::default(),
        &operand("held", &owner, json!({"finalizers": ["example.com/hold"]}))?,
    )
    .await?;
    cps.delete("fg", &DeleteParams::foreground()).await?;
    eventually_secs("the DaemonSet marked deleting", 60, || async {
        anyhow::Ok(dss.get("held").await?.metadata.deletion_timestamp.is_some())
    })
    .await?;
    let waiting = cps.get("fg").await?;
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert!(
        waiting
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "foregroundDeletion"),
        "{:?}",
        waiting.metadata.finalizers
    );
    dss.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    eventually_secs("the policy gone after its dependent", 60, || async {
        anyhow::Ok(cps.get_opt("fg").await?.is_none())
    })
    .await?;

    // Orphan: the DaemonSet stays, without the reference.
    let owner = policy(&cps, "orphaning").await?;
    dss.create(&PostParams::default(), &operand("kept", &owner, json!({}))?)
        .await?;
    cps.delete("orphaning", &DeleteParams::orphan()).await?;
    eventually_secs("the policy gone", 60, || async {
        anyhow::Ok(cps.get_opt("orphaning").await?.is_none())
    })
    .await?;
    eventually_secs("the orphan released", 60, || async {
        let refs = dss.get("kept").await?.metadata.owner_references;
        anyhow::Ok(if refs.as_ref().is_none_or(Vec::is_empty) {
            Look::Done(())
        } else {
            Look::Seen(format!("owner references {refs:?}"))
        })
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_crd_has_none_of_its_old_objects() -> Res {
    let (env, cps, _) = setup().await?;
    let client = env.client().clone();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    const CRD: &str = "clusterpolicies.nvidia.com";
    let old = policy(&cps, "old").await?;
    // One object a finalizer holds: the CRD waits for it.
    let mut held = policy(&cps, "held").await?;
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cps.replace("held", &PostParams::default(), &held).await?;
    let definition = crds.get(CRD).await?;
    crds.delete(CRD, &DeleteParams::default()).await?;
    eventually_secs("the free object deleted", 60, || async {
        anyhow::Ok(cps.get_opt("old").await?.is_none())
    })
    .await?;
    let terminating = crds.get(CRD).await?;
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let conds = terminating
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Terminating" && c.status == "True"),
        "{conds:?}"
    );
    // No new objects while it terminates.
    let refused = policy(&cps, "new").await.unwrap_err().to_string();
    assert!(refused.contains("terminating"), "{refused}");
    cps.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    eventually_secs("the CRD gone", 60, || async {
        anyhow::Ok(crds.get_opt(CRD).await?.is_none())
    })
    .await?;

    let mut again = definition.clone();
    again.metadata = kube::api::ObjectMeta {
        name: Some(CRD.into()),
        ..Default::default()
    };
    again.status = None;
    crds.create(&PostParams::default(), &again).await?;
    let listed = eventually_secs("the re-created CRD to serve", 60, || async {
        cps.list(&Default::default()).await.map(Some)
    })
    .await?;
    let names: Vec<_> = listed
        .items
        .iter()
        .map(|o| o.metadata.name.clone())
        .collect();
    assert!(names.is_empty(), "old objects came back: {names:?}");
    assert_ne!(old.metadata.uid, None);
    Ok(())
}
