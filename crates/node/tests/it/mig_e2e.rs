//! The MIG manager in the sim, end to end: a DaemonSet runs `gantry node mig-manager` on the
//! H100 node beside the device plugin (mixed strategy). Setting `nvidia.com/mig.config` makes
//! it pause the plugin (deploy label), repartition the simulated GPUs, bring the plugin back,
//! and report `success`; the node then advertises the MIG devices. A layout the GPUs cannot
//! hold ends in `failed` with the reason on the Node, and nothing changes.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use gantry_api::mig_parted::default_config_yaml;
use gantry_api::names;
use gantry_gpu::layout::{self, MigLayout};
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const NS: &str = "gpu-operator";
const NODE: &str = "h100-80gb-0";

fn label(n: &Node, key: &str) -> Option<String> {
    n.metadata.labels.as_ref()?.get(key).cloned()
}

fn allocatable(n: &Node, res: &str) -> Option<String> {
    Some(n.status.as_ref()?.allocatable.as_ref()?.get(res)?.0.clone())
}

async fn create<K>(api: &Api<K>, v: serde_json::Value) -> Res<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v)?;
    api.create(&PostParams::default(), &obj).await?;
    Ok(())
}

fn daemonset(
    name: &str,
    selector: (&str, &str),
    args: &[&str],
    env: serde_json::Value,
) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"nodeSelector": {selector.0: selector.1},
                                       "containers": [{"name": name, "image": "ghcr.io/gantry/gantry:dev",
                                                       "command": ["gantry"], "args": args, "env": env}]}}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_config_label_repartitions_the_node_and_the_plugin_advertises_mig_devices() -> Res<()> {
    let c = Cluster::builder()
        .nodes("1xH100-80GB:2")
        .controllers()
        .namespace(NS)
        .start()
        .await?;
    let client = c.client().clone();
    let sim = c.sim()?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let deploy_dp = format!("{}device-plugin", names::LABEL_DEPLOY_PREFIX);
    // What the operator would do: enable the device plugin on the GPU node.
    nodes_api
        .patch(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {&deploy_dp: "true"}}})),
        )
        .await?;
    create(
        &Api::<ConfigMap>::namespaced(client.clone(), NS),
        json!({"metadata": {"name": names::CONFIG_MAP_DEFAULT_MIG_PARTED, "namespace": NS},
               "data": {names::MIG_PARTED_CONFIG_KEY: default_config_yaml()}}),
    )
    .await?;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    create(
        &ds_api,
        daemonset(
            names::app::DEVICE_PLUGIN,
            (&deploy_dp, "true"),
            &["node", "device-plugin"],
            json!([{"name": "MIG_STRATEGY", "value": "mixed"}]),
        ),
    )
    .await?;
    let cm_ref = format!("{NS}/{}", names::CONFIG_MAP_DEFAULT_MIG_PARTED);
    create(
        &ds_api,
        daemonset(
            names::app::MIG_MANAGER,
            (names::NFD_GPU_LABELS[0], "true"),
            &["node", "mig-manager", "--config-map", &cm_ref],
            json!([{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]),
        ),
    )
    .await?;
    eventually_secs("2 whole GPUs from the plugin", 60, || async {
        nodes_api
            .get(NODE)
            .await
            .is_ok_and(|n| allocatable(&n, names::RESOURCE_GPU).as_deref() == Some("2"))
    })
    .await?;

    // Record every value the state and the plugin's deploy label take.
    let seen: Arc<Mutex<BTreeSet<(String, String)>>> = Arc::default();
    let recorder = {
        let seen = seen.clone();
        let api = nodes_api.clone();
        let keys = [names::LABEL_MIG_CONFIG_STATE.to_string(), deploy_dp.clone()];
        tokio::spawn(async move {
            let cfg = watcher::Config::default().fields(&format!("metadata.name={NODE}"));
            let mut s = watcher(api, cfg).applied_objects().boxed();
            while let Some(Ok(n)) = s.next().await {
                let mut seen = seen.lock().unwrap();
                for k in &keys {
                    if let Some(v) = label(&n, k) {
                        seen.insert((k.clone(), v));
                    }
                }
            }
        })
    };
    // The recorder must be watching before the change starts, or it could miss `pending`.
    eventually_secs(
        "the recorder sees the plugin's deploy label",
        60,
        || async {
            seen.lock()
                .unwrap()
                .contains(&(deploy_dp.clone(), "true".to_string()))
        },
    )
    .await?;

    nodes_api
        .patch(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"labels": {names::LABEL_MIG_CONFIG: "all-balanced"}}}),
            ),
        )
        .await?;
    // The state label, the plugin's label and the kubelet's allocatable are separate writes:
    // wait for all of them (whole GPUs are gone under the mixed strategy).
    eventually_secs(
        "mig.config.state=success, the plugin label restored, the MIG devices advertised and no whole GPUs",
        60,
        || async {
            let n = nodes_api.get(NODE).await?;
            let now = (
                label(&n, names::LABEL_MIG_CONFIG_STATE),
                label(&n, &deploy_dp),
                allocatable(&n, names::RESOURCE_GPU),
                allocatable(&n, "nvidia.com/mig-1g.10gb"),
                allocatable(&n, "nvidia.com/mig-2g.20gb"),
                allocatable(&n, "nvidia.com/mig-3g.40gb"),
            );
            let done = now.0.as_deref() == Some("success")
                && now.1.as_deref() == Some("true")
                && matches!(now.2.as_deref(), None | Some("0"))
                && now.3.as_deref() == Some("4")
                && now.4.as_deref() == Some("2")
                && now.5.as_deref() == Some("2");
            Ok::<_, kube::Error>(if done {
                Look::Done(())
            } else {
                Look::Seen(format!(
                    "(state, plugin label, gpu, 1g, 2g, 3g) = {now:?}"
                ))
            })
        },
    )
    .await?;
    let backend = sim
        .node(NODE)
        .and_then(|s| s.backend.clone())
        .ok_or("no backend")?;
    let balanced = MigLayout::enabled([("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)]);
    for gpu in 0..2 {
        assert_eq!(layout::current(backend.as_ref(), gpu)?, balanced);
    }
    // The recorder's watch may lag the reads above: wait until it has caught up to `success`.
    eventually_secs(
        "the recorder saw pending, the paused plugin and success",
        60,
        || async {
            let seen = seen.lock().unwrap();
            let state = |v: &str| seen.contains(&(names::LABEL_MIG_CONFIG_STATE.into(), v.into()));
            if state("success") {
                Look::Done(())
            } else {
                Look::Seen(format!("{seen:?}"))
            }
        },
    )
    .await?;
    {
        let seen = seen.lock().unwrap();
        assert!(
            seen.contains(&(names::LABEL_MIG_CONFIG_STATE.into(), "pending".into())),
            "{seen:?}"
        );
        assert!(
            seen.contains(&(
                deploy_dp.clone(),
                names::DEPLOY_PAUSED_FOR_MIG_CHANGE.into()
            )),
            "the plugin was paused during the change: {seen:?}"
        );
    }

    // A layout the GPUs cannot hold, from Gantry's inline-layouts ConfigMap: refused up front.
    let bad = "version: v1\nmig-configs:\n  gantry-mcp-bad:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"4g.40gb\": 1, \"3g.40gb\": 1, \"1g.10gb\": 1}\n";
    create(
        &Api::<ConfigMap>::namespaced(client.clone(), NS),
        json!({"metadata": {"name": names::CONFIG_MAP_MIG_CUSTOM_LAYOUTS, "namespace": NS},
               "data": {names::MIG_PARTED_CONFIG_KEY: bad}}),
    )
    .await?;
    seen.lock().unwrap().clear();
    nodes_api
        .patch(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"labels": {names::LABEL_MIG_CONFIG: "gantry-mcp-bad"}}}),
            ),
        )
        .await?;
    let why = eventually_secs("mig.config.state=failed", 60, || async {
        let n = nodes_api.get(NODE).await?;
        let state = label(&n, names::LABEL_MIG_CONFIG_STATE);
        Ok::<_, kube::Error>(if state.as_deref() == Some("failed") {
            // Written in the same patch as the state label.
            Look::Done(
                n.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(names::ANNOTATION_MIG_CONFIG_ERROR))
                    .cloned()
                    .unwrap_or_default(),
            )
        } else {
            Look::Seen(format!("mig.config.state={state:?}"))
        })
    })
    .await?;
    assert!(
        why.contains("cannot hold") && why.contains("GPU 0"),
        "{why}"
    );
    for gpu in 0..2 {
        assert_eq!(
            layout::current(backend.as_ref(), gpu)?,
            balanced,
            "nothing touched"
        );
    }
    // Only a check once the recorder has caught up with `failed` means "nothing was paused".
    eventually_secs("the recorder sees mig.config.state=failed", 60, || async {
        let seen = seen.lock().unwrap();
        if seen.contains(&(names::LABEL_MIG_CONFIG_STATE.into(), "failed".into())) {
            Look::Done(())
        } else {
            Look::Seen(format!("{seen:?}"))
        }
    })
    .await?;
    assert!(
        !seen.lock().unwrap().contains(&(
            deploy_dp.clone(),
            names::DEPLOY_PAUSED_FOR_MIG_CHANGE.into()
        )),
        "a refused layout pauses nothing"
    );
    // The event is written after the state label, by a separate request: wait for it.
    let events_api = Api::<Event>::namespaced(client.clone(), "default");
    eventually_secs(
        "a MigConfigFailed Node event naming the error",
        60,
        || async {
            let events = events_api.list(&ListParams::default()).await?;
            let found = events.items.iter().any(|e| {
                e.reason.as_deref() == Some("MigConfigFailed")
                    && e.involved_object.name.as_deref() == Some(NODE)
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.contains("cannot hold"))
            });
            Ok::<_, kube::Error>(if found {
                Look::Done(())
            } else {
                Look::Seen(format!(
                    "events: {:?}",
                    events
                        .items
                        .iter()
                        .map(|e| (
                            e.reason.clone(),
                            e.involved_object.name.clone(),
                            e.message.clone()
                        ))
                        .collect::<Vec<_>>()
                ))
            })
        },
    )
    .await?;
    recorder.abort();
    Ok(())
}
