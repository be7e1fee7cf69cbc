//! A validation problem: where (document, field path) and what is wrong.

use std::fmt;

/// One problem found in a manifest or config file. Displays as `path: message`, prefixed
/// with the document number when the input holds several YAML documents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// 1-based YAML document number, when the input has more than one document.
    pub document: Option<usize>,
    /// Field path such as `spec.resources.gpu.limit` or `sharing.timeSlicing.resources[0].replicas`;
    /// `<document>` for problems with the whole document.
    pub path: String,
    pub message: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        let path = path.into();
        Problem {
            document: None,
            path: if path.is_empty() {
                "<document>".to_string()
            } else {
                path
            },
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(d) = self.document {
            write!(f, "document {d}: ")?;
        }
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Join a parent path and a key the way users write paths (`a.b`, `a[0]`).
/// Keys that would read ambiguously after a `.` (they hold `.`, `/` or spaces) are written
/// as `["key"]`.
pub fn join(parent: &str, key: &str) -> String {
    let plain = !key.is_empty() && !key.contains(['.', '/', ' ', '[', ']', '"']);
    match (parent.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{parent}.{key}"),
        (_, false) => format!("{parent}[{key:?}]"),
    }
}

pub fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// Short rendering of a JSON value for messages.
pub fn show(v: &serde_json::Value) -> String {
    let s = match v {
        serde_json::Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    if s.chars().count() > 60 {
        let cut: String = s.chars().take(57).collect();
        format!("{cut}...")
    } else {
        s
    }
}

/// JSON type name of a value, as a schema would say it.
pub fn type_name(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(n) if n.is_f64() => "number",
        serde_json::Value::Number(_) => "integer",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}
