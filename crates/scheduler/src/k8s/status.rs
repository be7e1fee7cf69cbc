//! What the scheduler tells people besides Events ([`super::events`]):
//! `PodGroup.status.schedulingConditions`, and `Queue.status` as KAI's queue controller
//! writes it (child queues, allocated, requested) plus Gantry's fair share. Each is written
//! only when it changes.

use crate::decisions::{Bind, QueueReport};
use crate::input::{ClusterInput, PodPhase, QueueInput};
use gantry_api::kai::{PodGroup, Queue};
use gantry_api::names;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Event reasons (kube-scheduler's for scheduling and binding, KAI's for the rest).
pub mod reason {
    pub const FAILED_SCHEDULING: &str = "FailedScheduling";
    pub const INVALID: &str = "InvalidRequest";
    pub const SCHEDULED: &str = "Scheduled";
    pub const BIND_FAILED: &str = "FailedBinding";
    pub const RECLAIMED: &str = "Reclaimed";
    pub const PREEMPTED: &str = "Preempted";
    pub const CONSOLIDATED: &str = "Consolidated";
    pub const STALE: &str = "StaleGangEvicted";
}

fn fmt_num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.3}")
    }
}

/// Child queues per parent: the queues naming it in `spec.parentQueue`, sorted (KAI's
/// queue controller lists them the same way, whether or not the parent exists).
pub fn child_queues(queues: &[QueueInput]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for q in queues {
        if let Some(p) = q.parent.as_deref().filter(|p| !p.is_empty()) {
            out.entry(p.to_string()).or_default().push(q.name.clone());
        }
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

/// `Queue.status` as KAI writes it (GPUs in fractions, cpu in millicores as a quantity,
/// memory in bytes; `childQueues` omitted when there are none, so a merge patch clears it),
/// plus Gantry's `fairShare` and `deserved` in the same units.
pub fn queue_status(r: &QueueReport, children: &[String]) -> serde_json::Value {
    let res = |v: [f64; 3]| {
        json!({
            names::RESOURCE_GPU: fmt_num(v[0]),
            "cpu": format!("{}m", v[1].round() as i64),
            "memory": fmt_num(v[2].round()),
        })
    };
    json!({
        "allocated": res(r.allocated),
        "allocatedNonPreemptible": res(r.allocated_non_preemptible),
        "requested": res(r.requested),
        "fairShare": res(r.fair_share),
        "deserved": res(r.deserved),
        "usage": usage(r.usage),
        "childQueues": (!children.is_empty()).then_some(children),
    })
}

/// Gantry's `status.usage`: the historical usage time-based fair share weighs, per resource,
/// normalised to cluster capacity (a fraction: 0.25 = a quarter of the cluster's capacity over
/// the window), rounded to 4 digits as KAI rounds its queue metrics.
fn usage(v: [f64; 3]) -> serde_json::Value {
    let f = |x: f64| {
        let x = (x * 1e4).round() / 1e4;
        if x == x.trunc() {
            format!("{x}")
        } else {
            format!("{x:.4}")
        }
    };
    json!({names::RESOURCE_GPU: f(v[0]), "cpu": f(v[1]), "memory": f(v[2])})
}

/// The PodGroups this cycle starts: bound now (not pipelined) while none of their other pods
/// runs. Their minimum runtime counts from now (KAI's `kai.scheduler/last-start-timestamp`).
pub fn started_groups(input: &ClusterInput, binds: &[Bind]) -> BTreeSet<(String, String)> {
    let bound: BTreeSet<(&str, &str)> = binds
        .iter()
        .filter(|b| !b.pipelined)
        .map(|b| (b.namespace.as_str(), b.name.as_str()))
        .collect();
    let mut groups: BTreeSet<(String, String)> = input
        .pods
        .iter()
        .filter(|p| bound.contains(&(p.namespace.as_str(), p.name.as_str())))
        .filter(|p| !p.pod_group.is_empty())
        .map(|p| (p.namespace.clone(), p.pod_group.clone()))
        .collect();
    for p in &input.pods {
        let running = p.phase == PodPhase::Running && !p.releasing;
        if running && !bound.contains(&(p.namespace.as_str(), p.name.as_str())) {
            groups.remove(&(p.namespace.clone(), p.pod_group.clone()));
        }
    }
    groups
}

/// Annotate the groups this cycle starts with `kai.scheduler/last-start-timestamp` (now).
pub fn mark_started(client: &kube::Client, input: &ClusterInput, binds: &[Bind]) {
    let now = chrono::DateTime::from_timestamp(input.now, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    for (ns, name) in started_groups(input, binds) {
        let api: Api<PodGroup> = Api::namespaced(client.clone(), &ns);
        let patch =
            json!({"metadata": {"annotations": {names::ANNOTATION_LAST_START_TIMESTAMP: now}}});
        tokio::spawn(async move {
            if let Err(e) = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::debug!(podgroup = %name, error = %e, "last-start annotation failed");
            }
        });
    }
}

/// Writes Queue and PodGroup status when it changes.
pub struct StatusWriter {
    client: kube::Client,
    queues: HashMap<String, serde_json::Value>,
    groups: HashMap<String, String>,
}

impl StatusWriter {
    pub fn new(client: kube::Client) -> StatusWriter {
        StatusWriter {
            client,
            queues: HashMap::new(),
            groups: HashMap::new(),
        }
    }

    pub async fn queue(&mut self, r: &QueueReport, children: &[String]) {
        let st = queue_status(r, children);
        if self.queues.get(&r.name) == Some(&st) {
            return;
        }
        let api: Api<Queue> = Api::all(self.client.clone());
        let patch = json!({"status": st});
        match api
            .patch_status(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.queues.insert(r.name.clone(), st);
            }
            Err(e) => tracing::debug!(queue = %r.name, error = %e, "queue status write failed"),
        }
    }

    /// Set (or with `None`, clear) the group's `UnschedulableOnNodePool` condition.
    pub async fn pod_group(&mut self, namespace: &str, name: &str, unschedulable: Option<&str>) {
        let k = format!("{namespace}/{name}");
        let want = unschedulable.unwrap_or_default().to_string();
        if self.groups.get(&k).map_or(want.is_empty(), |v| *v == want) {
            return;
        }
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let conds = match unschedulable {
            Some(msg) => {
                let reason = if msg.starts_with("OverLimit") {
                    gantry_api::kai::reason::OVER_LIMIT
                } else if msg.contains("does not exist") {
                    gantry_api::kai::reason::QUEUE_DOES_NOT_EXIST
                } else {
                    "Unschedulable"
                };
                json!([{
                    "type": gantry_api::kai::reason::UNSCHEDULABLE_ON_NODE_POOL,
                    "nodePool": "default", "status": "True",
                    "reason": reason, "message": msg,
                    "reasons": [{"reason": reason, "message": msg}],
                    "lastTransitionTime": now, "transitionID": "0",
                }])
            }
            None => json!([]),
        };
        let api: Api<PodGroup> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({"status": {"schedulingConditions": conds}});
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.groups.insert(k, want);
            }
            Err(e) => tracing::debug!(podgroup = %k, error = %e, "podgroup status write failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_status_uses_kai_units() {
        let r = QueueReport {
            name: "q".into(),
            quota: [2.0, -1.0, -1.0],
            deserved: [2.0, 0.0, 0.0],
            fair_share: [1.5, 1000.0, 1e9],
            allocated: [1.0, 500.0, 2e9],
            allocated_non_preemptible: [0.0; 3],
            requested: [3.0, 1500.0, 3e9],
            usage: [0.123456, 0.0, 0.5],
        };
        let s = queue_status(&r, &[]);
        assert_eq!(s["allocated"]["nvidia.com/gpu"], "1");
        assert!(
            s["childQueues"].is_null(),
            "none: cleared by the merge patch"
        );
        let s = queue_status(&r, &["a".into(), "b".into()]);
        assert_eq!(s["childQueues"], json!(["a", "b"]));
        assert_eq!(s["allocated"]["cpu"], "500m");
        assert_eq!(s["fairShare"]["nvidia.com/gpu"], "1.500");
        assert_eq!(s["requested"]["memory"], "3000000000");
        assert_eq!(s["usage"]["nvidia.com/gpu"], "0.1235");
        assert_eq!(s["usage"]["memory"], "0.5000");
        assert_eq!(s["usage"]["cpu"], "0");
    }

    #[test]
    fn a_group_starts_when_its_first_pods_bind() {
        use crate::decisions::GpuBinding;
        use crate::input::PodInput;
        let pod = |name: &str, group: &str, running: bool| PodInput {
            namespace: "ns".into(),
            name: name.into(),
            pod_group: group.into(),
            phase: if running {
                PodPhase::Running
            } else {
                PodPhase::Pending
            },
            ..Default::default()
        };
        let bind = |name: &str, pipelined: bool| Bind {
            pod: 0,
            namespace: "ns".into(),
            name: name.into(),
            node: "n".into(),
            node_id: 0,
            gpu: GpuBinding::None,
            pipelined,
        };
        let input = ClusterInput {
            pods: vec![
                // fresh: both pods bound now (the cache already assumes them running).
                pod("fresh-0", "fresh", true),
                pod("fresh-1", "fresh", true),
                // growing: one pod ran before, one is bound now.
                pod("grow-0", "grow", true),
                pod("grow-1", "grow", true),
                // waiting: bound after its victims leave.
                pod("wait-0", "wait", false),
            ],
            ..Default::default()
        };
        let binds = [
            bind("fresh-0", false),
            bind("fresh-1", false),
            bind("grow-1", false),
            bind("wait-0", true),
        ];
        let got = started_groups(&input, &binds);
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            vec![("ns".to_string(), "fresh".to_string())]
        );
    }

    #[test]
    fn children_are_the_queues_naming_the_parent() {
        let q = |name: &str, parent: Option<&str>| QueueInput {
            name: name.into(),
            parent: parent.map(str::to_string),
            ..Default::default()
        };
        let c = child_queues(&[
            q("root", None),
            q("b", Some("root")),
            q("a", Some("root")),
            q("orphan", Some("gone")),
            q("top", Some("")),
        ]);
        assert_eq!(c["root"], vec!["a", "b"]);
        assert_eq!(c["gone"], vec!["orphan"]);
        assert_eq!(c.len(), 2);
    }
}
