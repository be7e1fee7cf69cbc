//! What the scheduler tells people besides Events ([`super::events`]):
//! `PodGroup.status.schedulingConditions`, and `Queue.status` as KAI's queue controller
//! writes it (child queues, allocated, requested) plus Gantry's fair share. Each is written
//! only when it changes.

use crate::decisions::QueueReport;
use crate::input::QueueInput;
use gantry_api::kai::{PodGroup, Queue};
use gantry_api::names;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};

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
        "childQueues": (!children.is_empty()).then_some(children),
    })
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
