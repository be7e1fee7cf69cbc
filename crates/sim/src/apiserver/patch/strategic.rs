//! Strategic merge patch for built-in types: maps merge recursively, lists of objects
//! merge by their patch merge key (containers by name, volumeMounts by mountPath, ...),
//! a few primitive lists merge as sets (finalizers), every other list is replaced.
//! Directives kubectl sends are honoured: `$patch: replace|delete|merge`,
//! `$retainKeys`, `$deleteFromPrimitiveList/<f>`, `$setElementOrder/<f>`, `null` deletes.

use super::super::status::ApiError;
use serde_json::{Map, Value};

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind<'a> {
    /// Objects keyed by this field.
    Keyed(&'a str),
    /// Primitives merged as a set.
    Set,
    /// Replaced whole.
    Atomic,
}

/// The merge strategy of a list field of the built-in types, by field name; `sample`
/// is an element, to tell container ports (`containerPort`) from service ports (`port`).
pub fn list_kind<'a>(field: &str, sample: Option<&Value>) -> ListKind<'a> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims" => ListKind::Keyed("name"),
        "volumeMounts" => ListKind::Keyed("mountPath"),
        "volumeDevices" => ListKind::Keyed("devicePath"),
        "hostAliases" => ListKind::Keyed("ip"),
        "conditions" | "addresses" => ListKind::Keyed("type"),
        "ownerReferences" => ListKind::Keyed("uid"),
        "topologySpreadConstraints" => ListKind::Keyed("topologyKey"),
        "ports" => {
            if sample.and_then(|s| s.get("containerPort")).is_some() {
                ListKind::Keyed("containerPort")
            } else {
                ListKind::Keyed("port")
            }
        }
        "finalizers" | "podCIDRs" => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

/// Applies `patch` to `original`.
pub fn apply(original: &Value, patch: &Value) -> Result<Value, ApiError> {
    let (Some(orig), Some(p)) = (original.as_object(), patch.as_object()) else {
        return Err(ApiError::bad_request(
            "strategic merge patch must be a JSON object",
        ));
    };
    let mut out = orig.clone();
    merge_map(&mut out, p)?;
    Ok(Value::Object(out))
}

fn merge_map(orig: &mut Map<String, Value>, patch: &Map<String, Value>) -> Result<(), ApiError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *orig = strip_directives(patch);
            return Ok(());
        }
        Some("delete") => {
            orig.clear();
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown patch directive $patch: {other:?}"
            )));
        }
    }
    // Upstream clears the keys not retained first, then merges the patch in.
    if let Some(retain) = patch.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        orig.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (key, pv) in patch {
        if key == "$patch" || key == "$retainKeys" || key.starts_with(SET_ORDER) {
            continue;
        }
        if let Some(field) = key.strip_prefix(DELETE_FROM) {
            let remove: Vec<&Value> = pv
                .as_array()
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            if let Some(list) = orig.get_mut(field).and_then(Value::as_array_mut) {
                list.retain(|v| !remove.contains(&v));
            }
            continue;
        }
        match pv {
            Value::Null => {
                orig.remove(key);
            }
            Value::Object(pm) => match orig.get_mut(key) {
                Some(Value::Object(om)) => {
                    if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
                        orig.remove(key);
                    } else {
                        merge_map(om, pm)?;
                    }
                }
                _ => {
                    if pm.get("$patch").and_then(Value::as_str) != Some("delete") {
                        orig.insert(key.clone(), Value::Object(strip_directives(pm)));
                    }
                }
            },
            Value::Array(pl) => {
                let merged = match orig.get(key).and_then(Value::as_array) {
                    Some(ol) => merge_list(key, ol, pl)?,
                    None => merge_list(key, &[], pl)?,
                };
                orig.insert(key.clone(), Value::Array(merged));
            }
            other => {
                orig.insert(key.clone(), other.clone());
            }
        }
    }
    Ok(())
}

fn merge_list(field: &str, orig: &[Value], patch: &[Value]) -> Result<Vec<Value>, ApiError> {
    if patch
        .iter()
        .any(|v| v.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return Ok(patch
            .iter()
            .filter(|v| v.get("$patch").is_none())
            .map(strip_value)
            .collect());
    }
    match list_kind(field, patch.first().or(orig.first())) {
        ListKind::Atomic => Ok(patch.iter().map(strip_value).collect()),
        ListKind::Set => {
            let mut out = orig.to_vec();
            for v in patch {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            Ok(out)
        }
        ListKind::Keyed(mk) => {
            let mut out = orig.to_vec();
            for item in patch {
                let Some(pm) = item.as_object() else {
                    return Err(ApiError::bad_request(format!(
                        "strategic merge patch: elements of {field} must be objects keyed by {mk}"
                    )));
                };
                let key = pm.get(mk);
                let pos = key.and_then(|k| out.iter().position(|o| o.get(mk) == Some(k)));
                let delete = pm.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(i), true) => {
                        out.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => {
                        if let Some(om) = out[i].as_object_mut() {
                            merge_map(om, pm)?;
                        }
                    }
                    (None, false) => out.push(Value::Object(strip_directives(pm))),
                }
            }
            Ok(out)
        }
    }
}

fn strip_value(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_directives(m)),
        Value::Array(a) => Value::Array(a.iter().map(strip_value).collect()),
        other => other.clone(),
    }
}

/// A patch fragment inserted as-is, minus directive keys and null fields.
fn strip_directives(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter()
        .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
        .map(|(k, v)| (k.clone(), strip_value(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containers_merge_by_name() {
        let orig = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}]}});
        let patch = json!({"spec": {"containers": [{"name": "b", "image": "b:2"},
            {"name": "a", "env": [{"name": "Y", "value": "2"}]}]}});
        let out = apply(&orig, &patch).expect("applies");
        assert_eq!(out["spec"]["containers"][0]["image"], "a:1");
        assert_eq!(
            out["spec"]["containers"][0]["env"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(out["spec"]["containers"][1]["image"], "b:2");
    }

    #[test]
    fn directives() {
        let orig = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "tolerations": [{"key": "k"}]}});
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "labels": {"x": null}},
            "spec": {"$setElementOrder/containers": [{"name": "b"}],
                     "containers": [{"name": "a", "$patch": "delete"}],
                     "tolerations": [{"key": "j"}]}});
        let out = apply(&orig, &patch).expect("applies");
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        assert_eq!(out["spec"]["containers"], json!([{"name": "b"}]));
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "j"}]));
    }

    #[test]
    fn replace_directive_and_ports() {
        let orig =
            json!({"spec": {"ports": [{"port": 80, "name": "http"}], "selector": {"a": "1"}}});
        let patch = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}], "selector": {"$patch": "replace", "b": "2"}}});
        let out = apply(&orig, &patch).expect("applies");
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 80, "name": "http", "targetPort": 8080}])
        );
        assert_eq!(out["spec"]["selector"], json!({"b": "2"}));
    }
}
