//! Operand pods: a DaemonSet running `gantry node device-plugin` makes the sim kubelet run the
//! real device plugin in-process on each GPU node; it registers over the node's kubelet socket
//! and the GPUs become allocatable. A GPU fault then shows up as an unhealthy device. A GFD
//! DaemonSet runs the real discovery agent, which labels its own Node.

use gantry_api::names;
use gantry_sim::cluster::Fault;
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

async fn allocatable(api: &Api<Node>, node: &str) -> Option<String> {
    let n = api.get(node).await.ok()?;
    Some(n.status?.allocatable?.get(names::RESOURCE_GPU)?.0.clone())
}

fn daemonset(name: &str, labels: serde_json::Value, pod_spec: serde_json::Value) -> Res<DaemonSet> {
    let mut spec = pod_spec;
    spec["nodeSelector"] = json!({names::NFD_GPU_LABELS[0]: "true"});
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "gpu-operator", "labels": labels},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}
    }))?)
}

/// The address the sim kubelet published for the metrics server of app `app`'s pod on
/// `node` (its `ANNOTATION_SIM_METRICS_ADDRESS`), waited for: `what` names it in a timeout.
async fn metrics_address(client: &kube::Client, app: &str, node: &str, what: &str) -> Res<String> {
    Ok(eventually_secs(what, 60, || async {
        operand_pod(client, app, node).await.and_then(|p| {
            p.metadata
                .annotations?
                .get(names::ANNOTATION_SIM_METRICS_ADDRESS)
                .cloned()
        })
    })
    .await?)
}

fn gantry(name: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["node"];
    all.extend_from_slice(args);
    json!({"name": name, "image": "ghcr.io/gantry/gantry:dev", "command": ["gantry"], "args": all,
           "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]})
}

/// The host's `/` mounted at `/host` (the pod needs the `host-root` volume), as the
/// operator renders the toolkit.
fn host_root_mounted(mut c: serde_json::Value) -> serde_json::Value {
    c["volumeMounts"] = json!([{"name": "host-root", "mountPath": "/host"}]);
    c
}

async fn operand_pod(client: &kube::Client, app: &str, node: &str) -> Option<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "gpu-operator");
    let lp = kube::api::ListParams::default().labels(&format!("app={app}"));
    pods.list(&lp)
        .await
        .ok()?
        .items
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(0, |c| c.restart_count)
}

async fn scrape(addr: &str) -> Res<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n")
        .await?;
    let mut body = String::new();
    s.read_to_string(&mut body).await?;
    Ok(body)
}

mod device_plugin;
mod discovery;
mod exporter;
mod operand_chain;
