//! The default scheduler's core, pure: which node a pod of `schedulerName: default-scheduler`
//! goes to. What kube-scheduler's filters check that matters here: required node affinity
//! and selector, untolerated NoSchedule/NoExecute taints, cordoned and not-Ready nodes, and
//! resource requests (cpu, memory, extended resources such as `nvidia.com/gpu`, pod count)
//! against allocatable minus what bound pods request. Among nodes that fit, the least loaded
//! (fewest pods) wins, by name on a tie. Pods for other schedulers (`kai-scheduler`) are left
//! to them.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use gantry_k8s_rules::RequiredNodeAffinity;
use gantry_k8s_rules::quantity::Quantity;
use gantry_k8s_rules::taints::{taints_from_k8s, tolerations_from_k8s, untolerated_taint};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};

pub const NAME: &str = "default-scheduler";

/// Whether this scheduler should place `pod` now.
pub fn wants(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    spec.node_name.as_deref().is_none_or(str::is_empty)
        && spec.scheduler_name.as_deref().is_none_or(|n| n == NAME)
        && pod.metadata.deletion_timestamp.is_none()
        && matches!(phase, None | Some("Pending"))
}

/// A pod's effective requests in milli-units: the sum over containers, at least the largest
/// init container's (resource by resource), as kube-scheduler computes them.
pub fn requests(spec: &PodSpec) -> BTreeMap<String, i128> {
    let of = |c: &k8s_openapi::api::core::v1::Container| -> BTreeMap<String, i128> {
        let r = c.resources.as_ref();
        // Limits stand in for requests that are not given (API defaulting does the same).
        let mut m: BTreeMap<String, i128> = BTreeMap::new();
        for src in [
            r.and_then(|r| r.limits.as_ref()),
            r.and_then(|r| r.requests.as_ref()),
        ]
        .into_iter()
        .flatten()
        {
            for (k, v) in src {
                // A quantity past int64 is capped, as stored (so `cpu: 1e100` fits nowhere).
                let milli = Quantity::parse(&v.0).ok();
                let milli = milli.and_then(|q| crate::kubelet::admission::scaled_capped(&q, 3));
                if let Some(q) = milli {
                    m.insert(k.clone(), q);
                }
            }
        }
        m
    };
    let mut sum: BTreeMap<String, i128> = BTreeMap::new();
    for c in &spec.containers {
        for (k, v) in of(c) {
            *sum.entry(k).or_default() += v;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (k, v) in of(c) {
            let e = sum.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    sum
}

/// Whether an unschedulable pod has yet to say so: its `PodScheduled` condition is not yet
/// False with this message (the scheduler then sets it and records `FailedScheduling`).
pub fn report_due(pod: &Pod, why: &str) -> bool {
    let cond = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    !cond.is_some_and(|c| c.status == "False" && c.message.as_deref() == Some(why))
}

fn allocatable(node: &Node) -> BTreeMap<String, i128> {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), Quantity::parse(&v.0).ok()?.milli_value()?)))
        .collect()
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn holds_resources(p: &Pod) -> bool {
    !matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Why `pod` fits no node, or the node it goes to.
pub fn pick<N: Borrow<Node>, P: Borrow<Pod>>(
    pod: &Pod,
    nodes: &[N],
    pods: &[P],
) -> Result<String, String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let want = requests(&spec);
    let affinity = RequiredNodeAffinity::from_pod_spec(&spec).0;
    let tolerations = tolerations_from_k8s(spec.tolerations.as_deref().unwrap_or_default());
    // Per node: requests of the pods bound there and their count.
    let mut used: BTreeMap<&str, (BTreeMap<String, i128>, i128)> = BTreeMap::new();
    for p in pods
        .iter()
        .map(Borrow::borrow)
        .filter(|p| holds_resources(p))
    {
        let Some(s) = p.spec.as_ref() else { continue };
        let Some(n) = s.node_name.as_deref() else {
            continue;
        };
        let e = used.entry(n).or_default();
        for (k, v) in requests(s) {
            *e.0.entry(k).or_default() += v;
        }
        e.1 += 1;
    }
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut best: Option<(i128, &str)> = None;
    let total = nodes.len();
    for node in nodes.iter().map(Borrow::borrow) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let mut taints = taints_from_k8s(
            node.spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default(),
        );
        if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            taints.push(gantry_k8s_rules::Taint {
                key: "node.kubernetes.io/unschedulable".into(),
                value: String::new(),
                effect: gantry_k8s_rules::TaintEffect::NoSchedule,
            });
        }
        let (node_used, count) = used.get(name).cloned().unwrap_or_default();
        let alloc = allocatable(node);
        let why = if !ready(node) {
            Some("node(s) were not ready".to_string())
        } else if !affinity.matches(name, &labels) {
            Some("node(s) didn't match Pod's node affinity/selector".to_string())
        } else if let Some(t) = untolerated_taint(&taints, &tolerations) {
            Some(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                t.key, t.value
            ))
        } else if alloc
            .get("pods")
            .is_some_and(|max| (count + 1) * 1000 > *max)
        {
            Some("Too many pods".to_string())
        } else {
            want.iter()
                .find(|(k, v)| {
                    **v > 0
                        && alloc.get(*k).copied().unwrap_or(0)
                            - node_used.get(*k).copied().unwrap_or(0)
                            < **v
                })
                .map(|(k, _)| format!("Insufficient {k}"))
        };
        match why {
            Some(w) => *reasons.entry(w).or_default() += 1,
            None => {
                if best.is_none_or(|(c, n)| (count, name) < (c, n)) {
                    best = Some((count, name));
                }
            }
        }
    }
    match best {
        Some((_, n)) => Ok(n.to_string()),
        None => {
            let list: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
            Err(format!(
                "0/{total} nodes are available: {}.",
                if list.is_empty() {
                    "no nodes".to_string()
                } else {
                    list.join(", ")
                }
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, gpus: u32, extra: serde_json::Value) -> Node {
        let mut v = json!({"metadata": {"name": name, "labels": {"pool": if gpus > 0 {"gpu"} else {"cpu"}}},
            "spec": {},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "3", "nvidia.com/gpu": gpus.to_string()},
                       "conditions": [{"type": "Ready", "status": "True"}]}});
        if let Some(o) = extra.as_object() {
            for (k, val) in o {
                v["spec"][k] = val.clone();
            }
        }
        serde_json::from_value(v).unwrap()
    }

    fn pod(name: &str, node: Option<&str>, cpu: &str, extra: serde_json::Value) -> Pod {
        let mut v = json!({"metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}});
        if let Some(n) = node {
            v["spec"]["nodeName"] = json!(n);
        }
        if let Some(o) = extra.as_object() {
            for (k, val) in o {
                v["spec"][k] = val.clone();
            }
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_unbound_pods_of_the_default_scheduler() {
        assert!(wants(&pod("p", None, "1", json!({}))));
        assert!(wants(&pod("p", None, "1", json!({"schedulerName": NAME}))));
        assert!(!wants(&pod(
            "p",
            None,
            "1",
            json!({"schedulerName": "kai-scheduler"})
        )));
        assert!(!wants(&pod("p", Some("n"), "1", json!({}))));
    }

    #[test]
    fn least_loaded_fitting_node() {
        let nodes = [node("a", 0, json!({})), node("b", 0, json!({}))];
        let bound = [pod("x", Some("a"), "1", json!({}))];
        assert_eq!(
            pick(&pod("p", None, "1", json!({})), &nodes, &bound),
            Ok("b".into())
        );
        // Only a has room for 3.5 CPUs? neither: a has 3 left, b 4.
        assert_eq!(
            pick(&pod("p", None, "3500m", json!({})), &nodes, &bound),
            Ok("b".into())
        );
        let err = pick(&pod("p", None, "5", json!({})), &nodes, &bound).unwrap_err();
        assert_eq!(err, "0/2 nodes are available: 2 Insufficient cpu.");
    }

    #[test]
    fn affinity_taints_cordons_and_extended_resources() {
        let nodes = [
            node("cpu", 0, json!({})),
            node(
                "gpu",
                8,
                json!({"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}),
            ),
            node("off", 8, json!({"unschedulable": true})),
        ];
        let gpu_pod = |tolerate: bool| {
            let mut p = pod("p", None, "1", json!({}));
            let s = p.spec.as_mut().unwrap();
            s.containers[0].resources =
                serde_json::from_value(json!({"limits": {"nvidia.com/gpu": "1"}})).unwrap();
            if tolerate {
                s.tolerations = serde_json::from_value(
                    json!([{"key": "nvidia.com/gpu", "operator": "Exists"}]),
                )
                .unwrap();
            }
            p
        };
        assert_eq!(
            pick::<_, Pod>(&gpu_pod(true), &nodes, &[]),
            Ok("gpu".into())
        );
        let err = pick::<_, Pod>(&gpu_pod(false), &nodes, &[]).unwrap_err();
        assert!(err.contains("1 Insufficient nvidia.com/gpu"), "{err}");
        assert!(
            err.contains("untolerated taint {nvidia.com/gpu: }"),
            "{err}"
        );
        assert!(
            err.contains("{node.kubernetes.io/unschedulable: }"),
            "{err}"
        );
        let sel = pod("p", None, "1", json!({"nodeSelector": {"pool": "gpu"}}));
        let err = pick::<_, Pod>(&sel, &nodes[..1], &[]).unwrap_err();
        assert!(
            err.contains("didn't match Pod's node affinity/selector"),
            "{err}"
        );
    }

    #[test]
    fn init_containers_count_at_their_peak() {
        let s: PodSpec = serde_json::from_value(json!({
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                           {"name": "b", "resources": {"requests": {"cpu": "500m"}}}]}))
        .unwrap();
        let r = requests(&s);
        assert_eq!(r["cpu"], 2000);
        assert_eq!(r["memory"], 1024 * 1024 * 1024 * 1000);
    }

    #[test]
    fn pod_count_limit() {
        let nodes = [node("a", 0, json!({}))];
        let bound: Vec<Pod> = (0..3)
            .map(|i| pod(&format!("x{i}"), Some("a"), "0", json!({})))
            .collect();
        let err = pick(&pod("p", None, "0", json!({})), &nodes, &bound).unwrap_err();
        assert!(err.contains("Too many pods"), "{err}");
    }
}
