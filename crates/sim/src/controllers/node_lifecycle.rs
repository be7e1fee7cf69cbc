//! The node-lifecycle part of kube-controller-manager, pure: which NoExecute taints a node's
//! Ready condition calls for (`node.kubernetes.io/not-ready` when Ready is False,
//! `node.kubernetes.io/unreachable` when Unknown), which pods those taints evict and when
//! (the taint-eviction controller: a pod that does not tolerate a NoExecute taint goes at once,
//! one that tolerates it with `tolerationSeconds` goes that long after the taint was added,
//! one that tolerates it without goes never), and which pods the pod GC deletes because their
//! node no longer exists. The shell is [`node_lifecycle_runner`](super::node_lifecycle_runner).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use gantry_k8s_rules::taints::{Taint as RuleTaint, TaintEffect, Toleration as RuleToleration};
use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// What the DefaultTolerationSeconds admission plugin gives a pod that does not tolerate the
/// two taints itself.
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

fn ready_status(node: &Node) -> Option<&str> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str())
}

/// The condition taint a node should carry: not-ready for Ready=False, unreachable for
/// Ready=Unknown, none while Ready=True or before the kubelet posted any status.
pub fn condition_taint(node: &Node) -> Option<&'static str> {
    match ready_status(node) {
        Some("False") => Some(TAINT_NOT_READY),
        Some("Unknown") => Some(TAINT_UNREACHABLE),
        _ => None,
    }
}

/// Whether some node carries a NoExecute taint: only then can [`plan`] evict a pod, so
/// without one the pods need not be walked for evictions (only for orphans).
pub fn any_no_execute<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> bool {
    nodes.into_iter().any(|n| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .is_some_and(|t| t.iter().any(|t| t.effect == "NoExecute"))
    })
}

fn is_condition_taint(t: &Taint) -> bool {
    t.effect == "NoExecute" && (t.key == TAINT_NOT_READY || t.key == TAINT_UNREACHABLE)
}

/// The node's taints with the condition taint brought in line with its Ready condition
/// (a new one stamped `now`); None when they already are.
pub fn reconcile_taints(node: &Node, now: DateTime<Utc>) -> Option<Vec<Taint>> {
    let current: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let want = condition_taint(node);
    let have: Vec<&str> = current
        .iter()
        .filter(|t| is_condition_taint(t))
        .map(|t| t.key.as_str())
        .collect();
    if have == want.into_iter().collect::<Vec<_>>() {
        return None;
    }
    let mut out: Vec<Taint> = current
        .into_iter()
        .filter(|t| !is_condition_taint(t))
        .collect();
    out.extend(want.map(|key| Taint {
        key: key.into(),
        effect: "NoExecute".into(),
        time_added: Some(Time(to_jiff(now))),
        value: None,
    }));
    Some(out)
}

fn to_jiff(t: DateTime<Utc>) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_millisecond(t.timestamp_millis())
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}

fn from_jiff(t: &Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(t.0.as_millisecond())
}

/// What the taint-eviction controller does with one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every NoExecute taint is tolerated for good (or there is none).
    Keep,
    /// Delete the pod now; the message names the taint.
    Evict(String),
    /// Tolerated for now; look again at this time.
    Until(DateTime<Utc>),
}

/// Upstream's `processPodOnNode`: all NoExecute taints must be tolerated, and the pod stays
/// for the shortest `tolerationSeconds` among the tolerations used, counted from when the
/// taint was added.
pub fn verdict(taints: &[Taint], tolerations: &[Toleration], now: DateTime<Utc>) -> Verdict {
    let rules: Vec<(RuleToleration, Option<i64>)> = tolerations
        .iter()
        .filter_map(|t| Some((RuleToleration::from_k8s(t)?, t.toleration_seconds)))
        .collect();
    let mut until: Option<DateTime<Utc>> = None;
    for t in taints.iter().filter(|t| t.effect == "NoExecute") {
        let Some(rule) = RuleTaint::from_k8s(t) else {
            continue;
        };
        debug_assert_eq!(rule.effect, TaintEffect::NoExecute);
        let used: Vec<Option<i64>> = rules
            .iter()
            .filter(|(r, _)| r.tolerates(&rule))
            .map(|(_, s)| *s)
            .collect();
        if used.is_empty() {
            return Verdict::Evict(format!("untolerated taint {}:NoExecute", t.key));
        }
        // Without tolerationSeconds a toleration lasts forever; with several, the shortest wins.
        let Some(secs) = used.iter().flatten().min().copied() else {
            continue;
        };
        let added = t.time_added.as_ref().and_then(from_jiff).unwrap_or(now);
        let at = added + chrono::Duration::seconds(secs.max(0));
        until = Some(until.map_or(at, |u| u.min(at)));
    }
    match until {
        Some(at) if at <= now => {
            Verdict::Evict("toleration period of a NoExecute taint ended".into())
        }
        Some(at) => Verdict::Until(at),
        None => Verdict::Keep,
    }
}

/// A pod the controller acts on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodId {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Succeeded or Failed already.
    pub terminal: bool,
}

fn terminal(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

impl PodId {
    fn of(p: &Pod) -> PodId {
        PodId {
            namespace: p.metadata.namespace.clone().unwrap_or_default(),
            name: p.metadata.name.clone().unwrap_or_default(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
            terminal: terminal(p),
        }
    }
}

/// One pass's decisions.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Pods to evict (delete gracefully), with why.
    pub evict: Vec<(PodId, String)>,
    /// Pods bound to nodes that do not exist, by node: force-deleted once the node's absence
    /// is confirmed.
    pub orphaned: BTreeMap<String, Vec<PodId>>,
}

/// Decide for every bound pod: orphaned (no such node), evicted, or kept.
pub fn plan<'a>(
    nodes: &BTreeMap<String, std::sync::Arc<Node>>,
    pods: impl IntoIterator<Item = &'a Pod>,
    now: DateTime<Utc>,
) -> Plan {
    let mut out = Plan::default();
    for p in pods {
        let Some(node_name) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        if node_name.is_empty() {
            continue;
        }
        let Some(node) = nodes.get(node_name) else {
            out.orphaned
                .entry(node_name.to_string())
                .or_default()
                .push(PodId::of(p));
            continue;
        };
        let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
        let Some(taints) = taints.filter(|t| t.iter().any(|t| t.effect == "NoExecute")) else {
            continue;
        };
        // Already leaving (or done): nothing to evict.
        if p.metadata.deletion_timestamp.is_some() || terminal(p) {
            continue;
        }
        let tolerations = p.spec.as_ref().and_then(|s| s.tolerations.as_deref());
        match verdict(taints, tolerations.unwrap_or_default(), now) {
            Verdict::Evict(why) => out.evict.push((PodId::of(p), why)),
            Verdict::Keep | Verdict::Until(_) => {}
        }
    }
    out
}

/// DefaultTolerationSeconds admission: tolerations for the two condition taints, for
/// `DEFAULT_TOLERATION_SECONDS`, on a pod spec (JSON) that does not tolerate them already.
pub fn add_default_tolerations(spec: &mut serde_json::Value) {
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let existing = spec
        .get("tolerations")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let str_of = |t: &serde_json::Value, f: &str| {
        t.get(f)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    // As upstream: an empty key or effect counts as covering the taint.
    let covered = |key: &str| {
        existing.iter().any(|t| {
            let (k, e) = (str_of(t, "key"), str_of(t, "effect"));
            (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
        })
    };
    let mut list = existing.clone();
    for key in [TAINT_NOT_READY, TAINT_UNREACHABLE] {
        if !covered(key) {
            list.push(
                serde_json::json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS}),
            );
        }
    }
    if list.len() != existing.len() {
        spec.insert("tolerations".into(), serde_json::Value::Array(list));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn node(name: &str, ready: &str, taints: serde_json::Value) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name},
                "spec": {"taints": taints},
                "status": {"conditions": [{"type": "Ready", "status": ready}]}}))
            .unwrap(),
        )
    }

    fn pod(name: &str, node: &str, tolerations: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"nodeName": node, "containers": [], "tolerations": tolerations},
            "status": {"phase": "Running"}}),
        )
        .unwrap()
    }

    #[test]
    fn pods_need_a_walk_for_evictions_only_where_a_node_has_a_noexecute_taint() {
        let (plain, soft) = (
            node("a", "True", json!(null)),
            node("b", "True", json!([{"key": "gpu", "effect": "NoSchedule"}])),
        );
        let hard = node("c", "True", json!([{"key": "gpu", "effect": "NoExecute"}]));
        assert!(!any_no_execute([&*plain, &*soft]));
        assert!(any_no_execute([&*plain, &*hard]));
        // Without one, no pod is evicted whatever it tolerates: the walk finds nothing.
        let nodes = BTreeMap::from([("a".to_string(), plain), ("b".to_string(), soft)]);
        let pods = [pod("p", "a", json!(null)), pod("q", "b", json!(null))];
        assert_eq!(
            plan(&nodes, &pods, at("2026-01-01T00:00:00Z")),
            Plan::default()
        );
    }

    #[test]
    fn ready_condition_sets_and_clears_the_noexecute_taint() {
        let now = at("2026-01-01T00:00:00Z");
        let keep = json!([{"key": "gpu", "effect": "NoSchedule"}]);
        let t = reconcile_taints(&node("a", "Unknown", keep.clone()), now).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].key, "gpu");
        assert_eq!(t[1].key, TAINT_UNREACHABLE);
        assert_eq!(t[1].effect, "NoExecute");
        assert!(t[1].time_added.is_some());
        let t = reconcile_taints(&node("a", "False", json!(t)), now).unwrap();
        assert_eq!(
            t.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            ["gpu", TAINT_NOT_READY]
        );
        assert_eq!(reconcile_taints(&node("a", "False", json!(t)), now), None);
        let t = reconcile_taints(&node("a", "True", json!(t)), now).unwrap();
        assert_eq!(json!(t), keep);
        assert_eq!(reconcile_taints(&node("a", "True", keep), now), None);
        let fresh: Node = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        assert_eq!(reconcile_taints(&fresh, now), None, "no status yet");
    }

    #[test]
    fn tolerations_decide_when_a_pod_goes() {
        let now = at("2026-01-01T00:10:00Z");
        let taint = |added: &str| -> Vec<Taint> {
            serde_json::from_value(
                json!([{"key": TAINT_UNREACHABLE, "effect": "NoExecute", "timeAdded": added}]),
            )
            .unwrap()
        };
        let tol = |v: serde_json::Value| -> Vec<Toleration> { serde_json::from_value(v).unwrap() };
        let defaults = tol(json!([
            {"key": TAINT_NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]));
        assert!(matches!(
            verdict(&taint("2026-01-01T00:09:00Z"), &[], now),
            Verdict::Evict(m) if m.contains(TAINT_UNREACHABLE)
        ));
        assert_eq!(
            verdict(&taint("2026-01-01T00:09:00Z"), &defaults, now),
            Verdict::Until(at("2026-01-01T00:14:00Z"))
        );
        assert!(matches!(
            verdict(&taint("2026-01-01T00:05:00Z"), &defaults, now),
            Verdict::Evict(_)
        ));
        // A DaemonSet pod's toleration has no seconds: it stays for good.
        let forever =
            tol(json!([{"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}]));
        assert_eq!(
            verdict(&taint("2026-01-01T00:00:00Z"), &forever, now),
            Verdict::Keep
        );
        // Two matching tolerations: the shortest period wins.
        let both = [
            defaults.clone(),
            tol(json!([{"operator": "Exists", "tolerationSeconds": 30}])),
        ]
        .concat();
        assert_eq!(
            verdict(&taint("2026-01-01T00:09:50Z"), &both, now),
            Verdict::Until(at("2026-01-01T00:10:20Z"))
        );
        // NoSchedule taints evict nothing.
        let soft: Vec<Taint> =
            serde_json::from_value(json!([{"key": "x", "effect": "NoSchedule"}])).unwrap();
        assert_eq!(verdict(&soft, &[], now), Verdict::Keep);
    }

    #[test]
    fn plan_finds_orphans_and_evictions() {
        let now = at("2026-01-01T00:10:00Z");
        let down = json!([{"key": TAINT_NOT_READY, "effect": "NoExecute", "timeAdded": "2026-01-01T00:09:00Z"}]);
        let nodes: BTreeMap<String, Arc<Node>> = [
            ("up".to_string(), node("up", "True", json!([]))),
            ("down".to_string(), node("down", "False", down)),
        ]
        .into_iter()
        .collect();
        let short = json!([{"key": TAINT_NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 120}]);
        let mut leaving = pod("leaving", "down", json!([]));
        leaving.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        let pods = [
            pod("fine", "up", json!([])),
            pod("evicted", "down", json!([])),
            pod("waits", "down", short),
            leaving,
            pod("lost", "gone", json!([])),
            pod("pending", "", json!([])),
        ];
        let p = plan(&nodes, pods.iter(), now);
        let names = |v: &[PodId]| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(
            p.evict
                .iter()
                .map(|(p, _)| p.name.as_str())
                .collect::<Vec<_>>(),
            ["evicted"]
        );
        assert_eq!(p.orphaned.len(), 1);
        assert_eq!(names(&p.orphaned["gone"]), ["lost"]);
    }

    #[test]
    fn default_toleration_seconds_only_where_missing() {
        let mut spec = json!({"containers": []});
        add_default_tolerations(&mut spec);
        let t = spec["tolerations"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0]["key"], TAINT_NOT_READY);
        assert_eq!(t[1]["tolerationSeconds"], DEFAULT_TOLERATION_SECONDS);
        // Already tolerated (a DaemonSet pod's), or tolerating everything: left alone.
        let own = json!([{"key": TAINT_NOT_READY, "operator": "Exists", "effect": "NoExecute"},
                         {"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}]);
        let mut spec = json!({"tolerations": own});
        add_default_tolerations(&mut spec);
        assert_eq!(spec["tolerations"], own);
        let mut spec = json!({"tolerations": [{"operator": "Exists"}]});
        add_default_tolerations(&mut spec);
        assert_eq!(spec["tolerations"].as_array().unwrap().len(), 1);
        // One covered, the other added.
        let mut spec = json!({"tolerations": [{"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]});
        add_default_tolerations(&mut spec);
        let t = spec["tolerations"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1]["key"], TAINT_NOT_READY);
    }
}
