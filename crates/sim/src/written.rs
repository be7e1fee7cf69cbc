//! [`Written`]: the answer to a write whose object the writer does not read. A kubelet's
//! status patches, lease renewals and annotation patches get the whole object back (a pod or
//! node with its `managedFields`); decoding it into a typed object only to drop it was most of
//! what a status patch cost the simulated kubelets. The controllers' pod creates skip theirs
//! too. The body is skipped without building anything; errors (the HTTP status) are reported
//! as for any other write.

use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Deserializer, de::IgnoredAny};

/// Stands for a `K` the server sent back; nothing of it is kept.
pub struct Written<K> {
    meta: ObjectMeta,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Written<K> {
    fn clone(&self) -> Self {
        Self {
            meta: self.meta.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Written<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Written")
    }
}

impl<'de, K> Deserialize<'de> for Written<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(d)?;
        Ok(Self {
            meta: ObjectMeta::default(),
            kind: PhantomData,
        })
    }
}

gantry_api::resource_of!(
    [K: Resource<DynamicType = ()>] Written<K> => K,
    |this| &this.meta,
    &mut this.meta
);

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn any_object_is_accepted_and_nothing_kept() {
        let w: Written<Pod> = serde_json::from_str(
            r#"{"metadata": {"name": "p"}, "spec": {"containers": [1, "x"]}}"#,
        )
        .expect("skipped");
        assert_eq!(w.meta().name, None);
        assert_eq!(Written::<Pod>::plural(&()), "pods");
        assert!(serde_json::from_str::<Written<Pod>>("{").is_err());
    }
}
