//! Events on pods, written the way kube-scheduler's recorder writes them: `Scheduled`
//! ("Successfully assigned NS/NAME to NODE") once a pod is bound, `FailedScheduling` with the
//! reason the cycle gives while it is pending, and the scheduler's own reasons (evicted,
//! invalid input). One Event object per pod and (type, reason, message): a repeat raises its
//! `count` and `lastTimestamp` instead of adding an object, and repeats are spaced out
//! (growing gaps) so a pod pending for an hour is not written every cycle.
//!
//! [`Correlator`] decides (pure, clock passed in); [`Events`] performs the writes.

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Gap before a repeat of one pod's event updates its count: it doubles from the first to
/// the last value (kube-scheduler retries an unschedulable pod at most every 5 minutes when
/// nothing changes).
const REPEAT_FIRST: Duration = Duration::from_secs(10);
const REPEAT_MAX: Duration = Duration::from_secs(300);
/// Scheduling attempts of one pod are reported no closer than this backoff, doubling from
/// 1 s to 10 s (kube-scheduler's pod backoff), however often its message changes.
const ATTEMPT_FIRST: Duration = Duration::from_secs(1);
const ATTEMPT_MAX: Duration = Duration::from_secs(10);

/// What one Event says about one pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Said {
    pub type_: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl Said {
    /// A report of a scheduling attempt (subject to the pod's attempt backoff).
    fn is_attempt(&self) -> bool {
        self.reason == super::status::reason::FAILED_SCHEDULING
    }
}

/// One write to perform.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// A new Event object.
    Create { name: String, first: DateTime<Utc> },
    /// The same Event seen again: set its count and last timestamp.
    Repeat {
        name: String,
        count: i32,
        first: DateTime<Utc>,
    },
}

struct Record {
    name: String,
    count: i32,
    first: DateTime<Utc>,
    gap: Duration,
    next: Instant,
}

#[derive(Default)]
struct PodLog {
    records: HashMap<Said, Record>,
    attempts: u32,
    next_attempt: Option<Instant>,
}

/// Decides, per pod, whether an observation becomes a new Event, a count update, or nothing.
#[derive(Default)]
pub struct Correlator {
    pods: HashMap<String, PodLog>,
    seq: u64,
}

impl Correlator {
    /// `pod` is `namespace/name`; `now` and `wall` are the same instant on both clocks.
    pub fn observe(
        &mut self,
        pod: &str,
        said: &Said,
        now: Instant,
        wall: DateTime<Utc>,
    ) -> Option<Write> {
        let log = self.pods.entry(pod.to_string()).or_default();
        if said.is_attempt() && log.next_attempt.is_some_and(|t| now < t) {
            return None;
        }
        let write = match log.records.get_mut(said) {
            Some(r) if now < r.next => return None,
            Some(r) => {
                r.count += 1;
                r.gap = (r.gap * 2).min(REPEAT_MAX);
                r.next = now + r.gap;
                Write::Repeat {
                    name: r.name.clone(),
                    count: r.count,
                    first: r.first,
                }
            }
            None => {
                self.seq += 1;
                // client-go names an Event `<object>.<unix nanos in hex>`.
                let nanos = wall.timestamp_nanos_opt().unwrap_or_default() as u64;
                let object = pod.rsplit('/').next().unwrap_or(pod);
                let name = format!("{object}.{:x}", nanos.wrapping_add(self.seq));
                log.records.insert(
                    said.clone(),
                    Record {
                        name: name.clone(),
                        count: 1,
                        first: wall,
                        gap: REPEAT_FIRST,
                        next: now + REPEAT_FIRST,
                    },
                );
                Write::Create { name, first: wall }
            }
        };
        if said.is_attempt() {
            log.attempts += 1;
            let backoff = ATTEMPT_FIRST * 2u32.saturating_pow(log.attempts - 1);
            log.next_attempt = Some(now + backoff.min(ATTEMPT_MAX));
        }
        Some(write)
    }

    /// Forget a pod (bound, or deleted): a later pending spell starts afresh.
    pub fn forget(&mut self, pod: &str) {
        self.pods.remove(pod);
    }

    /// Pods with something remembered (for tests and debugging).
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

/// Writes pod Events as `component` (the scheduler's name), instance `instance`.
pub struct Events {
    client: kube::Client,
    component: String,
    instance: String,
    correlator: Correlator,
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl Events {
    pub fn new(client: kube::Client, component: &str, instance: &str) -> Events {
        Events {
            client,
            component: component.to_string(),
            instance: instance.to_string(),
            correlator: Correlator::default(),
        }
    }

    /// Report `said` about a pod (written, counted, or held back by the correlator).
    pub async fn pod(&mut self, namespace: &str, name: &str, uid: &str, said: Said) {
        let now = Utc::now();
        let k = format!("{namespace}/{name}");
        let Some(w) = self.correlator.observe(&k, &said, Instant::now(), now) else {
            return;
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let (ev_name, count, first) = match w {
            Write::Create { name, first } => (name, 1, first),
            Write::Repeat { name, count, first } => {
                let patch = json!({"count": count, "lastTimestamp": ts(now)});
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => return,
                    // Expired (events have a TTL) or never written: write it afresh.
                    Err(kube::Error::Api(s)) if s.code == 404 => (name, count, first),
                    Err(e) => {
                        tracing::debug!(pod = %k, error = %e, "updating an event failed");
                        return;
                    }
                }
            }
        };
        let action = match said.reason {
            super::status::reason::SCHEDULED => "Binding",
            super::status::reason::FAILED_SCHEDULING => "Scheduling",
            _ => said.reason,
        };
        let ev = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": ev_name, "namespace": namespace},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": name,
                               "namespace": namespace, "uid": uid},
            "reason": said.reason, "message": said.message, "type": said.type_,
            "action": action,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": ts(first), "lastTimestamp": ts(now), "count": count,
        });
        let Ok(ev) = serde_json::from_value::<Event>(ev) else {
            return;
        };
        if let Err(e) = api.create(&PostParams::default(), &ev).await {
            tracing::debug!(pod = %k, error = %e, "posting an event failed");
        }
    }

    pub fn forget(&mut self, namespace: &str, name: &str) {
        self.correlator.forget(&format!("{namespace}/{name}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::status::reason;

    fn said(reason: &'static str, msg: &str) -> Said {
        Said {
            type_: "Warning",
            reason,
            message: msg.into(),
        }
    }

    /// Observe every 100 ms (a busy scheduler's cycle) for `secs`; the writes made.
    fn run(c: &mut Correlator, s: &Said, t0: Instant, from: u64, secs: u64) -> Vec<Write> {
        let wall = Utc::now();
        (from * 10..(from + secs) * 10)
            .filter_map(|i| {
                let d = Duration::from_millis(i * 100);
                c.observe(
                    "ns/p",
                    s,
                    t0 + d,
                    wall + chrono::Duration::from_std(d).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn a_pending_pod_is_one_event_whose_count_grows_slowly() {
        let mut c = Correlator::default();
        let t0 = Instant::now();
        let s = said(reason::FAILED_SCHEDULING, "0/2 nodes are available");
        let w = run(&mut c, &s, t0, 0, 3600);
        assert!(matches!(w[0], Write::Create { .. }));
        let names: std::collections::HashSet<_> = w
            .iter()
            .map(|w| match w {
                Write::Create { name, .. } | Write::Repeat { name, .. } => name.clone(),
            })
            .collect();
        assert_eq!(names.len(), 1, "one Event object");
        // 36,000 cycles: written at 0, 10, 30, 70, 150, 310 s, then every 300 s.
        assert!(w.len() >= 10 && w.len() <= 20, "{} writes", w.len());
        let Write::Repeat { count, .. } = w.last().unwrap() else {
            panic!()
        };
        assert_eq!(*count as usize, w.len());
    }

    #[test]
    fn changing_reasons_are_spaced_by_the_attempt_backoff() {
        let mut c = Correlator::default();
        let t0 = Instant::now();
        let wall = Utc::now();
        let mut writes = 0;
        for i in 0..600u64 {
            // A message that changes every cycle (60 s of 100 ms cycles).
            let s = said(reason::FAILED_SCHEDULING, &format!("attempt {i}"));
            let d = Duration::from_millis(i * 100);
            let w = wall + chrono::Duration::from_std(d).unwrap();
            writes += c.observe("ns/p", &s, t0 + d, w).is_some() as usize;
        }
        // 0, 1, 3, 7, 15 s, then every 10 s up to 60 s.
        assert!((8..=10).contains(&writes), "{writes} writes");
    }

    #[test]
    fn one_off_events_are_not_held_back_and_forget_starts_afresh() {
        let mut c = Correlator::default();
        let t0 = Instant::now();
        let wall = Utc::now();
        let pending = said(reason::FAILED_SCHEDULING, "no node fits");
        assert!(c.observe("ns/p", &pending, t0, wall).is_some());
        // A bind failure right after the attempt is still written.
        let failed = said(reason::BIND_FAILED, "node gone");
        assert!(c.observe("ns/p", &failed, t0, wall).is_some());
        // The same again at once: held back (no second object, no count churn).
        assert!(c.observe("ns/p", &failed, t0, wall).is_none());
        c.forget("ns/p");
        assert!(c.is_empty());
        assert!(matches!(
            c.observe("ns/p", &pending, t0, wall),
            Some(Write::Create { .. })
        ));
        // Another pod is independent.
        assert!(c.observe("ns/q", &pending, t0, wall).is_some());
        assert_eq!(c.len(), 2);
    }
}
