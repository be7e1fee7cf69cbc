use super::super::attrs::parse;
use super::*;
use serde_json::json;

fn policy(v: serde_json::Value) -> Policy {
    let items = |k: &str| v[k].as_array().cloned().unwrap_or_default();
    Policy {
        roles: items("roles")
            .into_iter()
            .map(|r| serde_json::from_value(r).unwrap())
            .collect(),
        cluster_roles: items("clusterRoles")
            .into_iter()
            .map(|r| serde_json::from_value(r).unwrap())
            .collect(),
        bindings: items("bindings")
            .into_iter()
            .map(|r| serde_json::from_value(r).unwrap())
            .collect(),
        cluster_bindings: items("clusterBindings")
            .into_iter()
            .map(|r| serde_json::from_value(r).unwrap())
            .collect(),
    }
}

fn sa() -> User {
    User::service_account("gantry", "sched")
}

fn can(p: &Policy, u: &User, method: &str, path: &str) -> bool {
    allows(p, u, &parse(method, path, ""))
}

fn cluster_policy() -> Policy {
    policy(json!({
        "clusterRoles": [{"metadata": {"name": "sched"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
            {"apiGroups": ["scheduling.run.ai"], "resources": ["*/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cfg"], "verbs": ["get", "update"]},
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}],
        "clusterBindings": [{"metadata": {"name": "sched"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "sched"},
            "subjects": [{"kind": "ServiceAccount", "name": "sched", "namespace": "gantry"}]}]
    }))
}

#[test]
fn cluster_role_binding_grants_everywhere() {
    let p = cluster_policy();
    assert!(can(&p, &sa(), "GET", "/api/v1/pods"));
    assert!(can(&p, &sa(), "GET", "/api/v1/namespaces/a/pods/x"));
    assert!(can(
        &p,
        &sa(),
        "POST",
        "/api/v1/namespaces/a/pods/x/binding"
    ));
    assert!(
        !can(&p, &sa(), "DELETE", "/api/v1/namespaces/a/pods/x"),
        "verb not granted"
    );
    assert!(
        !can(&p, &sa(), "PATCH", "/api/v1/namespaces/a/pods/x/status"),
        "pods does not cover pods/status"
    );
    assert!(!can(
        &p,
        &sa(),
        "POST",
        "/api/v1/namespaces/a/pods/x/eviction"
    ));
    assert!(
        can(
            &p,
            &sa(),
            "PATCH",
            "/apis/scheduling.run.ai/v2/queues/q/status"
        ),
        "*/status"
    );
    assert!(!can(
        &p,
        &sa(),
        "PATCH",
        "/apis/scheduling.run.ai/v2/queues/q"
    ));
    assert!(
        !can(&p, &sa(), "GET", "/apis/apps/v1/namespaces/a/deployments"),
        "other group"
    );
    // someone else
    assert!(!can(
        &p,
        &User::service_account("other", "sched"),
        "GET",
        "/api/v1/pods"
    ));
    assert!(can(
        &p,
        &User::admin(),
        "DELETE",
        "/api/v1/namespaces/a/pods/x"
    ));
}

#[test]
fn resource_names_and_non_resource_urls() {
    let p = cluster_policy();
    assert!(can(&p, &sa(), "GET", "/api/v1/namespaces/a/configmaps/cfg"));
    assert!(!can(
        &p,
        &sa(),
        "GET",
        "/api/v1/namespaces/a/configmaps/other"
    ));
    assert!(
        !can(&p, &sa(), "GET", "/api/v1/namespaces/a/configmaps"),
        "a list has no name"
    );
    assert!(can(&p, &sa(), "GET", "/metrics"));
    assert!(!can(&p, &sa(), "POST", "/metrics"));
    // discovery for every authenticated user
    let nobody = User::service_account("x", "y");
    assert!(can(&p, &nobody, "GET", "/apis/apps/v1"));
    assert!(can(&p, &nobody, "GET", "/version"));
    assert!(!can(&p, &nobody, "GET", "/metrics"));
}

#[test]
fn role_bindings_grant_only_in_their_namespace() {
    let p = policy(json!({
        "roles": [{"metadata": {"name": "lease", "namespace": "gantry"}, "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]}]}],
        "clusterRoles": [{"metadata": {"name": "view"}, "rules": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list"]}]}],
        "bindings": [
            {"metadata": {"name": "lease", "namespace": "gantry"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
             "subjects": [{"kind": "ServiceAccount", "name": "sched", "namespace": "gantry"}]},
            {"metadata": {"name": "view", "namespace": "team"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
             "subjects": [{"kind": "Group", "name": "system:serviceaccounts:gantry"}]}]
    }));
    assert!(can(
        &p,
        &sa(),
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/gantry/leases/l"
    ));
    assert!(!can(
        &p,
        &sa(),
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/other/leases/l"
    ));
    assert!(
        can(
            &p,
            &sa(),
            "GET",
            "/apis/apps/v1/namespaces/team/deployments"
        ),
        "group subject, ClusterRole in a namespace"
    );
    assert!(
        !can(&p, &sa(), "GET", "/apis/apps/v1/deployments"),
        "not across namespaces"
    );
    assert!(
        !can(&p, &sa(), "GET", "/api/v1/nodes"),
        "not cluster-scoped"
    );
}

#[test]
fn forbidden_messages_read_as_upstream() {
    let a = parse("GET", "/api/v1/namespaces/x/pods", "");
    assert_eq!(
        forbidden_message(&User::service_account("ns", "sa"), &a),
        r#"User "system:serviceaccount:ns:sa" cannot list resource "pods" in API group "" in the namespace "x""#
    );
    let a = parse("POST", "/api/v1/namespaces/x/pods/p/binding", "");
    assert!(
        forbidden_message(&sa(), &a)
            .contains(r#"cannot create resource "pods/binding" in API group """#)
    );
    let a = parse("GET", "/apis/nvidia.com/v1/clusterpolicies", "");
    assert!(
        forbidden_message(&sa(), &a).ends_with(r#"in API group "nvidia.com" at the cluster scope"#)
    );
    let a = parse("GET", "/metrics", "");
    assert!(forbidden_message(&sa(), &a).ends_with(r#"cannot get path "/metrics""#));
}
