//! OpenAPI v3 schemas of custom resources, from their CRDs' structural schemas, shaped as
//! the real server publishes them: `metadata` refers to ObjectMeta, `apiVersion` and
//! `kind` are described, and the kind is named by `x-kubernetes-group-version-kind`.

use serde_json::{Value, json};

const API_VERSION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The schema id the real server gives a custom kind: the group reversed, then version and
/// kind (`com.nvidia.v1.ClusterPolicy`).
pub fn schema_id(group: &str, version: &str, kind: &str) -> String {
    let rev: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", rev.join("."))
}

/// The published schema of `crd`'s `version`, or None when that version has no schema.
pub fn schema(crd: &Value, version: &str, object_meta_id: &str) -> Option<Value> {
    let spec = crd.get("spec")?;
    let group = spec.get("group")?.as_str()?;
    let kind = spec.pointer("/names/kind")?.as_str()?;
    let v = spec
        .get("versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?;
    // A version without its own schema uses the CRD-wide one (apiextensions v1beta1 style).
    let mut s = v
        .pointer("/schema/openAPIV3Schema")
        .or_else(|| spec.pointer("/validation/openAPIV3Schema"))
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    let obj = s.as_object_mut()?;
    let props = obj
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut()?;
    props.insert(
        "apiVersion".into(),
        json!({"type": "string", "description": API_VERSION}),
    );
    props.insert(
        "kind".into(),
        json!({"type": "string", "description": KIND}),
    );
    props.insert(
        "metadata".into(),
        json!({"allOf": [{"$ref": format!("#/components/schemas/{object_meta_id}")}], "description": METADATA}),
    );
    obj.entry("type").or_insert_with(|| json!("object"));
    obj.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([{"group": group, "version": version, "kind": kind}]),
    );
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_shapes_like_the_real_server() {
        assert_eq!(
            schema_id("scheduling.run.ai", "v2", "Queue"),
            "ai.run.scheduling.v2.Queue"
        );
        let crd = json!({"spec": {"group": "scheduling.run.ai", "names": {"kind": "Queue"},
            "versions": [{"name": "v2", "schema": {"openAPIV3Schema": {"type": "object",
                "properties": {"spec": {"type": "object", "description": "QueueSpec",
                    "properties": {"priority": {"type": "integer"}}},
                    "metadata": {"type": "object"}}}}}]}});
        let s = schema(&crd, "v2", "meta.ObjectMeta").expect("schema");
        assert_eq!(
            s["properties"]["metadata"]["allOf"][0]["$ref"],
            "#/components/schemas/meta.ObjectMeta"
        );
        assert_eq!(s["properties"]["spec"]["description"], "QueueSpec");
        assert_eq!(
            s["x-kubernetes-group-version-kind"],
            json!([{"group": "scheduling.run.ai", "version": "v2", "kind": "Queue"}])
        );
        assert!(schema(&crd, "v1", "m").is_none());
    }
}
