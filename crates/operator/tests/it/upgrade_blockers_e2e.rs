//! Driver upgrades past what used to stop them (issues #37, #44), end to end in the sim with
//! the upgrade controller of `upgrade_e2e` and `maxUnavailable: 25%` (one node of three):
//!
//! - fractional GPU pods placed by the real scheduler, which holds each shared GPU with a
//!   reservation pod that has no controller: the fractions are evicted, the reservations
//!   released, and every node finishes;
//! - a GPU pod that cannot be evicted (no controller, `podDeletion.force` off) fails its node,
//!   whose Warning names the ClusterPolicy field to set, and the other nodes go on.

use std::collections::BTreeMap;
use std::time::Duration;

use gantry_api::names;
use gantry_operator::upgrade::UpgradeState;
use gantry_testkit::{Look, eventually_secs};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::upgrade_e2e::*;

const RESERVATION_NS: &str = names::DEFAULT_RESERVATION_NAMESPACE;

/// The scheduler, in-process, until the test ends.
fn spawn_scheduler(env: &mut Env) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let client = env.client.clone();
    let opts = gantry_scheduler::k8s::Options {
        leader_elect: false,
        reservation_timeout: Duration::from_secs(20),
        ..Default::default()
    };
    env.tasks.push(tokio::spawn(async move {
        // Keep the sender alive as long as the scheduler: dropping it reads as "stop".
        let _tx = tx;
        if let Err(e) = gantry_scheduler::k8s::run(client, opts, rx).await {
            eprintln!("scheduler stopped: {e}");
        }
    }));
}

/// Running, not terminating pods in `ns` matching `selector`: name -> node.
async fn running(client: &kube::Client, ns: &str, selector: &str) -> BTreeMap<String, String> {
    let lp = ListParams::default().labels(selector);
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter_map(|p| Some((p.metadata.name?, p.spec?.node_name?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Every GPU node `upgrade-done`, uncordoned, on driver `version`; else what is not.
async fn all_done_on(env: &Env, version: &str) -> Look<()> {
    let want = driver_image(version);
    let imgs = driver_images(&env.client).await;
    let Ok(list) = Api::<Node>::all(env.client.clone())
        .list(&ListParams::default())
        .await
    else {
        return Look::Seen("nodes not listed".into());
    };
    let not: Vec<String> = list
        .items
        .iter()
        .filter_map(|n| {
            let name = n.metadata.name.as_deref()?;
            GPU_NODES.contains(&name).then_some(())?;
            let ok = state_of(n) == UpgradeState::UpgradeDone
                && !unschedulable(n)
                && imgs.get(name) == Some(&want);
            (!ok).then(|| {
                format!(
                    "{name}: {} cordoned={} image={:?}",
                    state_of(n),
                    unschedulable(n),
                    imgs.get(name)
                )
            })
        })
        .collect();
    if not.is_empty() {
        Look::Done(())
    } else {
        Look::Seen(not.join("; "))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_upgrade_with_fractional_pods_completes_on_every_node() -> Res<()> {
    let mut env = start(1, json!("25%")).await?;
    settled_on(&env, V1).await?;
    spawn_scheduler(&mut env);
    spawn_controller(&mut env, 10);
    let rec = record_from_done(&mut env).await?;

    // Four half-GPU pods under a Deployment: the scheduler packs them onto shared GPUs, each
    // held by a reservation pod in its own namespace.
    let deploy: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "infer", "namespace": "default"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "infer"}},
                 "template": {"metadata": {"labels": {"app": "infer", "kai.scheduler/queue": "default-queue"},
                                           "annotations": {names::ANNOTATION_GPU_FRACTION: "0.5"}},
                              "spec": {"schedulerName": "kai-scheduler",
                                       "containers": [{"name": "main", "image": "cuda", "command": ["sleep", "infinity"]}]}}}
    }))?;
    Api::<Deployment>::namespaced(env.client.clone(), "default")
        .create(&PostParams::default(), &deploy)
        .await?;
    let reservation_sel = format!("{}={}", names::LABEL_APP, names::RESERVATION_APP);
    let before = eventually_secs(
        "four fractions and their reservations running",
        120,
        || async {
            let fractions = running(&env.client, "default", "app=infer").await;
            let reservations = running(&env.client, RESERVATION_NS, &reservation_sel).await;
            if fractions.len() == 4 && !reservations.is_empty() {
                Look::Done(fractions)
            } else {
                Look::Seen(format!(
                    "fractions {fractions:?}, reservations {reservations:?}"
                ))
            }
        },
    )
    .await?;

    change_driver_version(&env.client, V2).await?;
    eventually_secs("every GPU node upgraded to v2 and uncordoned", 240, || {
        all_done_on(&env, V2)
    })
    .await?;
    {
        let r = rec.lock().map_err(|_| "recorder poisoned")?;
        for n in GPU_NODES {
            let walk = r.walks.get(n).cloned().unwrap_or_default();
            assert!(
                !walk.contains(&UpgradeState::UpgradeFailed),
                "{n} failed: {walk:?}"
            );
            assert!(
                walk.contains(&UpgradeState::PodRestartRequired),
                "{n} never restarted its driver: {walk:?}"
            );
        }
        assert_eq!(r.max_in_flight, 1, "never two nodes in flight");
    }
    // Every node was walked, so every first fraction was evicted; the Deployment's
    // replacements run on shared GPUs again, each held by a reservation.
    eventually_secs("four new fractions running", 120, || async {
        let fractions = running(&env.client, "default", "app=infer").await;
        let reservations = running(&env.client, RESERVATION_NS, &reservation_sel).await;
        let old: Vec<&String> = fractions
            .keys()
            .filter(|f| before.contains_key(*f))
            .collect();
        if fractions.len() == 4 && old.is_empty() && !reservations.is_empty() {
            Look::Done(())
        } else {
            Look::Seen(format!(
                "fractions {fractions:?} (first ones left: {old:?}), reservations {reservations:?}"
            ))
        }
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_upgrade_goes_on_past_a_node_whose_gpu_pod_cannot_be_evicted() -> Res<()> {
    let mut env = start(1, json!("25%")).await?;
    settled_on(&env, V1).await?;
    spawn_controller(&mut env, 10);
    let rec = record_from_done(&mut env).await?;
    // A bare GPU pod on the first node the walk takes: nothing would bring it back.
    let bad = GPU_NODES[0];
    let stuck: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stuck", "namespace": "default"},
        "spec": {"nodeName": bad,
                 "containers": [{"name": "c", "image": "cuda",
                                 "resources": {"limits": {names::RESOURCE_GPU: "1"}}}]}
    }))?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    pods.create(&PostParams::default(), &stuck).await?;
    eventually_secs("the bare GPU pod running", 60, || async {
        running(&env.client, "default", "")
            .await
            .contains_key("stuck")
    })
    .await?;

    change_driver_version(&env.client, V2).await?;
    eventually_secs(
        "the node with the stuck pod failed, the others finished on v2",
        180,
        || async {
            let imgs = driver_images(&env.client).await;
            let others = GPU_NODES[1..].iter().all(|n| {
                node_state(&rec, n) == Some(UpgradeState::UpgradeDone)
                    && imgs.get(*n) == Some(&driver_image(V2))
            });
            let failed = node_state(&rec, bad) == Some(UpgradeState::UpgradeFailed);
            if others && failed {
                Look::Done(())
            } else {
                Look::Seen(format!(
                    "states {:?}, images {imgs:?}",
                    rec.lock().map(|r| r.now.clone()).unwrap_or_default()
                ))
            }
        },
    )
    .await?;
    let nodes: Api<Node> = Api::all(env.client.clone());
    assert!(
        unschedulable(&nodes.get(bad).await?),
        "a failed node stays cordoned"
    );
    for n in &GPU_NODES[1..] {
        assert!(!unschedulable(&nodes.get(n).await?), "{n} left cordoned");
    }
    // Its driver was never touched, and the Warning names the ClusterPolicy field to set.
    assert_eq!(
        driver_images(&env.client).await.get(bad),
        Some(&driver_image(V1))
    );
    let events: Api<Event> = Api::namespaced(env.client.clone(), "default");
    let warning = eventually_secs("a Warning naming podDeletion.force", 60, || async {
        let list = events.list(&ListParams::default()).await?;
        let msgs: Vec<String> = list
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(bad))
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .filter_map(|e| e.message)
            .collect();
        Ok::<_, kube::Error>(match msgs.iter().find(|m| m.contains("default/stuck")) {
            Some(m) => Look::Done(m.clone()),
            None => Look::Seen(format!("{msgs:?}")),
        })
    })
    .await?;
    assert!(
        warning.contains(
            "set ClusterPolicy cluster-policy spec.driver.upgradePolicy.podDeletion.force: true"
        ),
        "{warning}"
    );

    // As docs/operations.md says: remove the cause and delete the node's driver pod; the
    // new one runs the current template and the node recovers on its own, uncordoned.
    pods.delete("stuck", &DeleteParams::default()).await?;
    let driver_pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    let lp = ListParams::default()
        .labels(&format!("{}={}", names::LABEL_APP, names::app::DRIVER))
        .fields(&format!("spec.nodeName={bad}"));
    for p in driver_pods.list(&lp).await?.items {
        if let Some(name) = p.metadata.name {
            driver_pods.delete(&name, &DeleteParams::default()).await?;
        }
    }
    eventually_secs("every GPU node on v2", 180, || all_done_on(&env, V2)).await?;
    Ok(())
}
