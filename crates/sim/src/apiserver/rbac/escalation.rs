//! RBAC's escalation prevention, as kube-apiserver's policy-based RBAC storage applies it: a
//! user may write a Role or ClusterRole only with rules it already holds (or with `escalate` on
//! that role), and may bind a role only if it holds every rule of that role (or has `bind` on
//! it). Otherwise anyone allowed to create RoleBindings could grant itself anything. The
//! kubeconfig's admin (`system:masters`) is never checked, as upstream.

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::Value;

use super::super::decode::{self, Format};
use super::super::patch::{self, PatchType};
use super::super::server::ApiServer;
use super::super::status::ApiError;
use super::attrs::{self, Attributes, ResourceAttrs};
use super::rules::{self, AUTHENTICATED, User};

const GROUP: &str = "rbac.authorization.k8s.io";

/// One rule split into rules of one verb, group, resource and name, or one verb and URL
/// (upstream's `BreakdownRule`).
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |s: &str| Some(vec![s.to_string()]);
    let mut out = Vec::new();
    let names = rule.resource_names.clone().unwrap_or_default();
    for g in rule.api_groups.iter().flatten() {
        for r in rule.resources.iter().flatten() {
            for v in &rule.verbs {
                let base = PolicyRule {
                    api_groups: one(g),
                    resources: one(r),
                    verbs: vec![v.clone()],
                    ..Default::default()
                };
                for n in &names {
                    out.push(PolicyRule {
                        resource_names: one(n),
                        ..base.clone()
                    });
                }
                if names.is_empty() {
                    out.push(base);
                }
            }
        }
    }
    for u in rule.non_resource_urls.iter().flatten() {
        for v in &rule.verbs {
            out.push(PolicyRule {
                non_resource_urls: one(u),
                verbs: vec![v.clone()],
                ..Default::default()
            });
        }
    }
    out
}

fn list(v: &Option<Vec<String>>) -> &[String] {
    v.as_deref().unwrap_or_default()
}

fn has_all(set: &[String], want: &[String]) -> bool {
    want.iter().all(|w| set.contains(w))
}

/// Whether `owner` covers every resource of `want`: `*`, the same name, or `*/sub` for a
/// subresource (upstream's `resourceCoversAll`).
fn resources_covered(owner: &[String], want: &[String]) -> bool {
    owner.iter().any(|o| o == "*")
        || want.iter().all(|w| {
            owner.contains(w)
                || w.split_once('/')
                    .is_some_and(|(_, sub)| owner.contains(&format!("*/{sub}")))
        })
}

/// Whether `owner` grants everything `sub` (one broken-down rule) does (`ruleCovers`).
fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let star = |l: &[String]| l.iter().any(|x| x == "*");
    let verbs = star(&owner.verbs) || has_all(&owner.verbs, &sub.verbs);
    let groups =
        star(list(&owner.api_groups)) || has_all(list(&owner.api_groups), list(&sub.api_groups));
    let resources = resources_covered(list(&owner.resources), list(&sub.resources));
    let urls = list(&sub.non_resource_urls).iter().all(|u| {
        list(&owner.non_resource_urls)
            .iter()
            .any(|o| rules::url_matches(o, u))
    });
    let on = list(&owner.resource_names);
    let names = on.is_empty()
        || (!list(&sub.resource_names).is_empty() && has_all(on, list(&sub.resource_names)));
    verbs && groups && resources && urls && names
}

/// The parts of `wanted` that no rule of `owner` grants, broken down (upstream's `Covers`).
pub fn missing(owner: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    wanted
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner.iter().any(|o| rule_covers(o, sub)))
        .collect()
}

/// Rules of one group and resource (and at most one name) merged into one rule listing
/// their verbs (upstream's `CompactRules`), in first-seen order.
fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    let mut simple: Vec<PolicyRule> = Vec::new();
    for r in rules {
        let is_simple = list(&r.non_resource_urls).is_empty()
            && list(&r.resource_names).len() <= 1
            && list(&r.api_groups).len() == 1
            && list(&r.resources).len() == 1;
        if !is_simple {
            out.push(r);
            continue;
        }
        let same = simple.iter_mut().find(|s| {
            s.api_groups == r.api_groups
                && s.resources == r.resources
                && list(&s.resource_names) == list(&r.resource_names)
        });
        match same {
            Some(s) => {
                for v in r.verbs {
                    if !s.verbs.contains(&v) {
                        s.verbs.push(v);
                    }
                }
            }
            None => simple.push(r),
        }
    }
    out.extend(simple);
    out
}

/// Go's `%q` of a string list: `["a" "b"]`.
fn quoted(l: &[String]) -> String {
    let parts: Vec<String> = l.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", parts.join(" "))
}

/// A rule as upstream's `CompactString` writes it: `{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`.
pub fn compact_string(r: &PolicyRule) -> String {
    let mut parts = Vec::new();
    for (name, l) in [
        ("APIGroups", list(&r.api_groups)),
        ("Resources", list(&r.resources)),
        ("NonResourceURLs", list(&r.non_resource_urls)),
        ("ResourceNames", list(&r.resource_names)),
        ("Verbs", r.verbs.as_slice()),
    ] {
        if !l.is_empty() {
            parts.push(format!("{name}:{}", quoted(l)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

/// Upstream's `ConfirmNoEscalation` message for the rules `user` lacks.
pub fn escalation_message(user: &User, lacking: Vec<PolicyRule>) -> String {
    let mut lines: Vec<String> = compact(lacking).iter().map(compact_string).collect();
    lines.sort();
    lines.dedup();
    format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        quoted(&user.groups),
        lines.join("\n")
    )
}

/// The object a create, update or patch of an RBAC object would store (a patch is applied to
/// the stored object); None where the write will fail anyway (it answers the error itself).
fn candidate(
    srv: &ApiServer,
    a: &Attributes,
    r: &ResourceAttrs,
    ct: Option<&str>,
    body: &[u8],
) -> Option<Value> {
    if a.verb != "patch" {
        return decode::body(body, Format::from_content_type(ct).ok()?, &a.verb).ok();
    }
    let kind = PatchType::from_content_type(ct.unwrap_or_default()).ok()?;
    if kind == PatchType::Apply {
        let format = if body.trim_ascii_start().starts_with(b"{") {
            Format::Json
        } else {
            Format::Yaml
        };
        return decode::body(body, format, "patch").ok();
    }
    let current = srv
        .store
        .get(&format!("{GROUP}/{}", r.resource), &r.namespace, &r.name)?;
    patch::apply_simple(kind, &current, body, "patch").ok()
}

fn rules_of(v: Option<&Value>) -> Vec<PolicyRule> {
    v.and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default()
}

/// Refuses (403, as upstream words it) a write of a role or binding that would grant
/// permissions the requesting user does not hold.
pub fn check(
    srv: &ApiServer,
    user: &User,
    method: &str,
    path: &str,
    query: &str,
    ct: Option<&str>,
    body: &[u8],
) -> Result<(), ApiError> {
    if user.is_master() {
        return Ok(());
    }
    let a = attrs::parse(method, path, query);
    let Some(r) = a.resource.as_ref() else {
        return Ok(());
    };
    let binding = match r.resource.as_str() {
        "roles" | "clusterroles" => false,
        "rolebindings" | "clusterrolebindings" => true,
        _ => return Ok(()),
    };
    if r.group != GROUP
        || !r.subresource.is_empty()
        || !matches!(a.verb.as_str(), "create" | "update" | "patch")
    {
        return Ok(());
    }
    let Some(obj) = candidate(srv, &a, r, ct, body) else {
        return Ok(());
    };
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or(&r.name)
        .to_string();
    let policy = super::policy(srv, &r.namespace);
    let may = |verb: &str, resource: &str, name: &str| {
        let a = Attributes {
            verb: verb.into(),
            resource: Some(ResourceAttrs {
                group: GROUP.into(),
                resource: resource.into(),
                namespace: r.namespace.clone(),
                name: name.into(),
                ..Default::default()
            }),
            path: path.into(),
        };
        rules::allows(&policy, user, &a)
    };
    let granted = if binding {
        let role_kind = obj
            .pointer("/roleRef/kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let role = obj
            .pointer("/roleRef/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (plural, ns) = match role_kind {
            "Role" => ("roles", r.namespace.as_str()),
            "ClusterRole" => ("clusterroles", ""),
            // Validation refuses any other kind.
            _ => return Ok(()),
        };
        if may("bind", plural, role) {
            return Ok(());
        }
        let Some(stored) = srv.store.get(&format!("{GROUP}/{plural}"), ns, role) else {
            return Err(ApiError::not_found(plural, GROUP, role));
        };
        rules_of(stored.get("rules"))
    } else {
        if may("escalate", &r.resource, &name) {
            return Ok(());
        }
        rules_of(obj.get("rules"))
    };
    let mut owner: Vec<PolicyRule> = rules::rules_for(&policy, user, &r.namespace)
        .into_iter()
        .cloned()
        .collect();
    if user.groups.iter().any(|g| g == AUTHENTICATED) {
        owner.push(rules::discovery_rule());
    }
    let lacking = missing(&owner, &granted);
    if lacking.is_empty() {
        return Ok(());
    }
    tracing::warn!(user = %user.name, resource = %r.resource, %name, "RBAC: escalation refused");
    let why = escalation_message(user, lacking);
    let refused = Attributes {
        resource: Some(ResourceAttrs { name, ..r.clone() }),
        ..a.clone()
    };
    Err(super::forbidden(&refused, &why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> PolicyRule {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn owner_rules_must_cover_every_part_of_the_granted_ones() {
        let owner = vec![
            rule(json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]})),
            rule(json!({"apiGroups": ["apps"], "resources": ["*/status"], "verbs": ["get"]})),
            rule(
                json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["mine"], "verbs": ["get"]}),
            ),
        ];
        let ok = [
            rule(
                json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "delete"]}),
            ),
            rule(
                json!({"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["get"]}),
            ),
            rule(
                json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["mine"], "verbs": ["get"]}),
            ),
        ];
        assert!(missing(&owner, &ok).is_empty());
        let bad = [rule(
            json!({"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["get", "list"]}),
        )];
        let lacking = missing(&owner, &bad);
        assert_eq!(lacking.len(), 2, "secrets get and list: {lacking:?}");
        let user = User::service_account("ns", "sa");
        assert_eq!(
            escalation_message(&user, lacking),
            "user \"system:serviceaccount:ns:sa\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:ns\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}"
        );
        // A named grant does not cover the whole resource.
        let all = [rule(
            json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
        )];
        assert_eq!(missing(&owner, &all).len(), 1);
        // URLs: prefix patterns.
        let urls = [rule(
            json!({"nonResourceURLs": ["/healthz", "/metrics"], "verbs": ["get"]}),
        )];
        let lacking = missing(&[rules::discovery_rule()], &urls);
        assert_eq!(
            compact_string(&lacking[0]),
            "{NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}"
        );
    }
}
