//! The kubelet side of issue #23: a container that fails keeps restarting with back-off
//! (CrashLoopBackOff, as the real kubelet), and a stored pod that a typed client cannot decode
//! (labels that are not strings, written before the API server refused them) neither wedges
//! the kubelet's pod watch nor stays Terminating once deleted.

use gantry_api::names;
use gantry_sim::kubelet::AgentRegistry;
use gantry_sim::store::{Mutation, ObjKey, StoreError};
use gantry_testkit::{Cluster, eventually_secs};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

type Result<T = ()> = anyhow::Result<T>;

/// One CPU node whose pods run no agents.
async fn start() -> Result<Cluster> {
    Cluster::builder()
        .nodes("1xcpu")
        .agents(AgentRegistry::new())
        .start()
        .await
}

fn pod(name: &str, annotations: Value) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"nodeName": "cpu-0", "restartPolicy": "Always",
                 "containers": [{"name": "c", "image": "busybox"}]}
    }))?)
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_container_restarts_with_back_off() -> Result {
    let env = start().await?;
    let pods: Api<Pod> = Api::default_namespaced(env.client().clone());
    let crash = pod(
        "crash",
        json!({names::ANNOTATION_SIM_RUN_TIME: "50ms", names::ANNOTATION_SIM_EXIT_CODE: "3"}),
    )?;
    pods.create(&PostParams::default(), &crash).await?;
    // Kubelet: restartPolicy Always restarts a failed container after a back-off that grows,
    // showing CrashLoopBackOff with the last exit while it waits; the pod stays Running.
    let st = eventually_secs("crash restarted twice, in back-off", 60, || async {
        let p = pods.get("crash").await?;
        let c = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first().cloned());
        anyhow::Ok(c.filter(|c| {
            c.restart_count >= 2
                && c.state.as_ref().and_then(|s| s.waiting.as_ref()).is_some()
                && phase(&p) == Some("Running")
        }))
    })
    .await?;
    let waiting = st.state.and_then(|s| s.waiting).unwrap_or_default();
    assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
    assert!(
        waiting
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("back-off"),
        "{waiting:?}"
    );
    let last = st.last_state.and_then(|s| s.terminated).unwrap_or_default();
    assert_eq!((last.exit_code, last.reason.as_deref()), (3, Some("Error")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_pod_neither_wedges_the_kubelet_nor_stays_terminating() -> Result {
    let env = start().await?;
    let client = env.client().clone();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &pod("before", json!({}))?)
        .await?;
    eventually_secs("before runs", 60, || async {
        anyhow::Ok(phase(&pods.get("before").await?) == Some("Running"))
    })
    .await?;
    // The API refuses labels that are not strings on every write path (400 naming the field,
    // as upstream's decoder): create, and a merge patch of an existing pod.
    let mut bad = serde_json::to_value(pod("bad", json!({}))?)?;
    bad["metadata"]["labels"] = json!({"tier": 1});
    // (A typed Pod cannot even hold such a label: the raw body goes.)
    let req = http::Request::post("/api/v1/namespaces/default/pods")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&bad)?)?;
    let Err(kube::Error::Api(s)) = client.request_text(req).await else {
        anyhow::bail!("a pod with a number as a label value was accepted");
    };
    assert_eq!(s.code, 400, "{}", s.message);
    assert!(s.message.contains("metadata.labels"), "{}", s.message);
    let patch = json!({"metadata": {"labels": {"tier": 1}}});
    let Err(kube::Error::Api(s)) = pods
        .patch("before", &PatchParams::default(), &Patch::Merge(&patch))
        .await
    else {
        anyhow::bail!("a merge patch setting a number label was accepted");
    };
    assert_eq!(s.code, 400, "{}", s.message);
    assert!(s.message.contains("metadata.labels"), "{}", s.message);

    // Such a pod stored by an earlier version (written to the store directly here), bound to
    // the node: the kubelet's pod watch relists and keeps going.
    let store = &env.cp().api().store;
    let key = ObjKey {
        gr: "/pods".into(),
        namespace: "default".into(),
        name: "legacy".into(),
    };
    store.mutate::<StoreError>(&key, |_, _| {
        let mut p = bad.clone();
        p["metadata"]["name"] = json!("legacy");
        p["metadata"]["namespace"] = json!("default");
        p["metadata"]["uid"] = json!("legacy-uid");
        p["metadata"]["creationTimestamp"] = json!("2026-12-01T00:00:00Z");
        Ok(Mutation::Put(p))
    })?;
    pods.create(&PostParams::default(), &pod("after", json!({}))?)
        .await?;
    eventually_secs(
        "a pod created after the undecodable one runs",
        60,
        || async { anyhow::Ok(phase(&pods.get("after").await?) == Some("Running")) },
    )
    .await?;
    // Deleting it: bound to a node, it is deleted gracefully (Terminating); its kubelet
    // finishes it off although it cannot decode it.
    let raw: Api<gantry_api::lenient::Lenient<Pod>> = Api::default_namespaced(client.clone());
    raw.delete("legacy", &DeleteParams::default()).await?;
    eventually_secs("the undecodable pod is gone after deletion", 60, || async {
        anyhow::Ok(store.get("/pods", "default", "legacy").is_none())
    })
    .await?;
    Ok(())
}
