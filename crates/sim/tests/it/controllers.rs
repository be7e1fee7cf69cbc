//! The DaemonSet and Job controllers against the embedded API server with simulated nodes
//! running the pods.

use gantry_sim::controllers::daemonset;
use gantry_sim::kubelet::AgentRegistry;
use gantry_testkit::{Cluster, eventually_secs};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Nodes per `spec` running pods without agents, and the controllers.
async fn setup(spec: &str) -> Res<Cluster> {
    Ok(Cluster::builder()
        .nodes(spec)
        .agents(AgentRegistry::new())
        .controllers()
        .start()
        .await?)
}

fn ds_status(ds: &DaemonSet) -> (i32, i32, i32, i32) {
    let s = ds.status.clone().unwrap_or_default();
    (
        s.desired_number_scheduled,
        s.current_number_scheduled,
        s.number_ready,
        s.updated_number_scheduled.unwrap_or(0),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_runs_on_gpu_nodes_and_rolls() -> Res<()> {
    let env = setup("2xL4:1,1xcpu").await?;
    let client = env.client().clone();
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"nodeSelector": {"feature.node.kubernetes.io/pci-10de.present": "true"},
                                       "containers": [{"name": "c", "image": "v1"}]}}}
    }))?;
    dss.create(&PostParams::default(), &ds).await?;
    eventually_secs("2 ready daemon pods", 60, || async {
        dss.get("agent")
            .await
            .is_ok_and(|d| ds_status(&d) == (2, 2, 2, 2))
    })
    .await?;
    let list = pods
        .list(&ListParams::default().labels("app=agent"))
        .await?;
    let mut on: Vec<String> = list
        .items
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    on.sort();
    assert_eq!(on, ["l4-0", "l4-1"]);
    let d = dss.get("agent").await?;
    let hash = daemonset::revision_hash(&d);
    assert!(list.items.iter().all(|p| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("controller-revision-hash"))
            == Some(&hash)
    }));

    // New template: every pod is replaced, one at a time.
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "v2"}]}}}});
    dss.patch("agent", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    eventually_secs("rolled to v2", 60, || async {
        let Ok(l) = pods.list(&ListParams::default().labels("app=agent")).await else {
            return false;
        };
        let live: Vec<&Pod> = l
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        live.len() == 2
            && live.iter().all(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.containers[0].image.as_deref())
                    == Some("v2")
            })
            && live.iter().all(|p| daemonset::is_ready(p))
    })
    .await?;
    eventually_secs("status updated", 60, || async {
        dss.get("agent")
            .await
            .is_ok_and(|d| ds_status(&d) == (2, 2, 2, 2))
    })
    .await?;

    // A taint the pods do not tolerate moves the DaemonSet off that node.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let taint =
        json!({"spec": {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}});
    nodes
        .patch("l4-1", &PatchParams::default(), &Patch::Merge(&taint))
        .await?;
    eventually_secs("one daemon pod left", 60, || async {
        dss.get("agent").await.is_ok_and(|d| ds_status(&d).0 == 1)
    })
    .await?;
    eventually_secs("pod on tainted node removed", 60, || async {
        pods.list(&ListParams::default().labels("app=agent"))
            .await
            .is_ok_and(|l| {
                l.items
                    .iter()
                    .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some("l4-1"))
            })
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_runs_to_completion() -> Res<()> {
    let env = setup("1xcpu").await?;
    let client = env.client().clone();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"parallelism": 2, "completions": 3,
                 "template": {"metadata": {"labels": {"app": "train"},
                                           "annotations": {"sim.gantry.dev/run-time": "500ms"}},
                              "spec": {"nodeName": "cpu-0", "restartPolicy": "Never",
                                       "containers": [{"name": "c", "image": "trainer"}]}}}
    }))?;
    jobs.create(&PostParams::default(), &job).await?;
    eventually_secs("job complete", 60, || async {
        jobs.get("train").await.is_ok_and(|j| {
            j.status.is_some_and(|s| {
                s.succeeded == Some(3)
                    && s.conditions
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Complete" && c.status == "True")
            })
        })
    })
    .await?;
    let list = pods
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=train"))
        .await?;
    assert_eq!(list.items.len(), 3);
    assert!(
        list.items
            .iter()
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
    );

    // A failing Job stops at its backoff limit.
    let failing: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "crash", "namespace": "default"},
        "spec": {"backoffLimit": 1,
                 "template": {"metadata": {"annotations": {"sim.gantry.dev/run-time": "100ms", "sim.gantry.dev/exit-code": "2"}},
                              "spec": {"nodeName": "cpu-0", "restartPolicy": "Never",
                                       "containers": [{"name": "c", "image": "bad"}]}}}
    }))?;
    jobs.create(&PostParams::default(), &failing).await?;
    eventually_secs("job failed", 60, || async {
        jobs.get("crash").await.is_ok_and(|j| {
            j.status.is_some_and(|s| {
                s.failed == Some(2)
                    && s.conditions.unwrap_or_default().iter().any(|c| {
                        c.type_ == "Failed" && c.reason.as_deref() == Some("BackoffLimitExceeded")
                    })
            })
        })
    })
    .await?;
    Ok(())
}
