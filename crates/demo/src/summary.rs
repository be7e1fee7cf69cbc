//! The end-of-demo summary: computed from the cluster's objects (pure), so a test can check
//! every figure against the cluster itself.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use gantry_api::names;
use gantry_sim::ui::Snapshot;
use k8s_openapi::api::core::v1::{Event, Pod};
use serde::Serialize;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub nodes: usize,
    pub gpu_nodes: usize,
    /// From applying the ClusterPolicy to every GPU node advertising its GPUs.
    pub time_to_gpu_ready: Duration,
    pub gpus_total: u32,
    pub gpus_allocated: f64,
    pub queues: Vec<QueueLine>,
    /// Pods that were not placed at once, and what they waited for.
    pub waited: Vec<Waited>,
    /// Pods the scheduler evicted (reclaim / preemption / consolidation), with its reason.
    pub evicted: Vec<Waited>,
    pub phases: Vec<(String, Duration)>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct QueueLine {
    pub name: String,
    pub quota: f64,
    pub fair_share: Option<f64>,
    pub allocated: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Waited {
    /// `namespace/name`.
    pub pod: String,
    pub secs: f64,
    pub reason: String,
}

impl Summary {
    pub fn allocated_pct(&self) -> f64 {
        if self.gpus_total == 0 {
            0.0
        } else {
            100.0 * self.gpus_allocated / self.gpus_total as f64
        }
    }
}

pub fn queue_lines(s: &Snapshot) -> Vec<QueueLine> {
    s.queues
        .iter()
        .filter(|q| q.parent.is_some())
        .map(|q| QueueLine {
            name: q.name.clone(),
            quota: q.quota,
            fair_share: q.fair_share,
            allocated: q.allocated,
        })
        .collect()
}

fn key(ns: Option<&str>, name: Option<&str>) -> String {
    format!("{}/{}", ns.unwrap_or(""), name.unwrap_or(""))
}

/// Pods whose PodScheduled condition came later than their creation (by at least
/// `min_wait`), with the last scheduling event the scheduler left on them; and pods with an
/// eviction event (reasons `Evicted`, `Reclaimed`, `Preempted`, `Consolidated`).
pub fn waited_and_evicted(
    pods: &[Pod],
    events: &[Event],
    min_wait: Duration,
) -> (Vec<Waited>, Vec<Waited>) {
    let mut last_reason: BTreeMap<String, String> = BTreeMap::new();
    let mut evicted = Vec::new();
    let mut evs: Vec<&Event> = events
        .iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("Pod"))
        .collect();
    evs.sort_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or(e.event_time.as_ref().map(|t| t.0))
    });
    for e in evs {
        let k = key(
            e.involved_object.namespace.as_deref(),
            e.involved_object.name.as_deref(),
        );
        let reason = e.reason.clone().unwrap_or_default();
        let msg = e.message.clone().unwrap_or_default();
        if matches!(
            reason.as_str(),
            "Evicted" | "Reclaimed" | "Preempted" | "Consolidated" | "Reclaim" | "Preempt"
        ) {
            evicted.push(Waited {
                pod: k.clone(),
                secs: 0.0,
                reason: format!("{reason}: {msg}"),
            });
        } else if e.type_.as_deref() == Some("Warning")
            || reason.contains("Unschedulable")
            || reason.contains("FailedScheduling")
        {
            last_reason.insert(k, format!("{reason}: {msg}"));
        }
    }
    let mut waited = Vec::new();
    // Only what the batch scheduler placed: DaemonSet pods are bound by their controller.
    let scheduled_by_us = |p: &Pod| {
        p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref())
            == Some(names::DEFAULT_SCHEDULER_NAME)
    };
    for p in pods.iter().filter(|p| scheduled_by_us(p)) {
        let Some(created) = p.metadata.creation_timestamp.as_ref() else {
            continue;
        };
        let scheduled = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "True")
            })
            .and_then(|c| c.last_transition_time.as_ref());
        let k = key(p.metadata.namespace.as_deref(), p.metadata.name.as_deref());
        let secs = match scheduled {
            Some(t) => t.0.duration_since(created.0).as_secs_f64(),
            // Still pending: only interesting if the scheduler said why.
            None if last_reason.contains_key(&k) => -1.0,
            None => continue,
        };
        if secs >= 0.0 && secs < min_wait.as_secs_f64() {
            continue;
        }
        waited.push(Waited {
            pod: k.clone(),
            secs,
            reason: last_reason
                .get(&k)
                .cloned()
                .unwrap_or_else(|| "no event recorded".to_string()),
        });
    }
    waited.sort_by(|a, b| a.pod.cmp(&b.pod));
    (waited, evicted)
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Summary")?;
        writeln!(f, "  nodes: {} ({} with GPUs)", self.nodes, self.gpu_nodes)?;
        writeln!(
            f,
            "  time to GPU-ready: {:.1} s (ClusterPolicy applied -> every GPU node advertising GPUs)",
            self.time_to_gpu_ready.as_secs_f64()
        )?;
        writeln!(
            f,
            "  GPUs in use: {:.2} of {} ({:.0}%; held by pods, a replica as 1/replicas, a MIG slice as its compute share)",
            self.gpus_allocated,
            self.gpus_total,
            self.allocated_pct()
        )?;
        writeln!(
            f,
            "  queues (GPUs, as the scheduler counts them in Queue status):"
        )?;
        writeln!(
            f,
            "    {:<18} {:>6}  {:>10}  {:>9}",
            "", "quota", "fair share", "allocated"
        )?;
        for q in &self.queues {
            let fs = q
                .fair_share
                .map(|v| format!("{v:.2}"))
                .unwrap_or_else(|| "-".into());
            let quota = if q.quota < 0.0 {
                "-".to_string()
            } else {
                format!("{:.0}", q.quota)
            };
            writeln!(
                f,
                "    {:<18} {:>6}  {:>10}  {:>9.2}",
                q.name, quota, fs, q.allocated
            )?;
        }
        writeln!(f, "  pods that waited: {}", self.waited.len())?;
        for w in self.waited.iter().take(12) {
            let t = if w.secs < 0.0 {
                "still pending".to_string()
            } else {
                format!("{:.1} s", w.secs)
            };
            writeln!(f, "    {:<36} {:>13}  {}", w.pod, t, w.reason)?;
        }
        if self.waited.len() > 12 {
            writeln!(f, "    ... and {} more", self.waited.len() - 12)?;
        }
        writeln!(f, "  pods evicted by the scheduler: {}", self.evicted.len())?;
        for w in self.evicted.iter().take(8) {
            writeln!(f, "    {:<36} {}", w.pod, w.reason)?;
        }
        writeln!(f, "  phases:")?;
        for (name, d) in &self.phases {
            writeln!(f, "    {:<44} {:>6.1} s", name, d.as_secs_f64())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn waits_come_from_conditions_and_reasons_from_events() {
        let pods: Vec<Pod> = serde_json::from_value(json!([
            {"metadata": {"name": "fast", "namespace": "a", "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"schedulerName": "kai-scheduler", "containers": []},
             "status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
            {"metadata": {"name": "slow", "namespace": "a", "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"schedulerName": "kai-scheduler", "containers": []},
             "status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:09Z"}]}},
            {"metadata": {"name": "stuck", "namespace": "a", "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"schedulerName": "kai-scheduler", "containers": []}, "status": {}},
            {"metadata": {"name": "daemon", "namespace": "a", "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"containers": []},
             "status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:09Z"}]}}
        ])).unwrap();
        let events: Vec<Event> = serde_json::from_value(json!([
            {"metadata": {"name": "e1", "namespace": "a"}, "involvedObject": {"kind": "Pod", "namespace": "a", "name": "slow"},
             "type": "Warning", "reason": "Unschedulable", "message": "queue team-a over quota", "lastTimestamp": "2026-01-01T00:00:01Z"},
            {"metadata": {"name": "e2", "namespace": "a"}, "involvedObject": {"kind": "Pod", "namespace": "a", "name": "stuck"},
             "type": "Warning", "reason": "Unschedulable", "message": "no node fits", "lastTimestamp": "2026-01-01T00:00:01Z"},
            {"metadata": {"name": "e3", "namespace": "b"}, "involvedObject": {"kind": "Pod", "namespace": "b", "name": "w"},
             "type": "Normal", "reason": "Reclaimed", "message": "for queue team-a", "lastTimestamp": "2026-01-01T00:00:02Z"}
        ])).unwrap();
        let (waited, evicted) = waited_and_evicted(&pods, &events, Duration::from_secs(2));
        assert_eq!(waited.len(), 2);
        assert_eq!(waited[0].pod, "a/slow");
        assert!((waited[0].secs - 9.0).abs() < 1e-9);
        assert!(waited[0].reason.contains("over quota"));
        assert_eq!(waited[1].secs, -1.0);
        assert_eq!(evicted.len(), 1);
        assert!(evicted[0].reason.starts_with("Reclaimed"));
        let s = Summary {
            gpus_total: 4,
            gpus_allocated: 3.0,
            waited,
            evicted,
            ..Default::default()
        };
        let text = s.to_string();
        assert!(text.contains("3.00 of 4 (75%"), "{text}");
        assert!(text.contains("still pending"));
    }
}
