//! What is served: the built-in resource table and the custom resources of stored CRDs.

use serde_json::Value;
use std::sync::{Arc, RwLock};

/// One served resource (all its versions).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceInfo {
    pub group: String,
    /// Served versions, preferred (storage) first.
    pub versions: Vec<String>,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Subresources beside the object itself: `status`, `scale`, `binding`, `eviction`, `finalize`.
    pub subresources: Vec<String>,
    /// Built-in types get strategic merge patch; custom resources do not.
    pub builtin: bool,
    /// For custom resources, the CRD's name (to find list-map keys, scope...).
    pub crd: Option<String>,
}

impl ResourceInfo {
    /// Store key prefix `group/plural`.
    pub fn gr(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }
    pub fn has_status(&self) -> bool {
        self.subresources.iter().any(|s| s == "status")
    }
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }
    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }
}

// (group, version, plural, kind, namespaced, short names, subresources)
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    &'static [&'static str],
);

const BUILTINS: &[Row] = &[
    (
        "",
        "v1",
        "namespaces",
        "Namespace",
        false,
        &["ns"],
        &["status", "finalize"],
    ),
    ("", "v1", "nodes", "Node", false, &["no"], &["status"]),
    (
        "",
        "v1",
        "pods",
        "Pod",
        true,
        &["po"],
        &["status", "binding", "eviction", "log"],
    ),
    ("", "v1", "bindings", "Binding", true, &[], &[]),
    ("", "v1", "configmaps", "ConfigMap", true, &["cm"], &[]),
    ("", "v1", "secrets", "Secret", true, &[], &[]),
    ("", "v1", "services", "Service", true, &["svc"], &["status"]),
    ("", "v1", "endpoints", "Endpoints", true, &["ep"], &[]),
    (
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        &["sa"],
        &[],
    ),
    ("", "v1", "events", "Event", true, &["ev"], &[]),
    (
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
        &["pvc"],
        &["status"],
    ),
    (
        "",
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        false,
        &["pv"],
        &["status"],
    ),
    (
        "",
        "v1",
        "resourcequotas",
        "ResourceQuota",
        true,
        &["quota"],
        &["status"],
    ),
    (
        "",
        "v1",
        "limitranges",
        "LimitRange",
        true,
        &["limits"],
        &[],
    ),
    (
        "apps",
        "v1",
        "daemonsets",
        "DaemonSet",
        true,
        &["ds"],
        &["status"],
    ),
    (
        "apps",
        "v1",
        "deployments",
        "Deployment",
        true,
        &["deploy"],
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        true,
        &["rs"],
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        true,
        &["sts"],
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "controllerrevisions",
        "ControllerRevision",
        true,
        &[],
        &[],
    ),
    ("batch", "v1", "jobs", "Job", true, &[], &["status"]),
    (
        "batch",
        "v1",
        "cronjobs",
        "CronJob",
        true,
        &["cj"],
        &["status"],
    ),
    (
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        &[],
        &[],
    ),
    ("events.k8s.io", "v1", "events", "Event", true, &["ev"], &[]),
    (
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        &["pdb"],
        &["status"],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        true,
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[],
        &[],
    ),
    (
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "PriorityClass",
        false,
        &["pc"],
        &[],
    ),
    (
        "node.k8s.io",
        "v1",
        "runtimeclasses",
        "RuntimeClass",
        false,
        &[],
        &[],
    ),
    (
        "storage.k8s.io",
        "v1",
        "storageclasses",
        "StorageClass",
        false,
        &["sc"],
        &[],
    ),
    (
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        true,
        &["netpol"],
        &[],
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        false,
        &[],
        &[],
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        false,
        &[],
        &[],
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        &["status"],
    ),
];

fn builtins() -> Vec<Arc<ResourceInfo>> {
    BUILTINS
        .iter()
        .map(|(g, v, plural, kind, namespaced, short, subs)| {
            Arc::new(ResourceInfo {
                group: g.to_string(),
                versions: vec![v.to_string()],
                plural: plural.to_string(),
                singular: kind.to_lowercase(),
                kind: kind.to_string(),
                namespaced: *namespaced,
                short_names: short.iter().map(|s| s.to_string()).collect(),
                categories: if [
                    "pods",
                    "services",
                    "deployments",
                    "daemonsets",
                    "replicasets",
                    "statefulsets",
                    "jobs",
                    "cronjobs",
                ]
                .contains(plural)
                {
                    vec!["all".into()]
                } else {
                    vec![]
                },
                subresources: subs.iter().map(|s| s.to_string()).collect(),
                builtin: true,
                crd: None,
            })
        })
        .collect()
}

/// Built-ins plus the custom resources of the CRDs currently stored.
pub struct Registry {
    builtins: Vec<Arc<ResourceInfo>>,
    custom: RwLock<Vec<Arc<ResourceInfo>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            builtins: builtins(),
            custom: RwLock::new(Vec::new()),
        }
    }
}

impl Registry {
    /// Finds the resource served at `group/version/plural`.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        let hit =
            |r: &&Arc<ResourceInfo>| r.group == group && r.plural == plural && r.serves(version);
        if let Some(r) = self.builtins.iter().find(hit) {
            return Some(r.clone());
        }
        let custom = self.custom.read().unwrap_or_else(|e| e.into_inner());
        custom.iter().find(hit).cloned()
    }

    /// Finds a resource by kind in a group (for ownerReferences and SSA bodies).
    pub fn by_kind(&self, group: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        self.all()
            .into_iter()
            .find(|r| r.group == group && r.kind == kind)
    }

    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        let custom = self.custom.read().unwrap_or_else(|e| e.into_inner());
        self.builtins.iter().chain(custom.iter()).cloned().collect()
    }

    /// Replaces the custom resources with those of `crds` (CRD objects as stored).
    pub fn set_crds<'a>(&self, crds: impl IntoIterator<Item = &'a Value>) {
        let list: Vec<_> = crds
            .into_iter()
            .filter_map(from_crd)
            .map(Arc::new)
            .collect();
        *self.custom.write().unwrap_or_else(|e| e.into_inner()) = list;
    }
}

/// The resource a CRD object defines, if its spec is complete enough to serve.
pub fn from_crd(crd: &Value) -> Option<ResourceInfo> {
    let spec = crd.get("spec")?;
    let names = spec.get("names")?;
    let strs = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut versions: Vec<(bool, String)> = Vec::new();
    let mut status = false;
    let mut scale = false;
    for v in spec
        .get("versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let name = v.get("name").and_then(Value::as_str)?.to_string();
        let storage = v.get("storage").and_then(Value::as_bool).unwrap_or(false);
        let subs = v.get("subresources");
        status |= subs.and_then(|s| s.get("status")).is_some();
        scale |= subs.and_then(|s| s.get("scale")).is_some();
        versions.push((!storage, name));
    }
    versions.sort_by_key(|v| v.0);
    let kind = names.get("kind").and_then(Value::as_str)?.to_string();
    let plural = names.get("plural").and_then(Value::as_str)?.to_string();
    let mut subresources = Vec::new();
    if status {
        subresources.push("status".into());
    }
    if scale {
        subresources.push("scale".into());
    }
    Some(ResourceInfo {
        group: spec.get("group").and_then(Value::as_str)?.to_string(),
        versions: versions.into_iter().map(|(_, n)| n).collect(),
        singular: names
            .get("singular")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| kind.to_lowercase()),
        plural,
        kind,
        namespaced: spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
        short_names: strs(names.get("shortNames")),
        categories: strs(names.get("categories")),
        subresources,
        builtin: false,
        crd: crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn crd_becomes_served_resource() {
        let reg = Registry::default();
        assert!(reg.lookup("example.com", "v1", "widgets").is_none());
        let crd = json!({"metadata": {"name": "widgets.example.com"}, "spec": {
            "group": "example.com", "scope": "Cluster",
            "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
            "versions": [{"name": "v1beta1", "served": true, "storage": false},
                         {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}});
        reg.set_crds([&crd]);
        let r = reg.lookup("example.com", "v1", "widgets").expect("served");
        assert_eq!(r.versions, vec!["v1", "v1beta1"]);
        assert!(!r.namespaced);
        assert!(r.has_status());
        assert_eq!(r.singular, "widget");
    }
}
