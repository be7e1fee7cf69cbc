//! Docker `daemon.json` edits. The file is parsed with serde_json to decide *what* changes,
//! then edited as text so every byte we do not touch stays as the user wrote it.

use super::error::ToolkitError;
use serde_json::{Map, Value, json};
use std::path::Path;

/// What to register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub runtime_name: String,
    pub binary_path: String,
    pub set_as_default: bool,
    pub enable_cdi: bool,
}

/// Parses `daemon.json`; an empty file is `{}`.
pub fn parse(text: &str, path: &Path) -> Result<Map<String, Value>, ToolkitError> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ToolkitError::config(path, "the top level must be a JSON object")),
        Err(err) => {
            let (line, column) = (err.line(), err.column());
            let message = err.to_string();
            let message = message.split(" at line ").next().unwrap_or(&message).to_string();
            Err(ToolkitError::Json { path: path.to_path_buf(), line, column, message })
        }
    }
}

/// Returns the edited file text (the input itself when nothing needs to change).
pub fn configure(text: &str, opts: &Options, path: &Path) -> Result<String, ToolkitError> {
    let current = parse(text, path)?;
    let mut wanted = current.clone();
    let runtime = json!({ "args": [], "path": opts.binary_path });
    let mut edits: Vec<Edit> = Vec::new();
    if wanted.get("runtimes").is_some_and(|r| !r.is_object()) {
        return Err(ToolkitError::config(path, "`runtimes` must be an object"));
    }
    let runtimes = wanted.entry("runtimes").or_insert_with(|| json!({}));
    if runtimes.get(&opts.runtime_name) != Some(&runtime) {
        if let Some(r) = runtimes.as_object_mut() {
            r.insert(opts.runtime_name.clone(), runtime.clone());
        }
        edits.push(Edit::Set(vec!["runtimes".into(), opts.runtime_name.clone()], runtime));
    }
    let default = wanted.get("default-runtime").and_then(Value::as_str).map(str::to_string);
    if opts.set_as_default && default.as_deref() != Some(opts.runtime_name.as_str()) {
        let v = Value::from(opts.runtime_name.as_str());
        wanted.insert("default-runtime".into(), v.clone());
        edits.push(Edit::Set(vec!["default-runtime".into()], v));
    } else if !opts.set_as_default && default.as_deref() == Some(opts.runtime_name.as_str()) {
        wanted.remove("default-runtime");
        edits.push(Edit::Remove(vec!["default-runtime".into()]));
    }
    if opts.enable_cdi && wanted.get("features").and_then(|f| f.get("cdi")) != Some(&Value::Bool(true)) {
        if wanted.get("features").is_some_and(|f| !f.is_object()) {
            return Err(ToolkitError::config(path, "`features` must be an object"));
        }
        let features = wanted.entry("features").or_insert_with(|| json!({}));
        if let Some(f) = features.as_object_mut() {
            f.insert("cdi".into(), Value::Bool(true));
        }
        edits.push(Edit::Set(vec!["features".into(), "cdi".into()], Value::Bool(true)));
    }
    finish(text, &wanted, edits)
}

/// Removes what [`configure`] adds (`enable_cdi` stays: it may be the user's own setting).
pub fn unconfigure(text: &str, runtime_name: &str, path: &Path) -> Result<String, ToolkitError> {
    let mut wanted = parse(text, path)?;
    let mut edits = Vec::new();
    let mut emptied = false;
    if let Some(runtimes) = wanted.get_mut("runtimes").and_then(Value::as_object_mut)
        && runtimes.remove(runtime_name).is_some()
    {
        emptied = runtimes.is_empty();
        edits.push(Edit::Remove(vec!["runtimes".into(), runtime_name.into()]));
    }
    if emptied {
        wanted.remove("runtimes");
        edits.push(Edit::Remove(vec!["runtimes".into()]));
    }
    if wanted.get("default-runtime").and_then(Value::as_str) == Some(runtime_name) {
        wanted.remove("default-runtime");
        edits.push(Edit::Remove(vec!["default-runtime".into()]));
    }
    finish(text, &wanted, edits)
}

enum Edit {
    Set(Vec<String>, Value),
    Remove(Vec<String>),
}

fn finish(text: &str, wanted: &Map<String, Value>, edits: Vec<Edit>) -> Result<String, ToolkitError> {
    if edits.is_empty() {
        return Ok(text.to_string());
    }
    let base = if text.trim().is_empty() { "{}\n".to_string() } else { text.to_string() };
    let edited = edits.iter().try_fold(base, |acc, edit| match edit {
        Edit::Set(keys, v) => set_path(&acc, keys, v),
        Edit::Remove(keys) => remove_path(&acc, keys),
    });
    // The text edit must mean exactly what we decided; if the file's shape defeated it,
    // fall back to re-serialising the whole document.
    match edited {
        Some(out) if serde_json::from_str::<Value>(&out).ok().as_ref() == Some(&Value::Object(wanted.clone())) => Ok(out),
        _ => {
            let unit = indent_unit(text);
            let mut out = pretty(&Value::Object(wanted.clone()), &unit);
            out.push('\n');
            Ok(out)
        }
    }
}

// ---- a minimal span scanner over valid JSON text ----

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
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
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
        return Some(Object { open, close: i, members });
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
        members.push(Member { key, key_start, value_start, value_end });
        i = skip_ws(b, value_end);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b'}' => return Some(Object { open, close: i, members }),
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
    let start = text.get(..at).and_then(|t| t.rfind('\n')).map_or(0, |p| p + 1);
    text.get(start..).unwrap_or("").chars().take_while(|c| *c == ' ' || *c == '\t').collect()
}

/// The indentation step the file uses (four spaces when it shows none).
fn indent_unit(text: &str) -> String {
    root_object(text)
        .and_then(|o| o.members.first().map(|m| line_indent(text, m.key_start)))
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "    ".to_string())
}

fn pretty(value: &Value, unit: &str) -> String {
    use serde::Serialize;
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    match value.serialize(&mut ser) {
        Ok(()) => String::from_utf8(buf).unwrap_or_default(),
        Err(_) => value.to_string(),
    }
}

fn set_path(text: &str, keys: &[String], value: &Value) -> Option<String> {
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
    let key = if depth == parents.len() { last } else { &keys[depth] };
    if let Some(m) = obj.members.iter().find(|m| &m.key == key) {
        let indent = line_indent(text, m.key_start);
        let rendered = render(text, &nested, &indent, multiline(text, &obj));
        return Some(format!("{}{}{}", &text[..m.value_start], rendered, &text[m.value_end..]));
    }
    insert_member(text, &obj, key, &nested)
}

fn multiline(text: &str, obj: &Object) -> bool {
    text.get(obj.open..obj.close).is_some_and(|s| s.contains('\n')) || obj.members.is_empty()
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
            let colon = text.get(skip_string(text.as_bytes(), first.key_start)?..first.value_start)?;
            let indent = line_indent(text, first.key_start);
            let sep = if ml { format!("\n{indent}") } else { sep.to_string() };
            let rendered = render(text, value, &indent, ml);
            Some(format!("{},{sep}{key_json}{colon}{rendered}{}", &text[..last.value_end], &text[last.value_end..]))
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

fn remove_path(text: &str, keys: &[String]) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(default: bool) -> Options {
        Options { runtime_name: "nvidia".into(), binary_path: "/t/nvidia-container-runtime".into(), set_as_default: default, enable_cdi: false }
    }

    #[test]
    fn adds_runtime_keeping_other_bytes() {
        let src = "{\n  \"log-opts\": {\"max-size\": \"10m\"},\n  \"insecure-registries\": [\"a:5000\"]\n}\n";
        let out = configure(src, &opts(true), Path::new("d.json")).unwrap();
        assert!(out.starts_with("{\n  \"log-opts\": {\"max-size\": \"10m\"},\n  \"insecure-registries\": [\"a:5000\"],\n  \"runtimes\": {\n    \"nvidia\": {\n      \"args\": [],"), "{out}");
        assert!(out.ends_with("\"default-runtime\": \"nvidia\"\n}\n"), "{out}");
        assert_eq!(configure(&out, &opts(true), Path::new("d.json")).unwrap(), out);
        assert_eq!(unconfigure(&out, "nvidia", Path::new("d.json")).unwrap(), src);
    }

    #[test]
    fn empty_and_compact_files() {
        let out = configure("", &opts(false), Path::new("d.json")).unwrap();
        assert_eq!(out, "{\n    \"runtimes\": {\n        \"nvidia\": {\n            \"args\": [],\n            \"path\": \"/t/nvidia-container-runtime\"\n        }\n    }\n}\n");
        let compact = "{\"debug\":true}";
        let out = configure(compact, &opts(false), Path::new("d.json")).unwrap();
        assert!(out.starts_with("{\"debug\":true,"), "{out}");
        assert_eq!(unconfigure(&out, "nvidia", Path::new("d.json")).unwrap(), compact);
    }

    #[test]
    fn malformed_json_names_file_and_position() {
        let err = configure("{\n  \"a\": 1,\n}\n", &opts(false), Path::new("/etc/docker/daemon.json")).unwrap_err().to_string();
        assert!(err.starts_with("/etc/docker/daemon.json: invalid JSON at line 3, column 1"), "{err}");
    }
}
