//! Field ownership on a write that is not an apply (create, update, patch): the fields whose
//! value changed go to the writer, fields that disappeared leave every manager.
//!
//! The result is what comparing every leaf field of both objects gives, but only the parts of
//! the object that differ are walked, and only the managers that own a changed or removed
//! field are read and rewritten. A write that changes one field (a Lease's `renewTime`, a
//! condition) costs in proportion to that field, not to the object and its `managedFields`.

use super::apply::{
    FieldSet, ListKinds, Path, SERVER_META, Writer, fields_v1_of, from_fields_v1, key_segment,
    set_managed_fields, to_fields_v1, value_at, walk,
};
use super::strategic::ListKind;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Records ownership for a non-apply write of `new` over `old` (`None`: a create).
pub fn track_update(old: Option<&Value>, new: &mut Value, who: &Writer<'_>, lk: ListKinds<'_>) {
    let with_status = who.subresource == "status";
    let Some(old) = old else {
        // A create: the writer owns every field set.
        let fields = fields_v1_of(new, lk, with_status);
        let owns_some = fields.as_object().is_some_and(|m| !m.is_empty());
        let entries = if owns_some {
            vec![entry(who, fields)]
        } else {
            Vec::new()
        };
        set_managed_fields(new, entries);
        return;
    };
    let (changed, gone) = diff(old, new, lk, with_status);
    // The writes hand `new` the stored `managedFields` (a client cannot set them on an
    // update): taken from it, not copied from `old`.
    let mut entries: Vec<Value> = match new.pointer_mut("/metadata/managedFields").map(Value::take)
    {
        Some(Value::Array(a)) => a,
        _ => old
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    };
    if !changed.is_empty() || !gone.is_empty() {
        let mut writer_seen = false;
        for e in entries.iter_mut() {
            let is_writer = writes_as(e, who);
            writer_seen |= is_writer;
            rewrite(e, is_writer, &changed, &gone, who);
        }
        if !writer_seen && !changed.is_empty() {
            entries.push(entry(who, to_fields_v1(&changed)));
        }
    }
    // A manager that owns nothing is not listed.
    entries.retain(|e| {
        e.get("fieldsV1")
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty())
    });
    set_managed_fields(new, entries);
}

/// The writer's new `managedFields` entry.
fn entry(who: &Writer<'_>, fields: Value) -> Value {
    let mut e = json!({
        "manager": who.manager,
        "operation": "Update",
        "apiVersion": who.api_version,
        "time": who.time,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    });
    if !who.subresource.is_empty() {
        e["subresource"] = json!(who.subresource);
    }
    e
}

/// Is this `managedFields` entry the writer's own (its manager, an update, its subresource)?
fn writes_as(e: &Value, who: &Writer<'_>) -> bool {
    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default();
    s("manager") == who.manager && s("operation") != "Apply" && s("subresource") == who.subresource
}

/// Takes the changed fields from a manager (and gives them to the writer), and the removed
/// ones from everybody. An entry the write does not touch is left as it is.
fn rewrite(e: &mut Value, is_writer: bool, changed: &FieldSet, gone: &FieldSet, who: &Writer<'_>) {
    let empty = Value::Object(Map::new());
    let tree = e.get("fieldsV1").unwrap_or(&empty);
    let loses_gone = gone.iter().any(|g| node_at(tree, g).is_some());
    let has = |p: &Path| is_leaf(node_at(tree, p));
    if is_writer {
        if loses_gone || !changed.iter().all(has) {
            let mut fields = from_fields_v1(tree);
            fields.retain(|p| !gone.iter().any(|g| p.starts_with(g)));
            fields.extend(changed.iter().cloned());
            e["fieldsV1"] = to_fields_v1(&fields);
        }
        e["time"] = json!(who.time);
        e["apiVersion"] = json!(who.api_version);
    } else if loses_gone || changed.iter().any(has) {
        let mut fields = from_fields_v1(tree);
        fields.retain(|p| !changed.contains(p) && !gone.iter().any(|g| p.starts_with(g)));
        e["fieldsV1"] = to_fields_v1(&fields);
    }
}

/// The node of a FieldsV1 tree at `path`.
fn node_at<'t>(tree: &'t Value, path: &[String]) -> Option<&'t Value> {
    path.iter()
        .try_fold(tree, |cur, seg| cur.as_object()?.get(seg.as_str()))
}

/// A leaf of a FieldsV1 tree: a field the manager owns (not only fields below it).
fn is_leaf(node: Option<&Value>) -> bool {
    node.is_some_and(|n| n.as_object().is_none_or(Map::is_empty))
}

/// A keyed list's items by their path segment (`k:{…}`).
type ByKey<'v> = BTreeMap<String, &'v Value>;

/// A list's items by their merge key, each key once; `None` where an item lacks the key or
/// repeats one (the list's leaves are then compared whole).
fn by_key<'v>(items: &'v [Value], mk: &str) -> Option<ByKey<'v>> {
    let mut out = BTreeMap::new();
    for item in items {
        let seg = key_segment(mk, item.get(mk)?);
        if out.insert(seg, item).is_some() {
            return None;
        }
    }
    Some(out)
}

/// The leaf fields of `new` that are new or hold another value than in `old` (changed), and
/// those of `old` that `new` lacks (gone): equal subtrees are skipped whole.
fn diff(old: &Value, new: &Value, lk: ListKinds<'_>, with_status: bool) -> (FieldSet, FieldSet) {
    let mut d = Diff {
        old,
        new,
        lk,
        changed: FieldSet::new(),
        gone: FieldSet::new(),
    };
    let empty = Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    for k in keys(o, n) {
        if k == "apiVersion" || k == "kind" || (with_status != (k == "status")) {
            continue;
        }
        let path = vec![format!("f:{k}")];
        if k == "metadata" {
            let om = o.get(k).and_then(Value::as_object).unwrap_or(&empty);
            let nm = n.get(k).and_then(Value::as_object).unwrap_or(&empty);
            for mk in keys(om, nm) {
                if SERVER_META.contains(&mk) {
                    continue;
                }
                let p = vec![path[0].clone(), format!("f:{mk}")];
                d.node(om.get(mk), nm.get(mk), p, mk);
            }
        } else {
            d.node(o.get(k), n.get(k), path, k);
        }
    }
    (d.changed, d.gone)
}

/// The keys of both maps, each once.
fn keys<'a>(a: &'a Map<String, Value>, b: &'a Map<String, Value>) -> Vec<&'a str> {
    a.keys()
        .chain(b.keys().filter(|k| !a.contains_key(*k)))
        .map(String::as_str)
        .collect()
}

struct Diff<'a, 'l> {
    old: &'a Value,
    new: &'a Value,
    lk: ListKinds<'l>,
    changed: FieldSet,
    gone: FieldSet,
}

impl Diff<'_, '_> {
    /// Both lists by merge key, where both are non-empty and keyed by one merge key that
    /// every item has once; `None` otherwise (their leaves are then compared whole).
    fn keyed<'v>(
        &self,
        a: &'v [Value],
        b: &'v [Value],
        path: &Path,
        field: &str,
    ) -> Option<(ByKey<'v>, ByKey<'v>)> {
        // An empty list is a leaf of its own (the field set to `[]`).
        if a.is_empty() || b.is_empty() {
            return None;
        }
        match (
            (self.lk)(path, field, a.first()),
            (self.lk)(path, field, b.first()),
        ) {
            (ListKind::Keyed(ka), ListKind::Keyed(kb)) if ka == kb => {
                Some((by_key(a, ka)?, by_key(b, kb)?))
            }
            _ => None,
        }
    }

    /// Two keyed lists item by item. The result is the leaf comparison's: an item's own path
    /// (`…/k:{…}/.`) changes with any of its fields.
    fn items(&mut self, old: &ByKey<'_>, new: &ByKey<'_>, path: &Path, field: &str) {
        let at = |seg: &str, rest: &[&str]| {
            let mut p = path.clone();
            p.push(seg.to_string());
            p.extend(rest.iter().map(|r| r.to_string()));
            p
        };
        for (seg, n) in new {
            match old.get(seg) {
                Some(o) if o == n => {}
                Some(o) => {
                    self.changed.insert(at(seg, &["."]));
                    // Keyed items are objects (each has its key).
                    if let (Value::Object(a), Value::Object(b)) = (o, n) {
                        self.fields(a, b, &at(seg, &[]));
                    }
                }
                None => {
                    self.changed.insert(at(seg, &["."]));
                    walk(n, at(seg, &[]), field, self.lk, &mut self.changed);
                }
            }
        }
        for (seg, o) in old.iter().filter(|(seg, _)| !new.contains_key(*seg)) {
            self.gone.insert(at(seg, &["."]));
            walk(o, at(seg, &[]), field, self.lk, &mut self.gone);
        }
    }

    /// Two objects (or keyed items) field by field.
    fn fields(&mut self, a: &Map<String, Value>, b: &Map<String, Value>, path: &Path) {
        for k in keys(a, b) {
            let mut p = path.clone();
            p.push(format!("f:{k}"));
            self.node(a.get(k), b.get(k), p, k);
        }
    }

    fn node(&mut self, o: Option<&Value>, n: Option<&Value>, path: Path, field: &str) {
        match (o, n) {
            (Some(a), Some(b)) if a == b => {}
            (Some(Value::Object(a)), Some(Value::Object(b))) if !a.is_empty() && !b.is_empty() => {
                self.fields(a, b, &path)
            }
            _ => {
                // A list keyed by a merge key (conditions, container statuses) goes item by
                // item, as an object goes field by field: equal items are skipped whole.
                if let (Some(Value::Array(a)), Some(Value::Array(b))) = (o, n)
                    && let Some((old, new)) = self.keyed(a, b, &path, field)
                {
                    self.items(&old, &new, &path, field);
                    return;
                }
                // Lists and values: every leaf below, compared as whole paths.
                let leaves = |v: Option<&Value>| {
                    let mut out = FieldSet::new();
                    if let Some(v) = v {
                        walk(v, path.clone(), field, self.lk, &mut out);
                    }
                    out
                };
                let (before, after) = (leaves(o), leaves(n));
                for p in &after {
                    if !before.contains(p) || value_at(self.old, p) != value_at(self.new, p) {
                        self.changed.insert(p.clone());
                    }
                }
                self.gone.extend(before.difference(&after).cloned());
            }
        }
    }
}

#[cfg(test)]
mod tests;
