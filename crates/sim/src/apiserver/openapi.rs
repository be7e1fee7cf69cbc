//! A minimal OpenAPI v3 surface. kubectl reads it to learn that every kind accepts
//! `fieldValidation` on PATCH (so it leaves validation to the server instead of
//! downloading schemas). Schemas themselves are not published: kubectl then builds
//! client-side apply patches from its compiled-in types (strategic merge) or as JSON
//! merge patches for custom resources, which is what it does against a real server too.

use super::ApiServer;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: one entry per served group/version.
pub fn v3_index(srv: &ApiServer) -> Value {
    let mut gvs = BTreeSet::new();
    for r in srv.registry.all() {
        for v in &r.versions {
            gvs.insert(gv_path(&r.group, v));
        }
    }
    let paths: Map<String, Value> = gvs
        .into_iter()
        .map(|p| {
            let url = format!("/openapi/v3/{p}?hash={:016X}", srv.store.current_rv());
            (p, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// `/openapi/v3/{api/v1|apis/g/v}`: per kind, the item path with a PATCH operation.
pub fn v3_doc(srv: &ApiServer, gv: &str) -> Option<Value> {
    let (group, version) = match gv.split('/').collect::<Vec<_>>().as_slice() {
        ["api", v] => (String::new(), v.to_string()),
        ["apis", g, v] => (g.to_string(), v.to_string()),
        _ => return None,
    };
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for r in srv
        .registry
        .all()
        .iter()
        .filter(|r| r.group == group && r.serves(&version))
    {
        if r.plural == "bindings" {
            continue;
        }
        let gvk = json!({"group": group, "version": version, "kind": r.kind});
        let base = format!("/{}", gv_path(&group, &version));
        let path = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{base}/{}/{{name}}", r.plural)
        };
        let param = |n: &str| json!({"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
        paths.insert(
            path,
            json!({"patch": {
                "operationId": format!("patch{}", r.kind),
                "parameters": [param("dryRun"), param("fieldManager"), param("fieldValidation"), param("force")],
                "requestBody": {"content": {
                    "application/json-patch+json": {"schema": {"type": "object"}},
                    "application/merge-patch+json": {"schema": {"type": "object"}},
                    "application/apply-patch+yaml": {"schema": {"type": "object"}}}},
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            }}),
        );
        let id = format!(
            "{}.{version}.{}",
            if group.is_empty() { "core" } else { &group },
            r.kind
        );
        schemas.insert(id, json!({"type": "object", "x-kubernetes-group-version-kind": [gvk], "x-kubernetes-preserve-unknown-fields": true}));
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (gantry sim)", "version": format!("v1.{}.0", super::discovery::KUBE_MINOR)},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}
