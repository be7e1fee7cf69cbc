//! The ReplicaSet controller's core, pure: (ReplicaSet, its pods, now) → how many pods to
//! create, which to delete, and the status. Pods are left unscheduled (`spec.nodeName` empty):
//! a scheduler binds them, as on a real cluster.

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::daemonset::is_ready;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub create: i32,
    /// Pods (names) to delete, the ones to lose first first.
    pub delete: Vec<String>,
    pub status: ReplicaSetStatus,
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Counted as a replica: not terminating and not finished.
fn active(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none() && !matches!(phase(p), "Succeeded" | "Failed")
}

/// Ready for at least `min_ready_seconds` at `now` (seconds since the epoch).
pub fn is_available(p: &Pod, min_ready_seconds: i64, now: i64) -> bool {
    if !is_ready(p) {
        return false;
    }
    if min_ready_seconds <= 0 {
        return true;
    }
    let since = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_second());
    since.is_some_and(|s| now - s >= min_ready_seconds)
}

/// Upstream's deletion order (`ActivePodsWithRanks`, simplified): unscheduled before
/// scheduled, pending before running, not ready before ready, newer before older.
fn deletion_rank(p: &Pod) -> (bool, u8, bool, std::cmp::Reverse<i64>) {
    let scheduled = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let phase_rank = match phase(p) {
        "Pending" | "" => 0,
        "Unknown" => 1,
        _ => 2,
    };
    let created = p
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or(0);
    (
        scheduled,
        phase_rank,
        is_ready(p),
        std::cmp::Reverse(created),
    )
}

/// The plan for one ReplicaSet; `pods` are the pods it controls (by owner uid), `now` is
/// seconds since the epoch (for `minReadySeconds`).
pub fn plan(rs: &ReplicaSet, pods: &[&Pod], now: i64) -> Plan {
    let spec = rs.spec.clone().unwrap_or_default();
    let want = spec.replicas.unwrap_or(1).max(0);
    let mut live: Vec<&Pod> = pods.iter().copied().filter(|p| active(p)).collect();
    let mut out = Plan::default();
    // Finished pods of a ReplicaSet are replaced (and removed, as the pod GC would).
    out.delete.extend(
        pods.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && !active(p))
            .filter_map(|p| p.metadata.name.clone()),
    );
    let have = live.len() as i32;
    if have < want {
        out.create = want - have;
    } else if have > want {
        live.sort_by_key(|p| deletion_rank(p));
        out.delete.extend(
            live.iter()
                .take((have - want) as usize)
                .filter_map(|p| p.metadata.name.clone()),
        );
    }
    let all: Vec<&Pod> = pods.iter().copied().filter(|p| active(p)).collect();
    let min_ready = i64::from(spec.min_ready_seconds.unwrap_or(0));
    let labels = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let fully_labeled = all
        .iter()
        .filter(|p| {
            let l = p.metadata.labels.clone().unwrap_or_default();
            labels.iter().all(|(k, v)| l.get(k) == Some(v))
        })
        .count();
    out.status = ReplicaSetStatus {
        replicas: all.len() as i32,
        fully_labeled_replicas: Some(fully_labeled as i32),
        ready_replicas: Some(all.iter().filter(|p| is_ready(p)).count() as i32),
        available_replicas: Some(
            all.iter()
                .filter(|p| is_available(p, min_ready, now))
                .count() as i32,
        ),
        observed_generation: rs.metadata.generation,
        ..Default::default()
    };
    out
}

/// A new pod of `rs`, named `name`, from its template.
pub fn new_pod(rs: &ReplicaSet, name: &str) -> Pod {
    let template = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: rs.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: meta.annotations,
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: rs.metadata.name.clone().unwrap_or_default(),
                uid: rs.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rs(replicas: i32) -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web-abc", "namespace": "ns", "uid": "rs-uid", "generation": 3},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "abc"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        }))
        .unwrap()
    }

    fn pod(name: &str, node: Option<&str>, phase: &str, ready: bool, created: &str) -> Pod {
        let mut p = new_pod(&rs(1), name);
        p.metadata.creation_timestamp = serde_json::from_value(json!(created)).unwrap();
        p.spec.as_mut().unwrap().node_name = node.map(str::to_string);
        p.status = serde_json::from_value(json!({"phase": phase,
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                            "lastTransitionTime": "2025-01-01T00:00:00Z"}]}))
        .unwrap();
        p
    }

    #[test]
    fn scales_up_and_down_in_upstream_order() {
        let a = pod("a", Some("n1"), "Running", true, "2025-01-01T00:00:00Z");
        let b = pod("b", Some("n1"), "Running", true, "2025-01-01T00:01:00Z");
        let c = pod("c", None, "Pending", false, "2025-01-01T00:00:00Z");
        let d = pod("d", Some("n2"), "Running", false, "2025-01-01T00:00:00Z");
        let p = plan(&rs(5), &[&a, &b], 0);
        assert_eq!((p.create, p.delete.len()), (3, 0));
        let p = plan(&rs(1), &[&a, &b, &c, &d], 0);
        assert_eq!(p.create, 0);
        // unscheduled first, then not ready, then the newer of the ready ones
        assert_eq!(p.delete, ["c", "d", "b"]);
    }

    #[test]
    fn status_counts_and_finished_pods_are_replaced() {
        let a = pod("a", Some("n1"), "Running", true, "2025-01-01T00:00:00Z");
        let f = pod("f", Some("n1"), "Failed", false, "2025-01-01T00:00:00Z");
        let mut gone = pod("g", Some("n1"), "Running", true, "2025-01-01T00:00:00Z");
        gone.metadata.deletion_timestamp =
            serde_json::from_value(json!("2025-01-01T00:05:00Z")).unwrap();
        let p = plan(&rs(2), &[&a, &f, &gone], 0);
        assert_eq!(p.create, 1);
        assert_eq!(p.delete, ["f"]);
        let s = &p.status;
        assert_eq!(
            (
                s.replicas,
                s.ready_replicas,
                s.available_replicas,
                s.fully_labeled_replicas
            ),
            (1, Some(1), Some(1), Some(1))
        );
        assert_eq!(s.observed_generation, Some(3));
    }

    #[test]
    fn min_ready_seconds_delays_availability() {
        let a = pod("a", Some("n1"), "Running", true, "2025-01-01T00:00:00Z");
        let t0 = 1_735_689_600; // 2025-01-01T00:00:00Z
        assert!(!is_available(&a, 30, t0 + 10));
        assert!(is_available(&a, 30, t0 + 30));
        assert!(is_available(&a, 0, t0));
    }

    #[test]
    fn pod_shape() {
        let p = new_pod(&rs(1), "web-abc-x1");
        let o = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((o.kind.as_str(), o.uid.as_str()), ("ReplicaSet", "rs-uid"));
        assert_eq!(p.metadata.labels.unwrap()["pod-template-hash"], "abc");
        assert_eq!(p.spec.unwrap().node_name, None);
    }
}
