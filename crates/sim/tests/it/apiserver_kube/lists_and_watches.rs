//! Lists and watches: selectors, pagination as one snapshot, resumed and expired watches, a
//! reflector under load.

use super::*;

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

/// A watch that falls more than the store's live ring (512 events) behind goes on from the
/// kept history, where the older events are packed JSON: written faster than it reads, it
/// still sees every object once, in order. (Should the server close it for not reading, the
/// test resumes from the last resourceVersion, as a client would.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_behind_the_live_ring_misses_nothing() -> Result {
    const N: usize = 6_000;
    let (env, client) = start().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let store = env.cp().api().store.clone();
    let mut last = store.current_rv().to_string();
    let mut stream = api.watch(&WatchParams::default(), &last).await?.boxed();
    // 8 KiB an object: 48 MiB in all, more than the socket buffers between server and client
    // hold, so the server's watch waits on its client while the writes go on.
    let pad = "x".repeat(8 << 10);
    let put = |i: usize| {
        let key = gantry_sim::store::ObjKey {
            gr: "/configmaps".into(),
            namespace: "default".into(),
            name: format!("ring-{i:05}"),
        };
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": key.name, "namespace": "default"}, "data": {"i": i.to_string(), "pad": pad}});
        store.mutate::<gantry_sim::store::StoreError>(&key, |_, _| {
            Ok(gantry_sim::store::Mutation::Put(obj))
        })
    };
    // The first event read: the watch is being served.
    put(0)?;
    let mut seen = Vec::with_capacity(N);
    match stream.try_next().await? {
        Some(WatchEvent::Added(c)) => {
            last = c.metadata.resource_version.clone().unwrap_or_default();
            seen.push(c.metadata.name.unwrap_or_default());
        }
        other => anyhow::bail!("unexpected {other:?}"),
    }
    // The rest straight into the store, unread: far faster than one watch sends over HTTPS,
    // and more events than the live ring holds.
    for i in 1..N {
        put(i)?;
    }
    while seen.len() < N {
        match tokio::time::timeout(std::time::Duration::from_secs(60), stream.try_next()).await? {
            Ok(Some(WatchEvent::Added(c))) => {
                last = c.metadata.resource_version.clone().unwrap_or_default();
                seen.push(c.metadata.name.unwrap_or_default());
            }
            Ok(Some(WatchEvent::Bookmark(_))) => {}
            Ok(Some(other)) => anyhow::bail!("unexpected {other:?}"),
            Ok(None) | Err(_) => {
                stream = api.watch(&WatchParams::default(), &last).await?.boxed();
            }
        }
    }
    let want: Vec<String> = (0..N).map(|i| format!("ring-{i:05}")).collect();
    assert!(
        seen == want,
        "{} events, first difference at {:?}",
        seen.len(),
        seen.iter().zip(&want).position(|(a, b)| a != b)
    );
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

/// A single-object watch (`metadata.name=…`, as a node agent watches its own Node) gets only
/// its object's events, before and after a resume, and its bookmarks carry the store's
/// version though every write in between was to another object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_of_one_object_by_name_sees_its_events_and_current_bookmarks() -> Result {
    let (_env, client) = start().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let a = api
        .create(&PostParams::default(), &cm("a", json!({"n": "0"}))?)
        .await?;
    api.create(&PostParams::default(), &cm("b", json!({"n": "0"}))?)
        .await?;
    let rv = a.metadata.resource_version.unwrap_or_default();
    // A short timeout: the bookmark upstream sends 2 s before the deadline comes soon, yet
    // after the 111 writes below on a loaded machine.
    let params = WatchParams::default().fields("metadata.name=a").timeout(20);
    let mut stream = api.watch(&params, &rv).await?.boxed();
    let set = |name: &'static str, n: usize| {
        let api = api.clone();
        async move {
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"n": n.to_string()}})),
            )
            .await
        }
    };
    // More writes to `b` than a single-object watch's ring holds, then one to `a`.
    for n in 1..=100 {
        set("b", n).await?;
    }
    let a1 = set("a", 1).await?;
    let mut last_b = String::new();
    for n in 101..=110 {
        last_b = set("b", n)
            .await?
            .metadata
            .resource_version
            .unwrap_or_default();
    }
    match tokio::time::timeout(std::time::Duration::from_secs(30), stream.try_next()).await?? {
        Some(WatchEvent::Modified(o)) => {
            assert_eq!(o.metadata.name.as_deref(), Some("a"));
            assert_eq!(o.metadata.resource_version, a1.metadata.resource_version);
        }
        other => anyhow::bail!("unexpected {other:?}"),
    }
    // The next line is a bookmark (sent 2 s before the deadline) at or past b's last write.
    let next = tokio::time::timeout(std::time::Duration::from_secs(30), stream.try_next()).await;
    let bookmark_rv = match next {
        Ok(Ok(Some(WatchEvent::Bookmark(b)))) => b.metadata.resource_version,
        other => anyhow::bail!("expected a bookmark, got {other:?}"),
    };
    let num = |s: &str| s.parse::<u64>().unwrap_or(0);
    assert!(
        num(&bookmark_rv) >= num(&last_b),
        "bookmark {bookmark_rv} is behind the last write {last_b}"
    );
    // Resumed from the bookmark: the next change to `a`, nothing of `b`.
    drop(stream);
    let mut stream = api.watch(&params, &bookmark_rv).await?.boxed();
    set("b", 111).await?;
    set("a", 2).await?;
    match tokio::time::timeout(std::time::Duration::from_secs(30), stream.try_next()).await?? {
        Some(WatchEvent::Modified(o)) => assert_eq!(
            (
                o.metadata.name.as_deref(),
                o.data.and_then(|d| d.get("n").cloned()).as_deref()
            ),
            (Some("a"), Some("2"))
        ),
        other => anyhow::bail!("unexpected {other:?}"),
    }
    Ok(())
}

/// `Accept: …;as=PartialObjectMetadata[List]` (kube-rs's `*_metadata` calls, client-go's
/// metadata informers): get, list and watch answer with the metadata only, as
/// `meta.k8s.io/v1` `PartialObjectMetadata`, `managedFields` included; a plain request still
/// gets the whole object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_requests_get_partial_object_metadata() -> Result {
    let (_env, client) = start().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &cm("m1", json!({"k": "v"}))?)
        .await?;
    let raw = |path: &str, accept: &str| {
        let req = http::Request::get(path)
            .header(http::header::ACCEPT, accept)
            .body(Vec::new());
        let client = client.clone();
        async move {
            let text = client.request_text(req?).await?;
            anyhow::Ok(serde_json::from_str::<serde_json::Value>(&text)?)
        }
    };
    let path = "/api/v1/namespaces/default/configmaps";
    let meta = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let one = raw(&format!("{path}/m1"), meta).await?;
    assert_eq!(one["kind"], "PartialObjectMetadata", "{one}");
    assert_eq!(one["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(one["metadata"]["name"], "m1");
    assert!(one["metadata"]["managedFields"].is_array(), "{one}");
    assert!(one.get("data").is_none(), "{one}");
    let list = raw(
        path,
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .await?;
    assert_eq!(list["kind"], "PartialObjectMetadataList", "{list}");
    assert!(list["metadata"]["resourceVersion"].is_string(), "{list}");
    assert_eq!(list["items"][0]["kind"], "PartialObjectMetadata");
    assert!(list["items"][0].get("data").is_none(), "{list}");
    let whole = raw(&format!("{path}/m1"), "application/json").await?;
    assert_eq!(whole["data"]["k"], "v");

    // A metadata watch sees the initial object and later writes as metadata only.
    let (reader, writer) = reflector::store();
    let meta_api: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::default_namespaced(client.clone());
    let mut stream = watcher(meta_api, watcher::Config::default())
        .reflect(writer)
        .applied_objects()
        .boxed();
    let wait = std::time::Duration::from_secs(20);
    let first = tokio::time::timeout(wait, stream.next()).await?;
    assert!(matches!(first, Some(Ok(_))), "{first:?}");
    api.patch(
        "m1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .await?;
    let second = tokio::time::timeout(wait, stream.next()).await?;
    let seen = [first, second]
        .into_iter()
        .map(|o| {
            o.ok_or_else(|| anyhow::anyhow!("the watch ended"))?
                .map_err(anyhow::Error::from)
        })
        .collect::<Result<Vec<_>>>()?;
    let last = &seen[1];
    assert_eq!(
        last.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("x"))
            .map(String::as_str),
        Some("y")
    );
    assert_eq!(
        last.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    assert_eq!(reader.state().len(), 1);
    let events = api
        .watch_metadata(&WatchParams::default(), "0")
        .await?
        .take(1)
        .try_collect::<Vec<_>>()
        .await?;
    match &events[0] {
        WatchEvent::Added(o) => assert_eq!(
            o.types.as_ref().map(|t| t.api_version.as_str()),
            Some("meta.k8s.io/v1")
        ),
        other => panic!("{other:?}"),
    }
    Ok(())
}
