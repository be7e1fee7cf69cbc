//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`) and field selectors
//! (`=`, `==`, `!=` on dotted paths such as `metadata.name`, `spec.nodeName`, `status.phase`).

use super::status::ApiError;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn set_values(rest: &str, whole: &str) -> Result<Vec<String>, ApiError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement {whole:?}: expected (v1,v2,...)"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let req = if let Some(key) = part.strip_prefix('!') {
                Req::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Req::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                Req::NotIn(k.trim().into(), set_values(rest, part)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                Req::In(k.trim().into(), set_values(rest, part)?)
            } else if part.contains(' ') || part.contains('(') {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement {part:?}"
                )));
            } else {
                Req::Exists(part.to_string())
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Req::NotIn(k, vs) => get(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(Vec<String>, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let (path, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector {part:?}: expected field=value or field!=value"
                )));
            };
            let segs = path.trim().split('.').map(str::to_string).collect();
            reqs.push((segs, eq, value.trim().to_string()));
        }
        Ok(Self(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `metadata.name=X` requirement, if any (used by single-object watches).
    pub fn name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(p, eq, _)| *eq && p.len() == 2 && p[0] == "metadata" && p[1] == "name")
            .map(|(_, _, v)| v.as_str())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for seg in path {
                cur = cur.and_then(|c| c.get(seg));
            }
            let have = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            };
            (have == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_operators() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let m = |s: &str| LabelSelector::parse(s).expect("parses").matches(&obj);
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db),tier notin (back)"));
        assert!(!m("app notin (web)"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m(""));
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn field_paths() {
        let obj = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let m = |s: &str| FieldSelector::parse(s).expect("parses").matches(&obj);
        assert!(m("metadata.name=p,metadata.namespace=ns"));
        assert!(m("spec.nodeName!=n2"));
        assert!(m("status.phase==Running"));
        assert!(m("spec.schedulerName="));
        assert!(!m("spec.nodeName="));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
