//! [`Touch<K>`]: a watched object decoded only as far as a change trigger needs it.

use std::borrow::Cow;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Deserializer};

/// A `K` decoded as its name, namespace, uid and resourceVersion only: every other field of
/// a watch event is skipped, not built. A loop woken by "something changed" needs no more,
/// and a pod's or node's `managedFields` alone cost most of the decoding: at 2,000 nodes the
/// operator's change triggers, decoding `PartialObjectMeta`s, were half of its CPU.
///
/// Requests ask for metadata only (`as=PartialObjectMetadata`), as for `PartialObjectMeta`.
#[derive(Debug)]
pub struct Touch<K> {
    metadata: ObjectMeta,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Touch<K> {
    fn clone(&self) -> Self {
        Touch {
            metadata: self.metadata.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Touch<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn metadata_api() -> bool {
        true
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de, K> Deserialize<'de> for Touch<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Fields not named here are skipped by serde without being built.
        #[derive(Deserialize)]
        struct Object {
            #[serde(default)]
            metadata: Meta,
        }
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Meta {
            name: Option<String>,
            namespace: Option<String>,
            uid: Option<String>,
            resource_version: Option<String>,
        }
        let Object { metadata: m } = Object::deserialize(d)?;
        Ok(Touch {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                ..ObjectMeta::default()
            },
            kind: PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn keeps_identity_and_version_and_skips_the_rest() {
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns",
            "uid":"u1","resourceVersion":"42","labels":{"a":"b"},
            "managedFields":[{"manager":"m","fieldsV1":{"f:spec":{}}}]},
            "spec":{"containers":[{"name":"c"}]},"status":{"phase":"Running"}}"#;
        let t: Touch<Pod> = serde_json::from_str(json).unwrap();
        assert_eq!(t.meta().name.as_deref(), Some("p"));
        assert_eq!(t.meta().namespace.as_deref(), Some("ns"));
        assert_eq!(t.meta().uid.as_deref(), Some("u1"));
        assert_eq!(t.meta().resource_version.as_deref(), Some("42"));
        assert!(t.meta().labels.is_none() && t.meta().managed_fields.is_none());
        assert_eq!(Touch::<Pod>::plural(&()), "pods");
        assert!(Touch::<Pod>::metadata_api());
    }

    #[test]
    fn a_partial_object_metadata_decodes_too() {
        let json = r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1",
            "metadata":{"name":"n","resourceVersion":"7"}}"#;
        let t: Touch<Pod> = serde_json::from_str(json).unwrap();
        assert_eq!(t.meta().resource_version.as_deref(), Some("7"));
    }
}
