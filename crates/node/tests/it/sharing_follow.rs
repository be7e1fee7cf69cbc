//! The device plugin README's MPS config, unchanged (no `flags.mpsRoot`), in the sim: with
//! `MPS_ROOT` set as the operator sets it, the plugin advertises 10 replicas per GPU and
//! discovery labels say `mps`/10. Switching the node's config label to a time-slicing config
//! moves both; discovery runs with `--sleep-interval infinite`, so only a config change can
//! have relabelled it (before, labels followed only on the next 60 s pass).

use gantry_api::names;
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const NS: &str = "gpu-operator";
const NODE: &str = "h100-80gb-0";

fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../gantry/tests/fixtures/upstream")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn ds(name: &str, args: &[&str], env: serde_json::Value) -> Res<DaemonSet> {
    // As on a node, the agents learn their Node from the downward API.
    let mut env = env;
    if let Some(list) = env.as_array_mut() {
        list.push(
            json!({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}),
        );
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"nodeSelector": {names::NFD_GPU_LABELS[0]: "true"},
                                       "containers": [{"name": name, "image": "ghcr.io/gantry/gantry:dev",
                                                       "command": ["gantry"], "args": args, "env": env}]}}}
    }))?)
}

async fn wait_for(nodes: &Api<Node>, what: &str, want: [(&str, &str); 3]) -> Res<()> {
    eventually_secs(what, 90, || async {
        let n = nodes.get(NODE).await?;
        let labels = n.metadata.labels.clone().unwrap_or_default();
        let alloc = n
            .status
            .and_then(|s| s.allocatable)
            .unwrap_or_default()
            .get(names::RESOURCE_GPU)
            .map(|q| q.0.clone());
        let now = [
            alloc,
            labels.get("nvidia.com/gpu.sharing-strategy").cloned(),
            labels.get("nvidia.com/gpu.replicas").cloned(),
        ];
        let done = now
            .iter()
            .zip(want)
            .all(|(got, (_, w))| got.as_deref() == Some(w));
        Ok::<_, kube::Error>(if done {
            Look::Done(())
        } else {
            Look::Seen(format!("(allocatable, strategy, replicas) = {now:?}"))
        })
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_mps_config_advertises_replicas_and_labels_follow_a_config_change() -> Res<()> {
    let c = Cluster::builder()
        .nodes("1xH100-80GB:2")
        .controllers()
        .namespace(NS)
        .start()
        .await?;
    let client = c.client().clone();
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "plugin-configs", "namespace": NS},
        "data": {"mps-ten": fixture("device-plugin-mps.yaml"),
                 "ts-four": fixture("device-plugin-time-slicing.yaml")}
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &cm)
        .await?;
    let cm_ref = format!("{NS}/plugin-configs");
    let dss = Api::<DaemonSet>::namespaced(client.clone(), NS);
    let common = ["--config-map", &cm_ref, "--default-config", "mps-ten"];
    let mut dp_args = vec!["node", "device-plugin"];
    dp_args.extend(common);
    dss.create(
        &PostParams::default(),
        &ds(
            names::app::DEVICE_PLUGIN,
            &dp_args,
            json!([{"name": "MPS_ROOT", "value": "/run/nvidia/mps"}]),
        )?,
    )
    .await?;
    let mut gfd_args = vec!["node", "discovery", "--sleep-interval", "infinite"];
    gfd_args.extend(common);
    dss.create(
        &PostParams::default(),
        &ds(names::app::GPU_FEATURE_DISCOVERY, &gfd_args, json!([]))?,
    )
    .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    wait_for(
        &nodes_api,
        "MPS: 20 devices, strategy mps, 10 replicas",
        [("alloc", "20"), ("strategy", "mps"), ("replicas", "10")],
    )
    .await?;
    let patch = json!({"metadata": {"labels": {names::LABEL_DEVICE_PLUGIN_CONFIG: "ts-four"}}});
    nodes_api
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_for(
        &nodes_api,
        "time-slicing: 8 devices, strategy time-slicing, 4 replicas",
        [
            ("alloc", "8"),
            ("strategy", "time-slicing"),
            ("replicas", "4"),
        ],
    )
    .await?;
    Ok(())
}
