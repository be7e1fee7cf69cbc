//! Check a JSON value against an OpenAPI v3 schema (the subset CRD schemas use) and report
//! every mismatch with its path. Used by `validate` for manifests (against the CRD schemas
//! `crds` prints) and for config files (against schemas derived from the config types).

use serde_json::{Map, Value};

use crate::problem::{Problem, index, join, show, type_name};

/// What to do with keys the schema does not declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownFields {
    /// Report as a problem with this explanation (e.g. "the API server drops it").
    Report(&'static str),
}

pub fn check(value: &Value, schema: &Value, unknown: UnknownFields) -> Vec<Problem> {
    let mut out = Vec::new();
    walk(value, schema, "", unknown, &mut out);
    out
}

fn walk(v: &Value, s: &Value, path: &str, unknown: UnknownFields, out: &mut Vec<Problem>) {
    let Some(s) = s.as_object() else { return };
    let flag = |k: &str| s.get(k).and_then(Value::as_bool).unwrap_or(false);
    // A null field is pruned by the API server (and read as absent by the parsers).
    if v.is_null() {
        return;
    }
    for key in ["anyOf", "oneOf"] {
        let Some(alts) = s.get(key).and_then(Value::as_array) else {
            continue;
        };
        // Alternatives that are all fixed values (schemars writes documented enums as a
        // oneOf of consts) are an enum.
        let fixed: Option<Vec<Value>> = alts
            .iter()
            .map(fixed_values)
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat());
        if let Some(values) = fixed {
            if !values.contains(v) {
                let list: Vec<String> = values.iter().map(show).collect();
                out.push(Problem::new(
                    path,
                    format!("must be one of {}, got {}", list.join(", "), show(v)),
                ));
            }
            return;
        }
        // Otherwise report against the best alternative whose type matched, or say which
        // shapes are accepted when none did.
        let here = Problem::new(path, "").path;
        let mut best: Option<Vec<Problem>> = None;
        for alt in alts {
            let mut sub = Vec::new();
            walk(v, alt, path, unknown, &mut sub);
            if sub.is_empty() {
                return;
            }
            let type_ok = !sub
                .iter()
                .any(|p| p.path == here && p.message.starts_with("must be a"));
            if type_ok && best.as_ref().is_none_or(|b| sub.len() < b.len()) {
                best = Some(sub);
            }
        }
        match best {
            Some(b) => out.extend(b),
            None => {
                let shapes: Vec<String> = alts
                    .iter()
                    .filter_map(|a| a.as_object().map(shape))
                    .collect();
                out.push(Problem::new(
                    path,
                    format!("must be {}, got {}", shapes.join(" or "), show(v)),
                ));
            }
        }
        return;
    }
    if flag("x-kubernetes-int-or-string") {
        if !(v.is_string() || v.is_i64() || v.is_u64()) {
            out.push(Problem::new(
                path,
                format!("must be an integer or a string, got {}", show(v)),
            ));
        }
        return;
    }
    if let Some(t) = s.get("type").and_then(Value::as_str) {
        let ok = match t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "boolean" => v.is_boolean(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            _ => true,
        };
        if !ok {
            out.push(Problem::new(
                path,
                format!("must be {}, got {} {}", expected(s), type_name(v), show(v)),
            ));
            return;
        }
    }
    if let Some(c) = s.get("const")
        && c != v
    {
        out.push(Problem::new(
            path,
            format!("must be {}, got {}", show(c), show(v)),
        ));
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        let list: Vec<String> = e.iter().map(show).collect();
        out.push(Problem::new(
            path,
            format!("must be one of {}, got {}", list.join(", "), show(v)),
        ));
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            out.push(Problem::new(
                path,
                format!("must be >= {min}, got {}", show(v)),
            ));
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            out.push(Problem::new(
                path,
                format!("must be <= {max}, got {}", show(v)),
            ));
        }
    }
    match v {
        Value::Object(m) => object(m, s, path, unknown, out),
        Value::Array(items) => {
            if let Some(item_schema) = s.get("items") {
                for (i, it) in items.iter().enumerate() {
                    walk(it, item_schema, &index(path, i), unknown, out);
                }
            }
        }
        _ => {}
    }
}

fn object(
    m: &Map<String, Value>,
    s: &Map<String, Value>,
    path: &str,
    unknown: UnknownFields,
    out: &mut Vec<Problem>,
) {
    let props = s.get("properties").and_then(Value::as_object);
    for req in s
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        // A required key with a schema default is filled in by the API server first.
        let defaulted = |r: &str| {
            props
                .and_then(|p| p.get(r))
                .is_some_and(|p| p.get("default").is_some())
        };
        if let Some(r) = req.as_str()
            && !m.contains_key(r)
            && !defaulted(r)
        {
            out.push(Problem::new(join(path, r), "is required"));
        }
    }
    let preserve = s
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    for (k, val) in m {
        let p = join(path, k);
        if let Some(ps) = props.and_then(|p| p.get(k)) {
            walk(val, ps, &p, unknown, out);
        } else if let Some(ap) = s.get("additionalProperties") {
            match ap {
                Value::Bool(false) => unknown_field(&p, props, k, unknown, out),
                Value::Bool(true) => {}
                schema => walk(val, schema, &p, unknown, out),
            }
        } else if props.is_some() && !preserve {
            unknown_field(&p, props, k, unknown, out);
        }
    }
}

fn unknown_field(
    p: &str,
    props: Option<&Map<String, Value>>,
    key: &str,
    unknown: UnknownFields,
    out: &mut Vec<Problem>,
) {
    let UnknownFields::Report(why) = unknown;
    let hint = props
        .and_then(|ps| {
            ps.keys()
                .find(|known| known.eq_ignore_ascii_case(key) || close(known, key))
        })
        .map(|k| format!(" (did you mean {k:?}?)"))
        .unwrap_or_default();
    out.push(Problem::new(p, format!("unknown field{hint}; {why}")));
}

/// Cheap typo detector: same length ±1 and at most 2 differing characters.
fn close(a: &str, b: &str) -> bool {
    let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
    if a.len().abs_diff(b.len()) > 1 || a.len() < 4 {
        return false;
    }
    let diff = a.bytes().zip(b.bytes()).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len());
    diff <= 2
}

/// The fixed values an alternative allows (`const` or a scalar `enum`), if that is all it says.
fn fixed_values(alt: &Value) -> Option<Vec<Value>> {
    let m = alt.as_object()?;
    if let Some(c) = m.get("const") {
        return Some(vec![c.clone()]);
    }
    let e = m.get("enum")?.as_array()?;
    (!m.contains_key("properties") && !m.contains_key("items")).then(|| e.clone())
}

/// Describe an alternative for a "must be X or Y" message: its fixed values, else its type.
fn shape(s: &Map<String, Value>) -> String {
    match s.get("enum").and_then(Value::as_array) {
        Some(e) => e.iter().map(show).collect::<Vec<_>>().join(" or "),
        None => expected(s),
    }
}

fn expected(s: &Map<String, Value>) -> String {
    if s.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
        return "an integer or a string".into();
    }
    match s.get("type").and_then(Value::as_str) {
        Some("object") => "an object (mapping)".into(),
        Some("array") => "a list".into(),
        Some("string") => "a string".into(),
        Some("boolean") => "a boolean".into(),
        Some("integer") => "an integer".into(),
        Some("number") => "a number".into(),
        Some(other) => other.to_string(),
        None => "a value".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const R: UnknownFields = UnknownFields::Report("ignored");

    #[test]
    fn reports_types_enums_required_unknown() {
        let s = json!({"type":"object","required":["a"],"properties":{
            "a":{"type":"integer","minimum":0},
            "b":{"type":"string","enum":["x","y"]},
            "c":{"type":"array","items":{"type":"boolean"}},
            "d":{"type":"object","additionalProperties":{"type":"integer"}}
        }});
        let v = json!({"b":"z","c":[true,"no"],"d":{"k":"v"},"bb":1});
        let msgs: Vec<String> = check(&v, &s, R).iter().map(ToString::to_string).collect();
        assert!(msgs.contains(&"a: is required".to_string()), "{msgs:?}");
        assert!(
            msgs.iter()
                .any(|m| m.starts_with("b: must be one of \"x\", \"y\", got \"z\""))
        );
        assert!(
            msgs.iter()
                .any(|m| m.starts_with("c[1]: must be a boolean"))
        );
        assert!(
            msgs.iter()
                .any(|m| m.starts_with("d.k: must be an integer"))
        );
        assert!(msgs.iter().any(|m| m.starts_with("bb: unknown field")));
        let neg = check(&json!({"a":-1}), &s, R);
        assert_eq!(neg[0].to_string(), "a: must be >= 0, got -1");
    }

    #[test]
    fn a_required_key_with_a_default_may_be_left_out() {
        let s = json!({"type":"object","required":["a","b"],"properties":{
            "a":{"type":"boolean","default":false},
            "b":{"type":"string"}
        }});
        let msgs: Vec<String> = check(&json!({}), &s, R)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(msgs, ["b: is required"]);
    }

    #[test]
    fn any_of_and_int_or_string() {
        let s = json!({"anyOf":[{"type":"string"},{"type":"array","items":{"type":"integer"}}]});
        assert!(check(&json!("all"), &s, R).is_empty());
        assert!(check(&json!([1, 2]), &s, R).is_empty());
        assert_eq!(check(&json!([1, "x"]), &s, R)[0].path, "[1]");
        assert!(
            check(&json!(true), &s, R)[0]
                .message
                .contains("a string or a list")
        );
        let ios = json!({"x-kubernetes-int-or-string": true});
        assert!(check(&json!("25%"), &ios, R).is_empty());
        assert!(!check(&json!(1.5), &ios, R).is_empty());
    }
}
