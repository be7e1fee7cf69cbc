//! Label selectors in their string form (`app=x,tier!=db,env in (a,b),!skip`), as the
//! upgrade policy's `podSelector` fields carry them.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("label selector {selector:?}: {reason}")]
pub struct SelectorError {
    pub selector: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    reqs: Vec<Req>,
}

/// Split at commas outside parentheses.
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
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_set(rest: &str) -> Option<Vec<String>> {
    let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

impl Selector {
    pub fn parse(s: &str) -> Result<Selector, SelectorError> {
        let err = |reason: String| SelectorError {
            selector: s.to_string(),
            reason,
        };
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Selector { reqs });
        }
        for part in split_top(s) {
            let p = part.trim();
            let req = if let Some(k) = p.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = p.split_once("!=") {
                Req::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = p.split_once(" notin ") {
                let set = parse_set(rest)
                    .ok_or_else(|| err(format!("{p:?}: expected `key notin (a,b)`")))?;
                Req::NotIn(k.trim().into(), set)
            } else if let Some((k, rest)) = p.split_once(" in ") {
                let set = parse_set(rest)
                    .ok_or_else(|| err(format!("{p:?}: expected `key in (a,b)`")))?;
                Req::In(k.trim().into(), set)
            } else {
                Req::Exists(p.to_string())
            };
            let key = match &req {
                Req::Eq(k, _)
                | Req::NotEq(k, _)
                | Req::In(k, _)
                | Req::NotIn(k, _)
                | Req::Exists(k)
                | Req::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(err(format!("{p:?}: {key:?} is not a valid label key")));
            }
            reqs.push(req);
        }
        Ok(Selector { reqs })
    }

    /// This selector plus `key!=value` (how the drain skips pods labelled to be skipped).
    pub fn and_not_eq(mut self, key: &str, value: &str) -> Selector {
        self.reqs.push(Req::NotEq(key.into(), value.into()));
        self
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.reqs.iter().all(|r| match r {
            Req::Eq(k, v) => labels.get(k) == Some(v),
            Req::NotEq(k, v) => labels.get(k) != Some(v),
            Req::In(k, set) => labels.get(k).is_some_and(|v| set.contains(v)),
            Req::NotIn(k, set) => labels.get(k).is_none_or(|v| !set.contains(v)),
            Req::Exists(k) => labels.contains_key(k),
            Req::NotExists(k) => !labels.contains_key(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_operator() {
        let s =
            Selector::parse("app=train, tier!=db,env in (a, b),zone notin (x),gpu,!skip").unwrap();
        let ok = l(&[("app", "train"), ("env", "b"), ("gpu", "1")]);
        assert!(s.matches(&ok));
        let mut bad = ok.clone();
        bad.insert("skip".into(), "".into());
        assert!(!s.matches(&bad));
        let mut bad = ok.clone();
        bad.insert("zone".into(), "x".into());
        assert!(!s.matches(&bad));
        let mut bad = ok.clone();
        bad.insert("env".into(), "c".into());
        assert!(!s.matches(&bad));
        let mut bad = ok.clone();
        bad.insert("tier".into(), "db".into());
        assert!(!s.matches(&bad));
        let mut bad = ok;
        bad.remove("gpu");
        assert!(!s.matches(&bad));
        assert!(Selector::parse("a==b").unwrap().matches(&l(&[("a", "b")])));
    }

    #[test]
    fn empty_matches_all_and_skip_clause_applies() {
        let s = Selector::parse(" ").unwrap();
        assert!(s.is_empty());
        assert!(s.matches(&l(&[])));
        let s = s.and_not_eq("drain.skip", "true");
        assert!(!s.matches(&l(&[("drain.skip", "true")])));
        assert!(s.matches(&l(&[("drain.skip", "false")])));
    }

    #[test]
    fn malformed_selectors_name_the_part() {
        let e = Selector::parse("app in a,b").unwrap_err();
        assert!(e.to_string().contains("app in a"), "{e}");
        let e = Selector::parse("a=b,,c").unwrap_err();
        assert!(e.to_string().contains("not a valid label key"), "{e}");
        assert!(Selector::parse("bad key=x").is_err());
    }
}
