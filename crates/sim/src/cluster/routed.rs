//! A pod or Node as a kubelet's watch first reads it: its text, who it is and (a pod) the
//! node it is bound to. Decoding the whole object is most of what a watch costs a kubelet: a
//! pod is decoded once, when it arrives (its later versions are read for their deletion
//! only), and of the Nodes, which every process of a large cluster watches together
//! (`gantry sim kubelets`, `--kubelet-processes`), only the process's own.

use gantry_api::lenient::Lenient;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// A pod's text with its identity and node read out.
#[derive(Clone, Debug)]
pub struct RoutedPod {
    /// Name, namespace, uid, resourceVersion and the deletion's timestamp and grace only.
    meta: ObjectMeta,
    node: Option<String>,
    text: Box<RawValue>,
}

#[derive(Deserialize, Default)]
struct Peek {
    #[serde(default)]
    metadata: PeekMeta,
    #[serde(default)]
    spec: PeekSpec,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PeekMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PeekSpec {
    node_name: Option<String>,
}

impl RoutedPod {
    /// The node the pod is bound to.
    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// The pod as a running pod's task follows it: who it is and whether it is being deleted
    /// (see `kubelet::pods::on_pod`), without decoding the rest.
    pub fn latest(&self) -> Pod {
        crate::kubelet::pods::latest_of(&self.meta)
    }

    /// The whole pod (or, for one that does not decode, what [`Lenient`] keeps of it), with
    /// `managedFields` dropped as the sim's caches drop them.
    pub fn decode(&self) -> Lenient<Pod> {
        if let Ok(pod) = crate::strip::pod_from(self.text.get()) {
            return Lenient::Decoded(pod);
        }
        // One that does not decode: what Lenient salvages, with the fault's field path.
        let mut pod = serde_json::from_str::<Lenient<Pod>>(self.text.get()).unwrap_or_else(|e| {
            Lenient::Undecodable {
                meta: Box::new(self.meta.clone()),
                raw: Value::Null,
                error: e.to_string(),
            }
        });
        crate::strip::strip_managed_fields(&mut pod);
        pod
    }
}

impl<'de> Deserialize<'de> for RoutedPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = Box::<RawValue>::deserialize(d)?;
        // A field of an unexpected type (a stored object the server did not check) is read
        // the slow way, field by field, so it still reaches its kubelet.
        let (meta, spec) = match serde_json::from_str::<Peek>(text.get()) {
            Ok(p) => (p.metadata, p.spec),
            Err(_) => {
                let v: Value =
                    serde_json::from_str(text.get()).map_err(serde::de::Error::custom)?;
                let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
                (
                    PeekMeta {
                        name: s("/metadata/name"),
                        namespace: s("/metadata/namespace"),
                        uid: s("/metadata/uid"),
                        resource_version: s("/metadata/resourceVersion"),
                        deletion_timestamp: v
                            .pointer("/metadata/deletionTimestamp")
                            .and_then(|t| serde_json::from_value(t.clone()).ok()),
                        deletion_grace_period_seconds: v
                            .pointer("/metadata/deletionGracePeriodSeconds")
                            .and_then(Value::as_i64),
                    },
                    PeekSpec {
                        node_name: s("/spec/nodeName"),
                    },
                )
            }
        };
        Ok(RoutedPod {
            meta: ObjectMeta {
                name: meta.name,
                namespace: meta.namespace,
                uid: meta.uid,
                resource_version: meta.resource_version,
                deletion_timestamp: meta.deletion_timestamp,
                deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
                ..Default::default()
            },
            node: spec.node_name,
            text,
        })
    }
}

gantry_api::resource_of!([] RoutedPod => Pod, |this| &this.meta, &mut this.meta);

/// A Node as the nodes' shared watch first reads it: its name (and resourceVersion) only,
/// the rest decoded for a node of this process alone. With one process per share of a large
/// cluster, most Node events are another process's nodes' status and lease-driven writes.
#[derive(Clone, Debug)]
pub struct RoutedNode {
    meta: ObjectMeta,
    text: Box<RawValue>,
}

impl RoutedNode {
    /// The whole Node, `managedFields` dropped as the sim's caches drop them; `None` for one
    /// that does not decode (the error is logged).
    pub fn decode(&self) -> Option<Node> {
        match crate::strip::node_from(self.text.get()) {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!(node = ?self.meta.name, error = %e, "a Node that does not decode");
                None
            }
        }
    }
}

impl<'de> Deserialize<'de> for RoutedNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = Box::<RawValue>::deserialize(d)?;
        // The pods' peek (a Node has no `spec.nodeName`). A name of an unexpected type reads
        // as none: such a Node is no node of ours.
        let peek = serde_json::from_str::<Peek>(text.get()).unwrap_or_default();
        Ok(RoutedNode {
            meta: ObjectMeta {
                name: peek.metadata.name,
                resource_version: peek.metadata.resource_version,
                ..Default::default()
            },
            text,
        })
    }
}

gantry_api::resource_of!([] RoutedNode => Node, |this| &this.meta, &mut this.meta);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::json;

    #[test]
    fn reads_the_node_and_identity_and_decodes_on_demand() {
        let text =
            json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                                       "managedFields": [{"manager": "m", "operation": "Update"}]},
                          "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}})
            .to_string();
        let r: RoutedPod = serde_json::from_str(&text).expect("routed");
        assert_eq!(r.node(), Some("n1"));
        assert_eq!(r.meta().uid.as_deref(), Some("u"));
        assert_eq!(r.meta().resource_version.as_deref(), Some("7"));
        assert_eq!(r.latest().metadata.deletion_timestamp, None);
        let pod = r.decode();
        let pod = pod.decoded().expect("decodes");
        assert_eq!(pod.spec.as_ref().map(|s| s.containers.len()), Some(1));
        assert_eq!(pod.metadata.managed_fields, None);
    }

    #[test]
    fn the_latest_version_carries_the_deletion() {
        let text = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u",
                                       "deletionTimestamp": "2026-12-07T01:02:03Z",
                                       "deletionGracePeriodSeconds": 30},
                          "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}})
        .to_string();
        let r: RoutedPod = serde_json::from_str(&text).expect("routed");
        let l = r.latest();
        assert_eq!(l.metadata.uid.as_deref(), Some("u"));
        assert_eq!(l.metadata.deletion_grace_period_seconds, Some(30));
        assert_eq!(
            l.metadata.deletion_timestamp.map(|t| t.0.to_string()),
            Some("2026-12-07T01:02:03Z".to_string())
        );
        assert!(l.spec.is_none());
    }

    #[test]
    fn a_node_is_named_first_and_decoded_on_demand() {
        let text = json!({"metadata": {"name": "n1", "resourceVersion": "4",
                                       "managedFields": [{"manager": "m", "operation": "Update"}]},
                          "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
        .to_string();
        let r: RoutedNode = serde_json::from_str(&text).expect("routed");
        assert_eq!(r.meta().name.as_deref(), Some("n1"));
        assert_eq!(r.meta().resource_version.as_deref(), Some("4"));
        let n = r.decode().expect("decodes");
        assert_eq!(n.metadata.managed_fields, None);
        assert!(n.status.and_then(|s| s.allocatable).is_some());
        let odd: RoutedNode =
            serde_json::from_str(&json!({"metadata": {"name": 7}}).to_string()).expect("routed");
        assert_eq!(odd.meta().name, None);
    }

    #[test]
    fn a_pod_with_a_bad_field_still_finds_its_node() {
        let text = json!({"metadata": {"name": 5, "namespace": "ns", "uid": "u"},
                          "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}})
        .to_string();
        let r: RoutedPod = serde_json::from_str(&text).expect("routed");
        assert_eq!(r.node(), Some("n1"));
        assert_eq!(r.meta().name, None);
        assert!(matches!(r.decode(), Lenient::Undecodable { .. }));
    }
}
