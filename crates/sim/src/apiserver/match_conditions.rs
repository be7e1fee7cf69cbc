//! Webhook `matchConditions` for the common shapes: a small CEL subset over `object` —
//! `has(path)`, `path == 'x'` / `!=`, `'key' in path` (map keys or list items), `!`, `&&`,
//! `||`, parentheses, string and boolean literals; paths `object.a.b` and `object.a['k']`.
//! Anything outside it is [`Unsupported`]: the caller then calls the webhook (the webhook
//! must cope, as it must when the real server's CEL says yes).

use serde_json::Value;

/// The expression uses CEL the sim does not evaluate.
#[derive(Debug, PartialEq)]
pub struct Unsupported(pub String);

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Op(&'static str),
}

fn lex(s: &str) -> Result<Vec<Tok>, Unsupported> {
    let c: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '\'' || ch == '"' {
            let end = c[i + 1..]
                .iter()
                .position(|&x| x == ch)
                .ok_or_else(|| Unsupported("unterminated string".into()))?;
            out.push(Tok::Str(c[i + 1..i + 1 + end].iter().collect()));
            i += end + 2;
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(c[start..i].iter().collect()));
        } else {
            let two: String = c[i..(i + 2).min(c.len())].iter().collect();
            let op = ["&&", "||", "==", "!="]
                .into_iter()
                .find(|o| *o == two)
                .or_else(|| {
                    ["!", "(", ")", ".", "[", "]"]
                        .into_iter()
                        .find(|o| o.starts_with(ch))
                })
                .ok_or_else(|| Unsupported(format!("unexpected {ch:?}")))?;
            i += op.len();
            out.push(Tok::Op(op));
        }
    }
    Ok(out)
}

#[derive(Debug)]
enum Val {
    Json(Option<Value>),
    Bool(bool),
}

struct Parser<'a> {
    toks: Vec<Tok>,
    at: usize,
    root: &'a Value,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }
    fn eat(&mut self, op: &'static str) -> bool {
        if self.peek() == Some(&Tok::Op(op)) {
            self.at += 1;
            return true;
        }
        false
    }
    fn expect(&mut self, op: &'static str) -> Result<(), Unsupported> {
        self.eat(op)
            .then_some(())
            .ok_or_else(|| Unsupported(format!("expected {op}")))
    }
    fn or(&mut self) -> Result<bool, Unsupported> {
        let mut v = self.and()?;
        while self.eat("||") {
            v |= self.and()?;
        }
        Ok(v)
    }
    fn and(&mut self) -> Result<bool, Unsupported> {
        let mut v = self.unary()?;
        while self.eat("&&") {
            v &= self.unary()?;
        }
        Ok(v)
    }
    fn unary(&mut self) -> Result<bool, Unsupported> {
        if self.eat("!") {
            return Ok(!self.unary()?);
        }
        if self.eat("(") {
            let v = self.or()?;
            self.expect(")")?;
            return Ok(v);
        }
        if self.peek() == Some(&Tok::Ident("has".into())) {
            self.at += 1;
            self.expect("(")?;
            let v = self.value()?;
            self.expect(")")?;
            return Ok(matches!(v, Val::Json(Some(_))));
        }
        let left = self.value()?;
        let op = match self.peek() {
            Some(Tok::Op(o @ ("==" | "!="))) => *o,
            Some(Tok::Ident(i)) if i == "in" => "in",
            _ => {
                return match left {
                    Val::Bool(b) => Ok(b),
                    Val::Json(v) => v
                        .as_ref()
                        .and_then(Value::as_bool)
                        .ok_or_else(|| Unsupported("not a condition".into())),
                };
            }
        };
        self.at += 1;
        let right = self.value()?;
        let (l, r) = match (&left, &right) {
            (Val::Json(l), Val::Json(r)) => (l.as_ref(), r.as_ref()),
            _ => return Err(Unsupported("booleans compared".into())),
        };
        Ok(match op {
            "==" => l.is_some() && l == r,
            "!=" => l != r,
            _ => match (l.and_then(Value::as_str), r) {
                (Some(k), Some(Value::Object(m))) => m.contains_key(k),
                (_, Some(Value::Array(a))) => l.is_some_and(|l| a.contains(l)),
                _ => false,
            },
        })
    }
    fn value(&mut self) -> Result<Val, Unsupported> {
        match self.peek().cloned() {
            Some(Tok::Str(s)) => {
                self.at += 1;
                Ok(Val::Json(Some(Value::String(s))))
            }
            Some(Tok::Ident(i)) if i == "true" || i == "false" => {
                self.at += 1;
                Ok(Val::Bool(i == "true"))
            }
            Some(Tok::Ident(i)) if i == "object" => {
                self.at += 1;
                let mut cur = Some(self.root);
                loop {
                    if self.eat(".") {
                        let Some(Tok::Ident(f)) = self.peek().cloned() else {
                            return Err(Unsupported("expected a field".into()));
                        };
                        self.at += 1;
                        cur = cur.and_then(|v| v.get(&f));
                    } else if self.eat("[") {
                        let Some(Tok::Str(k)) = self.peek().cloned() else {
                            return Err(Unsupported("expected a key".into()));
                        };
                        self.at += 1;
                        self.expect("]")?;
                        cur = cur.and_then(|v| v.get(&k));
                    } else {
                        return Ok(Val::Json(cur.cloned()));
                    }
                }
            }
            other => Err(Unsupported(format!("unsupported term {other:?}"))),
        }
    }
}

/// Evaluates one condition against the object.
pub fn eval(expr: &str, object: &Value) -> Result<bool, Unsupported> {
    let mut p = Parser {
        toks: lex(expr)?,
        at: 0,
        root: object,
    };
    let v = p.or()?;
    if p.at != p.toks.len() {
        return Err(Unsupported("trailing input".into()));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FRACTION: &str = "has(object.spec.schedulerName) && object.spec.schedulerName == \"kai-scheduler\" && has(object.metadata.annotations) && ('gpu-fraction' in object.metadata.annotations || 'gpu-memory' in object.metadata.annotations)";

    #[test]
    fn the_charts_condition_selects_fractional_pods_only() {
        let frac = json!({"metadata": {"annotations": {"gpu-fraction": "0.5"}}, "spec": {"schedulerName": "kai-scheduler"}});
        let mem = json!({"metadata": {"annotations": {"gpu-memory": "2000"}}, "spec": {"schedulerName": "kai-scheduler"}});
        let plain = json!({"metadata": {"name": "p"}, "spec": {"schedulerName": "kai-scheduler"}});
        let other = json!({"metadata": {"annotations": {"gpu-fraction": "0.5"}}, "spec": {}});
        assert_eq!(eval(FRACTION, &frac), Ok(true));
        assert_eq!(eval(FRACTION, &mem), Ok(true));
        assert_eq!(eval(FRACTION, &plain), Ok(false));
        assert_eq!(eval(FRACTION, &other), Ok(false));
    }

    #[test]
    fn operators_and_what_is_not_supported() {
        let o = json!({"metadata": {"labels": {"a": "b"}, "finalizers": ["x"]}});
        assert_eq!(eval("!has(object.spec)", &o), Ok(true));
        assert_eq!(eval("object.metadata.labels['a'] != 'c'", &o), Ok(true));
        assert_eq!(eval("'x' in object.metadata.finalizers", &o), Ok(true));
        assert_eq!(eval("(false || true) && !false", &o), Ok(true));
        assert!(eval("object.metadata.labels.size() > 0", &o).is_err());
        assert!(eval("request.userInfo.username == 'x'", &o).is_err());
        assert!(eval("'unterminated", &o).is_err());
    }
}
