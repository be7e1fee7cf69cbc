//! Create, update, patch and apply: conflicts, errors, generation, server-side apply,
//! strategic merge.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_conflicts_and_errors() -> Result {
    let (_env, client) = start().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let created = api
        .create(&PostParams::default(), &cm("a", json!({"k": "1"}))?)
        .await?;
    let rv1 = created
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let err = api
        .create(&PostParams::default(), &cm("a", json!({}))?)
        .await
        .expect_err("duplicate");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err:?}"
    );

    let mut changed = created.clone();
    changed.data = Some([("k".to_string(), "2".to_string())].into());
    let updated = api.replace("a", &PostParams::default(), &changed).await?;
    assert_ne!(
        updated.metadata.resource_version.as_deref(),
        Some(rv1.as_str())
    );
    // The stale resourceVersion from `created` now conflicts.
    let err = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .expect_err("stale");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );

    let generated: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}}))?;
    let generated = api.create(&PostParams::default(), &generated).await?;
    assert!(
        generated
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("gen-") && n.len() == 9)
    );

    let err = api
        .create(&PostParams::default(), &cm("Bad_Name", json!({}))?)
        .await
        .expect_err("invalid");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
    let missing: Api<ConfigMap> = Api::namespaced(client.clone(), "nope");
    let err = missing
        .create(&PostParams::default(), &cm("x", json!({}))?)
        .await
        .expect_err("no namespace");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );

    api.delete("a", &DeleteParams::default()).await?;
    let err = api.get("a").await.expect_err("deleted");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404 && s.reason == "NotFound"),
        "{err:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_bumps_on_spec_change_only() -> Result {
    let (_env, client) = start().await?;
    let api: Api<Deployment> = Api::default_namespaced(client);
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "d"}, "spec": {
        "selector": {"matchLabels": {"app": "d"}},
        "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}}))?;
    let d = api.create(&PostParams::default(), &d).await?;
    assert_eq!(d.metadata.generation, Some(1));
    let pp = PatchParams::default();
    let d = api
        .patch(
            "d",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await?;
    assert_eq!(d.metadata.generation, Some(1));
    let d = api
        .patch("d", &pp, &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await?;
    assert_eq!(d.metadata.generation, Some(2));
    let d = api
        .patch_status("d", &pp, &Patch::Merge(json!({"status": {"replicas": 3}})))
        .await?;
    assert_eq!(d.metadata.generation, Some(2));
    assert_eq!(d.status.and_then(|s| s.replicas), Some(3));
    // A no-op write does not change the resourceVersion.
    let before = api.get("d").await?.metadata.resource_version;
    let after = api
        .patch("d", &pp, &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await?
        .metadata
        .resource_version;
    assert_eq!(before, after);
    Ok(())
}

/// A pod status write changes the status only (a spec or label in the patch is dropped),
/// keeps the stored field order, records its manager under the `status` subresource, and
/// a write that changes nothing keeps the resourceVersion: by merge, strategic and JSON patch
/// and by PUT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_writes_change_the_status_only() -> Result {
    let (_env, client) = start().await?;
    let api: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "labels": {"a": "1"}},
        "spec": {"containers": [{"name": "c", "image": "i:1"}]}}))?;
    let created = api.create(&PostParams::default(), &pod).await?;
    let pp = PatchParams {
        field_manager: Some("kubelet-test".into()),
        ..PatchParams::default()
    };
    let patched = api
        .patch_status(
            "p",
            &pp,
            &Patch::Strategic(json!({"metadata": {"labels": {"a": "2"}},
                "spec": {"containers": [{"name": "c", "image": "i:2"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await?;
    let status = patched.status.clone().unwrap_or_default();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.conditions.map(|c| c.len()), Some(1));
    assert_eq!(patched.spec, created.spec, "the spec is kept");
    assert_eq!(
        patched.metadata.labels, created.metadata.labels,
        "the labels are kept"
    );
    assert_eq!(patched.metadata.generation, created.metadata.generation);
    let mine = patched
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|m| m.manager.as_deref() == Some("kubelet-test"))
        .expect("the writer's managedFields entry");
    assert_eq!(mine.subresource.as_deref(), Some("status"));
    assert!(
        serde_json::to_string(&mine.fields_v1)?.contains("f:phase"),
        "{mine:?}"
    );
    // The raw object keeps the stored order: the status after the spec.
    let raw = client
        .request_text(http::Request::get("/api/v1/namespaces/default/pods/p").body(Vec::new())?)
        .await?;
    let (spec_at, status_at) = (raw.find("\"spec\":"), raw.find("\"status\":"));
    assert!(spec_at.is_some() && spec_at < status_at, "{raw}");
    // The same status again: nothing written.
    let again = api
        .patch_status(
            "p",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await?;
    assert_eq!(
        again.metadata.resource_version,
        patched.metadata.resource_version
    );
    // A JSON patch and a PUT of the status.
    let jp: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/status/phase", "value": "Succeeded"}
    ]))?;
    let done = api.patch_status("p", &pp, &Patch::<()>::Json(jp)).await?;
    assert_eq!(
        done.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );
    let mut put = done.clone();
    put.status.get_or_insert_default().phase = Some("Failed".into());
    put.spec.get_or_insert_default().containers[0].image = Some("i:3".into());
    let replaced = api
        .replace_status("p", &PostParams::default(), &put)
        .await?;
    assert_eq!(
        replaced.status.and_then(|s| s.phase).as_deref(),
        Some("Failed")
    );
    assert_eq!(replaced.spec, created.spec);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_removes_dropped_fields_and_reports_conflicts() -> Result {
    let (_env, client) = start().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let m1 = PatchParams::apply("manager-one");
    let full = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s", "labels": {"a": "1", "b": "2"}}, "data": {"keep": "1", "drop": "2"}});
    let obj = api.patch("s", &m1, &Patch::Apply(&full)).await?;
    assert_eq!(obj.data.as_ref().map(|d| d.len()), Some(2));
    let rv = obj.metadata.resource_version.clone();
    // Re-applying the same configuration is a no-op.
    let again = api.patch("s", &m1, &Patch::Apply(&full)).await?;
    assert_eq!(again.metadata.resource_version, rv);
    let less = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s", "labels": {"a": "1"}}, "data": {"keep": "1"}});
    let obj = api.patch("s", &m1, &Patch::Apply(&less)).await?;
    assert_eq!(
        obj.data,
        Some([("keep".to_string(), "1".to_string())].into())
    );
    assert_eq!(obj.metadata.labels.map(|l| l.len()), Some(1));
    let mf = obj.metadata.managed_fields.unwrap_or_default();
    assert!(
        mf.iter()
            .any(|m| m.manager.as_deref() == Some("manager-one")
                && m.operation.as_deref() == Some("Apply"))
    );

    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"keep": "changed"}});
    let err = api
        .patch(
            "s",
            &PatchParams::apply("manager-two"),
            &Patch::Apply(&other),
        )
        .await
        .expect_err("conflict");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err:?}"
    );
    let obj = api
        .patch(
            "s",
            &PatchParams::apply("manager-two").force(),
            &Patch::Apply(&other),
        )
        .await?;
    assert_eq!(
        obj.data.and_then(|d| d.get("keep").cloned()).as_deref(),
        Some("changed")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_patches_containers_by_name() -> Result {
    let (_env, client) = start().await?;
    let api: Api<Pod> = Api::default_namespaced(client);
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
        {"name": "b", "image": "b:1"}]}}))?;
    api.create(&PostParams::default(), &pod).await?;
    let patch = json!({"spec": {"containers": [{"name": "b", "image": "b:2"}, {"name": "a", "env": [{"name": "Y", "value": "2"}]}]}});
    let p = api
        .patch("p", &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    let cs = p.spec.map(|s| s.containers).unwrap_or_default();
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0].image.as_deref(), Some("a:1"));
    assert_eq!(cs[0].env.as_ref().map(Vec::len), Some(2));
    assert_eq!(cs[1].image.as_deref(), Some("b:2"));
    Ok(())
}
