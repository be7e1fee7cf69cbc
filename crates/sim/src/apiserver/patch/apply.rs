//! Server-side apply and field ownership (`metadata.managedFields`, FieldsV1).
//!
//! A manager's field set is kept as its leaf paths; a path is a list of FieldsV1 segments
//! (`f:spec`, `k:{"name":"c"}`, `v:"x"`, and `.` for "this list item itself").
//! Apply merges the applied configuration into the object, reports conflicts with fields
//! other managers own at different values (unless forced), and removes fields the manager
//! applied before and omits now, when no other manager owns them.

use super::super::status::ApiError;
use super::strategic::ListKind;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

pub type Path = Vec<String>;
pub type FieldSet = BTreeSet<Path>;

/// Decides how a list merges, given the path of the list and its field name.
pub type ListKinds<'a> = &'a dyn Fn(&[String], &str, Option<&Value>) -> ListKind<'static>;

/// Metadata fields the server owns; never tracked.
pub(super) const SERVER_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "generateName",
];

/// The leaf fields set in `obj`. `with_status` says whether `.status` counts.
pub fn fields_of(obj: &Value, lk: ListKinds<'_>, with_status: bool) -> FieldSet {
    let mut out = FieldSet::new();
    visit_fields(obj, lk, with_status, &mut |p| {
        out.insert(p.to_vec());
    });
    out
}

/// `to_fields_v1(&fields_of(obj, ..))`, built without the set of paths between (a create's
/// `managedFields`: one pass over the object).
pub fn fields_v1_of(obj: &Value, lk: ListKinds<'_>, with_status: bool) -> Value {
    let mut root = Map::new();
    visit_fields(obj, lk, with_status, &mut |p| insert_path(&mut root, p));
    // In the order `to_fields_v1` gives: sorted, as upstream writes FieldsV1.
    fn sort(m: &mut Map<String, Value>) {
        m.sort_keys();
        m.values_mut()
            .filter_map(Value::as_object_mut)
            .for_each(sort);
    }
    sort(&mut root);
    Value::Object(root)
}

/// Calls `leaf` with each leaf field of `obj` (see [`fields_of`]).
fn visit_fields(
    obj: &Value,
    lk: ListKinds<'_>,
    with_status: bool,
    leaf: &mut dyn FnMut(&[String]),
) {
    let Some(m) = obj.as_object() else { return };
    let mut path = Path::new();
    for (k, v) in m {
        let skip = k == "apiVersion" || k == "kind" || (with_status != (k == "status"));
        if skip {
            continue;
        }
        path.push(format!("f:{k}"));
        if k == "metadata" {
            let tracked = v
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(mk, _)| !SERVER_META.contains(&mk.as_str()));
            for (mk, mv) in tracked {
                path.push(format!("f:{mk}"));
                visit(mv, &mut path, mk, lk, leaf);
                path.pop();
            }
        } else {
            visit(v, &mut path, k, lk, leaf);
        }
        path.pop();
    }
}

/// Every leaf field under `v` (at `path`, the field named `field`) into `out`.
pub(super) fn walk(v: &Value, mut path: Path, field: &str, lk: ListKinds<'_>, out: &mut FieldSet) {
    visit(v, &mut path, field, lk, &mut |p| {
        out.insert(p.to_vec());
    });
}

/// Calls `leaf` with the path of each leaf field under `v`; `path` is left as it was.
fn visit(
    v: &Value,
    path: &mut Path,
    field: &str,
    lk: ListKinds<'_>,
    leaf: &mut dyn FnMut(&[String]),
) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, cv) in m {
                path.push(format!("f:{k}"));
                visit(cv, path, k, lk, leaf);
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match lk(path, field, items.first()) {
            ListKind::Atomic => leaf(path),
            ListKind::Set => {
                for item in items {
                    path.push(format!("v:{item}"));
                    leaf(path);
                    path.pop();
                }
            }
            ListKind::Keyed(mk) => {
                for item in items {
                    let Some(key) = item.get(mk) else {
                        leaf(path);
                        continue;
                    };
                    path.push(key_segment(mk, key));
                    path.push(".".into());
                    leaf(path);
                    path.pop();
                    visit(item, path, field, lk, leaf);
                    path.pop();
                }
            }
        },
        _ => leaf(path),
    }
}

/// The path segment of a keyed list's item: `k:{"name":"c"}`.
pub(super) fn key_segment(mk: &str, key: &Value) -> String {
    format!("k:{}", json!({ mk: key }))
}

/// The value at a FieldsV1 path.
pub fn value_at<'v>(obj: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut cur = obj;
    for seg in path {
        if seg == "." {
            return Some(cur);
        }
        cur = step(cur, seg)?;
    }
    Some(cur)
}

fn step<'v>(cur: &'v Value, seg: &str) -> Option<&'v Value> {
    if let Some(f) = seg.strip_prefix("f:") {
        return cur.get(f);
    }
    let list = cur.as_array()?;
    if let Some(k) = seg.strip_prefix("k:") {
        let key: Map<String, Value> = serde_json::from_str(k).ok()?;
        return list
            .iter()
            .find(|it| key.iter().all(|(kk, kv)| it.get(kk) == Some(kv)));
    }
    if let Some(v) = seg.strip_prefix("v:") {
        let want: Value = serde_json::from_str(v).ok()?;
        return list.iter().find(|it| **it == want);
    }
    None
}

/// Removes the field at `path` (a `.`-terminated path removes the list item itself).
pub fn remove_at(obj: &mut Value, path: &[String]) {
    let (path, last) = match path.split_last() {
        Some((l, rest)) if l == "." => match rest.split_last() {
            Some((item, parent)) => (parent, item.as_str()),
            None => return,
        },
        Some((l, rest)) => (rest, l.as_str()),
        None => return,
    };
    let mut cur = obj;
    for seg in path {
        let next = if let Some(f) = seg.strip_prefix("f:") {
            cur.get_mut(f)
        } else {
            let pos = cur.as_array().and_then(|l| {
                let found = step(&Value::Array(l.clone()), seg).cloned();
                found.and_then(|f| l.iter().position(|it| *it == f))
            });
            match pos {
                Some(i) => cur.get_mut(i),
                None => None,
            }
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(found) = step(cur, last).cloned()
        && let Some(list) = cur.as_array_mut()
        && let Some(i) = list.iter().position(|it| *it == found)
    {
        list.remove(i);
    }
}

/// Renders a field set as a FieldsV1 tree.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        insert_path(&mut root, path);
    }
    Value::Object(root)
}

/// Adds `path` to a FieldsV1 tree, each segment a key whose value holds the ones below it.
fn insert_path(root: &mut Map<String, Value>, path: &[String]) {
    let mut cur = root;
    for seg in path {
        if !cur.contains_key(seg) {
            cur.insert(seg.clone(), Value::Object(Map::new()));
        }
        match cur.get_mut(seg).and_then(Value::as_object_mut) {
            Some(m) => cur = m,
            None => break,
        }
    }
}

/// Reads a FieldsV1 tree back into leaf paths.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    fn rec(v: &Value, path: &mut Path, out: &mut FieldSet) {
        match v.as_object() {
            Some(m) if !m.is_empty() => {
                for (k, cv) in m {
                    path.push(k.clone());
                    rec(cv, path, out);
                    path.pop();
                }
            }
            _ => {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
            }
        }
    }
    let mut out = FieldSet::new();
    rec(v, &mut Vec::new(), &mut out);
    out
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Manager {
    pub manager: String,
    pub apply: bool,
    pub subresource: String,
    pub api_version: String,
    pub time: String,
    pub fields: FieldSet,
}

pub fn read_managers(obj: &Value) -> Vec<Manager> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| Manager {
            manager: e
                .get("manager")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            apply: e.get("operation").and_then(Value::as_str) == Some("Apply"),
            subresource: e
                .get("subresource")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            api_version: e
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            time: e
                .get("time")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
        })
        .collect()
}

pub fn write_managers(obj: &mut Value, managers: &[Manager]) {
    let entries: Vec<Value> = managers
        .iter()
        .filter(|m| !m.fields.is_empty())
        .map(|m| {
            let mut e = json!({
                "manager": m.manager,
                "operation": if m.apply { "Apply" } else { "Update" },
                "apiVersion": m.api_version,
                "time": m.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&m.fields),
            });
            if !m.subresource.is_empty() {
                e["subresource"] = json!(m.subresource);
            }
            e
        })
        .collect();
    set_managed_fields(obj, entries);
}

/// Puts `entries` as the object's `managedFields` (none: removes them).
pub(super) fn set_managed_fields(obj: &mut Value, entries: Vec<Value>) {
    if !entries.is_empty() && obj.get("metadata").is_none() {
        obj["metadata"] = json!({});
    }
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(entries));
        }
    }
}

fn owns(fields: &FieldSet, path: &Path) -> bool {
    fields
        .iter()
        .any(|f| f.starts_with(path) || path.starts_with(f))
}

/// Who is doing a write.
pub struct Writer<'a> {
    pub manager: &'a str,
    pub subresource: &'a str,
    pub api_version: &'a str,
    pub time: &'a str,
}

/// Server-side apply of `applied` onto `current` (None: the object is created).
pub fn apply(
    current: Option<&Value>,
    applied: &Value,
    who: &Writer<'_>,
    force: bool,
    lk: ListKinds<'_>,
) -> Result<Value, ApiError> {
    let with_status = who.subresource == "status";
    let applied_fields = fields_of(applied, lk, with_status);
    let mut managers = current.map(read_managers).unwrap_or_default();
    let is_self =
        |m: &Manager| m.manager == who.manager && m.apply && m.subresource == who.subresource;
    let mut conflicts = Vec::new();
    if let Some(cur) = current {
        for m in managers.iter_mut().filter(|m| !is_self(m)) {
            let clash: Vec<Path> = applied_fields
                .iter()
                .filter(|p| m.fields.contains(*p) && value_at(cur, p) != value_at(applied, p))
                .cloned()
                .collect();
            if force {
                m.fields.retain(|p| !clash.contains(p));
            } else {
                conflicts.extend(clash.into_iter().map(|p| (m.manager.clone(), p)));
            }
        }
    }
    if !conflicts.is_empty() {
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|(m, p)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {m:?}"), "field": dotted(p)}))
            .collect();
        let list: Vec<String> = conflicts
            .iter()
            .map(|(m, p)| format!("conflict with {m:?}: {}", dotted(p)))
            .collect();
        return Err(ApiError::new(
            409,
            "Conflict",
            format!(
                "Apply failed with {} conflict(s): {}",
                conflicts.len(),
                list.join("; ")
            ),
        )
        .with_details(json!({"causes": causes})));
    }
    let mut merged = match current {
        Some(c) => {
            let mut m = c.clone();
            merge_into(&mut m, applied, &mut Vec::new(), "", lk);
            m
        }
        None => applied.clone(),
    };
    let previous = managers
        .iter()
        .find(|m| is_self(m))
        .map(|m| m.fields.clone())
        .unwrap_or_default();
    let mut removed: Vec<&Path> = previous
        .difference(&applied_fields)
        .filter(|p| !managers.iter().any(|m| !is_self(m) && owns(&m.fields, p)))
        .collect();
    // Outermost first: a dropped list item goes whole (its key fields are still there
    // to find it), and removing its fields afterwards finds nothing.
    removed.sort_by_key(|p| {
        if p.last().is_some_and(|s| s == ".") {
            p.len() - 1
        } else {
            p.len()
        }
    });
    for p in removed {
        remove_at(&mut merged, p);
    }
    managers.retain(|m| !is_self(m));
    managers.push(Manager {
        manager: who.manager.to_string(),
        apply: true,
        subresource: who.subresource.to_string(),
        api_version: who.api_version.to_string(),
        time: who.time.to_string(),
        fields: applied_fields,
    });
    write_managers(&mut merged, &managers);
    Ok(merged)
}

fn dotted(p: &Path) -> String {
    p.iter()
        .map(|s| match s.strip_prefix("f:") {
            Some(f) => format!(".{f}"),
            None => format!("[{}]", s.trim_start_matches("k:").trim_start_matches("v:")),
        })
        .collect()
}

/// Merges an applied configuration into an object: maps recursively, keyed lists by
/// key, set lists as union, everything else replaced.
fn merge_into(dst: &mut Value, src: &Value, path: &mut Path, field: &str, lk: ListKinds<'_>) {
    match (dst, src) {
        (Value::Object(d), Value::Object(s)) => {
            for (k, sv) in s {
                path.push(format!("f:{k}"));
                match d.get_mut(k) {
                    Some(dv) => merge_into(dv, sv, path, k, lk),
                    None => {
                        d.insert(k.clone(), sv.clone());
                    }
                }
                path.pop();
            }
        }
        (Value::Array(d), Value::Array(s)) => match lk(path, field, s.first().or(d.first())) {
            ListKind::Atomic => *d = s.clone(),
            ListKind::Set => {
                for v in s {
                    if !d.contains(v) {
                        d.push(v.clone());
                    }
                }
            }
            ListKind::Keyed(mk) => {
                for item in s {
                    let pos = item
                        .get(mk)
                        .and_then(|k| d.iter().position(|x| x.get(mk) == Some(k)));
                    match pos {
                        Some(i) => merge_into(&mut d[i], item, path, field, lk),
                        None => d.push(item.clone()),
                    }
                }
            }
        },
        (d, s) => *d = s.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::strategic::list_kind;
    use super::super::track::track_update;
    use super::*;

    fn lk(_: &[String], f: &str, s: Option<&Value>) -> ListKind<'static> {
        list_kind(f, s)
    }
    fn who(m: &str) -> Writer<'_> {
        Writer {
            manager: m,
            subresource: "",
            api_version: "v1",
            time: "t",
        }
    }

    #[test]
    fn apply_removes_dropped_fields_only_when_unowned() {
        let first = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "1", "b": "2"}}, "data": {"x": "1", "y": "2"}});
        let obj = apply(None, &first, &who("m1"), false, &lk).expect("apply");
        let second = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"x": "1"}});
        let obj = apply(Some(&obj), &second, &who("m1"), false, &lk).expect("reapply");
        assert_eq!(obj["data"], json!({"x": "1"}));
        assert_eq!(obj["metadata"]["labels"], json!({"a": "1"}));
    }

    #[test]
    fn conflicts_unless_forced() {
        let base = json!({"metadata": {"name": "c"}, "spec": {"replicas": 1}});
        let obj = apply(None, &base, &who("m1"), false, &lk).expect("apply");
        let other = json!({"metadata": {"name": "c"}, "spec": {"replicas": 2}});
        let err = apply(Some(&obj), &other, &who("m2"), false, &lk).expect_err("conflict");
        assert_eq!(err.code, 409);
        let obj = apply(Some(&obj), &other, &who("m2"), true, &lk).expect("forced");
        assert_eq!(obj["spec"]["replicas"], 2);
        // m1 lost the field, so dropping it from m1's config keeps m2's value.
        let empty = json!({"metadata": {"name": "c"}});
        let obj = apply(Some(&obj), &empty, &who("m1"), false, &lk).expect("apply");
        assert_eq!(obj["spec"]["replicas"], 2);
    }

    #[test]
    fn keyed_list_items_merge_and_drop() {
        let a = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}});
        let obj = apply(None, &a, &who("m"), false, &lk).expect("apply");
        let b = json!({"spec": {"containers": [{"name": "a", "image": "2"}]}});
        let obj = apply(Some(&obj), &b, &who("m"), false, &lk).expect("apply");
        assert_eq!(
            obj["spec"]["containers"],
            json!([{"name": "a", "image": "2"}])
        );
        let fields = from_fields_v1(&to_fields_v1(&fields_of(&obj, &lk, false)));
        assert_eq!(fields, fields_of(&obj, &lk, false));
    }

    #[test]
    fn a_creates_tree_is_the_tree_of_its_fields_in_the_same_order() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "uid": "u", "labels": {"z": "1", "a": "2"}, "finalizers": ["f/b", "f/a"]},
            "spec": {"nodeName": "n", "containers": [
                {"name": "b", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}], "args": ["x"]},
                {"name": "a", "env": [{"name": "E", "value": "v"}], "resources": {}},
                {"image": "no-name"}],
                "volumes": [], "tolerations": [{"key": "k", "operator": "Exists"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}});
        for with_status in [false, true] {
            let direct = fields_v1_of(&pod, &lk, with_status);
            let via = to_fields_v1(&fields_of(&pod, &lk, with_status));
            assert_eq!(
                direct.to_string(),
                via.to_string(),
                "with_status {with_status}"
            );
        }
        assert_eq!(
            fields_v1_of(&json!({"metadata": {"name": "p"}}), &lk, false),
            json!({})
        );
    }

    #[test]
    fn update_takes_ownership() {
        let a = json!({"metadata": {"name": "c"}, "spec": {"replicas": 1}});
        let obj = apply(None, &a, &who("m1"), false, &lk).expect("apply");
        let mut updated = obj.clone();
        updated["spec"]["replicas"] = json!(3);
        track_update(Some(&obj), &mut updated, &who("editor"), &lk);
        let err =
            apply(Some(&updated), &a, &who("m1"), false, &lk).expect_err("editor owns replicas");
        assert_eq!(err.code, 409);
    }
}
