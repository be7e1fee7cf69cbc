//! Small helpers over `toml_edit` shared by the containerd and CRI-O editors.

use super::error::{ToolkitError, line_col};
use std::path::Path;
use toml_edit::{DocumentMut, Item, Table, Value};

/// Parses a TOML file, mapping syntax errors to a line/column that names the file.
pub(crate) fn parse(text: &str, path: &Path) -> Result<DocumentMut, ToolkitError> {
    text.parse::<DocumentMut>().map_err(|err| {
        let (line, column) = line_col(text, err.span().map_or(0, |s| s.start));
        ToolkitError::Toml {
            path: path.to_path_buf(),
            line,
            column,
            message: err.message().trim().to_string(),
        }
    })
}

/// Renders a dotted path the way a person would write it in TOML (`plugins."a.b".c`).
pub(crate) fn dotted(keys: &[&str]) -> String {
    keys.iter()
        .map(|k| {
            if !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                (*k).to_string()
            } else {
                format!("\"{k}\"")
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn kind(item: &Item) -> &'static str {
    match item {
        Item::None => "nothing",
        Item::Value(v) => v.type_name(),
        Item::Table(_) => "table",
        Item::ArrayOfTables(_) => "array of tables",
    }
}

/// Follows `keys` from `root`; `Ok(None)` when some key is missing, an error when a key in the
/// way holds something other than a table.
pub(crate) fn get<'a>(
    root: &'a Item,
    keys: &[&str],
    path: &Path,
) -> Result<Option<&'a Item>, ToolkitError> {
    let mut item = root;
    for (depth, key) in keys.iter().enumerate() {
        let Some(table) = item.as_table_like() else {
            return Err(not_table(path, &keys[..depth], item));
        };
        match table.get(key) {
            Some(child) => item = child,
            None => return Ok(None),
        }
    }
    Ok(Some(item))
}

fn not_table(path: &Path, keys: &[&str], item: &Item) -> ToolkitError {
    ToolkitError::config(
        path,
        format!("`{}` must be a table, found {}", dotted(keys), kind(item)),
    )
}

/// Like [`get`] but creates missing tables (implicit, so no empty headers appear).
pub(crate) fn get_or_create<'a>(
    root: &'a mut Item,
    keys: &[&str],
    path: &Path,
) -> Result<&'a mut Item, ToolkitError> {
    let mut item = root;
    for (depth, key) in keys.iter().enumerate() {
        let inline = item.is_inline_table();
        if item.as_table_like().is_none() {
            return Err(not_table(path, &keys[..depth], item));
        }
        let Some(table) = item.as_table_like_mut() else {
            return Err(not_table(path, &keys[..depth], &Item::None));
        };
        if table.get(key).is_none() {
            let fresh = if inline {
                Item::Value(Value::InlineTable(Default::default()))
            } else {
                let mut t = Table::new();
                t.set_implicit(true);
                Item::Table(t)
            };
            table.insert(key, fresh);
        }
        let Some(child) = table.get_mut(key) else {
            return Err(not_table(path, &keys[..depth], &Item::None));
        };
        item = child;
    }
    if item.as_table_like().is_none() {
        return Err(not_table(path, keys, item));
    }
    Ok(item)
}

/// Inserts (or replaces) `key = value` in a table, indenting a new key like its siblings.
pub(crate) fn set_value(item: &mut Item, key: &str, value: Value) {
    let indent = sibling_indent(item);
    let Some(table) = item.as_table_like_mut() else {
        return;
    };
    match table.get_mut(key) {
        Some(Item::Value(existing)) => {
            let decor = existing.decor().clone();
            *existing = value;
            *existing.decor_mut() = decor;
        }
        Some(other) => *other = Item::Value(value),
        None => {
            table.insert(key, Item::Value(value));
            if let (Some(indent), Some(mut k)) = (indent, table.key_mut(key)) {
                k.leaf_decor_mut().set_prefix(indent);
            }
        }
    }
}

/// The whitespace a table's existing keys are indented with (only for `[header]` tables).
fn sibling_indent(item: &Item) -> Option<String> {
    let table = item.as_table()?;
    let (key, _) = table.iter().find(|(_, v)| v.is_value())?;
    let prefix = table.key(key)?.leaf_decor().prefix()?.as_str()?;
    let indent = prefix.rsplit('\n').next().unwrap_or("");
    indent
        .chars()
        .all(|c| c == ' ' || c == '\t')
        .then(|| indent.to_string())
}

/// Makes `existing` hold the same values as `desired` while keeping the formatting, comments
/// and order of every part that already matches (a second configure of a table that was
/// written by an older tool only touches the keys that differ).
pub(crate) fn sync(existing: &mut Item, desired: &Item) {
    let same_shape = (existing.is_table() && desired.is_table())
        || (existing.is_inline_table() && desired.is_inline_table());
    if !same_shape {
        if plain(existing) != plain(desired) {
            *existing = desired.clone();
        }
        return;
    }
    let Some(want) = desired.as_table_like() else {
        return;
    };
    let wanted: Vec<(String, Item)> = want
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let Some(have) = existing.as_table_like_mut() else {
        return;
    };
    let stale: Vec<String> = have
        .iter()
        .map(|(k, _)| k.to_string())
        .filter(|k| !wanted.iter().any(|(w, _)| w == k))
        .collect();
    for key in stale {
        have.remove(&key);
    }
    for (key, value) in wanted {
        match existing.as_table_like_mut().and_then(|t| t.get_mut(&key)) {
            Some(child) if child.is_table_like() => sync(child, &value),
            Some(child) => {
                if plain(child) != plain(&value) {
                    match (child.as_value_mut(), value.as_value()) {
                        (Some(old), Some(new)) => {
                            let decor = old.decor().clone();
                            *old = new.clone();
                            *old.decor_mut() = decor;
                        }
                        _ => *child = value,
                    }
                }
            }
            None => match value {
                Item::Value(v) => set_value(existing, &key, v),
                other => {
                    if let Some(t) = existing.as_table_like_mut() {
                        t.insert(&key, other);
                    }
                }
            },
        }
    }
}

/// A copy of `item` that can live elsewhere in the document: no comments, no fixed position.
pub(crate) fn detached_copy(item: &Item) -> Item {
    let mut copy = item.clone();
    scrub(&mut copy);
    copy
}

fn scrub(item: &mut Item) {
    match item {
        Item::Table(table) => {
            table.set_position(None);
            strip_comments(table.decor_mut());
            // Keep the header indentation, but always start the table on a fresh paragraph.
            let prefix = table
                .decor()
                .prefix()
                .and_then(|p| p.as_str())
                .unwrap_or("")
                .to_string();
            if !prefix.starts_with('\n') {
                table.decor_mut().set_prefix(format!("\n{prefix}"));
            }
            for (mut key, child) in table.iter_mut() {
                strip_comments(key.leaf_decor_mut());
                if let Item::Value(v) = child {
                    strip_comments(v.decor_mut());
                }
                scrub(child);
            }
        }
        Item::ArrayOfTables(array) => {
            for table in array.iter_mut() {
                let mut wrapped = Item::Table(std::mem::take(table));
                scrub(&mut wrapped);
                if let Item::Table(t) = wrapped {
                    *table = t;
                }
            }
        }
        Item::Value(_) | Item::None => {}
    }
}

/// Drops comment lines from a decor, keeping the blank lines and indentation around them.
fn strip_comments(decor: &mut toml_edit::Decor) {
    if let Some(prefix) = decor.prefix().and_then(|p| p.as_str())
        && prefix.contains('#')
    {
        let kept: Vec<&str> = prefix
            .split('\n')
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect();
        let kept = kept.join("\n");
        decor.set_prefix(kept);
    }
    if let Some(suffix) = decor.suffix().and_then(|s| s.as_str())
        && suffix.contains('#')
    {
        decor.set_suffix("");
    }
}

/// The value of an item with all formatting dropped, for "is this already what we want?" checks.
pub(crate) fn plain(item: &Item) -> serde_json::Value {
    use serde_json::Value as J;
    fn table_like(t: &dyn toml_edit::TableLike) -> J {
        J::Object(t.iter().map(|(k, v)| (k.to_string(), plain(v))).collect())
    }
    fn value(v: &Value) -> J {
        match v {
            Value::String(s) => J::String(s.value().clone()),
            Value::Integer(i) => J::from(*i.value()),
            Value::Float(f) => serde_json::Number::from_f64(*f.value()).map_or(J::Null, J::Number),
            Value::Boolean(b) => J::Bool(*b.value()),
            Value::Datetime(d) => J::String(d.value().to_string()),
            Value::Array(a) => J::Array(a.iter().map(value).collect()),
            Value::InlineTable(t) => table_like(t),
        }
    }
    match item {
        Item::None => J::Null,
        Item::Value(v) => value(v),
        Item::Table(t) => table_like(t),
        Item::ArrayOfTables(a) => J::Array(a.iter().map(|t| table_like(t)).collect()),
    }
}

/// Reads a string value at `key` of a table-like item.
pub(crate) fn str_at<'a>(item: &'a Item, key: &str) -> Option<&'a str> {
    item.as_table_like()?.get(key)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detached_copy_drops_comments_and_keeps_values() {
        let doc: DocumentMut = "[a]\n  # why\n  x = 1 # note\n[a.b]\n  y = true\n"
            .parse()
            .unwrap();
        let copy = detached_copy(&doc["a"]);
        assert_eq!(plain(&copy), plain(&doc["a"]));
        let mut out = DocumentMut::new();
        out.insert("c", copy);
        let text = out.to_string();
        assert!(!text.contains('#'), "{text}");
        assert!(text.contains("[c]\n  x = 1\n"), "{text}");
    }

    #[test]
    fn parse_error_names_line_and_column() {
        let err = parse("a = 1\nb = [\n", Path::new("/etc/x.toml")).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("/etc/x.toml: invalid TOML at line "),
            "{msg}"
        );
    }

    #[test]
    fn get_or_create_refuses_to_overwrite_a_value() {
        let mut doc: DocumentMut = "plugins = 3\n".parse().unwrap();
        let err = get_or_create(doc.as_item_mut(), &["plugins", "x"], Path::new("f")).unwrap_err();
        assert!(
            err.to_string()
                .contains("`plugins` must be a table, found integer"),
            "{err}"
        );
    }
}
