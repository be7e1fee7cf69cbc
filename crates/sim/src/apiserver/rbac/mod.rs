//! Authentication and RBAC authorization, the API server's request path before routing.
//!
//! Two kinds of bearer token: the kubeconfig's (admin, group `system:masters`, never checked
//! against RBAC) and ServiceAccount tokens this server issued through the TokenRequest API
//! (`POST …/serviceaccounts/NAME/token`, what the kubelet asks for a pod's token). A
//! ServiceAccount token names `system:serviceaccount:NS:NAME` and is valid while that
//! ServiceAccount (same uid), the pod it was bound to, and its expiry last. Its requests are
//! authorized against Roles, ClusterRoles and their bindings ([`rules`]); a denial is a 403
//! worded as upstream's, logged and counted in `apiserver_authorization_decisions_total`
//! (served on `/metrics`). Writes of roles and bindings that would grant more than the
//! writer holds are refused ([`escalation`]).

pub mod attrs;
pub mod escalation;
pub mod rules;
pub mod state;
mod tokens;

use std::sync::atomic::Ordering;

use axum::response::{IntoResponse, Response};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::server::ApiServer;
use super::status::ApiError;
pub use rules::User;
use state::Rbac;

fn decode_all<T: DeserializeOwned>(srv: &ApiServer, gr: &str, ns: Option<&str>) -> Vec<T> {
    srv.store
        .list(gr, ns, None)
        .0
        .iter()
        .filter_map(|v| serde_json::from_value((**v).clone()).ok())
        .collect()
}

/// The roles and bindings that can apply in `namespace` ("" = cluster-wide only).
fn policy(srv: &ApiServer, namespace: &str) -> rules::Policy {
    const G: &str = "rbac.authorization.k8s.io";
    let in_ns = |plural: &str| format!("{G}/{plural}");
    rules::Policy {
        cluster_roles: decode_all::<ClusterRole>(srv, &in_ns("clusterroles"), None),
        cluster_bindings: decode_all::<ClusterRoleBinding>(
            srv,
            &in_ns("clusterrolebindings"),
            None,
        ),
        roles: if namespace.is_empty() {
            Vec::new()
        } else {
            decode_all::<Role>(srv, &in_ns("roles"), Some(namespace))
        },
        bindings: if namespace.is_empty() {
            Vec::new()
        } else {
            decode_all::<RoleBinding>(srv, &in_ns("rolebindings"), Some(namespace))
        },
    }
}

/// Who sent a request with this bearer token: the admin for `admin_token` (and for any
/// request when the server runs without auth), a ServiceAccount for a token it issued.
pub fn authenticate(
    srv: &ApiServer,
    admin_token: Option<&str>,
    bearer: Option<&str>,
) -> Option<User> {
    let Some(admin) = admin_token else {
        return Some(User::admin());
    };
    let bearer = bearer?.trim();
    if constant_time_eq(bearer.as_bytes(), admin.as_bytes()) {
        return Some(User::admin());
    }
    srv.rbac.tokens.resolve(&srv.store, bearer)
}

/// Compares secrets in time that depends only on their lengths, not on where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The authorization step: `Ok` or upstream's 403.
pub fn authorize(
    srv: &ApiServer,
    user: &User,
    method: &str,
    path: &str,
    query: &str,
) -> Result<(), ApiError> {
    if user.is_master() {
        return Ok(());
    }
    let a = attrs::parse(method, path, query);
    let ns = a
        .resource
        .as_ref()
        .map(|r| r.namespace.as_str())
        .unwrap_or("");
    if rules::allows(&policy(srv, ns), user, &a) {
        srv.rbac.allowed.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    srv.rbac.denied.fetch_add(1, Ordering::Relaxed);
    let why = rules::forbidden_message(user, &a);
    tracing::warn!(user = %user.name, verb = %a.verb, path = %path, "RBAC: forbidden");
    Err(forbidden(&a, &why))
}

fn forbidden(a: &attrs::Attributes, why: &str) -> ApiError {
    let Some(r) = &a.resource else {
        return ApiError::new(403, "Forbidden", format!("forbidden: {why}"));
    };
    let what = if r.group.is_empty() {
        r.resource.clone()
    } else {
        format!("{}.{}", r.resource, r.group)
    };
    let message = if r.name.is_empty() {
        format!("{what} is forbidden: {why}")
    } else {
        format!("{what} {:?} is forbidden: {why}", r.name)
    };
    ApiError::new(403, "Forbidden", message)
        .with_details(json!({"name": r.name, "group": r.group, "kind": r.resource}))
}

/// Requests this module answers itself (after authorization): TokenRequest and `/metrics`.
pub fn serve(
    srv: &ApiServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Option<Response> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        (
            "POST",
            [
                "api",
                "v1",
                "namespaces",
                ns,
                "serviceaccounts",
                name,
                "token",
            ],
        ) => Some(
            match tokens::request(&srv.store, &srv.rbac.tokens, ns, name, content_type, body) {
                Ok(v) => super::status::json_response(http::StatusCode::CREATED, &v),
                Err(e) => e.into_response(),
            },
        ),
        ("GET", ["metrics"]) => Some(
            (
                http::StatusCode::OK,
                [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                // The authorizer's counters, then the requests served.
                metrics_text(&srv.rbac) + &srv.requests.exposition() + &srv.watches.exposition(),
            )
                .into_response(),
        ),
        _ => None,
    }
}

fn metrics_text(r: &Rbac) -> String {
    format!(
        "# HELP apiserver_authorization_decisions_total Total number of terminal decisions made by an authorizer split by authorizer type, name, and decision.\n\
         # TYPE apiserver_authorization_decisions_total counter\n\
         apiserver_authorization_decisions_total{{decision=\"allowed\",name=\"rbac\",type=\"RBAC\"}} {}\n\
         apiserver_authorization_decisions_total{{decision=\"denied\",name=\"rbac\",type=\"RBAC\"}} {}\n",
        r.allowed(),
        r.denied()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn constant_time_eq_compares() {
        assert!(super::constant_time_eq(b"abc", b"abc"));
        assert!(!super::constant_time_eq(b"abc", b"abd"));
        assert!(!super::constant_time_eq(b"abc", b"ab"));
    }
}
