//! OpenAPI v3, per group/version as the real server publishes it. kubectl reads it to learn
//! that every kind accepts `fieldValidation` on PATCH (so it leaves validation to the
//! server), and `kubectl explain` reads the kinds' schemas: built-ins from k8s-openapi,
//! custom resources from their CRDs' structural schemas. The PATCH operations do not offer
//! strategic merge, so kubectl's client-side apply keeps building patches from its compiled-in
//! types (built-ins) or as JSON merge patches (custom resources), as against a real server.

mod builtin;
mod crd;

use super::server::ApiServer;
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
        match &r.crd {
            None => {
                let b = builtin::builtins();
                let root = b
                    .roots
                    .iter()
                    .find(|x| x.group == group && x.version == version && x.kind == r.kind);
                if let Some(root) = root
                    && let Some(s) = b.definitions.get(&root.id)
                {
                    builtin::add_referenced(s, &b.definitions, &mut schemas);
                    schemas.insert(root.id.clone(), s.clone());
                }
            }
            Some(name) => {
                let stored =
                    srv.store
                        .get("apiextensions.k8s.io/customresourcedefinitions", "", name);
                let meta = builtin::object_meta_id();
                if let Some(s) = stored.and_then(|c| crd::schema(&c, &version, &meta)) {
                    let b = builtin::builtins();
                    builtin::add_referenced(&s, &b.definitions, &mut schemas);
                    schemas.insert(crd::schema_id(&group, &version, &r.kind), s);
                }
            }
        }
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
