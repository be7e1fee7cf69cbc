//! The only Kubernetes calls of the device plugin: read this node's config label, and
//! tell people about a bad config or a GPU fault with events on the Node and the Pods.

use gantry_runtime::events::{Recorder, Said};
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::api::Api;

use gantry_api::names;

pub const REASON_CONFIG_ERROR: &str = "DevicePluginConfigError";
pub const REASON_CONFIG_APPLIED: &str = "DevicePluginConfigApplied";
const COMPONENT: &str = "gantry-device-plugin";

/// The node's `nvidia.com/device-plugin.config` label (`None` when unset).
pub async fn config_label(
    client: &kube::Client,
    node: &str,
) -> Result<Option<String>, kube::Error> {
    let node: Node = Api::<Node>::all(client.clone()).get(node).await?;
    Ok(node
        .metadata
        .labels
        .and_then(|mut l| l.remove(names::LABEL_DEVICE_PLUGIN_CONFIG)))
}

/// Emits a Warning event on the Node naming the config error.
pub async fn config_error_event(
    client: &kube::Client,
    node: &str,
    message: &str,
) -> Result<(), kube::Error> {
    let ev = Report {
        warning: true,
        reason: REASON_CONFIG_ERROR,
        action: "LoadConfig",
        message: message.to_string(),
    };
    event(client, node, node_ref(node), &ev).await
}

/// One event to report.
#[derive(Debug, Clone)]
pub struct Report {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub message: String,
}

/// The Node as an event's object.
pub fn node_ref(node: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Node".to_string()),
        name: Some(node.to_string()),
        uid: Some(node.to_string()),
        ..ObjectReference::default()
    }
}

/// A Pod as an event's object.
pub fn pod_ref(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Pod".to_string()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        ..ObjectReference::default()
    }
}

/// Emits `report` about `object`, from the device plugin on `node`, through the one
/// recorder (`gantry_runtime::events`; Node events go to `default`). Each report is a
/// transition (config applied, a GPU lost or back), so each is written as it comes.
pub async fn event(
    client: &kube::Client,
    node: &str,
    object: ObjectReference,
    report: &Report,
) -> Result<(), kube::Error> {
    let said = if report.warning {
        Said::warning(report.reason, report.message.clone())
    } else {
        Said::normal(report.reason, report.message.clone())
    };
    Recorder::on_node(client.clone(), COMPONENT, node)
        .try_publish(&object, &said, Some(report.action))
        .await
}

/// The `data` of a ConfigMap (named device plugin configs, one key each).
pub async fn config_map_data(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<std::collections::BTreeMap<String, String>, kube::Error> {
    let cm: k8s_openapi::api::core::v1::ConfigMap =
        Api::namespaced(client.clone(), namespace).get(name).await?;
    Ok(cm.data.unwrap_or_default())
}
