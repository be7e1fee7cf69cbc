//! The JSONPath subset CRD printer columns use (client-go `util/jsonpath`, as the API server
//! evaluates `additionalPrinterColumns`): `.a.b`, escaped dots (`nvidia\.com/gpu`), `[n]`,
//! `[*]`, and filters `[?(@.type=="Ready")]` with `==` / `!=`. Optional `{…}` and a leading
//! `$` are accepted. A path that does not parse finds nothing.

use serde_json::Value;

#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    Filter {
        path: Vec<String>,
        equal: bool,
        value: String,
    },
}

fn field_name(s: &str) -> (String, &str) {
    let mut name = String::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, n)) = chars.next() {
                    name.push(n);
                }
            }
            '.' | '[' => return (name, &s[i..]),
            c => name.push(c),
        }
    }
    (name, "")
}

fn parse(path: &str) -> Option<Vec<Step>> {
    let mut s = path.trim();
    if let Some(inner) = s.strip_prefix('{').and_then(|x| x.strip_suffix('}')) {
        s = inner.trim();
    }
    s = s.strip_prefix('$').unwrap_or(s);
    let mut steps = Vec::new();
    while !s.is_empty() {
        if let Some(rest) = s.strip_prefix('.') {
            let (name, rest) = field_name(rest);
            if name.is_empty() {
                return None;
            }
            steps.push(Step::Field(name));
            s = rest;
        } else if let Some(rest) = s.strip_prefix('[') {
            let end = rest.find(']')?;
            let inner = rest[..end].trim();
            s = &rest[end + 1..];
            if inner == "*" {
                steps.push(Step::All);
            } else if let Some(f) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
                let (lhs, rhs, equal) = match (f.split_once("=="), f.split_once("!=")) {
                    (Some((l, r)), _) => (l, r, true),
                    (None, Some((l, r))) => (l, r, false),
                    _ => return None,
                };
                let lhs = lhs.trim().strip_prefix("@.")?;
                let value = rhs
                    .trim()
                    .trim_matches(|c| c == '"' || c == '\'')
                    .to_string();
                steps.push(Step::Filter {
                    path: lhs.split('.').map(str::to_string).collect(),
                    equal,
                    value,
                });
            } else {
                steps.push(Step::Index(inner.parse().ok()?));
            }
        } else {
            return None;
        }
    }
    Some(steps)
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Every value the path reaches in `o`, in document order.
pub fn find<'a>(o: &'a Value, path: &str) -> Vec<&'a Value> {
    let Some(steps) = parse(path) else {
        return Vec::new();
    };
    let mut cur = vec![o];
    for step in &steps {
        let mut next = Vec::new();
        for v in cur {
            match step {
                Step::Field(f) => next.extend(v.get(f.as_str())),
                Step::Index(i) => {
                    if let Some(a) = v.as_array() {
                        let at = if *i < 0 { a.len() as i64 + i } else { *i };
                        next.extend(usize::try_from(at).ok().and_then(|at| a.get(at)));
                    }
                }
                Step::All => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter { path, equal, value } => {
                    for item in v.as_array().into_iter().flatten() {
                        let got = path.iter().try_fold(item, |x, k| x.get(k.as_str()));
                        let matches = got.is_some_and(|g| scalar(g) == *value);
                        if matches == *equal && (got.is_some() || !*equal) {
                            next.push(item);
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_printer_columns_use() {
        let o = json!({
            "metadata": {"labels": {"nvidia.com/gpu.product": "H100"}},
            "spec": {"priority": 100, "containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Degraded", "status": "False"}
            ]}
        });
        assert_eq!(find(&o, ".spec.priority"), vec![&json!(100)]);
        assert_eq!(find(&o, "{.spec.priority}"), vec![&json!(100)]);
        assert_eq!(
            find(&o, ".metadata.labels.nvidia\\.com/gpu\\.product"),
            vec![&json!("H100")]
        );
        assert_eq!(find(&o, ".spec.containers[1].name"), vec![&json!("b")]);
        assert_eq!(find(&o, ".spec.containers[-1].name"), vec![&json!("b")]);
        assert_eq!(
            find(&o, ".spec.containers[*].name"),
            vec![&json!("a"), &json!("b")]
        );
        assert_eq!(
            find(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            vec![&json!("True")]
        );
        assert_eq!(
            find(&o, ".status.conditions[?(@.type!='Ready')].type"),
            vec![&json!("Degraded")]
        );
        assert!(find(&o, ".status.missing").is_empty());
        assert!(find(&o, "not a path").is_empty());
        assert!(find(&o, ".spec.containers[x]").is_empty());
    }
}
