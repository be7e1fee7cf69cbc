//! Metadata-only answers: a get, list or watch whose `Accept` asks for
//! `application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` (a list:
//! `as=PartialObjectMetadataList`) gets each object as a `meta.k8s.io` `PartialObjectMetadata`,
//! its whole `metadata` and nothing else, as kube-apiserver serves client-go's metadata
//! informers and kube-rs's `Api::<PartialObjectMeta<K>>`. A Go metadata client cannot decode
//! the full object in its place (its scheme knows only the metadata kinds), and a watch of
//! change triggers is sent a tenth of the bytes. Which form a request gets is
//! [`super::accept::requested`]'s answer.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

/// An object as `PartialObjectMetadata`, written out without copying its metadata.
#[derive(Serialize)]
struct Partial<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    metadata: &'a Value,
}

fn empty() -> &'static Value {
    static EMPTY: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| Value::Object(Map::new()))
}

/// `obj` as a `PartialObjectMetadata` of `api_version`, encoded.
pub fn encode(obj: &Value, api_version: &str) -> Vec<u8> {
    let partial = Partial {
        kind: "PartialObjectMetadata",
        api_version,
        metadata: obj.get("metadata").unwrap_or(empty()),
    };
    // Serializing borrowed JSON values cannot fail.
    serde_json::to_vec(&partial).unwrap_or_default()
}

/// An object's JSON as a `PartialObjectMetadata` of `api_version`: its `metadata` bytes are
/// copied as they are, nothing is decoded (a watch sends stored objects so). `None` if the
/// bytes are not a JSON object.
pub fn encode_json(json: &[u8], api_version: &str) -> Option<Vec<u8>> {
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(borrow)]
        metadata: Option<&'a RawValue>,
    }
    // A derived struct would also take a JSON array (by position).
    if json.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let meta: Meta<'_> = serde_json::from_slice(json).ok()?;
    let metadata = meta.metadata.map_or("{}", RawValue::get);
    let mut out = Vec::with_capacity(metadata.len() + 80);
    out.extend_from_slice(b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":");
    // A version is a plain ASCII token: written as a JSON string as it is.
    out.extend_from_slice(format!("\"{api_version}\",\"metadata\":").as_bytes());
    out.extend_from_slice(metadata.as_bytes());
    out.push(b'}');
    Some(out)
}

/// `obj` as a `PartialObjectMetadata` of `api_version`.
pub fn object(obj: &Value, api_version: &str) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": api_version,
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A list as a `PartialObjectMetadataList`: its own metadata (resourceVersion, continue,
/// remainingItemCount) and each item's.
pub fn list(list: &Value, api_version: &str) -> Value {
    let items: Vec<Value> = list
        .get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|item| object(item, api_version))
        .collect();
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": api_version,
        "metadata": list.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_and_lists_keep_their_metadata_only() {
        let pod = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "resourceVersion": "7", "managedFields": [{"manager": "m"}]},
            "spec": {"containers": []}, "status": {"phase": "Running"}});
        let want = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"name": "p", "resourceVersion": "7", "managedFields": [{"manager": "m"}]}});
        assert_eq!(object(&pod, "meta.k8s.io/v1"), want);
        let encoded: Value = serde_json::from_slice(&encode(&pod, "meta.k8s.io/v1")).unwrap();
        assert_eq!(encoded, want);
        let raw = encode_json(&serde_json::to_vec(&pod).unwrap(), "meta.k8s.io/v1").unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&raw).unwrap(), want);
        let bare = encode_json(br#"{"kind":"X"}"#, "meta.k8s.io/v1").unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&bare).unwrap()["metadata"],
            json!({})
        );
        assert!(encode_json(b"[1]", "meta.k8s.io/v1").is_none());
        let l = list(
            &json!({"kind": "PodList", "apiVersion": "v1",
                "metadata": {"resourceVersion": "9", "continue": "c"}, "items": [pod]}),
            "meta.k8s.io/v1",
        );
        assert_eq!(l["kind"], "PartialObjectMetadataList");
        assert_eq!(
            l["metadata"],
            json!({"resourceVersion": "9", "continue": "c"})
        );
        assert_eq!(l["items"], json!([want]));
    }
}
