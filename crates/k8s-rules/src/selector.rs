//! Label selectors. The string form (`app=web,tier in (a,b),!skip`, as in `kubectl -l` and
//! `?labelSelector=`) is lexed and parsed as apimachinery's `labels.Parse` does, so input the
//! API server rejects is rejected here with the same reason; the structured form
//! (`matchLabels` + `matchExpressions`) converts as `metav1.LabelSelectorAsSelector`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::names::{label_key_problem, label_value_problem};

mod parse;

/// A selector that cannot be built, naming the input and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("label selector {input:?}: {reason}")]
pub struct SelectorError {
    pub input: String,
    pub reason: String,
}

/// A requirement's operator. `=` and `==` are [`Operator::Equals`].
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Operator {
    Equals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One `key <op> values` requirement; values are sorted and deduplicated.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Checks what `labels.NewRequirement` checks: a valid key, the value count the operator
    /// needs, valid label values, and integers for `Gt`/`Lt`. The error is the reason only.
    pub fn new(key: &str, operator: Operator, values: &[String]) -> Result<Requirement, String> {
        if let Some(p) = label_key_problem(key) {
            return Err(format!("key {key:?}: {p}"));
        }
        match operator {
            Operator::In | Operator::NotIn if values.is_empty() => {
                return Err(format!(
                    "key {key:?}: for 'in', 'notin' operators, values set can't be empty"
                ));
            }
            Operator::Equals | Operator::NotEquals if values.len() != 1 => {
                return Err(format!(
                    "key {key:?}: exact-match compatibility requires one single value"
                ));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                return Err(format!(
                    "key {key:?}: values set must be empty for exists and does not exist"
                ));
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    return Err(format!(
                        "key {key:?}: for 'Gt', 'Lt' operators, exactly one value is required"
                    ));
                }
                if values[0].parse::<i64>().is_err() {
                    return Err(format!(
                        "key {key:?}: for 'Gt', 'Lt' operators, the value must be an integer, got {:?}",
                        values[0]
                    ));
                }
            }
            _ => {}
        }
        for v in values {
            if let Some(p) = label_value_problem(v) {
                return Err(format!("key {key:?}: value {v:?}: {p}"));
            }
        }
        let values: BTreeSet<&String> = values.iter().collect();
        Ok(Requirement {
            key: key.to_string(),
            operator,
            values: values.into_iter().cloned().collect(),
        })
    }

    pub fn key(&self) -> &str {
        &self.key
    }
    pub fn operator(&self) -> Operator {
        self.operator
    }
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// `labels.Requirement.Matches`: `NotIn`/`!=` match an absent key; `Gt`/`Lt` need the
    /// label to parse as an integer.
    pub fn matches_value(&self, value: Option<&str>) -> bool {
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::Equals | Operator::In => value.is_some_and(has),
            Operator::NotEquals | Operator::NotIn => !value.is_some_and(has),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(have), Some(bound)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|v| v.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > bound
                } else {
                    have < bound
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.values.join(",");
        match self.operator {
            Operator::Equals => write!(f, "{}={v}", self.key),
            Operator::NotEquals => write!(f, "{}!={v}", self.key),
            Operator::In => write!(f, "{} in ({v})", self.key),
            Operator::NotIn => write!(f, "{} notin ({v})", self.key),
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::GreaterThan => write!(f, "{}>{v}", self.key),
            Operator::LessThan => write!(f, "{}<{v}", self.key),
        }
    }
}

/// Requirements that must all hold. The empty selector matches everything; [`Selector::nothing`]
/// matches nothing (a nil structured selector).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Selector {
    reqs: Vec<Requirement>,
    nothing: bool,
}

impl Selector {
    pub fn everything() -> Selector {
        Selector::default()
    }
    pub fn nothing() -> Selector {
        Selector {
            reqs: Vec::new(),
            nothing: true,
        }
    }

    /// Parse the string form. Requirements are sorted by key, as upstream does.
    pub fn parse(input: &str) -> Result<Selector, SelectorError> {
        let mut reqs = parse::requirements(input).map_err(|reason| SelectorError {
            input: input.to_string(),
            reason,
        })?;
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Selector {
            reqs,
            nothing: false,
        })
    }

    /// `metav1.LabelSelectorAsSelector`: `matchLabels` AND `matchExpressions` (operators
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`). No requirements at all selects everything.
    pub fn from_label_selector(sel: &LabelSelector) -> Result<Selector, SelectorError> {
        let mut reqs = Vec::new();
        let err = |input: String, reason: String| SelectorError { input, reason };
        for (k, v) in sel.match_labels.iter().flatten() {
            reqs.push(
                Requirement::new(k, Operator::Equals, std::slice::from_ref(v))
                    .map_err(|r| err(format!("matchLabels[{k:?}]"), r))?,
            );
        }
        for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
            let at = || format!("matchExpressions[{i}]");
            let op = match e.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(err(
                        at(),
                        format!(
                            "{other:?} is not a valid label selector operator (In, NotIn, Exists, DoesNotExist)"
                        ),
                    ));
                }
            };
            let values = e.values.as_deref().unwrap_or_default();
            reqs.push(Requirement::new(&e.key, op, values).map_err(|r| err(at(), r))?);
        }
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Selector {
            reqs,
            nothing: false,
        })
    }

    /// This selector plus one more requirement.
    pub fn and(mut self, req: Requirement) -> Selector {
        self.reqs.push(req);
        self
    }

    /// Whether the selector matches every label set.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty() && !self.nothing
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.reqs
    }

    /// Match labels looked up through `get`.
    pub fn matches_fn<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        !self.nothing && self.reqs.iter().all(|r| r.matches_value(get(&r.key)))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_fn(|k| labels.get(k).map(String::as_str))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.reqs.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_operator() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("cores", "64")]);
        let m = |s: &str| Selector::parse(s).expect(s).matches(&l);
        assert!(m(""));
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db),tier notin (back)"));
        assert!(!m("app notin (web)"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m("cores>32,cores<65"));
        assert!(!m("cores>64"));
        assert!(!m("app>1"), "Gt needs an integer label");
        assert!(m("missing!=x"), "!= matches an absent key");
        assert!(m("in=web") == l.contains_key("in"));
    }

    #[test]
    fn malformed_input_is_rejected_as_upstream() {
        for (bad, why) in [
            ("!app=web", "found '=', expected: ',' or 'end of string'"),
            ("!!!(((", "found '!', expected: identifier"),
            ("app in web", "found 'web' expected: '('"),
            ("bad key=x", "found 'key', expected: in, notin"),
            ("a=b,,c", "found ',', expected: identifier after ','"),
            ("a=b,", "found '', expected: identifier after ','"),
            ("=x", "found '=', expected: !, identifier"),
            ("x>a", "must be an integer"),
            ("app=-web", "value \"-web\""),
            ("-app=x", "key \"-app\""),
            ("a in (b c)", "found 'c', expected: ',' or ')'"),
        ] {
            let e = Selector::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
            assert!(e.contains(&format!("{bad:?}")), "names the input: {e}");
        }
    }

    #[test]
    fn set_edge_cases_follow_upstream() {
        let s = Selector::parse("a in (),b in (x,),c notin (,y)").expect("parses");
        let vals: Vec<&[String]> = s.requirements().iter().map(|r| r.values()).collect();
        assert_eq!(vals[0], [String::new()]);
        assert_eq!(vals[1], [String::new(), "x".into()]);
        assert_eq!(vals[2], [String::new(), "y".into()]);
        assert!(
            Selector::parse("x=")
                .expect("empty value")
                .matches(&labels(&[("x", "")]))
        );
        assert_eq!(
            Selector::parse("b=1, a in (z,y,y)")
                .expect("parses")
                .to_string(),
            "a in (y,z),b=1"
        );
    }

    #[test]
    fn structured_selectors() {
        let sel: LabelSelector = serde_json::from_str(
            r#"{"matchLabels": {"gpu": "true"},
                "matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}"#,
        )
        .expect("json");
        let s = Selector::from_label_selector(&sel).expect("valid");
        assert!(s.matches(&labels(&[("gpu", "true")])));
        assert!(!s.matches(&labels(&[("gpu", "true"), ("zone", "b")])));
        assert!(
            Selector::from_label_selector(&LabelSelector::default())
                .expect("empty")
                .is_empty()
        );
        assert!(!Selector::nothing().matches(&labels(&[])));
        let bad: LabelSelector = serde_json::from_str(
            r#"{"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["1"]}]}"#,
        )
        .expect("json");
        let e = Selector::from_label_selector(&bad)
            .expect_err("Gt")
            .to_string();
        assert!(
            e.contains("matchExpressions[0]") && e.contains("\"Gt\""),
            "{e}"
        );
        let bad: LabelSelector = serde_json::from_str(
            r#"{"matchExpressions": [{"key": "zone", "operator": "In", "values": []}]}"#,
        )
        .expect("json");
        assert!(Selector::from_label_selector(&bad).is_err());
    }
}
