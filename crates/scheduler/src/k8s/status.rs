//! What the scheduler tells people: Events on pods (why pending, why evicted, bad input),
//! `PodGroup.status.schedulingConditions`, and `Queue.status` (allocated, requested, fair
//! share). Each is written only when it changes.

use crate::decisions::QueueReport;
use gantry_api::kai::{PodGroup, Queue};
use gantry_api::names;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::HashMap;

pub const COMPONENT: &str = "kai-scheduler";

/// Event reasons.
pub mod reason {
    pub const UNSCHEDULABLE: &str = "Unschedulable";
    pub const INVALID: &str = "InvalidRequest";
    pub const SCHEDULED: &str = "Scheduled";
    pub const BIND_FAILED: &str = "FailedBinding";
    pub const RECLAIMED: &str = "Reclaimed";
    pub const PREEMPTED: &str = "Preempted";
    pub const CONSOLIDATED: &str = "Consolidated";
    pub const STALE: &str = "StaleGangEvicted";
}

/// Writes Events and remembers what it said last per object, to say it once.
pub struct Events {
    client: kube::Client,
    last: HashMap<String, String>,
    seq: u64,
}

impl Events {
    pub fn new(client: kube::Client) -> Events {
        Events {
            client,
            last: HashMap::new(),
            seq: 0,
        }
    }

    /// Post an Event on a pod unless the same reason+message was the last one posted.
    pub async fn pod(
        &mut self,
        namespace: &str,
        name: &str,
        uid: &str,
        type_: &str,
        reason: &str,
        message: &str,
    ) {
        let k = format!("{namespace}/{name}");
        let said = format!("{reason}\u{0}{message}");
        if self.last.get(&k) == Some(&said) {
            return;
        }
        self.last.insert(k, said);
        self.post(namespace, "Pod", "v1", name, uid, type_, reason, message)
            .await;
    }

    /// Forget a pod (deleted, or scheduled: a later pending spell reports again).
    pub fn forget(&mut self, namespace: &str, name: &str) {
        self.last.remove(&format!("{namespace}/{name}"));
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn post(
        &mut self,
        namespace: &str,
        kind: &str,
        api_version: &str,
        name: &str,
        uid: &str,
        type_: &str,
        reason: &str,
        message: &str,
    ) {
        self.seq += 1;
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let ev = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("{name}.{:x}{:04x}", chrono::Utc::now().timestamp_micros(), self.seq % 0xffff),
                         "namespace": namespace},
            "involvedObject": {"kind": kind, "apiVersion": api_version, "name": name,
                               "namespace": namespace, "uid": uid},
            "reason": reason, "message": message, "type": type_,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        });
        let Ok(ev) = serde_json::from_value::<Event>(ev) else {
            return;
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        if let Err(e) = api.create(&PostParams::default(), &ev).await {
            tracing::debug!(%namespace, %name, error = %e, "posting an event failed");
        }
    }
}

fn fmt_num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.3}")
    }
}

/// `Queue.status` as KAI writes it (GPUs in fractions, cpu in cores as a quantity, memory
/// in bytes), plus Gantry's `fairShare` in the same units.
pub fn queue_status(r: &QueueReport) -> serde_json::Value {
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

    pub async fn queue(&mut self, r: &QueueReport) {
        let st = queue_status(r);
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
        let s = queue_status(&r);
        assert_eq!(s["allocated"]["nvidia.com/gpu"], "1");
        assert_eq!(s["allocated"]["cpu"], "500m");
        assert_eq!(s["fairShare"]["nvidia.com/gpu"], "1.500");
        assert_eq!(s["requested"]["memory"], "3000000000");
    }
}
