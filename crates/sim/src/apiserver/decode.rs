//! Request bodies as the real API server reads them: the content type picks the one
//! decoder (JSON is never retried as YAML, which is quadratic in nesting), bodies are
//! limited to 3 MiB and to a nesting depth checked by a linear scan before any parser
//! runs, and objects are limited to what etcd stores.

use super::status::ApiError;
use serde_json::Value;

/// `--max-request-bytes` of kube-apiserver's generic handlers (3 MiB).
pub const MAX_REQUEST_BYTES: usize = 3 << 20;
/// etcd's default `--max-request-bytes` (1.5 MiB): the largest object that can be stored.
pub const MAX_OBJECT_BYTES: usize = 3 << 19;
/// Deepest nesting of objects and arrays accepted (serde_json's own recursion limit).
pub const MAX_DEPTH: usize = 128;

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

/// The deepest nesting of `{`/`[` outside strings, stopping at `limit + 1`. Linear; quotes
/// are JSON's (and YAML's double quotes); YAML single-quoted scalars are skipped too.
pub fn nesting_depth(body: &[u8], limit: usize, yaml: bool) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                i += 1;
                while i < body.len() && body[i] != b'"' {
                    i += if body[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if yaml => {
                i += 1;
                while i < body.len() && body[i] != b'\'' {
                    i += 1;
                }
            }
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
                if max > limit {
                    return max;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    max
}

fn check_depth(body: &[u8], yaml: bool, what: &str) -> Result<(), ApiError> {
    if nesting_depth(body, MAX_DEPTH, yaml) > MAX_DEPTH {
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

/// Refuses an object larger than etcd stores, as upstream's storage layer does.
pub fn check_object_size(obj: &Value) -> Result<(), ApiError> {
    let size = serde_json::to_vec(obj).map(|v| v.len()).unwrap_or(0);
    if size > MAX_OBJECT_BYTES {
        return Err(ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("etcdserver: request is too large ({size} bytes; limit is {MAX_OBJECT_BYTES})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_is_counted_outside_strings() {
        assert_eq!(
            nesting_depth(br#"{"a":{"b":[1,{"c":"{{{["}]}}"#, 100, false),
            4
        );
        assert_eq!(nesting_depth(br#"{"a":"\"{{"}"#, 100, false), 1);
        assert_eq!(nesting_depth(b"a: '{{{'\nb: [1]", 100, true), 1);
        let deep = "{\"a\":".repeat(100_000);
        assert_eq!(nesting_depth(deep.as_bytes(), 128, false), 129);
    }

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
        let obj = serde_json::json!({"data": {"a": "x".repeat(MAX_OBJECT_BYTES)}});
        assert_eq!(check_object_size(&obj).expect_err("object").code, 413);
        assert!(check_object_size(&serde_json::json!({"a": 1})).is_ok());
    }
}
