//! What the simulated kubelets and controllers drop from watched objects before keeping them.

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Drops `metadata.managedFields` (client-go's `TransformStripManagedFields`, which
/// kube-scheduler's and other components' informers apply): nobody in the sim's caches reads
/// them, and they are about as large as the rest of an operand pod. Every cached pod and node
/// would otherwise carry them, which at 1,000 nodes is hundreds of MB (docs/benchmarks.md,
/// issue #42).
pub fn strip_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// A pod from its JSON without `managedFields`: they are skipped as they are read, never
/// built (as large as the rest of an operand pod, they were ~5 % of the simulated kubelets'
/// CPU when decoded and then dropped). An object the typed decode refuses is refused here too.
pub fn pod_from(text: &str) -> serde_json::Result<Pod> {
    let o: Slim<PodSpec, PodStatus> = serde_json::from_str(text)?;
    Ok(Pod {
        metadata: o.metadata.into(),
        spec: o.spec,
        status: o.status,
    })
}

/// [`pod_from`] for a Node.
pub fn node_from(text: &str) -> serde_json::Result<Node> {
    let o: Slim<NodeSpec, NodeStatus> = serde_json::from_str(text)?;
    Ok(Node {
        metadata: o.metadata.into(),
        spec: o.spec,
        status: o.status,
    })
}

/// An object of a kind with `spec` and `status`, its metadata read without `managedFields`
/// (unknown keys such as `apiVersion` and `managedFields` are skipped unread).
#[derive(Deserialize)]
struct Slim<S, T> {
    #[serde(default)]
    metadata: SlimMeta,
    spec: Option<S>,
    status: Option<T>,
}

/// `ObjectMeta`'s fields but `managedFields`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<SlimMeta> for ObjectMeta {
    fn from(m: SlimMeta) -> Self {
        ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn a_pod_and_a_node_decode_as_typed_but_for_their_managed_fields() {
        let meta = serde_json::json!({"name": "p", "namespace": "ns", "uid": "u",
            "resourceVersion": "7", "generation": 2, "generateName": "p-",
            "creationTimestamp": "2026-12-07T01:02:03Z", "deletionTimestamp": "2026-12-07T01:02:04Z",
            "deletionGracePeriodSeconds": 30, "labels": {"a": "b"}, "annotations": {"c": "d"},
            "finalizers": ["f"], "selfLink": "/x",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "o"}],
            "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:spec": {}}}]});
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}});
        let mut typed: Pod = serde_json::from_value(pod.clone()).expect("a pod");
        strip_managed_fields(&mut typed);
        assert_eq!(pod_from(&pod.to_string()).expect("decodes"), typed);
        let node = serde_json::json!({"metadata": meta, "spec": {"unschedulable": true},
            "status": {"capacity": {"nvidia.com/gpu": "8"}}});
        let mut typed: Node = serde_json::from_value(node.clone()).expect("a node");
        strip_managed_fields(&mut typed);
        assert_eq!(node_from(&node.to_string()).expect("decodes"), typed);
        // What the typed decode refuses is refused: a label that is not a string.
        let bad = serde_json::json!({"metadata": {"name": "p", "labels": {"a": 1}}});
        assert!(pod_from(&bad.to_string()).is_err());
        assert!(serde_json::from_value::<Pod>(bad).is_err());
    }

    #[test]
    fn managed_fields_go_and_the_rest_stays() {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "labels": {"a": "b"},
                "managedFields": [{"manager": "m", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .expect("a pod");
        let before = p.clone();
        strip_managed_fields(&mut p);
        assert_eq!(p.metadata.managed_fields, None);
        p.metadata.managed_fields = before.metadata.managed_fields.clone();
        assert_eq!(p, before);
    }
}
