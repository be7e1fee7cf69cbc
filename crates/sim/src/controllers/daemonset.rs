//! The DaemonSet controller's core, pure: (DaemonSet, nodes, its pods) → pods to create and
//! delete, and the status. Pods are bound straight to their node (the sim has no default
//! scheduler), labelled `controller-revision-hash` / `pod-template-generation`, and carry the
//! tolerations the real controller adds.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, Pod, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use gantry_k8s_rules::RequiredNodeAffinity;
use gantry_k8s_rules::taints::{taints_from_k8s, tolerations_from_k8s, untolerated_taint};

pub const LABEL_REVISION_HASH: &str = "controller-revision-hash";
pub const LABEL_TEMPLATE_GENERATION: &str = "pod-template-generation";

/// Tolerations every daemon pod gets (as kube-controller-manager adds them).
pub fn daemon_tolerations() -> Vec<Toleration> {
    let t = |key: &str, effect: &str| Toleration {
        key: Some(key.to_string()),
        operator: Some("Exists".into()),
        effect: Some(effect.to_string()),
        ..Default::default()
    };
    vec![
        t("node.kubernetes.io/not-ready", "NoExecute"),
        t("node.kubernetes.io/unreachable", "NoExecute"),
        t("node.kubernetes.io/disk-pressure", "NoSchedule"),
        t("node.kubernetes.io/memory-pressure", "NoSchedule"),
        t("node.kubernetes.io/pid-pressure", "NoSchedule"),
        t("node.kubernetes.io/unschedulable", "NoSchedule"),
    ]
}

/// A stable short hash of the pod template (FNV-1a of its JSON), like the revision hash.
pub fn revision_hash(ds: &DaemonSet) -> String {
    let json = ds
        .spec
        .as_ref()
        .map(|s| serde_json::to_string(&s.template).unwrap_or_default())
        .unwrap_or_default();
    super::hash::short_hash(&json)
}

/// What decides whether a DaemonSet wants a pod on a node: nodeSelector, required node
/// affinity and NoSchedule/NoExecute taints, by the shared Kubernetes rules. Read once per
/// DaemonSet, then checked against each node.
pub struct Placement {
    affinity: RequiredNodeAffinity,
    tolerations: Vec<gantry_k8s_rules::Toleration>,
}

impl Placement {
    pub fn of(ds: &DaemonSet) -> Placement {
        let spec = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref());
        let mut tolerations = tolerations_from_k8s(
            spec.and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default(),
        );
        tolerations.extend(tolerations_from_k8s(&daemon_tolerations()));
        let affinity = spec
            .map(|s| RequiredNodeAffinity::from_pod_spec(s).0)
            .unwrap_or_default();
        Placement {
            affinity,
            tolerations,
        }
    }

    pub fn should_run(&self, node: &Node) -> bool {
        static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
        let taints = taints_from_k8s(
            node.spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default(),
        );
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let labels = node.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
        self.affinity.matches(name, labels)
            && untolerated_taint(&taints, &self.tolerations).is_none()
    }
}

/// Whether the DaemonSet wants a pod on `node` (see [`Placement`]).
pub fn should_run(ds: &DaemonSet, node: &Node) -> bool {
    Placement::of(ds).should_run(node)
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn hash_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(LABEL_REVISION_HASH)
        .map(String::as_str)
}

/// The pod for `node`, named `name`.
pub fn new_pod(ds: &DaemonSet, node: &str, name: &str) -> Pod {
    let template = ds
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let mut meta = template.metadata.unwrap_or_default();
    let mut labels = meta.labels.take().unwrap_or_default();
    labels.insert(LABEL_REVISION_HASH.into(), revision_hash(ds));
    labels.insert(
        LABEL_TEMPLATE_GENERATION.into(),
        ds.metadata.generation.unwrap_or(1).to_string(),
    );
    let mut spec = template.spec.unwrap_or_default();
    spec.node_name = Some(node.to_string());
    let mut tolerations = spec.tolerations.take().unwrap_or_default();
    for t in daemon_tolerations() {
        if !tolerations.contains(&t) {
            tolerations.push(t);
        }
    }
    spec.tolerations = Some(tolerations);
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: ds.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: meta.annotations,
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: ds.metadata.name.clone().unwrap_or_default(),
                uid: ds.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// What to do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Nodes that need a pod.
    pub create: Vec<String>,
    /// Pods (names) to delete.
    pub delete: Vec<String>,
    pub status: DaemonSetStatus,
}

/// `maxUnavailable` resolved against the desired count (percent rounds up, at least 1 when
/// there is anything to run).
pub fn max_unavailable(ds: &DaemonSet, desired: i32) -> i32 {
    let v = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.max_unavailable.clone());
    let n = match v {
        None => 1,
        Some(IntOrString::Int(i)) => i,
        Some(IntOrString::String(s)) => {
            match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
                Some(p) => ((i64::from(desired) * p + 99) / 100) as i32,
                None => 1,
            }
        }
    };
    n.max(if desired > 0 { 1 } else { 0 })
}

fn on_delete(ds: &DaemonSet) -> bool {
    ds.spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.type_.as_deref())
        == Some("OnDelete")
}

/// The plan for one DaemonSet. `pods` are the pods it controls (by owner uid).
/// Generic over how the caller holds its nodes and pods (the controller's caches hand out `Arc`s;
/// cloning 1,000 nodes and thousands of pods per pass was most of its time).
pub fn plan<N: Borrow<Node>, P: Borrow<Pod>>(ds: &DaemonSet, nodes: &[N], pods: &[P]) -> Plan {
    let hash = revision_hash(ds);
    let placement = Placement::of(ds);
    let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    let mut out = Plan::default();
    let node_names: BTreeSet<&str> = nodes
        .iter()
        .filter_map(|n| n.borrow().metadata.name.as_deref())
        .collect();
    for p in pods.iter().map(Borrow::borrow) {
        if p.metadata.deletion_timestamp.is_some() {
            // Going away already; still occupies its node.
            if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                by_node.entry(n).or_default().push(p);
            }
            continue;
        }
        match p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            Some(n) if node_names.contains(n) => by_node.entry(n).or_default().push(p),
            _ => out.delete.push(p.metadata.name.clone().unwrap_or_default()),
        }
    }
    let (mut desired, mut current, mut misscheduled, mut ready, mut updated) = (0, 0, 0, 0, 0);
    // Old pods on wanted nodes, for the rolling update: (name, ready).
    let mut old: Vec<(String, bool)> = Vec::new();
    for node in nodes.iter().map(Borrow::borrow) {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let here = by_node.remove(name).unwrap_or_default();
        let live: Vec<&Pod> = here
            .iter()
            .copied()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        if !placement.should_run(node) {
            if !live.is_empty() {
                misscheduled += 1;
            }
            out.delete
                .extend(live.iter().filter_map(|p| p.metadata.name.clone()));
            continue;
        }
        desired += 1;
        // Failed daemon pods are replaced.
        let (failed, healthy): (Vec<&Pod>, Vec<&Pod>) =
            live.iter().partition(|p| phase(p) == "Failed");
        out.delete
            .extend(failed.iter().filter_map(|p| p.metadata.name.clone()));
        if here.len() > live.len() && healthy.is_empty() {
            // Wait for the terminating pod to go before creating its successor.
            current += 1;
            continue;
        }
        let Some(keep) = healthy.iter().copied().max_by_key(|p| {
            (
                hash_of(p) == Some(hash.as_str()),
                is_ready(p),
                std::cmp::Reverse(p.metadata.creation_timestamp.clone()),
            )
        }) else {
            out.create.push(name.to_string());
            continue;
        };
        current += 1;
        // Duplicates beyond one per node go.
        for p in &healthy {
            if !std::ptr::eq(*p, keep) {
                out.delete.extend(p.metadata.name.clone());
            }
        }
        let r = is_ready(keep);
        if r {
            ready += 1;
        }
        if hash_of(keep) == Some(hash.as_str()) {
            updated += 1;
        } else {
            old.push((keep.metadata.name.clone().unwrap_or_default(), r));
        }
    }
    // Rolling update: old unready pods go at once; ready ones within maxUnavailable.
    if !on_delete(ds) {
        let unavailable = desired - ready;
        let mut budget = max_unavailable(ds, desired) - unavailable;
        for (name, r) in old {
            if !r {
                out.delete.push(name);
            } else if budget > 0 {
                budget -= 1;
                out.delete.push(name);
            }
        }
    }
    out.status = DaemonSetStatus {
        desired_number_scheduled: desired,
        current_number_scheduled: current,
        number_misscheduled: misscheduled,
        number_ready: ready,
        number_available: Some(ready),
        number_unavailable: Some(desired - ready),
        updated_number_scheduled: Some(updated),
        observed_generation: ds.metadata.generation,
        ..Default::default()
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(extra: serde_json::Value) -> DaemonSet {
        let mut v = json!({
            "metadata": {"name": "dp", "namespace": "gpu", "uid": "ds-uid", "generation": 2},
            "spec": {"selector": {"matchLabels": {"app": "dp"}},
                     "template": {"metadata": {"labels": {"app": "dp"}},
                                  "spec": {"nodeSelector": {"gpu": "true"}, "containers": [{"name": "c", "image": "i"}]}}}
        });
        if let Some(o) = extra.as_object() {
            for (k, val) in o {
                v["spec"][k] = val.clone();
            }
        }
        serde_json::from_value(v).unwrap()
    }
    fn node(name: &str, gpu: bool, taint: bool) -> Node {
        let taints = if taint {
            json!([{"key": "dedicated", "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"gpu": gpu.to_string()}}, "spec": {"taints": taints}})).unwrap()
    }
    fn pod(d: &DaemonSet, name: &str, node: &str, ready: bool, hash: Option<&str>) -> Pod {
        let mut p = new_pod(d, node, name);
        if let Some(h) = hash {
            p.metadata
                .labels
                .as_mut()
                .unwrap()
                .insert(LABEL_REVISION_HASH.into(), h.into());
        }
        p.status = serde_json::from_value(json!({"phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}))
        .unwrap();
        p
    }

    #[test]
    fn creates_on_matching_untainted_nodes_only() {
        let d = ds(json!({}));
        let nodes = [
            node("a", true, false),
            node("b", false, false),
            node("c", true, true),
        ];
        let p = plan::<_, Pod>(&d, &nodes, &[]);
        assert_eq!(p.create, ["a"]);
        assert_eq!(p.status.desired_number_scheduled, 1);
        assert_eq!(p.status.current_number_scheduled, 0);
        let tol = ds(
            json!({"template": {"metadata": {"labels": {"app": "dp"}}, "spec": {"nodeSelector": {"gpu": "true"},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}], "containers": [{"name": "c"}]}}}),
        );
        assert_eq!(plan::<_, Pod>(&tol, &nodes, &[]).create, ["a", "c"]);
    }

    #[test]
    fn pod_shape() {
        let d = ds(json!({}));
        let p = new_pod(&d, "a", "dp-x1");
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("a"));
        let l = p.metadata.labels.as_ref().unwrap();
        assert_eq!(l[LABEL_REVISION_HASH], revision_hash(&d));
        assert_eq!(l[LABEL_TEMPLATE_GENERATION], "2");
        assert_eq!(l["app"], "dp");
        let o = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.uid.as_str(), o.controller),
            ("DaemonSet", "ds-uid", Some(true))
        );
        assert!(
            p.spec
                .unwrap()
                .tolerations
                .unwrap()
                .iter()
                .any(|t| t.key.as_deref() == Some("node.kubernetes.io/unschedulable"))
        );
        assert_eq!(revision_hash(&d).len(), 10);
        assert_ne!(
            revision_hash(&d),
            revision_hash(&ds(
                json!({"template": {"spec": {"containers": [{"name": "other"}]}}})
            ))
        );
    }

    #[test]
    fn status_counts_and_misscheduled_cleanup() {
        let d = ds(json!({}));
        let h = revision_hash(&d);
        let nodes = [
            node("a", true, false),
            node("b", true, false),
            node("c", false, false),
        ];
        let pods = [
            pod(&d, "p-a", "a", true, Some(&h)),
            pod(&d, "p-b", "b", false, Some(&h)),
            pod(&d, "p-c", "c", true, Some(&h)),
            pod(&d, "p-gone", "zzz", true, Some(&h)),
        ];
        let p = plan(&d, &nodes, &pods);
        assert!(p.create.is_empty());
        assert_eq!(p.delete, ["p-gone", "p-c"]);
        let s = &p.status;
        assert_eq!(
            (
                s.desired_number_scheduled,
                s.current_number_scheduled,
                s.number_ready,
                s.number_misscheduled
            ),
            (2, 2, 1, 1)
        );
        assert_eq!(
            (
                s.updated_number_scheduled,
                s.number_available,
                s.number_unavailable
            ),
            (Some(2), Some(1), Some(1))
        );
        assert_eq!(s.observed_generation, Some(2));
    }

    #[test]
    fn rolling_update_respects_max_unavailable() {
        let d = ds(
            json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}}}),
        );
        let nodes: Vec<Node> = (0..5)
            .map(|i| node(&format!("n{i}"), true, false))
            .collect();
        let mut pods: Vec<Pod> = (0..5)
            .map(|i| pod(&d, &format!("p{i}"), &format!("n{i}"), true, Some("old")))
            .collect();
        assert_eq!(plan(&d, &nodes, &pods).delete, ["p0", "p1"]);
        // one already unavailable (its replacement is not ready yet): only one more may go
        pods[0] = pod(&d, "p0new", "n0", false, Some(&revision_hash(&d)));
        assert_eq!(plan(&d, &nodes, &pods).delete, ["p1"]);
        // old pods that are not ready go regardless of the budget
        pods[3] = pod(&d, "p3", "n3", false, Some("old"));
        assert_eq!(plan(&d, &nodes, &pods).delete, ["p3"]);
        assert_eq!(
            max_unavailable(
                &ds(json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": "25%"}}})),
                10
            ),
            3
        );
        assert_eq!(max_unavailable(&ds(json!({})), 10), 1);
        let od = ds(json!({"updateStrategy": {"type": "OnDelete"}}));
        assert!(plan(&od, &nodes, &pods).delete.is_empty());
    }

    #[test]
    fn failed_pods_replaced_and_duplicates_removed() {
        let d = ds(json!({}));
        let h = revision_hash(&d);
        let nodes = [node("a", true, false)];
        let mut failed = pod(&d, "p-f", "a", false, Some(&h));
        failed.status.as_mut().unwrap().phase = Some("Failed".into());
        let p = plan(&d, &nodes, &[failed]);
        assert_eq!(p.delete, ["p-f"]);
        assert_eq!(p.create, ["a"]);
        let p = plan(
            &d,
            &nodes,
            &[
                pod(&d, "x", "a", true, Some(&h)),
                pod(&d, "y", "a", false, Some(&h)),
            ],
        );
        assert_eq!(p.delete, ["y"]);
        assert!(p.create.is_empty());
    }
}
