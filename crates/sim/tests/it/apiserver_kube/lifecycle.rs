//! Object lifecycle: garbage collection, finalizers and namespace cascade, binding and eviction.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_of_owned_objects() -> Result {
    let (_env, client) = start().await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    let owned = |owner: &ConfigMap, name: &str| -> Result<Secret> {
        Ok(serde_json::from_value(
            json!({"metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid, "blockOwnerDeletion": true}]}}),
        )?)
    };
    // Background.
    let owner = cms
        .create(&PostParams::default(), &cm("owner", json!({}))?)
        .await?;
    secrets
        .create(&PostParams::default(), &owned(&owner, "dep")?)
        .await?;
    cms.delete("owner", &DeleteParams::background()).await?;
    eventually_secs("dependent deleted", 60, || async {
        anyhow::Ok(secrets.get_opt("dep").await?.is_none())
    })
    .await?;
    // Orphan: the dependent stays, without the owner reference.
    let owner = cms
        .create(&PostParams::default(), &cm("owner2", json!({}))?)
        .await?;
    secrets
        .create(&PostParams::default(), &owned(&owner, "orphan")?)
        .await?;
    cms.delete("owner2", &DeleteParams::orphan()).await?;
    eventually_secs("owner gone", 60, || async {
        anyhow::Ok(cms.get_opt("owner2").await?.is_none())
    })
    .await?;
    eventually_secs("the orphan's owner reference removed", 60, || async {
        let refs = secrets.get("orphan").await?.metadata.owner_references;
        anyhow::Ok(if refs.as_ref().is_none_or(Vec::is_empty) {
            Look::Done(())
        } else {
            Look::Seen(format!("owner references {refs:?}"))
        })
    })
    .await?;
    // Foreground: the owner waits for its dependent, which a finalizer holds.
    let owner = cms
        .create(&PostParams::default(), &cm("owner3", json!({}))?)
        .await?;
    let mut dep = owned(&owner, "held")?;
    dep.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    secrets.create(&PostParams::default(), &dep).await?;
    cms.delete("owner3", &DeleteParams::foreground()).await?;
    eventually_secs("dependent marked deleting", 60, || async {
        anyhow::Ok(
            secrets
                .get("held")
                .await?
                .metadata
                .deletion_timestamp
                .is_some(),
        )
    })
    .await?;
    assert!(
        cms.get_opt("owner3").await?.is_some(),
        "foreground owner must wait"
    );
    secrets
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    eventually_secs("owner gone after dependent", 60, || async {
        anyhow::Ok(cms.get_opt("owner3").await?.is_none())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_hold_a_delete_and_namespaces_cascade() -> Result {
    let (_env, client) = start().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut c = cm("f", json!({}))?;
    c.metadata.finalizers = Some(vec!["example.com/f".into()]);
    api.create(&PostParams::default(), &c).await?;
    api.delete("f", &DeleteParams::default()).await?;
    let held = api.get("f").await?;
    assert!(held.metadata.deletion_timestamp.is_some());
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(
            json!([{"op": "remove", "path": "/metadata/finalizers"}]),
        )?),
    )
    .await?;
    assert!(api.get_opt("f").await?.is_none());

    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team"}}))?,
    )
    .await?;
    let in_ns: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    in_ns
        .create(&PostParams::default(), &cm("x", json!({}))?)
        .await?;
    nss.delete("team", &DeleteParams::default()).await?;
    let err = in_ns
        .create(&PostParams::default(), &cm("y", json!({}))?)
        .await;
    assert!(err.is_err() || nss.get_opt("team").await?.is_none());
    eventually_secs("namespace gone", 60, || async {
        anyhow::Ok(nss.get_opt("team").await?.is_none())
    })
    .await?;
    assert!(in_ns.get_opt("x").await?.is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_binding_and_eviction() -> Result {
    let (_env, client) = start().await?;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )?;
    let created = pods.create(&PostParams::default(), &pod).await?;
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
    assert_eq!(
        created.spec.and_then(|s| s.scheduler_name).as_deref(),
        Some("default-scheduler")
    );
    let unbound = pods
        .list(&ListParams::default().fields("spec.nodeName="))
        .await?;
    assert_eq!(unbound.items.len(), 1);
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}});
    let req = http::Request::post("/api/v1/namespaces/default/pods/p/binding")
        .body(serde_json::to_vec(&binding)?)?;
    client.request_text(req).await?;
    let bound = pods.get("p").await?;
    assert_eq!(
        bound.spec.and_then(|s| s.node_name).as_deref(),
        Some("node-1")
    );
    let req = http::Request::post("/api/v1/namespaces/default/pods/p/binding")
        .body(serde_json::to_vec(&binding)?)?;
    assert!(
        client.request_text(req).await.is_err(),
        "binding twice conflicts"
    );
    // A bound pod is deleted gracefully: deletionTimestamp first, gone after a grace-0 delete.
    pods.evict("p", &Default::default()).await?;
    assert!(pods.get("p").await?.metadata.deletion_timestamp.is_some());
    pods.delete(
        "p",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await?;
    assert!(pods.get_opt("p").await?.is_none());
    Ok(())
}
