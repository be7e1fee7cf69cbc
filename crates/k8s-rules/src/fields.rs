//! Field selectors (`metadata.name=x,spec.nodeName!=n1`), parsed as apimachinery's
//! `fields.ParseSelector`: terms split at unescaped commas, each `field=value`,
//! `field==value` or `field!=value`, values unescaped (`\,` `\=` `\\`). No trimming.

use std::fmt;

/// A field selector that cannot be parsed, naming the input and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field selector {input:?}: {reason}")]
pub struct FieldSelectorError {
    pub input: String,
    pub reason: String,
}

/// `field = value` (`equal`) or `field != value`. A field the object lacks reads as `""`.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct FieldRequirement {
    pub field: String,
    pub equal: bool,
    pub value: String,
}

impl FieldRequirement {
    pub fn matches_value(&self, have: &str) -> bool {
        (have == self.value) == self.equal
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = if self.equal { "=" } else { "!=" };
        write!(f, "{}{op}{}", self.field, self.value)
    }
}

/// Requirements that must all hold; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    reqs: Vec<FieldRequirement>,
}

/// Split at commas not escaped by a backslash.
fn split_terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// The first operator (`!=`, `==`, `=`) outside an escape: (field, equal, raw value).
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    let mut escaped = false;
    for (i, c) in term.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if c == '\\' {
            escaped = true;
            continue;
        }
        let rest = &term[i..];
        for (op, equal) in [("!=", false), ("==", true), ("=", true)] {
            if rest.starts_with(op) {
                return Some((&term[..i], equal, &term[i + op.len()..]));
            }
        }
    }
    None
}

fn unescape(v: &str) -> Result<String, String> {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(format!("invalid escape sequence: \\{e}")),
                None => return Err("unterminated escape sequence".into()),
            },
            ',' | '=' => return Err(format!("unescaped {c:?} in value {v:?}")),
            c => out.push(c),
        }
    }
    Ok(out)
}

impl FieldSelector {
    pub fn parse(input: &str) -> Result<FieldSelector, FieldSelectorError> {
        let err = |reason: String| FieldSelectorError {
            input: input.to_string(),
            reason,
        };
        let mut terms = split_terms(input);
        terms.sort_unstable();
        let mut reqs = Vec::new();
        for term in terms.into_iter().filter(|t| !t.is_empty()) {
            let (field, equal, raw) = split_term(term).ok_or_else(|| {
                err(format!(
                    "can't understand {term:?}: expected field=value, field==value or field!=value"
                ))
            })?;
            if field.is_empty() {
                return Err(err(format!("{term:?} names no field")));
            }
            reqs.push(FieldRequirement {
                field: field.to_string(),
                equal,
                value: unescape(raw).map_err(err)?,
            });
        }
        Ok(FieldSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.reqs
    }

    /// The value a `field=value` requirement pins `field` to, if any.
    pub fn required_value(&self, field: &str) -> Option<&str> {
        self.reqs
            .iter()
            .find(|r| r.equal && r.field == field)
            .map(|r| r.value.as_str())
    }

    /// Match with `get` reading a field's value (`None`: the object lacks it, read as `""`).
    pub fn matches_fn(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.reqs
            .iter()
            .all(|r| r.matches_value(get(&r.field).as_deref().unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_and_escapes() {
        let get = |f: &str| match f {
            "metadata.name" => Some("a,b".to_string()),
            "spec.nodeName" => Some("n1".to_string()),
            _ => None,
        };
        let m = |s: &str| FieldSelector::parse(s).expect(s).matches_fn(get);
        assert!(m(""));
        assert!(m(r"metadata.name=a\,b"));
        assert!(m("spec.nodeName==n1,spec.nodeName!=n2"));
        assert!(m("spec.schedulerName="), "an absent field reads as empty");
        assert!(!m("spec.nodeName="));
        let s = FieldSelector::parse("metadata.name=x,spec.nodeName!=y").expect("parses");
        assert_eq!(s.required_value("metadata.name"), Some("x"));
        assert_eq!(s.required_value("spec.nodeName"), None);
    }

    #[test]
    fn malformed_input_names_the_term() {
        for (bad, why) in [
            ("nonsense", "can't understand \"nonsense\""),
            ("=x", "names no field"),
            (r"a=b\", "unterminated escape"),
            (r"a=\q", "invalid escape"),
            ("a=b=c", "unescaped '='"),
        ] {
            let e = FieldSelector::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }
}
