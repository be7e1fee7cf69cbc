//! CRD structural schemas as kube-apiserver applies them to custom resources on every
//! write: unknown fields are pruned (and reported for `fieldValidation`), `null`s of
//! non-nullable fields dropped, `default`s filled in, then types, enums, formats,
//! bounds, `required`, `x-kubernetes-int-or-string`, `-preserve-unknown-fields` and
//! `-embedded-resource` checked, every problem a field error with its path.

use super::status::{ApiError, FieldError};
use serde_json::{Map, Value};
use std::sync::Arc;

/// `?fieldValidation=`: what an unknown field does. Upstream's default is Warn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(v: Option<&str>) -> Result<Self, ApiError> {
        match v.unwrap_or_default() {
            "" | "Warn" => Ok(Self::Warn),
            "Ignore" => Ok(Self::Ignore),
            "Strict" => Ok(Self::Strict),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation {other:?} is invalid: must be one of Ignore, Warn or Strict"
            ))),
        }
    }
}

/// One request's checking state: the mode, the warnings to send back as `Warning` headers,
/// and the custom resource's schema (read before the store is locked for the write).
#[derive(Debug, Default)]
pub struct Checks {
    pub mode: FieldValidation,
    pub warnings: Vec<String>,
    pub schema: Option<CrdSchema>,
    /// Keys the JSON body repeats (their paths), reported with the unknown fields.
    pub duplicates: Vec<String>,
}

/// A custom resource version's `openAPIV3Schema`, read in place from the stored CRD (shared,
/// not copied: a CRD's schema can be tens of kilobytes and every write of its kind reads it).
#[derive(Debug, Clone)]
pub struct CrdSchema {
    crd: Arc<Value>,
    version: usize,
}

impl CrdSchema {
    /// The schema of `version` in `crd`, if the CRD serves that version with a schema.
    pub fn of(crd: Arc<Value>, version: &str) -> Option<Self> {
        let version = crd
            .pointer("/spec/versions")?
            .as_array()?
            .iter()
            .position(|v| {
                v.get("name").and_then(Value::as_str) == Some(version)
                    && v.pointer("/schema/openAPIV3Schema").is_some()
            })?;
        Some(Self { crd, version })
    }

    pub fn value(&self) -> &Value {
        &self.crd["spec"]["versions"][self.version]["schema"]["openAPIV3Schema"]
    }
}

impl Checks {
    pub fn new(mode: FieldValidation) -> Self {
        Self {
            mode,
            ..Default::default()
        }
    }
}

/// The result of walking an object: field errors and the paths of pruned unknown fields.
#[derive(Debug, Default)]
pub struct Walk {
    pub errors: Vec<FieldError>,
    pub unknown: Vec<String>,
}

/// Prunes, defaults and validates the custom resource `obj` against `schema` (the version's
/// `openAPIV3Schema`). `apiVersion`, `kind` and `metadata` at the root are the server's.
pub fn apply(schema: &Value, obj: &mut Value) -> Walk {
    let mut w = Walk::default();
    walk(schema, obj, "", true, &mut w, true);
    w
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

/// `mutate`: prune and default (false inside `allOf`/`anyOf`/`oneOf`, which only constrain).
fn walk(schema: &Value, v: &mut Value, path: &str, root: bool, w: &mut Walk, mutate: bool) {
    let shown = if path.is_empty() { "<root>" } else { path };
    let ty = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if flag(schema, "x-kubernetes-int-or-string") {
        if !(v.is_string() || type_name(v) == "integer") {
            w.errors.push(FieldError::type_invalid(
                shown,
                v,
                &format!(
                    "{shown} in body must be of type integer-or-string: {:?}",
                    type_name(v)
                ),
            ));
        }
    } else if !ty.is_empty() {
        let actual = type_name(v);
        let ok = actual == ty
            || (ty == "number" && actual == "integer")
            || (v.is_null() && flag(schema, "nullable"));
        if !ok {
            w.errors.push(FieldError::type_invalid(
                shown,
                v,
                &format!("{shown} in body must be of type {ty}: {actual:?}"),
            ));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !v.is_null()
        && !allowed.contains(v)
    {
        w.errors.push(FieldError::not_supported(shown, v, allowed));
    }
    scalar_bounds(schema, v, shown, w);
    for (key, need) in [("allOf", usize::MAX), ("anyOf", 1), ("oneOf", 0)] {
        let Some(subs) = schema.get(key).and_then(Value::as_array) else {
            continue;
        };
        let mut passing = 0;
        let mut first_errors = Vec::new();
        for s in subs {
            let mut copy = v.clone();
            let mut sw = Walk::default();
            walk(s, &mut copy, path, root, &mut sw, false);
            if sw.errors.is_empty() {
                passing += 1;
            } else if first_errors.is_empty() || need == usize::MAX {
                first_errors.extend(sw.errors);
            }
        }
        match key {
            "allOf" => w.errors.extend(first_errors),
            "anyOf" if passing == 0 => w.errors.extend(first_errors),
            "oneOf" if passing != 1 => w.errors.push(FieldError::invalid(
                shown,
                v,
                &format!("must validate one and only one schema (oneOf); {passing} matched"),
            )),
            _ => {}
        }
    }
    match v {
        Value::Object(map) => object(schema, map, path, root, w, mutate),
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (i, it) in items.iter_mut().enumerate() {
                    walk(item, it, &format!("{path}[{i}]"), false, w, mutate);
                }
            }
        }
        _ => {}
    }
}

fn object(
    schema: &Value,
    map: &mut Map<String, Value>,
    path: &str,
    root: bool,
    w: &mut Walk,
    mutate: bool,
) {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields")
        || additional == Some(&Value::Bool(true));
    let embedded = flag(schema, "x-kubernetes-embedded-resource");
    let server_owned =
        |k: &str| (root || embedded) && matches!(k, "apiVersion" | "kind" | "metadata");
    if mutate {
        let keys: Vec<String> = map.keys().cloned().collect();
        for k in keys {
            let sub = props
                .and_then(|p| p.get(&k))
                .or(additional.filter(|a| a.is_object()));
            match sub {
                Some(s) => {
                    if map.get(&k).is_some_and(Value::is_null) && !flag(s, "nullable") {
                        map.remove(&k);
                    }
                }
                None if server_owned(&k) || preserve => {}
                None => {
                    map.remove(&k);
                    w.unknown.push(join(path, &k));
                }
            }
        }
        for (k, s) in props.into_iter().flatten() {
            if !map.contains_key(k)
                && let Some(d) = s.get("default")
            {
                map.insert(k.clone(), d.clone());
            }
        }
    }
    for (k, v) in map.iter_mut() {
        if server_owned(k) {
            continue;
        }
        let sub = props
            .and_then(|p| p.get(k))
            .or(additional.filter(|a| a.is_object()));
        if let Some(s) = sub {
            walk(s, v, &join(path, k), false, w, mutate);
        }
    }
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    for r in required.filter_map(Value::as_str) {
        if !map.contains_key(r) {
            w.errors.push(FieldError::required(join(path, r)));
        }
    }
    if embedded {
        for r in ["apiVersion", "kind"] {
            if map.get(r).and_then(Value::as_str).is_none_or(str::is_empty) {
                w.errors.push(FieldError::required(join(path, r)));
            }
        }
    }
    let count = map.len() as u64;
    let shown = if path.is_empty() { "<root>" } else { path };
    if let Some(min) = schema
        .get("minProperties")
        .and_then(Value::as_u64)
        .filter(|m| count < *m)
    {
        w.errors.push(FieldError::invalid(
            shown,
            &Value::from(count),
            &format!("{shown} in body should have at least {min} properties"),
        ));
    }
    if let Some(max) = schema
        .get("maxProperties")
        .and_then(Value::as_u64)
        .filter(|m| count > *m)
    {
        w.errors.push(FieldError::invalid(
            shown,
            &Value::from(count),
            &format!("{shown} in body should have at most {max} properties"),
        ));
    }
}

/// Bounds and formats of strings, numbers and arrays.
fn scalar_bounds(schema: &Value, v: &Value, path: &str, w: &mut Walk) {
    let num = |k: &str| schema.get(k).and_then(Value::as_f64);
    let int = |k: &str| schema.get(k).and_then(Value::as_u64);
    let mut bad = |why: String| w.errors.push(FieldError::invalid(path, v, &why));
    match v {
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(m) = int("minLength").filter(|m| len < *m) {
                bad(format!("{path} in body should be at least {m} chars long"));
            }
            if let Some(m) = int("maxLength").filter(|m| len > *m) {
                bad(format!("{path} in body should be at most {m} chars long"));
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(p) {
                    Ok(re) if !re.is_match(s) => bad(format!("{path} in body should match '{p}'")),
                    _ => {}
                }
            }
            if let Some(f) = schema.get("format").and_then(Value::as_str)
                && !format_ok(f, s)
            {
                bad(format!("{path} in body must be of type {f}: {s:?}"));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(m) = num("minimum") {
                let excl = flag(schema, "exclusiveMinimum");
                if x < m || (excl && x == m) {
                    bad(format!(
                        "{path} in body should be greater than {}{m}",
                        if excl { "" } else { "or equal to " }
                    ));
                }
            }
            if let Some(m) = num("maximum") {
                let excl = flag(schema, "exclusiveMaximum");
                if x > m || (excl && x == m) {
                    bad(format!(
                        "{path} in body should be less than {}{m}",
                        if excl { "" } else { "or equal to " }
                    ));
                }
            }
            if schema.get("format").and_then(Value::as_str) == Some("int32")
                && n.as_i64().is_none_or(|i| i32::try_from(i).is_err())
            {
                bad(format!("{path} in body must be of type int32"));
            }
        }
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(m) = int("minItems").filter(|m| len < *m) {
                bad(format!("{path} in body should have at least {m} items"));
            }
            if let Some(m) = int("maxItems").filter(|m| len > *m) {
                bad(format!("{path} in body should have at most {m} items"));
            }
        }
        _ => {}
    }
}

/// The string formats kube-apiserver checks; unknown formats pass, as upstream.
fn format_ok(format: &str, s: &str) -> bool {
    use base64::Engine;
    match format {
        "date-time" | "datetime" => chrono::DateTime::parse_from_rfc3339(s).is_ok(),
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
        "uuid" => uuid::Uuid::parse_str(s).is_ok(),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => s.split_once('/').is_some_and(|(ip, bits)| {
            ip.parse::<std::net::IpAddr>().is_ok() && bits.parse::<u8>().is_ok()
        }),
        "hostname" => gantry_k8s_rules::names::dns_subdomain_problem(s).is_none(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["mig"], "properties": {
                "mig": {"type": "object", "properties": {
                    "strategy": {"type": "string", "enum": ["none", "single", "mixed"], "default": "single"}}},
                "devicePlugin": {"type": "object", "properties": {
                    "enabled": {"type": "boolean", "nullable": true, "default": true},
                    "config": {"type": "object", "properties": {"name": {"type": "string"}}}}},
                "port": {"x-kubernetes-int-or-string": true},
                "replicas": {"type": "integer", "format": "int32", "minimum": 0},
                "since": {"type": "string", "format": "date-time"},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "x-kubernetes-preserve-unknown-fields": true}}},
            "status": {"type": "object", "properties": {"state": {"type": "string"}}}}})
    }

    fn run(mut obj: Value) -> (Value, Walk) {
        let w = apply(&schema(), &mut obj);
        (obj, w)
    }

    #[test]
    fn defaults_prunes_and_keeps_metadata() {
        let (o, w) = run(
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"},
            "spec": {"mig": {}, "devicePlugin": {"enabeld": false, "config": null},
                     "extra": {"anything": [1]}, "labels": {"a": "b"}}, "bogus": 1}),
        );
        assert!(w.errors.is_empty(), "{:?}", w.errors);
        assert_eq!(o["spec"]["mig"]["strategy"], "single");
        assert_eq!(o["spec"]["devicePlugin"]["enabled"], true);
        assert!(
            o["spec"]["devicePlugin"].get("config").is_none(),
            "non-nullable null dropped"
        );
        assert_eq!(o["spec"]["extra"]["anything"], json!([1]));
        assert_eq!(o["metadata"]["name"], "n");
        assert_eq!(
            w.unknown,
            vec!["bogus".to_string(), "spec.devicePlugin.enabeld".into()]
        );
    }

    #[test]
    fn errors_name_the_path() {
        let (_, w) = run(json!({"spec": {"mig": {"strategy": "sometimes"}}}));
        assert_eq!(w.errors.len(), 1);
        assert_eq!(w.errors[0].field, "spec.mig.strategy");
        assert_eq!(w.errors[0].reason, "FieldValueNotSupported");
        assert!(
            w.errors[0]
                .message
                .contains("\"none\", \"single\", \"mixed\"")
        );
        let (_, w) = run(json!({"spec": {}}));
        assert_eq!(w.errors[0].field, "spec.mig");
        assert_eq!(w.errors[0].reason, "FieldValueRequired");
        let (_, w) = run(json!({"spec": {"mig": {}, "replicas": "3", "port": 1.5,
            "since": "yesterday", "labels": {"a": 1}, "template": {"kind": "Pod"}}}));
        let fields: Vec<&str> = w.errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.replicas",
                "spec.port",
                "spec.since",
                "spec.labels.a",
                "spec.template.apiVersion"
            ],
            "{:?}",
            w.errors
        );
        let (_, w) = run(json!({"spec": {"mig": {}, "replicas": -1, "port": "http"}}));
        assert_eq!(w.errors.len(), 1, "{:?}", w.errors);
        assert!(w.errors[0].message.contains("greater than or equal to 0"));
    }

    #[test]
    fn modes() {
        assert_eq!(
            FieldValidation::parse(None).expect("default"),
            FieldValidation::Warn
        );
        assert_eq!(
            FieldValidation::parse(Some("Strict")).expect("strict"),
            FieldValidation::Strict
        );
        assert_eq!(
            FieldValidation::parse(Some("strict"))
                .expect_err("case")
                .code,
            400
        );
    }
}
