//! Request bodies in Kubernetes' protobuf encoding, for the kinds client-go's typed clients
//! send. Since client-go 1.32, typed clients (helm's release storage, `kubectl create namespace`,
//! `kubectl create secret`) encode built-in objects as `application/vnd.kubernetes.protobuf` with
//! no fallback to JSON, so the API server must read them. Responses stay JSON (clients accept it).
//!
//! The wire format: the magic `k8s\0`, then a `runtime.Unknown` message
//! {1: TypeMeta {1: apiVersion, 2: kind}, 2: raw object bytes, 3: contentEncoding, 4: contentType}.
//! Each supported kind is decoded with a field table below into the JSON the REST layer takes.

use super::status::ApiError;
use base64::Engine;
use serde_json::{Map, Value, json};

/// The prefix of every protobuf-encoded Kubernetes object.
pub const MAGIC: &[u8] = b"k8s\0";

/// How one field's value is turned into JSON.
#[derive(Clone, Copy)]
enum Ty {
    Str,
    Int,
    Bool,
    Msg(&'static [Field]),
    /// `map<string, string>`.
    MapStr,
    /// `map<string, bytes>`: base64 values.
    MapBytes,
    RepStr,
    RepMsg(&'static [Field]),
}

/// (field number, JSON name, type). Fields not listed (timestamps, managedFields, status) are
/// skipped: the server sets them.
type Field = (u32, &'static str, Ty);

const OWNER_REFERENCE: &[Field] = &[
    (1, "kind", Ty::Str),
    (3, "name", Ty::Str),
    (4, "uid", Ty::Str),
    (5, "apiVersion", Ty::Str),
    (6, "controller", Ty::Bool),
    (7, "blockOwnerDeletion", Ty::Bool),
];

const OBJECT_META: &[Field] = &[
    (1, "name", Ty::Str),
    (2, "generateName", Ty::Str),
    (3, "namespace", Ty::Str),
    (5, "uid", Ty::Str),
    (6, "resourceVersion", Ty::Str),
    (7, "generation", Ty::Int),
    (10, "deletionGracePeriodSeconds", Ty::Int),
    (11, "labels", Ty::MapStr),
    (12, "annotations", Ty::MapStr),
    (13, "ownerReferences", Ty::RepMsg(OWNER_REFERENCE)),
    (14, "finalizers", Ty::RepStr),
];

const SECRET: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META)),
    (2, "data", Ty::MapBytes),
    (3, "type", Ty::Str),
    (4, "stringData", Ty::MapStr),
    (5, "immutable", Ty::Bool),
];

const CONFIG_MAP: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META)),
    (2, "data", Ty::MapStr),
    (3, "binaryData", Ty::MapBytes),
    (4, "immutable", Ty::Bool),
];

const NAMESPACE_SPEC: &[Field] = &[(1, "finalizers", Ty::RepStr)];

const NAMESPACE: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META)),
    (2, "spec", Ty::Msg(NAMESPACE_SPEC)),
];

const PRECONDITIONS: &[Field] = &[(1, "uid", Ty::Str), (2, "resourceVersion", Ty::Str)];

const DELETE_OPTIONS: &[Field] = &[
    (1, "gracePeriodSeconds", Ty::Int),
    (2, "preconditions", Ty::Msg(PRECONDITIONS)),
    (3, "orphanDependents", Ty::Bool),
    (4, "propagationPolicy", Ty::Str),
    (5, "dryRun", Ty::RepStr),
];

const SERVICE_ACCOUNT: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META)),
    (4, "automountServiceAccountToken", Ty::Bool),
];

const BOUND_OBJECT_REFERENCE: &[Field] = &[
    (1, "kind", Ty::Str),
    (2, "apiVersion", Ty::Str),
    (3, "name", Ty::Str),
    (4, "uid", Ty::Str),
];

const TOKEN_REQUEST_SPEC: &[Field] = &[
    (1, "audiences", Ty::RepStr),
    (3, "boundObjectRef", Ty::Msg(BOUND_OBJECT_REFERENCE)),
    (4, "expirationSeconds", Ty::Int),
];

const TOKEN_REQUEST: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META)),
    (2, "spec", Ty::Msg(TOKEN_REQUEST_SPEC)),
];

const POLICY_RULE: &[Field] = &[
    (1, "verbs", Ty::RepStr),
    (2, "apiGroups", Ty::RepStr),
    (3, "resources", Ty::RepStr),
    (4, "resourceNames", Ty::RepStr),
    (5, "nonResourceURLs", Ty::RepStr),
];

const ROLE: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META)),
    (2, "rules", Ty::RepMsg(POLICY_RULE)),
];

const SUBJECT: &[Field] = &[
    (1, "kind", Ty::Str),
    (2, "apiGroup", Ty::Str),
    (3, "name", Ty::Str),
    (4, "namespace", Ty::Str),
];

const ROLE_REF: &[Field] = &[
    (1, "apiGroup", Ty::Str),
    (2, "kind", Ty::Str),
    (3, "name", Ty::Str),
];

const ROLE_BINDING: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META)),
    (2, "subjects", Ty::RepMsg(SUBJECT)),
    (3, "roleRef", Ty::Msg(ROLE_REF)),
];

/// The kinds this server reads in protobuf: (apiVersion, kind, fields).
const KINDS: &[(&str, &str, &[Field])] = &[
    ("v1", "Secret", SECRET),
    ("v1", "ConfigMap", CONFIG_MAP),
    ("v1", "Namespace", NAMESPACE),
    // `kubectl create serviceaccount|token|role|rolebinding|clusterrole|clusterrolebinding`.
    ("v1", "ServiceAccount", SERVICE_ACCOUNT),
    ("authentication.k8s.io/v1", "TokenRequest", TOKEN_REQUEST),
    ("rbac.authorization.k8s.io/v1", "Role", ROLE),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", ROLE),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", ROLE_BINDING),
    (
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        ROLE_BINDING,
    ),
    ("v1", "DeleteOptions", DELETE_OPTIONS),
    ("meta.k8s.io/v1", "DeleteOptions", DELETE_OPTIONS),
];

/// Decodes a protobuf request body (starting with [`MAGIC`]) into the object's JSON.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let bad = |why: &str| ApiError::bad_request(format!("protobuf request body: {why}"));
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("missing the k8s\\0 prefix"))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for item in Reader(rest) {
        match item.map_err(|e| bad(&e))? {
            (1, Wire::Len(tm)) => {
                for f in Reader(tm) {
                    match f.map_err(|e| bad(&e))? {
                        (1, Wire::Len(s)) => api_version = utf8(s).map_err(&bad)?,
                        (2, Wire::Len(s)) => kind = utf8(s).map_err(&bad)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Len(r)) => raw = r,
            (3, Wire::Len(enc)) if !enc.is_empty() => {
                return Err(bad("a content encoding other than none is not supported"));
            }
            _ => {}
        }
    }
    let fields = KINDS
        .iter()
        .find(|(v, k, _)| *v == api_version && *k == kind)
        .map(|(_, _, f)| *f)
        .ok_or_else(|| {
            ApiError::unsupported_media_type(&format!(
                "application/vnd.kubernetes.protobuf for {api_version} {kind} (send JSON)"
            ))
        })?;
    let mut obj = message(raw, fields).map_err(|e| bad(&format!("{kind}: {e}")))?;
    if kind != "DeleteOptions" {
        obj.insert("apiVersion".into(), json!(api_version));
        obj.insert("kind".into(), json!(kind));
    }
    Ok(Value::Object(obj))
}

fn utf8(b: &[u8]) -> Result<String, &'static str> {
    String::from_utf8(b.to_vec()).map_err(|_| "a string field is not UTF-8")
}

fn message(bytes: &[u8], fields: &[Field]) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for item in Reader(bytes) {
        let (num, wire) = item?;
        let Some(&(_, name, ty)) = fields.iter().find(|(n, _, _)| *n == num) else {
            continue;
        };
        match (ty, wire) {
            (Ty::Str, Wire::Len(b)) => {
                out.insert(name.into(), json!(utf8(b)?));
            }
            (Ty::Int, Wire::Varint(v)) => {
                // int64 fields are plain varints (two's complement for negatives).
                out.insert(name.into(), json!(v as i64));
            }
            (Ty::Bool, Wire::Varint(v)) => {
                out.insert(name.into(), json!(v != 0));
            }
            (Ty::Msg(inner), Wire::Len(b)) => {
                out.insert(name.into(), Value::Object(message(b, inner)?));
            }
            (Ty::MapStr | Ty::MapBytes, Wire::Len(b)) => {
                let (k, v) = map_entry(b)?;
                let v = if matches!(ty, Ty::MapBytes) {
                    b64(v)
                } else {
                    utf8(v)?
                };
                let map = out.entry(name).or_insert_with(|| json!({}));
                if let Some(m) = map.as_object_mut() {
                    m.insert(k, json!(v));
                }
            }
            (Ty::RepStr, Wire::Len(b)) => push(&mut out, name, json!(utf8(b)?)),
            (Ty::RepMsg(inner), Wire::Len(b)) => {
                push(&mut out, name, Value::Object(message(b, inner)?))
            }
            _ => return Err(format!("field {name} has the wrong wire type")),
        }
    }
    Ok(out)
}

fn push(out: &mut Map<String, Value>, name: &str, v: Value) {
    let list = out.entry(name).or_insert_with(|| json!([]));
    if let Some(a) = list.as_array_mut() {
        a.push(v);
    }
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// A map entry message: {1: key, 2: value}.
fn map_entry(b: &[u8]) -> Result<(String, &[u8]), String> {
    let (mut key, mut value) = (String::new(), &[][..]);
    for item in Reader(b) {
        match item? {
            (1, Wire::Len(k)) => key = utf8(k)?,
            (2, Wire::Len(v)) => value = v,
            _ => {}
        }
    }
    Ok((key, value))
}

/// One field's payload by wire type.
enum Wire<'a> {
    Varint(u64),
    Len(&'a [u8]),
    Fixed,
}

/// Iterates (field number, payload) over a message's bytes.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, &'static str> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.0.split_first().ok_or("truncated varint")?;
            self.0 = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 10 bytes")
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.0.len() {
            return Err("truncated field");
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    fn field(&mut self) -> Result<(u32, Wire<'a>), &'static str> {
        let key = self.varint()?;
        let num = u32::try_from(key >> 3).map_err(|_| "field number out of range")?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| "length out of range")?;
                Wire::Len(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            _ => return Err("unsupported wire type (groups)"),
        };
        Ok((num, wire))
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<(u32, Wire<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let r = self.field().map_err(str::to_string);
        if r.is_err() {
            self.0 = &[];
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    fn len(num: u32, payload: &[u8], out: &mut Vec<u8>) {
        varint(u64::from(num) << 3 | 2, out);
        varint(payload.len() as u64, out);
        out.extend_from_slice(payload);
    }
    fn int(num: u32, v: u64, out: &mut Vec<u8>) {
        varint(u64::from(num) << 3, out);
        varint(v, out);
    }
    fn entry(k: &str, v: &[u8]) -> Vec<u8> {
        let mut e = Vec::new();
        len(1, k.as_bytes(), &mut e);
        len(2, v, &mut e);
        e
    }
    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut tm = Vec::new();
        len(1, api_version.as_bytes(), &mut tm);
        len(2, kind.as_bytes(), &mut tm);
        let mut u = MAGIC.to_vec();
        len(1, &tm, &mut u);
        len(2, raw, &mut u);
        u
    }

    #[test]
    fn decodes_a_helm_release_secret() {
        let mut meta = Vec::new();
        len(1, b"sh.helm.release.v1.gantry.v1", &mut meta);
        len(3, b"gantry", &mut meta);
        len(11, &entry("owner", b"helm"), &mut meta);
        len(11, &entry("status", b"pending-install"), &mut meta);
        // creationTimestamp (8) is skipped.
        len(8, &[8, 1], &mut meta);
        let mut secret = Vec::new();
        len(1, &meta, &mut secret);
        len(2, &entry("release", b"\x1f\x8b\x00binary"), &mut secret);
        len(3, b"helm.sh/release.v1", &mut secret);
        let v = decode(&envelope("v1", "Secret", &secret)).expect("decodes");
        assert_eq!(
            v,
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "sh.helm.release.v1.gantry.v1", "namespace": "gantry",
                             "labels": {"owner": "helm", "status": "pending-install"}},
                "data": {"release": b64(b"\x1f\x8b\x00binary")},
                "type": "helm.sh/release.v1",
            })
        );
    }

    #[test]
    fn decodes_delete_options_and_namespaces() {
        let mut opts = Vec::new();
        int(1, 30, &mut opts);
        len(4, b"Background", &mut opts);
        len(5, b"All", &mut opts);
        let v = decode(&envelope("meta.k8s.io/v1", "DeleteOptions", &opts)).expect("decodes");
        assert_eq!(
            v,
            json!({"gracePeriodSeconds": 30, "propagationPolicy": "Background", "dryRun": ["All"]})
        );
        let mut meta = Vec::new();
        len(1, b"gantry", &mut meta);
        let mut ns = Vec::new();
        len(1, &meta, &mut ns);
        let v = decode(&envelope("v1", "Namespace", &ns)).expect("decodes");
        assert_eq!(v["metadata"]["name"], "gantry");
        assert_eq!(v["kind"], "Namespace");
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        let err = decode(&envelope("apps/v1", "Deployment", &[])).expect_err("unsupported");
        assert!(err.to_string().contains("Deployment"), "{err}");
        let mut truncated = envelope("v1", "Secret", &[]);
        truncated.push(0x0a);
        truncated.push(0x05);
        assert!(decode(&truncated).is_err());
        assert!(decode(b"k8s\0\x0f").is_err());
    }
}
