//! The string form's lexer and parser, after apimachinery's `labels.Parse`: the same tokens,
//! the same grammar, the same reasons for rejecting input.

use super::{Operator, Requirement};
use crate::names::label_key_problem;

/// Parse `input` into requirements (unsorted); the error is the reason only.
pub(super) fn requirements(input: &str) -> Result<Vec<Requirement>, String> {
    let tokens = lex(input);
    Parser {
        tokens: &tokens,
        pos: 0,
    }
    .parse()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    End,
    ClosePar,
    Comma,
    Bang,
    DoubleEquals,
    Equals,
    GreaterThan,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
    Ident,
    Error,
}

fn keyword(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosePar,
        "," => Tok::Comma,
        "!" => Tok::Bang,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::GreaterThan,
        "in" => Tok::In,
        "<" => Tok::LessThan,
        "!=" => Tok::NotEquals,
        "notin" => Tok::NotIn,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// apimachinery's lexer: symbols are the longest known run of special characters;
/// everything up to whitespace or a symbol is an identifier or the keyword `in`/`notin`.
fn lex(s: &str) -> Vec<(Tok, String)> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < chars.len() && is_space(chars[i]) {
            i += 1;
        }
        if i >= chars.len() {
            out.push((Tok::End, String::new()));
            return out;
        }
        let start = i;
        if is_special(chars[i]) {
            let mut best: Option<(Tok, usize)> = None;
            while i < chars.len() && is_special(chars[i]) {
                let cand: String = chars[start..=i].iter().collect();
                match keyword(&cand) {
                    Some(t) => best = Some((t, i + 1)),
                    None if best.is_some() => break,
                    None => {}
                }
                i += 1;
            }
            match best {
                Some((t, end)) => {
                    out.push((t, chars[start..end].iter().collect()));
                    i = end;
                }
                None => {
                    let lit: String = chars[start..i].iter().collect();
                    out.push((Tok::Error, format!("error expected: keyword found '{lit}'")));
                }
            }
        } else {
            while i < chars.len() && !is_space(chars[i]) && !is_special(chars[i]) {
                i += 1;
            }
            let lit: String = chars[start..i].iter().collect();
            out.push((keyword(&lit).unwrap_or(Tok::Ident), lit));
        }
    }
}

/// In value position the keywords `in`/`notin` are plain identifiers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

struct Parser<'a> {
    tokens: &'a [(Tok, String)],
    pos: usize,
}

impl Parser<'_> {
    fn at(&self, pos: usize, ctx: Ctx) -> (Tok, String) {
        let (t, lit) = self
            .tokens
            .get(pos)
            .cloned()
            .unwrap_or((Tok::End, String::new()));
        let t = match t {
            Tok::In | Tok::NotIn if ctx == Ctx::Values => Tok::Ident,
            t => t,
        };
        (t, lit)
    }
    fn lookahead(&self, ctx: Ctx) -> (Tok, String) {
        self.at(self.pos, ctx)
    }
    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        self.pos += 1;
        self.at(self.pos - 1, ctx)
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Ctx::Values);
            match tok {
                Tok::Ident | Tok::Bang => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, l) = self.consume(Ctx::Values);
                    match t {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Ident && t2 != Tok::Bang {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::End => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let (mut tok, mut lit) = self.consume(Ctx::Values);
        let mut unary = None;
        if tok == Tok::Bang {
            unary = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Ctx::Values);
        }
        if tok != Tok::Ident {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        if let Some(p) = label_key_problem(&lit) {
            return Err(format!("key {lit:?}: {p}"));
        }
        let key = lit;
        if unary.is_none() {
            let (t, _) = self.lookahead(Ctx::Values);
            if t == Tok::End || t == Tok::Comma {
                unary = Some(Operator::Exists);
            }
        }
        if let Some(op) = unary {
            return Requirement::new(&key, op, &[]);
        }
        let (tok, lit) = self.consume(Ctx::KeyAndOperator);
        let op = match tok {
            Tok::In => Operator::In,
            Tok::Equals | Tok::DoubleEquals => Operator::Equals,
            Tok::GreaterThan => Operator::GreaterThan,
            Tok::LessThan => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        };
        let values = match op {
            Operator::In | Operator::NotIn => self.set_values()?,
            _ => self.exact_value()?,
        };
        Requirement::new(&key, op, &values)
    }

    fn set_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Ctx::Values);
        if tok != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Ctx::Values);
        match tok {
            Tok::Ident | Tok::Comma => {
                let set = self.identifiers()?;
                let (t, _) = self.consume(Ctx::Values);
                if t != Tok::ClosePar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            // `()` is the set holding the empty value.
            Tok::ClosePar => {
                self.consume(Ctx::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    /// A comma list inside parentheses; empty places (`(,a)`, `(a,)`, `(a,,b)`) are `""`.
    fn identifiers(&mut self) -> Result<Vec<String>, String> {
        let mut set = Vec::new();
        loop {
            let (tok, lit) = self.consume(Ctx::Values);
            match tok {
                Tok::Ident => {
                    set.push(lit);
                    let (t2, l2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosePar => return Ok(set),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if set.is_empty() {
                        set.push(String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosePar {
                        set.push(String::new());
                        return Ok(set);
                    }
                    if t2 == Tok::Comma {
                        self.consume(Ctx::Values);
                        set.push(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.lookahead(Ctx::Values);
        if tok == Tok::End || tok == Tok::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Ctx::Values);
        if tok == Tok::Ident {
            Ok(vec![lit])
        } else {
            Err(format!("found '{lit}', expected: identifier"))
        }
    }
}
