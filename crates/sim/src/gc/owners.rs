//! What the garbage collector does with one dependent, pure (upstream's `attemptToDeleteItem`):
//! its ownerReferences are classified as solid (the owner exists with that uid and is not
//! waiting for its dependents), waiting (the owner is in foreground deletion), absent (no
//! such object, another uid — the owner was re-created — or a namespaced owner named from a
//! cluster-scoped dependent) or unresolvable (a kind the server does not serve: the
//! collector waits, as upstream does on a failed REST mapping). Then: a dependent with a
//! solid owner keeps it and loses the others; one whose owners are all gone is deleted.

use crate::apiserver::meta::{FOREGROUND, ORPHAN};
use serde_json::Value;

/// What one ownerReference resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Solid,
    Waiting,
    Absent,
    Unresolvable,
}

/// What to do with the dependent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Keep,
    /// Delete it with this propagation policy.
    Delete(&'static str),
    /// Remove the references with these uids (owners gone or waiting; a solid one remains).
    DropRefs(Vec<String>),
}

/// The ownerReferences of `obj`: (apiVersion, kind, name, uid).
pub fn refs(obj: &Value) -> Vec<OwnerRef> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| {
            let s = |f: &str| {
                r.get(f)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            OwnerRef {
                api_version: s("apiVersion"),
                kind: s("kind"),
                name: s("name"),
                uid: s("uid"),
            }
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

impl OwnerRef {
    /// The API group of `apiVersion` (`apps/v1` → `apps`, `v1` → core).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }
}

/// Classify a stored owner candidate (None: nothing by that name) against the reference.
pub fn classify(reference: &OwnerRef, found: Option<&Value>) -> Owner {
    let Some(o) = found else {
        return Owner::Absent;
    };
    if o.pointer("/metadata/uid").and_then(Value::as_str) != Some(reference.uid.as_str()) {
        return Owner::Absent;
    }
    let deleting = o.pointer("/metadata/deletionTimestamp").is_some();
    if deleting && has_finalizer(o, FOREGROUND) {
        Owner::Waiting
    } else {
        Owner::Solid
    }
}

pub fn has_finalizer(obj: &Value, f: &str) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(|x| x == f))
}

/// Decide for `dependent`, given each of its references' owner state (by uid).
pub fn decide(dependent: &Value, owners: &[(String, Owner)]) -> Action {
    if owners.is_empty() || dependent.pointer("/metadata/deletionTimestamp").is_some() {
        return Action::Keep;
    }
    if owners.iter().any(|(_, o)| *o == Owner::Unresolvable) {
        return Action::Keep;
    }
    let gone: Vec<String> = owners
        .iter()
        .filter(|(_, o)| matches!(o, Owner::Absent | Owner::Waiting))
        .map(|(u, _)| u.clone())
        .collect();
    if owners.iter().any(|(_, o)| *o == Owner::Solid) {
        return if gone.is_empty() {
            Action::Keep
        } else {
            Action::DropRefs(gone)
        };
    }
    // Every owner is gone or waiting: the dependent goes. For an owner in foreground
    // deletion, the dependent's own dependents go first too.
    if owners.iter().any(|(_, o)| *o == Owner::Waiting) {
        return Action::Delete("Foreground");
    }
    if has_finalizer(dependent, ORPHAN) {
        Action::Delete("Orphan")
    } else if has_finalizer(dependent, FOREGROUND) {
        Action::Delete("Foreground")
    } else {
        Action::Delete("Background")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owned(uids: &[&str]) -> Value {
        let refs: Vec<Value> = uids
            .iter()
            .map(|u| json!({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "name": "cp", "uid": u}))
            .collect();
        json!({"metadata": {"name": "d", "namespace": "ns", "ownerReferences": refs}})
    }

    fn s(u: &str, o: Owner) -> (String, Owner) {
        (u.to_string(), o)
    }

    #[test]
    fn references_resolve_by_uid_and_deletion_state() {
        let r = &refs(&owned(&["u1"]))[0];
        assert_eq!(r.group(), "nvidia.com");
        assert_eq!(classify(r, None), Owner::Absent);
        let same = json!({"metadata": {"name": "cp", "uid": "u1"}});
        assert_eq!(classify(r, Some(&same)), Owner::Solid);
        // Deleted and created again under the same name: another uid.
        let again = json!({"metadata": {"name": "cp", "uid": "u2"}});
        assert_eq!(classify(r, Some(&again)), Owner::Absent);
        let fg = json!({"metadata": {"name": "cp", "uid": "u1",
            "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["foregroundDeletion"]}});
        assert_eq!(classify(r, Some(&fg)), Owner::Waiting);
        let bg = json!({"metadata": {"name": "cp", "uid": "u1",
            "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["example.com/hold"]}});
        assert_eq!(classify(r, Some(&bg)), Owner::Solid);
        let core = OwnerRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "c".into(),
            uid: "u".into(),
        };
        assert_eq!(core.group(), "");
    }

    #[test]
    fn dependents_go_when_every_owner_is_gone() {
        let d = owned(&["u1"]);
        assert_eq!(decide(&d, &[s("u1", Owner::Solid)]), Action::Keep);
        assert_eq!(
            decide(&d, &[s("u1", Owner::Absent)]),
            Action::Delete("Background")
        );
        assert_eq!(
            decide(&d, &[s("u1", Owner::Waiting)]),
            Action::Delete("Foreground")
        );
        assert_eq!(decide(&d, &[s("u1", Owner::Unresolvable)]), Action::Keep);
        assert_eq!(decide(&json!({"metadata": {}}), &[]), Action::Keep);
        // Its own finalizers pick the policy.
        let mut orphaning = d.clone();
        orphaning["metadata"]["finalizers"] = json!(["orphan"]);
        assert_eq!(
            decide(&orphaning, &[s("u1", Owner::Absent)]),
            Action::Delete("Orphan")
        );
        // Already being deleted: nothing more to do.
        let mut leaving = d.clone();
        leaving["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(decide(&leaving, &[s("u1", Owner::Absent)]), Action::Keep);
    }

    #[test]
    fn a_solid_owner_keeps_the_dependent_without_the_others() {
        let d = owned(&["u1", "u2", "u3"]);
        assert_eq!(
            decide(
                &d,
                &[
                    s("u1", Owner::Solid),
                    s("u2", Owner::Absent),
                    s("u3", Owner::Waiting)
                ]
            ),
            Action::DropRefs(vec!["u2".into(), "u3".into()])
        );
        assert_eq!(
            decide(&d, &[s("u1", Owner::Absent), s("u2", Owner::Absent)]),
            Action::Delete("Background")
        );
    }
}
