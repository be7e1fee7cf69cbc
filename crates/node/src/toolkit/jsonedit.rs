//! Text edits of JSON documents that keep every untouched byte: a minimal span scanner over
//! (already validated) JSON finds where members are, and edits splice new text in, indented
//! the way the file already is.

use serde_json::{Map, Value};

struct Member {
    key: String,
    key_start: usize,
    value_start: usize,
    value_end: usize,
}

struct Object {
    open: usize,
    close: usize,
    members: Vec<Member>,
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

fn skip_string(b: &[u8], mut i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = skip_string(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

fn scan_object(text: &str, open: usize) -> Option<Object> {
    let b = text.as_bytes();
    if b.get(open) != Some(&b'{') {
        return None;
    }
    let mut members = Vec::new();
    let mut i = skip_ws(b, open + 1);
    if b.get(i) == Some(&b'}') {
        return Some(Object {
            open,
            close: i,
            members,
        });
    }
    loop {
        let key_start = i;
        let key_end = skip_string(b, i)?;
        let key: String = serde_json::from_str(text.get(key_start..key_end)?).ok()?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let value_start = skip_ws(b, i + 1);
        let value_end = skip_value(b, value_start)?;
        members.push(Member {
            key,
            key_start,
            value_start,
            value_end,
        });
        i = skip_ws(b, value_end);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b'}' => {
                return Some(Object {
                    open,
                    close: i,
                    members,
                });
            }
            _ => return None,
        }
    }
}

fn root_object(text: &str) -> Option<Object> {
    scan_object(text, skip_ws(text.as_bytes(), 0))
}

fn find_object(text: &str, keys: &[String]) -> Option<Object> {
    let mut obj = root_object(text)?;
    for key in keys {
        let m = obj.members.iter().find(|m| &m.key == key)?;
        obj = scan_object(text, m.value_start)?;
    }
    Some(obj)
}

/// Indentation of the line holding byte `at`.
fn line_indent(text: &str, at: usize) -> String {
    let start = text
        .get(..at)
        .and_then(|t| t.rfind('\n'))
        .map_or(0, |p| p + 1);
    text.get(start..)
        .unwrap_or("")
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect()
}

/// The indentation step the file uses (four spaces when it shows none).
pub(crate) fn indent_unit(text: &str) -> String {
    root_object(text)
        .and_then(|o| o.members.first().map(|m| line_indent(text, m.key_start)))
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "    ".to_string())
}

pub(crate) fn pretty(value: &Value, unit: &str) -> String {
    use serde::Serialize;
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    match value.serialize(&mut ser) {
        Ok(()) => String::from_utf8(buf).unwrap_or_default(),
        Err(_) => value.to_string(),
    }
}

pub(crate) fn set_path(text: &str, keys: &[String], value: &Value) -> Option<String> {
    let (last, parents) = keys.split_last()?;
    // Deepest existing object along the path.
    let mut depth = parents.len();
    let obj = loop {
        if let Some(o) = find_object(text, &parents[..depth]) {
            break o;
        }
        depth = depth.checked_sub(1)?;
    };
    let mut nested = value.clone();
    for key in keys[depth + 1..].iter().rev() {
        let mut map = Map::new();
        map.insert(key.clone(), nested);
        nested = Value::Object(map);
    }
    let key = if depth == parents.len() {
        last
    } else {
        &keys[depth]
    };
    if let Some(m) = obj.members.iter().find(|m| &m.key == key) {
        let indent = line_indent(text, m.key_start);
        let rendered = render(text, &nested, &indent, multiline(text, &obj));
        return Some(format!(
            "{}{}{}",
            &text[..m.value_start],
            rendered,
            &text[m.value_end..]
        ));
    }
    insert_member(text, &obj, key, &nested)
}

fn multiline(text: &str, obj: &Object) -> bool {
    text.get(obj.open..obj.close)
        .is_some_and(|s| s.contains('\n'))
        || obj.members.is_empty()
}

fn render(text: &str, value: &Value, indent: &str, multiline: bool) -> String {
    if !multiline {
        return value.to_string();
    }
    pretty(value, &indent_unit(text)).replace('\n', &format!("\n{indent}"))
}

fn insert_member(text: &str, obj: &Object, key: &str, value: &Value) -> Option<String> {
    let key_json = serde_json::to_string(key).ok()?;
    let ml = multiline(text, obj);
    match obj.members.last() {
        Some(last) => {
            let first = obj.members.first()?;
            let sep = text.get(obj.open + 1..first.key_start)?;
            let colon =
                text.get(skip_string(text.as_bytes(), first.key_start)?..first.value_start)?;
            let indent = line_indent(text, first.key_start);
            let sep = if ml {
                format!("\n{indent}")
            } else {
                sep.to_string()
            };
            let rendered = render(text, value, &indent, ml);
            Some(format!(
                "{},{sep}{key_json}{colon}{rendered}{}",
                &text[..last.value_end],
                &text[last.value_end..]
            ))
        }
        None => {
            let outer = line_indent(text, obj.open);
            let indent = format!("{outer}{}", indent_unit(text));
            let rendered = render(text, value, &indent, true);
            Some(format!(
                "{}{{\n{indent}{key_json}: {rendered}\n{outer}}}{}",
                &text[..obj.open],
                &text[obj.close + 1..]
            ))
        }
    }
}

pub(crate) fn remove_path(text: &str, keys: &[String]) -> Option<String> {
    let (last, parents) = keys.split_last()?;
    let obj = find_object(text, parents)?;
    let pos = obj.members.iter().position(|m| &m.key == last)?;
    let m = &obj.members[pos];
    let (from, to) = if let Some(next) = obj.members.get(pos + 1) {
        (m.key_start, next.key_start)
    } else if let Some(prev) = pos.checked_sub(1).and_then(|p| obj.members.get(p)) {
        (prev.value_end, m.value_end)
    } else {
        (obj.open + 1, obj.close)
    };
    Some(format!("{}{}", &text[..from], &text[to..]))
}
