//! Deployments on the sim, through kube-rs and the real kubectl: the Deployment controller
//! makes a ReplicaSet, the ReplicaSet controller its pods, the default scheduler binds them,
//! the kubelets run them; a template change rolls over to a new ReplicaSet
//! (`kubectl rollout status` says when), scaling resizes, deleting cascades to the pods.

use gantry_sim::cluster::{self, UpOptions};
use gantry_sim::{ControlPlane, ControlPlaneOptions};
use gantry_testkit::eventually_secs;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

type Result<T = ()> = anyhow::Result<T>;

fn running(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_rolls_out_scales_and_cascades() -> Result {
    let cp = ControlPlane::start(ControlPlaneOptions::default()).await?;
    let opts = UpOptions {
        default_scheduler: true,
        ..Default::default()
    };
    let _up = cluster::up_with(&cp, None, "2xcpu", opts).await?;
    let client = cp.client()?;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "web:1",
                                  "resources": {"requests": {"cpu": "100m"}}}]}}}
    }))?;
    deps.create(&PostParams::default(), &d).await?;
    let lp = ListParams::default().labels("app=web");
    eventually_secs("three pods running", 60, || async {
        anyhow::Ok(running(&pods.list(&lp).await?.items) == 3)
    })
    .await?;
    eventually_secs("the Deployment's status complete", 30, || async {
        let s = deps.get("web").await?.status.unwrap_or_default();
        anyhow::Ok(
            s.available_replicas == Some(3)
                && s.updated_replicas == Some(3)
                && s.observed_generation == Some(1),
        )
    })
    .await?;
    let kc = cp.kubeconfig_path().to_path_buf();
    let kubectl = |args: &[&str]| {
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kc)
            .args(args)
            .output()
    };
    if let Ok(out) = kubectl(&["rollout", "status", "deployment/web", "--timeout=30s"]) {
        let s = String::from_utf8_lossy(&out.stdout);
        assert!(s.contains("successfully rolled out"), "{s}");
    }

    // A new template: a second ReplicaSet takes over, the first is drained and kept.
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "web:2"}]}}}});
    deps.patch("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await?;
    eventually_secs("rolled over to web:2", 90, || async {
        let all = pods.list(&lp).await?.items;
        let new = all
            .iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .is_some_and(|s| s.containers[0].image.as_deref() == Some("web:2"))
            })
            .cloned()
            .collect::<Vec<_>>();
        let s = deps.get("web").await?.status.unwrap_or_default();
        anyhow::Ok(
            running(&new) == 3
                && all.len() == 3
                && s.updated_replicas == Some(3)
                && s.available_replicas == Some(3)
                && s.replicas == Some(3),
        )
    })
    .await?;
    let sets = rss.list(&ListParams::default()).await?.items;
    let mut sizes: Vec<i32> = sets
        .iter()
        .map(|r| r.spec.as_ref().and_then(|s| s.replicas).unwrap_or(-1))
        .collect();
    sizes.sort();
    assert_eq!(sizes, [0, 3]);
    if let Ok(out) = kubectl(&["rollout", "status", "deployment/web", "--timeout=30s"]) {
        let s = String::from_utf8_lossy(&out.stdout);
        assert!(s.contains("successfully rolled out"), "{s}");
    }

    // Scale down: the ReplicaSet loses pods.
    deps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await?;
    eventually_secs("one pod left", 60, || async {
        let all = pods.list(&lp).await?.items;
        anyhow::Ok(all.len() == 1 && running(&all) == 1)
    })
    .await?;

    // Deleting the Deployment deletes its ReplicaSets and pods.
    deps.delete("web", &DeleteParams::default()).await?;
    eventually_secs("ReplicaSets and pods gone", 60, || async {
        anyhow::Ok(
            rss.list(&ListParams::default()).await?.items.is_empty()
                && pods.list(&lp).await?.items.is_empty(),
        )
    })
    .await?;
    Ok(())
}
