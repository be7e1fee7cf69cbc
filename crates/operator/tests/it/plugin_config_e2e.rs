//! Issue #24: a device-plugin config change that would reduce capacity is surfaced, not
//! silent. Pointing `devicePlugin.config.name` at a ConfigMap that does not exist, or at one
//! with a huge `replicas`, leaves the device plugins on their last good config (allocatable
//! unchanged), the ClusterPolicy `notReady` with a condition naming the problem; creating or
//! fixing the ConfigMap converges.

use crate::support;

use std::time::Duration;

use gantry_api::names;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

fn ts(n: u64) -> String {
    format!(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {n}\n"
    )
}

async fn wait_allocatable(client: &kube::Client, want: &str, secs: u64) -> Res<()> {
    eventually_secs(&format!("allocatable {want:?}"), secs, || async move {
        let now = allocatable(client).await?;
        anyhow::Ok(if now == want {
            Look::Done(())
        } else {
            Look::Seen(format!("allocatable {now:?}"))
        })
    })
    .await?;
    Ok(())
}

/// Waits for `notReady` with an Error condition of our reason whose message has `needle`.
async fn wait_refused(client: &kube::Client, name: &str, needle: &str) -> Res<String> {
    Ok(
        eventually_secs(&format!("notReady naming {needle:?}"), 60, || async {
            let error = condition(client, name, "Error").await;
            let state = policy_state(client, name).await;
            match &error {
                Some((s, r, m))
                    if s == "True"
                        && r == "DevicePluginConfigInvalid"
                        && m.contains(needle)
                        && state.as_deref() == Some("notReady") =>
                {
                    Look::Done(m.clone())
                }
                _ => Look::Seen(format!("Error condition {error:?}, state {state:?}")),
            }
        })
        .await?,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_invalid_plugin_config_map_changes_no_capacity() -> Res {
    let env = Env::start("1xL4:1").await?;
    let op = env.operator()?;
    eventually_secs("operator namespace", 60, || {
        let c = env.client().clone();
        async move {
            Api::<k8s_openapi::api::core::v1::Namespace>::all(c)
                .get_opt(NS)
                .await
                .ok()
                .flatten()
        }
    })
    .await?;
    let cms = Api::<ConfigMap>::namespaced(env.client().clone(), NS);
    let cm = |name: &str, n: u64| -> Res<ConfigMap> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS}, "data": {"ts": ts(n)}
        }))?)
    };
    cms.create(&PostParams::default(), &cm("four", 4)?).await?;
    let mut policy = fixture("clusterpolicy-minimal.yaml")?;
    policy["spec"]["devicePlugin"] = json!({"config": {"name": "four", "default": "ts"}});
    let name = env
        .create_policy(policy)
        .await?
        .metadata
        .name
        .unwrap_or_default();
    wait_allocatable(env.client(), "4", 240).await?;
    eventually_secs("ready", 120, || async {
        (policy_state(env.client(), &name).await.as_deref() == Some("ready")).then_some(())
    })
    .await?;

    // A ConfigMap that does not exist: refused, capacity unchanged.
    let point = |cm: &'static str| json!({"spec": {"devicePlugin": {"config": {"name": cm, "default": "ts"}}}});
    policies(env.client())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&point("later")),
        )
        .await?;
    let m = wait_refused(
        env.client(),
        &name,
        "ConfigMap gpu-operator/later does not exist",
    )
    .await?;
    assert!(m.starts_with("spec.devicePlugin.config.name"), "{m}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(allocatable(env.client()).await?, "4", "capacity changed");

    // Created: converges to the new config.
    cms.create(&PostParams::default(), &cm("later", 2)?).await?;
    wait_allocatable(env.client(), "2", 120).await?;
    eventually_secs("ready again", 120, || async {
        (policy_state(env.client(), &name).await.as_deref() == Some("ready")).then_some(())
    })
    .await?;

    // A deliberate edit of the ConfigMap in use: applied in place, with an event on the Node.
    let patch = json!({"data": {"ts": ts(3)}});
    cms.patch("later", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_allocatable(env.client(), "3", 120).await?;
    let events =
        Api::<k8s_openapi::api::core::v1::Event>::namespaced(env.client().clone(), "default");
    eventually_secs("DevicePluginConfigApplied on the Node", 60, || async {
        let list = events.list(&Default::default()).await?;
        let applied: Vec<String> = list
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("DevicePluginConfigApplied"))
            .filter(|e| e.involved_object.name.as_deref() == Some("l4-0"))
            .filter_map(|e| e.message)
            .collect();
        anyhow::Ok(if applied.iter().any(|m| m.contains("nvidia.com/gpu 3")) {
            Look::Done(())
        } else {
            Look::Seen(format!("{applied:?}"))
        })
    })
    .await?;

    // A huge replica count in the ConfigMap the plugins read: the operator refuses and the
    // plugins keep their last good config.
    let patch = json!({"data": {"ts": ts(100_000_000)}});
    cms.patch("later", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let m = wait_refused(env.client(), &name, "replicas: must be <= 1024").await?;
    assert!(m.contains("got 100000000"), "{m}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(allocatable(env.client()).await?, "3", "capacity changed");
    op.stop().await;
    Ok(())
}

/// `app` label -> names of its Running pods in the operator namespace.
async fn running_apps(client: &kube::Client) -> Res<std::collections::BTreeMap<String, usize>> {
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await?;
    let mut out = std::collections::BTreeMap::new();
    for p in pods.items {
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let app = p.metadata.labels.and_then(|mut l| l.remove("app"));
        if let (true, Some(app)) = (running, app) {
            *out.entry(app).or_default() += 1;
        }
    }
    Ok(out)
}

/// Issues #37 and #44: a policy naming a ConfigMap that does not exist yet holds back only the
/// device plugin; the status follows the ConfigMap within seconds (it is watched), and
/// deleting the policy garbage-collects every DaemonSet it owns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_plugin_config_holds_back_only_the_device_plugin() -> Res {
    let env = Env::start("1xL4:1").await?;
    let op = env.operator()?;
    let mut policy = fixture("clusterpolicy-minimal.yaml")?;
    policy["spec"]["devicePlugin"] = json!({"config": {"name": "later", "default": "ts"}});
    let name = env
        .create_policy(policy)
        .await?
        .metadata
        .name
        .unwrap_or_default();
    let m = wait_refused(
        env.client(),
        &name,
        "ConfigMap gpu-operator/later does not exist",
    )
    .await?;
    assert!(m.contains("held back: [state-device-plugin"), "{m}");
    // Everything else rolls out: the driver, the toolkit, the exporter, GFD.
    let wanted = [
        names::app::DRIVER,
        "nvidia-container-toolkit-daemonset",
        names::app::DCGM_EXPORTER,
        names::app::GPU_FEATURE_DISCOVERY,
    ];
    eventually_secs("the other operands running", 240, || async {
        let apps = running_apps(env.client()).await?;
        anyhow::Ok(if wanted.iter().all(|a| apps.contains_key(*a)) {
            Look::Done(())
        } else {
            Look::Seen(format!("running {apps:?}"))
        })
    })
    .await?;
    // The device plugin waits for its config: no DaemonSet, no capacity.
    let dss = Api::<DaemonSet>::namespaced(env.client().clone(), NS);
    assert!(
        dss.get_opt(names::app::DEVICE_PLUGIN).await?.is_none(),
        "the device plugin was deployed without its config"
    );
    let none = allocatable(env.client()).await?;
    assert!(matches!(none.as_str(), "" | "0"), "allocatable {none:?}");

    // Created: the device plugin comes with the shared capacity, GFD labels it, ready.
    let cms = Api::<ConfigMap>::namespaced(env.client().clone(), NS);
    let cm = |n: u64| -> Res<ConfigMap> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": "later", "namespace": NS}, "data": {"ts": ts(n)}
        }))?)
    };
    cms.create(&PostParams::default(), &cm(4)?).await?;
    wait_allocatable(env.client(), "4", 240).await?;
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(env.client().clone());
    eventually_secs("GFD labels the replicas", 120, || async {
        let l = nodes.get("l4-0").await?.metadata.labels.unwrap_or_default();
        let r = l.get(names::LABEL_GPU_REPLICAS).cloned();
        anyhow::Ok(if r.as_deref() == Some("4") {
            Look::Done(())
        } else {
            Look::Seen(format!("replicas label {r:?}"))
        })
    })
    .await?;
    let ready = || async {
        (policy_state(env.client(), &name).await.as_deref() == Some("ready")).then_some(())
    };
    eventually_secs("ready", 240, ready).await?;
    // Settled: the next round is the 300 s resync unless something wakes the operator.
    wait_quiet("the operator's writes", 3, 120, || op.api_writes()).await?;

    // Deleted: notReady within seconds (not at the next resync), naming it; capacity stays.
    cms.delete("later", &Default::default()).await?;
    let not_ready = |needle: &'static str| {
        let client = env.client().clone();
        let name = name.clone();
        move || {
            let (client, name) = (client.clone(), name.clone());
            async move {
                let state = policy_state(&client, &name).await;
                let error = condition(&client, &name, "Error").await;
                let named = error.as_ref().is_some_and(|(_, _, m)| m.contains(needle));
                if state.as_deref() == Some("notReady") && named {
                    Look::Done(())
                } else {
                    Look::Seen(format!("state {state:?}, Error {error:?}"))
                }
            }
        }
    };
    eventually_secs(
        "notReady after the ConfigMap is deleted",
        10,
        not_ready("ConfigMap gpu-operator/later does not exist"),
    )
    .await?;
    assert_eq!(allocatable(env.client()).await?, "4", "capacity changed");
    // Back, then made invalid in place: notReady within seconds again.
    cms.create(&PostParams::default(), &cm(4)?).await?;
    eventually_secs("ready again", 60, ready).await?;
    wait_quiet("the operator's writes", 3, 120, || op.api_writes()).await?;
    cms.patch(
        "later",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"ts": ts(0)}})),
    )
    .await?;
    eventually_secs(
        "notReady after replicas: 0",
        10,
        not_ready("replicas: must be >= 2, got 0"),
    )
    .await?;

    // The policy deleted: the DaemonSets it owns are garbage-collected.
    let owned = || async {
        let list = dss.list(&Default::default()).await?;
        anyhow::Ok(
            list.items
                .into_iter()
                .filter_map(|d| d.metadata.name)
                .collect::<Vec<_>>(),
        )
    };
    assert!(!owned().await?.is_empty());
    policies(env.client())
        .delete(&name, &Default::default())
        .await?;
    eventually_secs("every operand DaemonSet gone", 60, || async {
        let left = owned().await?;
        anyhow::Ok(if left.is_empty() {
            Look::Done(())
        } else {
            Look::Seen(format!("DaemonSets left: {left:?}"))
        })
    })
    .await?;
    op.stop().await;
    Ok(())
}
