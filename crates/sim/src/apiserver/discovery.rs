//! Discovery documents: /version, /api, /apis, /api/v1, /apis/{group}[/{version}].

use super::resources::ResourceInfo;
use super::server::ApiServer;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The Kubernetes version we answer as.
pub const KUBE_MINOR: &str = "33";

pub fn version() -> Value {
    json!({
        "major": "1", "minor": KUBE_MINOR,
        "gitVersion": format!("v1.{KUBE_MINOR}.0+gantry"),
        "gitCommit": "gantry", "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "none", "compiler": "rustc", "platform": "linux/amd64",
    })
}

pub fn core_versions(addr: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Groups in discovery order (built-ins first, as listed), each with its versions.
fn groups(srv: &ApiServer) -> Vec<(String, Vec<String>)> {
    let mut order: Vec<String> = Vec::new();
    let mut versions: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in srv.registry.all() {
        if r.group.is_empty() {
            continue;
        }
        if !order.contains(&r.group) {
            order.push(r.group.clone());
        }
        let vs = versions.entry(r.group.clone()).or_default();
        for v in &r.versions {
            if !vs.contains(v) {
                vs.push(v.clone());
            }
        }
    }
    let mut out: Vec<(String, Vec<String>)> = order
        .into_iter()
        .map(|g| {
            let v = versions.remove(&g).unwrap_or_default();
            (g, v)
        })
        .collect();
    // Served beside the stored resources, like metrics-server's aggregated API.
    out.push((
        super::metrics::GROUP.to_string(),
        vec![super::metrics::VERSION.to_string()],
    ));
    out
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(json!({}))})
}

pub fn api_groups(srv: &ApiServer) -> Value {
    let gs: Vec<Value> = groups(srv).iter().map(|(g, v)| group_doc(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

pub fn api_group(srv: &ApiServer, group: &str) -> Option<Value> {
    let (g, v) = groups(srv).into_iter().find(|(g, _)| g == group)?;
    let mut doc = group_doc(&g, &v);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

fn entries(r: &Arc<ResourceInfo>) -> Vec<Value> {
    let only_create = r.plural == "bindings";
    let mut out = vec![json!({
        "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
        "verbs": if only_create { vec!["create"] } else { VERBS.to_vec() },
        "shortNames": r.short_names, "categories": r.categories,
    })];
    for sub in &r.subresources {
        let (kind, group, version, verbs): (&str, Option<&str>, Option<&str>, &[&str]) =
            match sub.as_str() {
                "status" => (&r.kind, None, None, &["get", "patch", "update"]),
                "binding" => ("Binding", None, None, &["create"]),
                "eviction" => ("Eviction", Some("policy"), Some("v1"), &["create"]),
                "finalize" => (&r.kind, None, None, &["update"]),
                "log" => ("Pod", None, None, &["get"]),
                _ => continue,
            };
        let mut e = json!({"name": format!("{}/{sub}", r.plural), "singularName": "", "namespaced": r.namespaced, "kind": kind, "verbs": verbs});
        if let Some(g) = group {
            e["group"] = json!(g);
        }
        if let Some(v) = version {
            e["version"] = json!(v);
        }
        out.push(e);
    }
    out
}

/// The APIResourceList of one group/version, if anything is served there.
pub fn resource_list(srv: &ApiServer, group: &str, version: &str) -> Option<Value> {
    if group == super::metrics::GROUP {
        return (version == super::metrics::VERSION).then(super::metrics::resource_list);
    }
    let rs: Vec<Value> = srv
        .registry
        .all()
        .iter()
        .filter(|r| r.group == group && r.serves(version))
        .flat_map(entries)
        .collect();
    if rs.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": rs}),
    )
}
