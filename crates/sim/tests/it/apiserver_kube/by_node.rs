//! One node's pods (`fieldSelector=spec.nodeName=<node>`), as every kubelet lists and watches
//! them: served from the store's node index, with upstream's semantics for a filtered watch
//! (a pod bound to the node arrives as ADDED) and bookmarks that carry the store's version.

use super::*;

fn pod(name: &str, node: Option<&str>) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}
    }))?)
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelets_list_and_watch_of_its_node_see_its_pods_only() -> Result {
    let (env, client) = start().await?;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &pod("p1", None)?)
        .await?;
    pods.create(&PostParams::default(), &pod("p2", Some("node-2"))?)
        .await?;
    let on = |node: &str| ListParams::default().fields(&format!("spec.nodeName={node}"));
    let first = pods.list(&on("node-1")).await?;
    assert!(first.items.is_empty(), "{:?}", names(&first.items));
    assert_eq!(names(&pods.list(&on("node-2")).await?.items), ["p2"]);
    let rv = first.metadata.resource_version.unwrap_or_default();
    // A short timeout: the bookmark upstream sends 2 s before the deadline comes soon, yet
    // after the writes below on a loaded machine.
    let params = WatchParams::default()
        .fields("spec.nodeName=node-1")
        .timeout(20);
    let mut stream = pods.watch(&params, &rv).await?.boxed();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}});
    let req = http::Request::post("/api/v1/namespaces/default/pods/p1/binding")
        .body(serde_json::to_vec(&binding)?)?;
    client.request_text(req).await?;
    let label = |v: &str| Patch::Merge(json!({"metadata": {"labels": {"v": v}}}));
    let p2 = pods
        .patch("p2", &PatchParams::default(), &label("1"))
        .await?;
    pods.patch("p1", &PatchParams::default(), &label("1"))
        .await?;
    pods.delete("p1", &DeleteParams::default().grace_period(0))
        .await?;
    let mut seen = Vec::new();
    let bookmark = loop {
        let next = tokio::time::timeout(std::time::Duration::from_secs(30), stream.try_next());
        match next.await?? {
            Some(WatchEvent::Added(p)) => seen.push(format!("ADDED {}", names(&[p])[0])),
            Some(WatchEvent::Modified(p)) => seen.push(format!("MODIFIED {}", names(&[p])[0])),
            Some(WatchEvent::Deleted(p)) => seen.push(format!("DELETED {}", names(&[p])[0])),
            Some(WatchEvent::Bookmark(b)) => break b.metadata.resource_version,
            other => anyhow::bail!("unexpected {other:?} after {seen:?}"),
        }
    };
    // Bound to node-1: ADDED, as upstream sends an object that comes to match a selector.
    assert_eq!(seen, ["ADDED p1", "MODIFIED p1", "DELETED p1"]);
    let num = |s: &str| s.parse::<u64>().unwrap_or(0);
    let p2_rv = p2.metadata.resource_version.unwrap_or_default();
    assert!(
        num(&bookmark) >= num(&p2_rv),
        "the bookmark ({bookmark}) is behind the last write to another node's pod ({p2_rv})"
    );
    // The real kubectl reads the same.
    if gantry_testkit::Kubectl::installed() {
        let out = env
            .kubectl()
            .run(&[
                "get",
                "pods",
                "--field-selector",
                "spec.nodeName=node-2",
                "-o",
                "name",
            ])
            .await?;
        assert_eq!(out.trim(), "pod/p2");
    } else {
        eprintln!("skipping the kubectl step: no {}", gantry_testkit::KUBECTL);
    }
    Ok(())
}
