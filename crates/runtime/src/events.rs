//! The one Events recorder every Gantry component writes through (scheduler, operator, node
//! agents, the sim's controllers and kubelet), counting and spacing repeats the way
//! client-go's recorder and kube-scheduler do: one Event object per (object, type, reason,
//! message), a repeat raises its `count` and `lastTimestamp` instead of adding an object,
//! and repeats are spaced out (growing gaps) so a condition that lasts an hour is not
//! written every loop. Reasons marked as *attempts* (kube-scheduler's `FailedScheduling`)
//! are further spaced by a per-object backoff however often their message changes.
//!
//! [`Correlator`] decides (pure, clocks passed in); [`Recorder`] performs the writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};

/// Gap before a repeat of one event updates its count: it doubles from the first to the
/// last value (kube-scheduler retries an unschedulable pod at most every 5 minutes when
/// nothing changes).
const REPEAT_FIRST: Duration = Duration::from_secs(10);
const REPEAT_MAX: Duration = Duration::from_secs(300);
/// Attempts on one object are reported no closer than this backoff, doubling from 1 s to
/// 10 s (kube-scheduler's pod backoff).
const ATTEMPT_FIRST: Duration = Duration::from_secs(1);
const ATTEMPT_MAX: Duration = Duration::from_secs(10);
/// Cluster-scoped objects (Nodes) have their Events in `default`, as client-go does.
const CLUSTER_EVENT_NAMESPACE: &str = "default";

/// What one Event says.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Said {
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    pub reason: String,
    pub message: String,
}

impl Said {
    pub fn normal(reason: impl Into<String>, message: impl Into<String>) -> Said {
        Said {
            type_: "Normal",
            reason: reason.into(),
            message: message.into(),
        }
    }
    pub fn warning(reason: impl Into<String>, message: impl Into<String>) -> Said {
        Said {
            type_: "Warning",
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// One write to perform.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// A new Event object.
    Create { name: String, first: SystemTime },
    /// The same Event seen again: set its count and last timestamp.
    Repeat {
        name: String,
        count: i32,
        first: SystemTime,
    },
}

struct Record {
    name: String,
    count: i32,
    first: SystemTime,
    gap: Duration,
    next: Instant,
}

#[derive(Default)]
struct ObjectLog {
    records: HashMap<Said, Record>,
    attempts: u32,
    next_attempt: Option<Instant>,
}

/// Decides, per object, whether an observation becomes a new Event, a count update, or
/// nothing.
#[derive(Default)]
pub struct Correlator {
    objects: HashMap<String, ObjectLog>,
    attempt_reasons: Vec<String>,
    seq: u64,
}

impl Correlator {
    /// A correlator that spaces `reasons` by the attempt backoff.
    pub fn with_attempt_reasons(reasons: &[&str]) -> Correlator {
        Correlator {
            attempt_reasons: reasons.iter().map(|r| r.to_string()).collect(),
            ..Correlator::default()
        }
    }

    /// `key` names the object (`kind/namespace/name`); `name` is its name, the Event
    /// name's prefix; `now` and `wall` are the same instant on both clocks.
    pub fn observe(
        &mut self,
        key: &str,
        name: &str,
        said: &Said,
        now: Instant,
        wall: SystemTime,
    ) -> Option<Write> {
        let attempt = self.attempt_reasons.contains(&said.reason);
        let log = self.objects.entry(key.to_string()).or_default();
        if attempt && log.next_attempt.is_some_and(|t| now < t) {
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
                let nanos = wall
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                let ev_name = format!("{name}.{:x}", nanos.wrapping_add(self.seq));
                log.records.insert(
                    said.clone(),
                    Record {
                        name: ev_name.clone(),
                        count: 1,
                        first: wall,
                        gap: REPEAT_FIRST,
                        next: now + REPEAT_FIRST,
                    },
                );
                Write::Create {
                    name: ev_name,
                    first: wall,
                }
            }
        };
        if attempt {
            log.attempts += 1;
            let backoff = ATTEMPT_FIRST * 2u32.saturating_pow(log.attempts - 1);
            log.next_attempt = Some(now + backoff.min(ATTEMPT_MAX));
        }
        Some(write)
    }

    /// Forget an object (done with, or deleted): a later spell starts afresh.
    pub fn forget(&mut self, key: &str) {
        self.objects.remove(key);
    }

    /// Objects with something remembered (for tests and debugging).
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// The object an Event is about.
pub fn object_ref(
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    uid: Option<&str>,
) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some(kind.into()),
        namespace: namespace.map(str::to_string),
        name: Some(name.into()),
        uid: uid.filter(|u| !u.is_empty()).map(str::to_string),
        ..ObjectReference::default()
    }
}

fn key_of(o: &ObjectReference) -> String {
    format!(
        "{}/{}/{}",
        o.kind.as_deref().unwrap_or(""),
        o.namespace.as_deref().unwrap_or(""),
        o.name.as_deref().unwrap_or("")
    )
}

fn time(t: SystemTime) -> Time {
    Time(Timestamp::try_from(t).unwrap_or_else(|_| Timestamp::now()))
}

struct Shared {
    client: kube::Client,
    component: String,
    correlator: Mutex<Correlator>,
}

/// Writes Events as a component. Cheap to clone: clones (and [`Recorder::for_node`]
/// handles) share one correlator, so every task of a component counts into the same Events.
#[derive(Clone)]
pub struct Recorder {
    shared: Arc<Shared>,
    instance: String,
    host: Option<String>,
}

impl Recorder {
    /// Events from `component`, this replica `instance`.
    pub fn new(client: kube::Client, component: &str, instance: &str) -> Recorder {
        Recorder::with_attempt_reasons(client, component, instance, &[])
    }

    /// A recorder that spaces `reasons` by the attempt backoff (kube-scheduler's
    /// `FailedScheduling`).
    pub fn with_attempt_reasons(
        client: kube::Client,
        component: &str,
        instance: &str,
        reasons: &[&str],
    ) -> Recorder {
        Recorder {
            shared: Arc::new(Shared {
                client,
                component: component.to_string(),
                correlator: Mutex::new(Correlator::with_attempt_reasons(reasons)),
            }),
            instance: instance.to_string(),
            host: None,
        }
    }

    /// A node component's recorder: `reportingInstance` and `source.host` are the node.
    pub fn on_node(client: kube::Client, component: &str, node: &str) -> Recorder {
        Recorder::new(client, component, node).for_node(node)
    }

    /// The same recorder (shared counts) reporting from `node`, as a kubelet does
    /// (`reportingInstance` and `source.host` are the node).
    pub fn for_node(&self, node: &str) -> Recorder {
        Recorder {
            shared: self.shared.clone(),
            instance: node.to_string(),
            host: Some(node.to_string()),
        }
    }

    /// Report `said` about `regarding` with an optional `action` (written, counted, or held
    /// back by the correlator). A failed write is logged at debug level, never fatal.
    pub async fn publish(&self, regarding: &ObjectReference, said: &Said, action: Option<&str>) {
        if let Err(e) = self.try_publish(regarding, said, action).await {
            tracing::debug!(object = %key_of(regarding), reason = %said.reason, error = %e, "recording an event failed");
        }
    }

    /// [`Recorder::publish`], returning the API error.
    pub async fn try_publish(
        &self,
        regarding: &ObjectReference,
        said: &Said,
        action: Option<&str>,
    ) -> Result<(), kube::Error> {
        let wall = SystemTime::now();
        let key = key_of(regarding);
        let name = regarding.name.as_deref().unwrap_or("");
        let write = {
            let mut c = self
                .shared
                .correlator
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            c.observe(&key, name, said, Instant::now(), wall)
        };
        let Some(write) = write else {
            return Ok(());
        };
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| CLUSTER_EVENT_NAMESPACE.to_string());
        let api: Api<Event> = Api::namespaced(self.shared.client.clone(), &namespace);
        let (ev_name, count, first) = match write {
            Write::Create { name, first } => (name, 1, first),
            Write::Repeat { name, count, first } => {
                let patch = RepeatPatch {
                    count,
                    last_timestamp: time(wall),
                };
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => return Ok(()),
                    // Expired (Events have a TTL) or never written: write it afresh.
                    Err(kube::Error::Api(s)) if s.code == 404 => (name, count, first),
                    Err(e) => return Err(e),
                }
            }
        };
        let ev = Event {
            metadata: ObjectMeta {
                name: Some(ev_name),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            involved_object: regarding.clone(),
            reason: Some(said.reason.clone()),
            message: Some(said.message.clone()),
            type_: Some(said.type_.to_string()),
            action: action.map(str::to_string),
            count: Some(count),
            first_timestamp: Some(time(first)),
            last_timestamp: Some(time(wall)),
            reporting_component: Some(self.shared.component.clone()),
            reporting_instance: Some(self.instance.clone()),
            source: Some(EventSource {
                component: Some(self.shared.component.clone()),
                host: self.host.clone(),
            }),
            ..Event::default()
        };
        api.create(&PostParams::default(), &ev).await.map(|_| ())
    }

    /// Forget what was said about an object (bound, deleted): its next Event is a new one.
    pub fn forget(&self, regarding: &ObjectReference) {
        let mut c = self
            .shared
            .correlator
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        c.forget(&key_of(regarding));
    }
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct RepeatPatch {
    count: i32,
    last_timestamp: Time,
}

#[cfg(test)]
mod tests {
    use super::*;

    const ATTEMPT: &str = "FailedScheduling";

    fn c() -> Correlator {
        Correlator::with_attempt_reasons(&[ATTEMPT])
    }

    /// Observe every 100 ms (a busy loop) for `secs`; the writes made.
    fn run(c: &mut Correlator, s: &Said, t0: Instant, secs: u64) -> Vec<Write> {
        let wall = SystemTime::now();
        (0..secs * 10)
            .filter_map(|i| {
                let d = Duration::from_millis(i * 100);
                c.observe("Pod/ns/p", "p", s, t0 + d, wall + d)
            })
            .collect()
    }

    #[test]
    fn a_lasting_condition_is_one_event_whose_count_grows_slowly() {
        let mut c = c();
        let s = Said::warning(ATTEMPT, "0/2 nodes are available");
        let w = run(&mut c, &s, Instant::now(), 3600);
        assert!(matches!(&w[0], Write::Create { name, .. } if name.starts_with("p.")));
        let names: std::collections::HashSet<_> = w
            .iter()
            .map(|w| match w {
                Write::Create { name, .. } | Write::Repeat { name, .. } => name.clone(),
            })
            .collect();
        assert_eq!(names.len(), 1, "one Event object");
        // 36,000 observations: written at 0, 10, 30, 70, 150, 310 s, then every 300 s.
        assert!(w.len() >= 10 && w.len() <= 20, "{} writes", w.len());
        let Write::Repeat { count, .. } = w.last().unwrap() else {
            panic!("the last write is a repeat")
        };
        assert_eq!(*count as usize, w.len());
    }

    #[test]
    fn changing_attempt_messages_are_spaced_by_the_attempt_backoff() {
        let mut c = c();
        let t0 = Instant::now();
        let wall = SystemTime::now();
        let mut writes = 0;
        for i in 0..600u64 {
            // A message that changes every 100 ms, for 60 s.
            let s = Said::warning(ATTEMPT, format!("attempt {i}"));
            let d = Duration::from_millis(i * 100);
            writes += c.observe("Pod/ns/p", "p", &s, t0 + d, wall + d).is_some() as usize;
        }
        // 0, 1, 3, 7, 15 s, then every 10 s up to 60 s.
        assert!((8..=10).contains(&writes), "{writes} writes");
        // Without the attempt marking every new message is its own Event.
        let mut plain = Correlator::default();
        let n = (0..50u64)
            .filter(|i| {
                let s = Said::warning(ATTEMPT, format!("attempt {i}"));
                plain.observe("Pod/ns/p", "p", &s, t0, wall).is_some()
            })
            .count();
        assert_eq!(n, 50);
    }

    #[test]
    fn one_off_events_are_not_held_back_and_forget_starts_afresh() {
        let mut c = c();
        let t0 = Instant::now();
        let wall = SystemTime::now();
        let pending = Said::warning(ATTEMPT, "no node fits");
        assert!(c.observe("Pod/ns/p", "p", &pending, t0, wall).is_some());
        // Another reason right after the attempt is still written.
        let failed = Said::warning("BindFailed", "node gone");
        assert!(c.observe("Pod/ns/p", "p", &failed, t0, wall).is_some());
        // The same again at once: held back (no second object, no count churn).
        assert!(c.observe("Pod/ns/p", "p", &failed, t0, wall).is_none());
        c.forget("Pod/ns/p");
        assert!(c.is_empty());
        assert!(matches!(
            c.observe("Pod/ns/p", "p", &pending, t0, wall),
            Some(Write::Create { .. })
        ));
        // Another object is independent.
        assert!(c.observe("Pod/ns/q", "q", &pending, t0, wall).is_some());
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn references_name_the_object_and_cluster_scoped_ones_have_no_namespace() {
        let n = object_ref("Node", None, "gpu-a", Some("u1"));
        assert_eq!(key_of(&n), "Node//gpu-a");
        assert_eq!(n.uid.as_deref(), Some("u1"));
        let p = object_ref("Pod", Some("ns"), "p", Some(""));
        assert_eq!((key_of(&p), p.uid), ("Pod/ns/p".to_string(), None));
    }
}
