//! The embedded API server driven by kube-rs over HTTPS, the way Gantry's components use it.

use futures::{StreamExt, TryStreamExt};
use gantry_sim::ControlPlaneOptions;
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

type Result<T = ()> = anyhow::Result<T>;

async fn start() -> Result<(Cluster, kube::Client)> {
    let env = Cluster::builder().start().await?;
    let client = env.client().clone();
    Ok((env, client))
}

fn cm(name: &str, data: serde_json::Value) -> Result<ConfigMap> {
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name}, "data": data}),
    )?)
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_and_pagination() -> Result {
    let (_env, client) = start().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    for i in 0..10 {
        let mut c = cm(&format!("c{i}"), json!({}))?;
        c.metadata.labels = Some(
            [(
                "parity".to_string(),
                if i % 2 == 0 { "even" } else { "odd" }.to_string(),
            )]
            .into(),
        );
        api.create(&PostParams::default(), &c).await?;
    }
    let even = api
        .list(&ListParams::default().labels("parity=even"))
        .await?;
    assert_eq!(even.items.len(), 5);
    let some = api
        .list(&ListParams::default().labels("parity in (odd),parity!=even"))
        .await?;
    assert_eq!(some.items.len(), 5);
    let one = api
        .list(&ListParams::default().fields("metadata.name=c3"))
        .await?;
    assert_eq!(one.items.len(), 1);
    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(3);
    loop {
        let page = api.list(&lp).await?;
        names.extend(page.items.iter().filter_map(|c| c.metadata.name.clone()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(names.len(), 10);
    Ok(())
}

/// A change to an object on an earlier page, made while later pages are read, must reach the
/// watch that follows the list: every page is read at the first page's resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paged_list_is_one_snapshot_and_the_watch_after_it_misses_nothing() -> Result {
    let (_env, client) = start().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    for name in ["a", "b", "c", "d"] {
        api.create(&PostParams::default(), &cm(name, json!({"v": "0"}))?)
            .await?;
    }
    let first = api.list(&ListParams::default().limit(2)).await?;
    let rv = first.metadata.resource_version.clone().unwrap_or_default();
    let token = first.metadata.continue_.clone().unwrap_or_default();
    // Between the pages: "a" (on the first page) and "c" (on the second) change, "d" goes.
    for name in ["a", "c"] {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "1"}})),
        )
        .await?;
    }
    api.delete("d", &DeleteParams::default()).await?;
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await?;
    assert_eq!(
        second.metadata.resource_version.as_deref(),
        Some(rv.as_str())
    );
    let v = |c: &ConfigMap| c.data.as_ref().and_then(|d| d.get("v").cloned());
    let page2: Vec<(String, Option<String>)> = second
        .items
        .iter()
        .map(|c| (c.metadata.name.clone().unwrap_or_default(), v(c)))
        .collect();
    assert_eq!(
        page2,
        vec![
            ("c".into(), Some("0".into())),
            ("d".into(), Some("0".into()))
        ],
        "the second page shows the first page's moment"
    );
    // The watch from the list's version brings all three changes.
    let mut stream = api.watch(&WatchParams::default(), &rv).await?.boxed();
    let mut seen = Vec::new();
    for _ in 0..3 {
        match stream.try_next().await? {
            Some(WatchEvent::Modified(o)) => {
                seen.push(format!("modified {}", o.metadata.name.unwrap_or_default()))
            }
            Some(WatchEvent::Deleted(o)) => {
                seen.push(format!("deleted {}", o.metadata.name.unwrap_or_default()))
            }
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["modified a", "modified c", "deleted d"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_after_a_dropped_connection() -> Result {
    let (_env, client) = start().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let c = api
        .create(&PostParams::default(), &cm("w", json!({"n": "0"}))?)
        .await?;
    let rv = c.metadata.resource_version.unwrap_or_default();
    let mut stream = api.watch(&WatchParams::default(), &rv).await?.boxed();
    for n in 1..=3 {
        api.patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"n": n.to_string()}})),
        )
        .await?;
    }
    let mut last = rv;
    for _ in 0..2 {
        match stream.try_next().await? {
            Some(WatchEvent::Modified(o)) => last = o.metadata.resource_version.unwrap_or_default(),
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }
    drop(stream);
    let mut stream = api.watch(&WatchParams::default(), &last).await?.boxed();
    match stream.try_next().await? {
        Some(WatchEvent::Modified(o)) => assert_eq!(
            o.data.and_then(|d| d.get("n").cloned()).as_deref(),
            Some("3")
        ),
        other => anyhow::bail!("unexpected {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_old_resource_version_is_gone_and_relist_recovers() -> Result {
    let env = Cluster::builder()
        .options(ControlPlaneOptions {
            watch_history: 16,
            ..Default::default()
        })
        .start()
        .await?;
    let api: Api<ConfigMap> = Api::default_namespaced(env.client().clone());
    let first = api
        .create(&PostParams::default(), &cm("g", json!({}))?)
        .await?;
    for n in 0..40 {
        api.patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"n": n.to_string()}})),
        )
        .await?;
    }
    let rv = first.metadata.resource_version.unwrap_or_default();
    let mut stream = api.watch(&WatchParams::default(), &rv).await?.boxed();
    match stream.try_next().await? {
        Some(WatchEvent::Error(e)) => assert_eq!(e.code, 410),
        other => anyhow::bail!("expected 410, got {other:?}"),
    }
    // Relist, then watch from the list's resourceVersion.
    let list = api.list(&ListParams::default()).await?;
    let rv = list.metadata.resource_version.unwrap_or_default();
    let mut stream = api.watch(&WatchParams::default(), &rv).await?.boxed();
    api.patch(
        "g",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"n": "last"}})),
    )
    .await?;
    assert!(matches!(
        stream.try_next().await?,
        Some(WatchEvent::Modified(_))
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_stays_in_sync_under_10000_writes() -> Result {
    let (_env, client) = start().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let (reader, writer) = reflector::store::<ConfigMap>();
    let cfg = watcher::Config::default().streaming_lists();
    let stream = reflector(writer, watcher(api.clone(), cfg)).applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await?;
    const OBJECTS: usize = 500;
    const WRITES: usize = 10_000;
    futures::stream::iter(0..WRITES)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = format!("r{}", i % OBJECTS);
                let c = cm(&name, json!({"i": i.to_string()}))?;
                if i < OBJECTS {
                    api.create(&PostParams::default(), &c).await?;
                } else {
                    // Writes to one object are serialized by (i % OBJECTS) ordering per batch.
                    api.patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"data": {"i": i.to_string()}})),
                    )
                    .await?;
                }
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffered(16)
        .try_collect::<Vec<_>>()
        .await?;
    let truth = api.list(&ListParams::default()).await?;
    eventually_secs("reflector to match the server", 60, || {
        let reader = reader.clone();
        let truth = truth.items.clone();
        async move {
            anyhow::Ok(
                reader.len() == OBJECTS
                    && truth.iter().all(|t| {
                        reader
                            .get(&reflector::ObjectRef::from_obj(t))
                            .is_some_and(|r| {
                                r.metadata.resource_version == t.metadata.resource_version
                            })
                    }),
            )
        }
    })
    .await?;
    task.abort();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_are_served_once_their_crd_exists() -> Result {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let (_env, client) = start().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}))?;
    let crd = crds.create(&PostParams::default(), &crd).await?;
    let established = crd.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        established
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let w: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"ignored": true}}))?;
    let w = widgets.create(&PostParams::default(), &w).await?;
    assert!(w.data.get("status").is_none(), "status is a subresource");
    let w = widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await?;
    assert_eq!(w.data["status"]["ready"], json!(true));
    assert_eq!(w.metadata.generation, Some(1));
    let err = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 2}})),
        )
        .await
        .expect_err("415");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 415),
        "{err:?}"
    );
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await?;
    // Once the garbage collector has deleted its objects, the CRD goes.
    eventually_secs("no longer served", 60, || async {
        widgets.list(&ListParams::default()).await.is_err()
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_the_token_get_401() -> Result {
    let (env, _client) = start().await?;
    let mut cfg = env.kube_config()?;
    cfg.auth_info.token = None;
    let anon = kube::Client::try_from(cfg)?;
    let err = Api::<ConfigMap>::default_namespaced(anon)
        .list(&ListParams::default())
        .await
        .expect_err("401");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 401),
        "{err:?}"
    );
    Ok(())
}
