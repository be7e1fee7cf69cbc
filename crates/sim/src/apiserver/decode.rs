//! Request bodies as the real API server reads them: the content type picks the one
//! decoder (JSON is never retried as YAML, which is quadratic in nesting), bodies are
//! limited to 3 MiB and to a nesting depth checked by a linear scan before any parser
//! runs, and objects are limited to what etcd stores.

use super::status::ApiError;
use serde_json::Value;

/// `--max-request-bytes` of kube-apiserver's generic handlers (3 MiB).
pub const MAX_REQUEST_BYTES: usize = 3 << 20;
/// Deepest nesting of objects and arrays accepted (shared with `gantry validate`).
pub use gantry_k8s_rules::depth::MAX_DEPTH;

/// The body formats a write may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
    Protobuf,
}

impl Format {
    /// The decoder for a `Content-Type`; none (or empty) means JSON, as upstream.
    pub fn from_content_type(ct: Option<&str>) -> Result<Self, ApiError> {
        let base = ct
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        match base.as_str() {
            "" | "application/json" | "*/*" => Ok(Self::Json),
            "application/yaml" | "application/x-yaml" | "text/yaml" => Ok(Self::Yaml),
            "application/vnd.kubernetes.protobuf" => Ok(Self::Protobuf),
            _ => Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {base:?})"
                ),
            )),
        }
    }
}

/// 413 for a body over [`MAX_REQUEST_BYTES`], as upstream words it.
pub fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        413,
        "RequestEntityTooLarge",
        format!("Request entity too large: limit is {limit}"),
    )
}

fn check_depth(body: &[u8], yaml: bool, what: &str) -> Result<(), ApiError> {
    if gantry_k8s_rules::depth::too_deep(body, yaml) {
        return Err(ApiError::bad_request(format!(
            "the body of the {what} request is nested more than {MAX_DEPTH} levels deep"
        )));
    }
    Ok(())
}

/// Decodes a JSON document (only JSON: trailing commas, comments and YAML are errors).
pub fn json(body: &[u8], what: &str) -> Result<Value, ApiError> {
    check_depth(body, false, what)?;
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the {what} request is not valid JSON: {e}"
        ))
    })
}

/// Decodes a YAML document (one; JSON is valid YAML).
pub fn yaml(body: &[u8], what: &str) -> Result<Value, ApiError> {
    check_depth(body, true, what)?;
    serde_yaml::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the {what} request is not valid YAML: {e}"
        ))
    })
}

/// [`duplicate_fields`] of a body sent as JSON (under content type `ct`); none for YAML and
/// protobuf bodies, and for bodies too deep to decode (they are refused anyway).
pub fn repeated_keys(ct: Option<&str>, body: &[u8]) -> Vec<String> {
    let json = matches!(Format::from_content_type(ct), Ok(Format::Json));
    if !json
        || body.starts_with(super::protobuf::MAGIC)
        || gantry_k8s_rules::depth::too_deep(body, false)
    {
        return Vec::new();
    }
    duplicate_fields(body)
}

/// The paths of keys that repeat within one JSON object (`data.a`, `spec.containers[0].name`),
/// as upstream's strict decoder reports them (`duplicate field "data.a"`). Empty for bodies
/// that are not JSON objects; the body has passed [`json`] already.
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = serde::de::DeserializeSeed::deserialize(
        Dups {
            path: String::new(),
            found: &mut found,
        },
        &mut de,
    );
    found
}

/// Walks one value, recording repeated keys under `path`.
struct Dups<'a> {
    path: String,
    found: &'a mut Vec<String>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Dups<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Dups<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(k) = m.next_key::<String>()? {
            let path = if self.path.is_empty() {
                k.clone()
            } else {
                format!("{}.{k}", self.path)
            };
            if !seen.insert(k) {
                self.found.push(path.clone());
            }
            m.next_value_seed(Dups {
                path,
                found: &mut *self.found,
            })?;
        }
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
        let mut i = 0;
        while s
            .next_element_seed(Dups {
                path: format!("{}[{i}]", self.path),
                found: &mut *self.found,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// Decodes a request body in `format`; an empty body is an empty object.
pub fn body(body: &[u8], format: Format, what: &str) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    if body.len() > MAX_REQUEST_BYTES {
        return Err(too_large(MAX_REQUEST_BYTES));
    }
    match format {
        // client-go's typed clients send built-in kinds as protobuf.
        Format::Protobuf => super::protobuf::decode(body),
        _ if body.starts_with(super::protobuf::MAGIC) => super::protobuf::decode(body),
        Format::Json => json(body, what),
        Format::Yaml => yaml(body, what),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_only_json() {
        assert!(json(br#"{"a": 1,}"#, "create").is_err(), "trailing comma");
        assert!(json(b"a: 1", "create").is_err(), "YAML");
        assert_eq!(json(br#"{"a": 1}"#, "create").expect("json")["a"], 1);
        assert_eq!(yaml(b"a: 1", "create").expect("yaml")["a"], 1);
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let e = json(deep.as_bytes(), "create").expect_err("deep");
        assert_eq!((e.code, e.reason), (400, "BadRequest"));
        assert!(e.message.contains("128 levels"), "{}", e.message);
        assert!(yaml(deep.as_bytes(), "create").is_err());
    }

    #[test]
    fn repeated_keys_are_found_with_their_paths() {
        let body = br#"{"data":{"a":"1","b":"2","a":"3"},"metadata":{"name":"x"},"list":[{"k":1,"k":2}],"data":{}}"#;
        assert_eq!(duplicate_fields(body), vec!["data.a", "list[0].k", "data"]);
        assert!(duplicate_fields(br#"{"a":{"a":{"a":1}}}"#).is_empty());
    }

    #[test]
    fn content_types() {
        assert_eq!(Format::from_content_type(None).expect("none"), Format::Json);
        assert_eq!(
            Format::from_content_type(Some("application/json; charset=utf-8")).expect("json"),
            Format::Json
        );
        assert_eq!(
            Format::from_content_type(Some("application/yaml")).expect("yaml"),
            Format::Yaml
        );
        let e = Format::from_content_type(Some("text/plain")).expect_err("plain");
        assert_eq!(e.code, 415);
    }

    #[test]
    fn sizes() {
        let big = vec![b' '; MAX_REQUEST_BYTES + 1];
        assert_eq!(
            body(&big, Format::Json, "create").expect_err("big").code,
            413
        );
    }
}
