//! RBAC's decision, pure, with upstream's semantics (`rbac/v1` `RuleAllows`): a request is
//! allowed when a rule of a role bound to the user allows it. ClusterRoleBindings grant their
//! role everywhere; RoleBindings (to a Role of their namespace or to a ClusterRole) only in
//! their namespace. Verbs, API groups and resources match exactly or by `*`; a subresource
//! is `resource/sub` (or `*/sub`); `resourceNames` narrows to named objects (so never
//! matches a request without a name, such as create or list). Aggregated ClusterRoles are
//! read as stored (their rules are not re-aggregated).

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};

use super::attrs::Attributes;

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

pub const MASTERS: &str = "system:masters";
pub const AUTHENTICATED: &str = "system:authenticated";

impl User {
    /// The identity of a ServiceAccount's token.
    pub fn service_account(namespace: &str, name: &str) -> User {
        User {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                AUTHENTICATED.into(),
            ],
        }
    }

    /// The kubeconfig's (admin) identity: `system:masters` bypasses authorization.
    pub fn admin() -> User {
        User {
            name: "kubernetes-admin".into(),
            groups: vec![MASTERS.into(), AUTHENTICATED.into()],
        }
    }

    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }
}

/// Every role and binding of the cluster (or at least of the request's namespace).
#[derive(Debug, Default, Clone)]
pub struct Policy {
    pub roles: Vec<Role>,
    pub cluster_roles: Vec<ClusterRole>,
    pub bindings: Vec<RoleBinding>,
    pub cluster_bindings: Vec<ClusterRoleBinding>,
}

/// Paths every authenticated user may GET (upstream's bootstrap `system:discovery`,
/// `system:public-info-viewer`): discovery, OpenAPI, version and health.
const DISCOVERY_PATHS: &[&str] = &[
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/openapi",
    "/openapi/*",
    "/version",
    "/version/",
    "/healthz",
    "/livez",
    "/readyz",
];

fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

fn subject_matches(s: &Subject, user: &User, binding_ns: &str) -> bool {
    match s.kind.as_str() {
        "ServiceAccount" => {
            let ns = s
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            user.name == format!("system:serviceaccount:{ns}:{}", s.name)
        }
        "User" => user.name == s.name,
        "Group" => user.groups.contains(&s.name),
        _ => false,
    }
}

/// Whether one rule allows the request (upstream's `RuleAllows`).
pub fn rule_allows(rule: &PolicyRule, a: &Attributes) -> bool {
    if !has(&rule.verbs, &a.verb) {
        return false;
    }
    match &a.resource {
        Some(r) => {
            let groups = rule.api_groups.as_deref().unwrap_or_default();
            let resources = rule.resources.as_deref().unwrap_or_default();
            let combined = r.combined();
            let resource_ok = resources.iter().any(|x| {
                x == "*"
                    || *x == combined
                    || (!r.subresource.is_empty() && *x == format!("*/{}", r.subresource))
            });
            let names = rule.resource_names.as_deref().unwrap_or_default();
            has(groups, &r.group) && resource_ok && (names.is_empty() || names.contains(&r.name))
        }
        None => rule
            .non_resource_urls
            .iter()
            .flatten()
            .any(|u| url_matches(u, &a.path)),
    }
}

pub fn url_matches(pattern: &str, path: &str) -> bool {
    pattern == "*"
        || pattern == path
        || pattern
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

/// Every rule granted to `user` in `namespace` ("": cluster-wide only): its ClusterRoleBindings'
/// roles, then its RoleBindings' roles in that namespace (upstream's `RulesFor`).
pub fn rules_for<'p>(policy: &'p Policy, user: &User, namespace: &str) -> Vec<&'p PolicyRule> {
    let cluster_role = |name: &str| {
        policy
            .cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
    };
    let mut out = Vec::new();
    for b in &policy.cluster_bindings {
        if b.subjects
            .iter()
            .flatten()
            .any(|s| subject_matches(s, user, ""))
            && b.role_ref.kind == "ClusterRole"
            && let Some(r) = cluster_role(&b.role_ref.name)
        {
            out.extend(r.rules.iter().flatten());
        }
    }
    // RoleBindings grant only inside their namespace (and never cluster-scoped requests).
    if namespace.is_empty() {
        return out;
    }
    for b in policy
        .bindings
        .iter()
        .filter(|b| b.metadata.namespace.as_deref() == Some(namespace))
    {
        if !b
            .subjects
            .iter()
            .flatten()
            .any(|s| subject_matches(s, user, namespace))
        {
            continue;
        }
        let rules = match b.role_ref.kind.as_str() {
            "ClusterRole" => cluster_role(&b.role_ref.name).and_then(|r| r.rules.as_ref()),
            "Role" => policy
                .roles
                .iter()
                .find(|r| {
                    r.metadata.namespace.as_deref() == Some(namespace)
                        && r.metadata.name.as_deref() == Some(b.role_ref.name.as_str())
                })
                .and_then(|r| r.rules.as_ref()),
            _ => None,
        };
        out.extend(rules.into_iter().flatten());
    }
    out
}

/// Whether `policy` lets `user` do `a`.
pub fn allows(policy: &Policy, user: &User, a: &Attributes) -> bool {
    if user.is_master() {
        return true;
    }
    if a.resource.is_none()
        && a.verb == "get"
        && user.groups.iter().any(|g| g == AUTHENTICATED)
        && DISCOVERY_PATHS.iter().any(|p| url_matches(p, &a.path))
    {
        return true;
    }
    let ns = a.resource.as_ref().map_or("", |r| r.namespace.as_str());
    rules_for(policy, user, ns)
        .into_iter()
        .any(|r| rule_allows(r, a))
}

/// The discovery rule every authenticated user holds (see [`DISCOVERY_PATHS`]).
pub fn discovery_rule() -> PolicyRule {
    PolicyRule {
        verbs: vec!["get".into()],
        non_resource_urls: Some(DISCOVERY_PATHS.iter().map(|p| p.to_string()).collect()),
        ..Default::default()
    }
}

/// The message of a 403, as upstream's `forbiddenMessage` words it.
pub fn forbidden_message(user: &User, a: &Attributes) -> String {
    let Some(r) = &a.resource else {
        return format!("User {:?} cannot {} path {:?}", user.name, a.verb, a.path);
    };
    let scope = if r.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {:?}", r.namespace)
    };
    format!(
        "User {:?} cannot {} resource {:?} in API group {:?} {scope}",
        user.name,
        a.verb,
        r.combined(),
        r.group
    )
}

#[cfg(test)]
mod tests;
