//! Issue #24: a device-plugin config change that would reduce capacity is surfaced, not
//! silent. Pointing `devicePlugin.config.name` at a ConfigMap that does not exist, or at one
//! with a huge `replicas`, leaves the device plugins on their last good config (allocatable
//! unchanged), the ClusterPolicy `notReady` with a condition naming the problem; creating or
//! fixing the ConfigMap converges.

use crate::support;

use std::time::Duration;

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
