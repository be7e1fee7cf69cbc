//! [`Lenient`]: a typed object that a list or watch never fails on. A typed client decodes a
//! whole list at once, so one stored object it cannot decode (written before the API server
//! checked it, e.g. a label that is not a string) would fail every relist and leave the
//! component stuck; through `Lenient<K>` that object arrives as [`Lenient::Undecodable`] with
//! its identity (name, namespace, uid, deletion state) and the reason, and everything else
//! decodes as usual. [`Lenient::salvaged`] then gives the object with only the metadata that
//! decodes field by field (a bad label loses the labels, not the pod's node, requests or
//! phase), so a scheduler or controller can still account for it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// An object of kind `K`, or what can be read of it when it does not decode as `K`.
#[derive(Debug, Clone)]
pub enum Lenient<K> {
    Decoded(K),
    Undecodable {
        /// The identity fields that could be read; everything else is left empty.
        meta: Box<ObjectMeta>,
        /// The object as stored.
        raw: Value,
        /// Why it does not decode, with the field path.
        error: String,
    },
}

impl<K> Lenient<K> {
    /// The decoded object, if it decoded.
    pub fn decoded(&self) -> Option<&K> {
        match self {
            Lenient::Decoded(k) => Some(k),
            Lenient::Undecodable { .. } => None,
        }
    }
}

/// The metadata of an object that did not decode: each field on its own, a bad one skipped.
fn salvage_meta(raw: &Value) -> ObjectMeta {
    let m = raw.get("metadata");
    let field = |k: &str| m.and_then(|m| m.get(k)).cloned().unwrap_or(Value::Null);
    let string = |k: &str| field(k).as_str().map(str::to_string);
    ObjectMeta {
        labels: serde_json::from_value(field("labels")).ok().flatten(),
        annotations: serde_json::from_value(field("annotations")).ok().flatten(),
        owner_references: serde_json::from_value(field("ownerReferences"))
            .ok()
            .flatten(),
        finalizers: serde_json::from_value(field("finalizers")).ok().flatten(),
        name: string("name"),
        namespace: string("namespace"),
        uid: string("uid"),
        resource_version: string("resourceVersion"),
        generation: field("generation").as_i64(),
        deletion_timestamp: serde_json::from_value(field("deletionTimestamp")).ok(),
        deletion_grace_period_seconds: field("deletionGracePeriodSeconds").as_i64(),
        creation_timestamp: serde_json::from_value(field("creationTimestamp")).ok(),
        ..Default::default()
    }
}

impl<K: DeserializeOwned> Lenient<K> {
    /// The object; for one that does not decode, the stored object with its metadata replaced
    /// by what decodes of it (see [`Lenient::Undecodable`]'s `meta`), if that decodes (None
    /// when the fault is outside the metadata).
    pub fn salvaged(self) -> Option<K> {
        match self {
            Lenient::Decoded(k) => Some(k),
            Lenient::Undecodable { meta, mut raw, .. } => {
                raw["metadata"] = serde_json::to_value(&*meta).ok()?;
                serde_json::from_value(raw).ok()
            }
        }
    }
}

/// One typed pass over the object's text for an object that decodes (nearly all); only one
/// that does not is read into a `Value` for the field path of the fault and what salvages.
impl<'de, K: DeserializeOwned> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = Box::<serde_json::value::RawValue>::deserialize(d)?;
        if let Ok(k) = serde_json::from_str::<K>(text.get()) {
            return Ok(Lenient::Decoded(k));
        }
        let raw: Value = serde_json::from_str(text.get()).map_err(serde::de::Error::custom)?;
        match serde_path_to_error::deserialize::<_, K>(&raw) {
            Ok(k) => Ok(Lenient::Decoded(k)),
            Err(e) => Ok(Lenient::Undecodable {
                meta: Box::new(salvage_meta(&raw)),
                error: format!("{}: {}", e.path(), e.inner()),
                raw,
            }),
        }
    }
}

crate::resource_of!(
    [K: Resource<DynamicType = ()>] Lenient<K> => K,
    |this| match this {
        Lenient::Decoded(k) => k.meta(),
        Lenient::Undecodable { meta, .. } => meta,
    },
    match this {
        Lenient::Decoded(k) => k.meta_mut(),
        Lenient::Undecodable { meta, .. } => meta,
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::core::ObjectList;
    use serde_json::json;

    #[test]
    fn one_bad_object_does_not_fail_the_list() {
        let list = json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
            "items": [
                {"metadata": {"name": "good", "uid": "u1"}, "spec": {"containers": [{"name": "c"}]}},
                {"metadata": {"name": "bad", "namespace": "ns", "uid": "u2", "labels": {"a": 1},
                              "deletionTimestamp": "2026-12-03T10:00:00Z"},
                 "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}},
            ]
        });
        assert!(serde_json::from_value::<ObjectList<Pod>>(list.clone()).is_err());
        let l: ObjectList<Lenient<Pod>> = serde_json::from_value(list).unwrap();
        assert_eq!(l.items.len(), 2);
        assert_eq!(
            l.items[0].decoded().unwrap().meta().name.as_deref(),
            Some("good")
        );
        let Lenient::Undecodable { meta, raw, error } = &l.items[1] else {
            panic!("the bad pod decoded");
        };
        assert_eq!(meta.name.as_deref(), Some("bad"));
        assert_eq!(meta.namespace.as_deref(), Some("ns"));
        assert_eq!(meta.uid.as_deref(), Some("u2"));
        assert!(meta.deletion_timestamp.is_some());
        assert!(error.starts_with("metadata.labels.a: "), "{error}");
        assert_eq!(raw["spec"]["nodeName"], "n1");
        assert_eq!(meta.labels, None, "the labels are what is wrong");
        assert_eq!(
            Lenient::<Pod>::url_path(&(), Some("ns")),
            "/api/v1/namespaces/ns/pods"
        );
    }

    #[test]
    fn salvaged_keeps_every_part_that_decodes() {
        let bad: Lenient<Pod> = serde_json::from_value(json!({
            "metadata": {"name": "bad", "namespace": "ns", "uid": "u2", "labels": {"a": 1},
                "annotations": {"k": "v"}, "finalizers": ["f"],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d",
                                     "uid": "o1", "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c",
                "resources": {"requests": {"nvidia.com/gpu": "2"}}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        assert!(bad.decoded().is_none());
        let p = bad.salvaged().expect("only the labels are bad");
        assert_eq!(p.metadata.name.as_deref(), Some("bad"));
        assert_eq!(p.metadata.labels, None);
        assert_eq!(p.metadata.annotations.unwrap()["k"], "v");
        assert_eq!(p.metadata.finalizers.unwrap(), ["f"]);
        assert_eq!(p.metadata.owner_references.unwrap()[0].uid, "o1");
        let spec = p.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert!(
            spec.containers[0]
                .resources
                .as_ref()
                .unwrap()
                .requests
                .is_some()
        );
        assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
        // A fault outside the metadata cannot be cut away.
        let spec_bad: Lenient<Pod> =
            serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": {"containers": 5}}))
                .unwrap();
        assert!(spec_bad.salvaged().is_none());
    }
}
