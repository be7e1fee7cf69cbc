//! The only Kubernetes calls of the device plugin: read this node's config label, and
//! tell people about a bad config with a Node event.

use k8s_openapi::api::core::v1::{Event, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, PostParams};

use gantry_api::names;

/// Where events about nodes go (nodes are cluster-scoped; kubectl shows them from here).
const EVENT_NAMESPACE: &str = "default";
pub const REASON_CONFIG_ERROR: &str = "DevicePluginConfigError";
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
    let now = k8s_openapi::jiff::Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{node}.device-plugin-config.")),
            namespace: Some(EVENT_NAMESPACE.to_string()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Node".to_string()),
            name: Some(node.to_string()),
            uid: Some(node.to_string()),
            ..ObjectReference::default()
        },
        reason: Some(REASON_CONFIG_ERROR.to_string()),
        message: Some(message.to_string()),
        type_: Some("Warning".to_string()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        reporting_component: Some(COMPONENT.to_string()),
        reporting_instance: Some(format!("{COMPONENT}-{node}")),
        action: Some("LoadConfig".to_string()),
        source: Some(k8s_openapi::api::core::v1::EventSource {
            component: Some(COMPONENT.to_string()),
            host: Some(node.to_string()),
        }),
        ..Event::default()
    };
    Api::<Event>::namespaced(client.clone(), EVENT_NAMESPACE)
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
