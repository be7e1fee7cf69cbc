//! Upstream's default mig-parted config, unchanged, drives the MIG manager in the sim: the
//! GPU Operator-shaped `default-mig-parted-config` ConfigMap (every GPU family's configs, most
//! entries without a device filter, profiles no H100 or A100 has) is applied as is, and layouts
//! chosen from it land on an H100 and an A100-40GB node. `all-balanced` has entries for GB200,
//! B200, H200 … whose profiles those GPUs lack: they are not theirs, so they are ignored.

use gantry_api::names;
use gantry_gpu::layout::{self, MigLayout};
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const NS: &str = "gpu-operator";

fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../gantry/tests/fixtures/upstream")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

async fn select(nodes: &Api<Node>, node: &str, config: &str) -> Res<()> {
    let patch = json!({"metadata": {"labels": {names::LABEL_MIG_CONFIG: config}}});
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Create `cm` and a MIG manager DaemonSet on the GPU nodes that reads it.
async fn start_mig_manager(client: &kube::Client, cm: &ConfigMap) -> Res<()> {
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), cm)
        .await?;
    let cm_ref = format!("{NS}/{}", cm.metadata.name.as_deref().unwrap_or_default());
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": names::app::MIG_MANAGER, "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "mm"}},
                 "template": {"metadata": {"labels": {"app": "mm"}},
                              "spec": {"nodeSelector": {names::NFD_GPU_LABELS[0]: "true"},
                                       "containers": [{"name": "mm", "image": "ghcr.io/gantry/gantry:dev",
                                                       "command": ["gantry"],
                                                       "args": ["node", "mig-manager", "--config-map", &cm_ref],
                                                       "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]}}}
    }))?;
    Api::<DaemonSet>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &ds)
        .await?;
    Ok(())
}

/// The state label alone says nothing about *which* config succeeded (it still reads `success`
/// from the last one right after a new selection): wait for it and the GPUs' layout together.
async fn wait_applied(
    nodes: &Api<Node>,
    node: &str,
    backend: &dyn gantry_gpu::Backend,
    gpus: u32,
    want: &MigLayout,
) -> Res<()> {
    eventually_secs(&format!("{node}: success with {want:?}"), 90, || async {
        let n = nodes.get(node).await?;
        let l = n.metadata.labels.unwrap_or_default();
        let state = l.get(names::LABEL_MIG_CONFIG_STATE).cloned();
        let err = n
            .metadata
            .annotations
            .unwrap_or_default()
            .get(names::ANNOTATION_MIG_CONFIG_ERROR)
            .cloned();
        let now: Vec<_> = (0..gpus)
            .map(|g| layout::current(backend, g).map_err(|e| e.to_string()))
            .collect();
        let done = state.as_deref() == Some("success")
            && now.iter().all(|l| l.as_ref().is_ok_and(|l| l == want));
        Ok::<_, kube::Error>(if done {
            Look::Done(())
        } else {
            Look::Seen(format!("state {state:?}, error {err:?}, layouts {now:?}"))
        })
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_default_mig_config_applies_on_h100_and_a100_nodes() -> Res<()> {
    let c = Cluster::builder()
        .nodes("1xH100-80GB:2,1xA100-40GB:1")
        .controllers()
        .namespace(NS)
        .start()
        .await?;
    let client = c.client().clone();
    let sim = c.sim()?;
    // The fixture is a whole ConfigMap manifest, applied unchanged.
    let cm: ConfigMap = serde_yaml::from_str(&fixture("default-mig-parted-config.yaml"))?;
    start_mig_manager(&client, &cm).await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let (h100, a100) = ("h100-80gb-0", "a100-40gb-0");
    let backend = |node: &str| sim.node(node).and_then(|s| s.backend.clone());
    let hb = backend(h100).ok_or("no H100 backend")?;
    let ab = backend(a100).ok_or("no A100 backend")?;
    // all-1g.10gb: seven on the 80 GB class, four on the 40 GB A100 (two filtered entries).
    select(&nodes_api, h100, "all-1g.10gb").await?;
    select(&nodes_api, a100, "all-1g.10gb").await?;
    let seven = MigLayout::enabled([("1g.10gb", 7)]);
    wait_applied(&nodes_api, h100, hb.as_ref(), 2, &seven).await?;
    let four = MigLayout::enabled([("1g.10gb", 4)]);
    wait_applied(&nodes_api, a100, ab.as_ref(), 1, &four).await?;
    // all-balanced: entries for ten GPU groups; each node takes its own.
    select(&nodes_api, h100, "all-balanced").await?;
    select(&nodes_api, a100, "all-balanced").await?;
    let h = MigLayout::enabled([("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)]);
    wait_applied(&nodes_api, h100, hb.as_ref(), 2, &h).await?;
    let a = MigLayout::enabled([("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)]);
    wait_applied(&nodes_api, a100, ab.as_ref(), 1, &a).await?;
    // Back to all-disabled, the config the issue saw fail on H100s.
    select(&nodes_api, h100, "all-disabled").await?;
    wait_applied(&nodes_api, h100, hb.as_ref(), 2, &MigLayout::disabled()).await?;
    Ok(())
}

/// NVIDIA's own mig-parted default config (tests/fixtures/upstream/nvidia, unchanged) on a
/// simulated B200 node: `all-1g.23gb` (an entry for every GPU) and `all-balanced` (eleven
/// device-filtered entries, the B200's among them) apply; the entries for other GPUs are
/// skipped, as mig-parted skips them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvidias_default_mig_config_applies_on_a_b200_node() -> Res<()> {
    let c = Cluster::builder()
        .nodes("1xB200:2")
        .controllers()
        .namespace(NS)
        .start()
        .await?;
    let client = c.client().clone();
    let sim = c.sim()?;
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "nvidia-mig-parted-config", "namespace": NS},
        "data": {"config.yaml": fixture("nvidia/mig-parted-config-default.yaml")}
    }))?;
    start_mig_manager(&client, &cm).await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let node = "b200-0";
    let backend = sim
        .node(node)
        .and_then(|s| s.backend.clone())
        .ok_or("no B200 backend")?;
    select(&nodes_api, node, "all-1g.23gb").await?;
    let seven = MigLayout::enabled([("1g.23gb", 7)]);
    wait_applied(&nodes_api, node, backend.as_ref(), 2, &seven).await?;
    select(&nodes_api, node, "all-balanced").await?;
    let balanced = MigLayout::enabled([("1g.23gb", 2), ("2g.45gb", 1), ("3g.90gb", 1)]);
    wait_applied(&nodes_api, node, backend.as_ref(), 2, &balanced).await?;
    Ok(())
}
