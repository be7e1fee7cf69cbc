//! End to end in the sim: bare GPU nodes + one upstream-shaped ClusterPolicy -> labelled GPU
//! nodes, ordered operand pods, allocatable GPUs, `status.state=ready`; time-slicing from the
//! policy; self-healing; an invalid spec as a condition that changes nothing else.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gantry_api::names::{self, operand};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

const GPU_NODES: [&str; 4] = ["h100-80gb-0", "h100-80gb-1", "h100-80gb-2", "l4-0"];
const CPU_NODES: [&str; 2] = ["cpu-0", "cpu-1"];
const SPEC: &str = "3xH100-80GB:8,1xL4:1,2xcpu";

async fn node_labels(client: &kube::Client, name: &str) -> BTreeMap<String, String> {
    Api::<Node>::all(client.clone())
        .get(name)
        .await
        .ok()
        .and_then(|n| n.metadata.labels)
        .unwrap_or_default()
}

fn deploy(o: &str) -> String {
    format!("{}{o}", names::LABEL_DEPLOY_PREFIX)
}

/// A small policy for the cheaper tests: the upstream minimal fixture plus `extra` spec keys.
fn minimal_with(extra: serde_json::Value) -> Res<serde_json::Value> {
    let mut v = fixture("clusterpolicy-minimal.yaml")?;
    if let (Some(spec), Some(extra)) = (v["spec"].as_object_mut(), extra.as_object()) {
        for (k, val) in extra {
            spec.insert(k.clone(), val.clone());
        }
    }
    Ok(v)
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

/// `startedAt` of the first running main container of the pod of DaemonSet app `app` on `node`.
async fn started_at(client: &kube::Client, app: &str, node: &str) -> Option<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .ok()?;
    let p = pods
        .items
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))?;
    let v = serde_json::to_value(p.status?).ok()?;
    v.pointer("/containerStatuses/0/state/running/startedAt")
        .and_then(|s| s.as_str())
        .map(str::to_string)
}

/// `finishedAt` of init container `init` of the pod of app `app` on `node`.
async fn init_finished(client: &kube::Client, app: &str, node: &str, init: &str) -> Option<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .ok()?;
    let p = pods
        .items
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))?;
    let v = serde_json::to_value(p.status?).ok()?;
    v.get("initContainerStatuses")?
        .as_array()?
        .iter()
        .find(|c| c["name"] == init)?
        .pointer("/state/terminated/finishedAt")
        .and_then(|s| s.as_str())
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_gpu_nodes_to_ready_cluster_with_upstream_policy() -> Res {
    let env = Env::start(SPEC).await?;
    let op = env.operator()?;
    // The policy names the device-plugin ConfigMap `time-slicing-config` (default key
    // `any`); the device plugin waits while it is missing (issues #24, #37), so create it,
    // here with a config that shares nothing.
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
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "time-slicing-config", "namespace": NS},
        "data": {"any": "version: v1\n"}
    }))?;
    Api::<ConfigMap>::namespaced(env.client().clone(), NS)
        .create(&PostParams::default(), &cm)
        .await?;
    let policy = fixture("clusterpolicy-helm-defaults.yaml")?;
    let name = policy["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    env.create_policy(policy).await?;

    wait_allocatable(env.client(), "8 8 8 1", 240).await?;
    eventually_secs(
        "status.state=ready with a Ready=True/Reconciled condition",
        120,
        || async {
            let state = policy_state(env.client(), &name).await;
            let ready = condition(env.client(), &name, "Ready").await;
            let done = state.as_deref() == Some("ready")
                && ready
                    .as_ref()
                    .is_some_and(|(s, r, _)| s == "True" && r == "Reconciled");
            if done {
                Look::Done(())
            } else {
                Look::Seen(format!("state {state:?}, Ready condition {ready:?}"))
            }
        },
    )
    .await?;

    // Labels: GPU nodes only.
    for n in GPU_NODES {
        eventually_secs(&format!("{n}: GPU and deploy labels"), 60, || async {
            let l = node_labels(env.client(), n).await;
            let want = [
                names::LABEL_GPU_PRESENT.to_string(),
                deploy(operand::DEVICE_PLUGIN),
                deploy(operand::CONTAINER_TOOLKIT),
                deploy(operand::OPERATOR_VALIDATOR),
            ];
            let wrong: Vec<(&String, Option<&String>)> = want
                .iter()
                .map(|k| (k, l.get(k)))
                .filter(|(_, v)| v.map(String::as_str) != Some("true"))
                .collect();
            if wrong.is_empty() {
                Look::Done(())
            } else {
                Look::Seen(format!("not \"true\": {wrong:?}"))
            }
        })
        .await?;
    }
    for n in CPU_NODES {
        let l = node_labels(env.client(), n).await;
        assert!(
            !l.keys().any(|k| k.starts_with("nvidia.com/gpu")),
            "{n} got GPU labels: {l:?}"
        );
    }
    // Operand pods: on GPU nodes only.
    let pods = Api::<Pod>::namespaced(env.client().clone(), NS)
        .list(&Default::default())
        .await?;
    assert!(!pods.items.is_empty());
    for p in &pods.items {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        assert!(GPU_NODES.contains(&node.as_str()), "operand pod on {node}");
    }
    // Dependency order on every GPU node: the validator's toolkit check finished before the
    // device plugin started (its init container waits on `toolkit-ready`), and the
    // validator's plugin check (which needs allocatable GPUs) finished after it started.
    // Init containers run once per pod, so restarts of main containers do not blur this.
    for n in GPU_NODES {
        let v = names::app::OPERATOR_VALIDATOR;
        let (dp, t, p) = eventually_secs(
            &format!("{n}: device plugin start and validator init times"),
            60,
            || async {
                let dp = started_at(env.client(), names::app::DEVICE_PLUGIN, n).await;
                let toolkit_ok = init_finished(env.client(), v, n, "toolkit-validation").await;
                let plugin_ok = init_finished(env.client(), v, n, "plugin-validation").await;
                match (dp, toolkit_ok, plugin_ok) {
                    (Some(dp), Some(t), Some(p)) => Look::Done((dp, t, p)),
                    seen => Look::Seen(format!(
                        "(plugin started, toolkit validated, plugin validated) = {seen:?}"
                    )),
                }
            },
        )
        .await?;
        assert!(
            t <= dp,
            "{n}: toolkit validated {t}, device plugin started {dp}"
        );
        assert!(
            dp <= p,
            "{n}: device plugin started {dp}, plugin validated {p}"
        );
    }
    op.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_slicing_config_from_the_policy_and_a_per_node_choice() -> Res {
    let env = Env::start(SPEC).await?;
    let op = env.operator()?;
    let ts = |n: u32| {
        format!(
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {n}\n"
        )
    };
    // The namespace exists once the operator started.
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
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "time-slicing-config", "namespace": NS},
        "data": {"four": ts(4), "two": ts(2)}
    }))?;
    Api::<ConfigMap>::namespaced(env.client().clone(), NS)
        .create(&PostParams::default(), &cm)
        .await?;
    env.create_policy(minimal_with(json!({
        "devicePlugin": {"config": {"name": "time-slicing-config", "default": "four"}}
    }))?)
    .await?;
    wait_allocatable(env.client(), "32 32 32 4", 240).await?;

    // One node picks the other named config.
    let patch = json!({"metadata": {"labels": {names::LABEL_DEVICE_PLUGIN_CONFIG: "two"}}});
    Api::<Node>::all(env.client().clone())
        .patch(
            "h100-80gb-1",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    wait_allocatable(env.client(), "32 16 32 4", 120).await?;
    op.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_daemonset_and_removed_label_are_restored_and_bad_spec_changes_nothing() -> Res {
    let env = Env::start("2xL4:1,1xcpu").await?;
    let op = env.operator()?;
    let policy = env.create_policy(minimal_with(json!({}))?).await?;
    let name = policy.metadata.name.clone().unwrap_or_default();
    wait_allocatable(env.client(), "1 1", 240).await?;
    let dss = Api::<DaemonSet>::namespaced(env.client().clone(), NS);

    // Deleted device-plugin DaemonSet: recreated (a new uid).
    let dp_name = eventually_secs("device plugin DaemonSet", 60, || {
        let dss = dss.clone();
        async move {
            let l = dss
                .list(&ListParams::default().labels(&format!("app={}", names::app::DEVICE_PLUGIN)))
                .await
                .ok()?;
            l.items.first().map(|d| {
                (
                    d.metadata.name.clone().unwrap_or_default(),
                    d.metadata.uid.clone(),
                )
            })
        }
    })
    .await?;
    dss.delete(&dp_name.0, &DeleteParams::default()).await?;
    eventually_secs("device plugin DaemonSet recreated", 60, || {
        let dss = dss.clone();
        let (n, uid) = dp_name.clone();
        async move {
            let d = dss.get_opt(&n).await.ok()??;
            (d.metadata.uid != uid).then_some(())
        }
    })
    .await?;

    // Removed deploy label: restored.
    let nodes = Api::<Node>::all(env.client().clone());
    let key = deploy(operand::DEVICE_PLUGIN);
    let patch = json!({"metadata": {"labels": {key.clone(): null}}});
    nodes
        .patch("l4-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    eventually_secs("deploy label restored", 60, || {
        let c = env.client().clone();
        let key = key.clone();
        async move {
            (node_labels(&c, "l4-0").await.get(&key).map(String::as_str) == Some("true"))
                .then_some(())
        }
    })
    .await?;
    // A user's `false` is respected.
    let patch = json!({"metadata": {"labels": {key.clone(): "false"}}});
    nodes
        .patch("l4-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        node_labels(env.client(), "l4-1")
            .await
            .get(&key)
            .map(String::as_str),
        Some("false")
    );

    // Invalid spec: a condition naming the field; no other write.
    wait_quiet("the operator's writes", 3, 240, || op.metrics.writes()).await?;
    let before = op.metrics.writes();
    let rv_before = dss
        .list(&Default::default())
        .await?
        .items
        .iter()
        .map(|d| d.metadata.resource_version.clone())
        .collect::<Vec<_>>();
    let labels_before = node_labels(env.client(), "l4-0").await;
    // A value outside the CRD's enum never reaches the operator: the API answers 422 with
    // the field path, as a real one does.
    let bad = json!({"spec": {"mig": {"strategy": "bogus"}}});
    let refused = policies(env.client())
        .patch(&name, &PatchParams::default(), &Patch::Merge(&bad))
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("spec.mig.strategy")),
        "{refused:?}"
    );
    // A spec the schema accepts but the operator refuses (NRI needs CDI and the toolkit).
    let bad = json!({"spec": {"toolkit": {"enabled": false}, "cdi": {"enabled": true, "nriPluginEnabled": true}}});
    policies(env.client())
        .patch(&name, &PatchParams::default(), &Patch::Merge(&bad))
        .await?;
    let msg = eventually_secs(
        "an Error condition naming cdi.nriPluginEnabled, state notReady",
        60,
        || async {
            let error = condition(env.client(), &name, "Error").await;
            let state = policy_state(env.client(), &name).await;
            match &error {
                Some((s, _, m))
                    if s == "True"
                        && m.contains("nriPluginEnabled")
                        && state.as_deref() == Some("notReady") =>
                {
                    Look::Done(m.clone())
                }
                _ => Look::Seen(format!("Error condition {error:?}, state {state:?}")),
            }
        },
    )
    .await?;
    assert!(msg.contains("spec.cdi.nriPluginEnabled"), "{msg}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        op.metrics.writes() - before,
        1,
        "only the status may be written"
    );
    let rv_after = dss
        .list(&Default::default())
        .await?
        .items
        .iter()
        .map(|d| d.metadata.resource_version.clone())
        .collect::<Vec<_>>();
    assert_eq!(
        rv_before, rv_after,
        "DaemonSets changed under an invalid spec"
    );
    assert_eq!(labels_before, node_labels(env.client(), "l4-0").await);
    op.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oldest_policy_wins_and_the_others_are_ignored() -> Res {
    let env = Env::start("1xL4:1").await?;
    let op = env.operator()?;
    env.create_policy(minimal_with(json!({}))?).await?;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut second = minimal_with(json!({}))?;
    second["metadata"]["name"] = json!("second");
    env.create_policy(second).await?;
    eventually_secs("second ignored", 60, || {
        let c = env.client().clone();
        async move { (policy_state(&c, "second").await.as_deref() == Some("ignored")).then_some(()) }
    })
    .await?;
    let first = policy_state(env.client(), "minimal").await;
    assert_ne!(first.as_deref(), Some("ignored"));
    op.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_and_jsonpath() -> Res {
    const KUBECTL: &str = "/usr/bin/kubectl";
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return Ok(());
    }
    let env = Env::start("2xL4:1,1xcpu").await?;
    let op = env.operator()?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("cp.yaml");
    std::fs::write(
        &file,
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../api/tests/fixtures/clusterpolicy-minimal.yaml"),
        )?,
    )?;
    let kubectl = |args: Vec<String>| {
        let kc = env.cp().kubeconfig_path().to_path_buf();
        let home = dir.path().to_path_buf();
        async move {
            let out = tokio::process::Command::new(KUBECTL)
                .arg("--kubeconfig")
                .arg(kc)
                .args(args)
                .env("HOME", home)
                .output()
                .await
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        }
    };
    let applied = kubectl(vec![
        "apply".into(),
        "-f".into(),
        file.display().to_string(),
    ])
    .await;
    assert!(
        applied.is_some_and(|o| o.contains("clusterpolicy")),
        "kubectl apply failed"
    );
    eventually_secs("jsonpath prints 1 1", 240, || {
        let k = kubectl;
        async move {
            let out = k(vec![
                "get".into(),
                "nodes".into(),
                "-o".into(),
                r"jsonpath={.items[*].status.allocatable.nvidia\.com/gpu}".into(),
            ])
            .await?;
            (out.trim() == "1 1").then_some(())
        }
    })
    .await?;
    eventually_secs("kubectl shows ready", 120, || {
        let k = kubectl;
        async move {
            let out = k(vec![
                "get".into(),
                "clusterpolicy".into(),
                "minimal".into(),
                "-o".into(),
                "jsonpath={.status.state}".into(),
            ])
            .await?;
            (out.trim() == "ready").then_some(())
        }
    })
    .await?;
    op.stop().await;
    Ok(())
}

/// `psa.enabled` (upstream's operator does the same): the operator's namespace gets the three
/// Pod Security Admission labels at `privileged`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psa_enabled_labels_the_namespace_privileged() -> Res {
    let env = Env::start("1xL4:1").await?;
    let op = env.operator()?;
    env.create_policy(minimal_with(json!({"psa": {"enabled": true}}))?)
        .await?;
    eventually_secs("namespace labelled privileged", 60, || {
        let c = env.client().clone();
        async move {
            let ns = Api::<k8s_openapi::api::core::v1::Namespace>::all(c)
                .get(NS)
                .await
                .ok()?;
            let labels = ns.metadata.labels.unwrap_or_default();
            names::PSA_LABELS
                .iter()
                .all(|l| labels.get(*l).map(String::as_str) == Some("privileged"))
                .then_some(())
        }
    })
    .await?;
    op.stop().await;
    Ok(())
}
