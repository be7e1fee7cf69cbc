//! The only Kubernetes calls of the device plugin: read this node's config label, and
//! tell people about a bad config or a GPU fault with events on the Node and the Pods.

use k8s_openapi::api::core::v1::{Event, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, PostParams};

use gantry_api::names;

/// Where events about nodes go (nodes are cluster-scoped; kubectl shows them from here).
const EVENT_NAMESPACE: &str = "default";
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

/// Emits `report` about `object`, from the device plugin on `node`. Node events go to
/// `default` (nodes are cluster-scoped); pod events to the pod's namespace.
pub async fn event(
    client: &kube::Client,
    node: &str,
    object: ObjectReference,
    report: &Report,
) -> Result<(), kube::Error> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let namespace = object
        .namespace
        .clone()
        .unwrap_or_else(|| EVENT_NAMESPACE.to_string());
    let prefix = object.name.clone().unwrap_or_default();
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}.device-plugin.")),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: object,
        reason: Some(report.reason.to_string()),
        message: Some(report.message.clone()),
        type_: Some(if report.warning { "Warning" } else { "Normal" }.to_string()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        reporting_component: Some(COMPONENT.to_string()),
        reporting_instance: Some(format!("{COMPONENT}-{node}")),
        action: Some(report.action.to_string()),
        source: Some(k8s_openapi::api::core::v1::EventSource {
            component: Some(COMPONENT.to_string()),
            host: Some(node.to_string()),
        }),
        ..Event::default()
    };
    Api::<Event>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &event)
        .await?;
    Ok(())
}

/// A client from the in-cluster config or `KUBECONFIG`.
pub async fn default_client() -> Result<kube::Client, kube::Error> {
    kube::Client::try_default().await
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
