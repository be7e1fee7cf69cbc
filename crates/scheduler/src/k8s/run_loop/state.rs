//! The loop's state ([`Loop`]) and what it is told ([`Msg`]): watch events folded into the
//! cache, and the results that the spawned API tasks report back.

use super::status_task::StatusMsg;
use crate::k8s::cache::{Cache, key};
use crate::k8s::events::Said;
use crate::k8s::metrics::Metrics;
use crate::k8s::options::Options;
use crate::k8s::status::reason;
use gantry_api::kai::{PodGroup, Queue, Topology};
use gantry_api::lenient::Lenient;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::runtime::watcher;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{Semaphore, mpsc};

/// What the reflectors and the spawned API tasks tell the loop.
pub(super) enum Msg {
    Node(Box<watcher::Event<Node>>),
    Pod(Box<watcher::Event<Lenient<Pod>>>),
    Queue(Box<watcher::Event<Queue>>),
    Group(Box<watcher::Event<PodGroup>>),
    Class(Box<watcher::Event<PriorityClass>>),
    Topology(Box<watcher::Event<Topology>>),
    Bound {
        key: String,
        node: String,
        result: Result<(), String>,
        started: Instant,
    },
    Grouped {
        key: String,
        result: Result<Box<PodGroup>, String>,
    },
    Deleted {
        key: String,
    },
}

const KINDS: usize = 6;

/// Per-kind bookkeeping of a (re)list: keys seen between Init and InitDone.
#[derive(Default)]
pub(super) struct Relist {
    pub(super) synced: bool,
    seen: Option<HashSet<String>>,
}

fn obj_key<K: kube::Resource>(o: &K) -> String {
    let m = o.meta();
    match &m.namespace {
        Some(ns) => key(ns, m.name.as_deref().unwrap_or_default()),
        None => m.name.clone().unwrap_or_default(),
    }
}

pub(super) struct Loop {
    pub(super) client: kube::Client,
    pub(super) opts: Options,
    pub(super) cache: Cache,
    pub(super) metrics: Arc<Metrics>,
    pub(super) tx: mpsc::Sender<Msg>,
    pub(super) status_tx: mpsc::UnboundedSender<StatusMsg>,
    pub(super) bind_slots: Arc<Semaphore>,
    pub(super) api_slots: Arc<Semaphore>,
    pub(super) grouping: HashSet<String>,
    pub(super) deleting: HashSet<String>,
    pub(super) relist: [Relist; KINDS],
    pub(super) said_problem: HashSet<String>,
    pub(super) usage: crate::k8s::usage::UsageState,
}

impl Loop {
    pub(super) fn handle(&mut self, m: Msg) {
        match m {
            Msg::Node(ev) => self.reflect(0, *ev, |c, n| c.apply_node(n), |c, k| c.delete_node(k)),
            Msg::Pod(ev) => {
                if let watcher::Event::Delete(p) = &*ev {
                    let m = kube::Resource::meta(p);
                    let _ = self.status_tx.send(StatusMsg::Forget {
                        namespace: m.namespace.clone().unwrap_or_default(),
                        name: m.name.clone().unwrap_or_default(),
                    });
                }
                self.reflect(
                1,
                *ev,
                |c, p| match p {
                    Lenient::Decoded(p) => c.apply_pod(p),
                    bad => match bad.clone().salvaged() {
                        Some(p) => c.apply_pod(&p),
                        None => {
                            tracing::warn!(pod = ?kube::Resource::meta(bad).name, "pod does not decode; ignored")
                        }
                    },
                },
                |c, k| {
                    if let Some((ns, n)) = k.split_once('/') {
                        c.delete_pod(ns, n)
                    }
                },
            )
            }
            Msg::Topology(ev) => self.reflect(
                5,
                *ev,
                |c, t| c.apply_topology(t),
                |c, k| c.delete_topology(k),
            ),
            Msg::Queue(ev) => {
                self.reflect(2, *ev, |c, q| c.apply_queue(q), |c, k| c.delete_queue(k))
            }
            Msg::Group(ev) => self.reflect(
                3,
                *ev,
                |c, g| c.apply_pod_group(g),
                |c, k| {
                    if let Some((ns, n)) = k.split_once('/') {
                        c.delete_pod_group(ns, n)
                    }
                },
            ),
            Msg::Class(ev) => self.reflect(
                4,
                *ev,
                |c, pc| {
                    if let Some(n) = &pc.metadata.name {
                        c.apply_priority_class(n, pc.value)
                    }
                },
                |_, _| {},
            ),
            Msg::Bound {
                key,
                node,
                result,
                started,
            } => match result {
                Ok(()) => {
                    self.metrics.binds.inc();
                    self.metrics
                        .bind_seconds
                        .observe(started.elapsed().as_secs_f64());
                    let msg = format!("Successfully assigned {key} to {node}");
                    self.pod_event(&key, "Normal", reason::SCHEDULED, msg);
                    if let Some((ns, n)) = key.split_once('/') {
                        let _ = self.status_tx.send(StatusMsg::Forget {
                            namespace: ns.into(),
                            name: n.into(),
                        });
                    }
                }
                Err(e) => {
                    self.metrics.bind_failures.inc();
                    tracing::warn!(pod = %key, error = %e, "bind failed; the pod is pending again");
                    self.cache.forget(&key);
                    self.pod_event(&key, "Warning", reason::BIND_FAILED, e);
                }
            },
            Msg::Grouped { key, result } => {
                self.grouping.remove(&key);
                match result {
                    // Use the group at once rather than waiting for both watch events.
                    Ok(pg) => {
                        self.cache.apply_pod_group(&pg);
                        if let Some(name) = &pg.metadata.name {
                            self.cache.set_pod_group(&key, name);
                        }
                    }
                    Err(e) => self.pod_event(&key, "Warning", reason::INVALID, e),
                }
            }
            Msg::Deleted { key } => {
                self.deleting.remove(&key);
            }
        }
    }

    fn reflect<K: kube::Resource>(
        &mut self,
        kind: usize,
        ev: watcher::Event<K>,
        apply: impl Fn(&mut Cache, &K),
        delete: impl Fn(&mut Cache, &str),
    ) {
        match ev {
            watcher::Event::Init => self.relist[kind].seen = Some(HashSet::new()),
            watcher::Event::InitApply(o) => {
                if let Some(s) = self.relist[kind].seen.as_mut() {
                    s.insert(obj_key(&o));
                }
                apply(&mut self.cache, &o);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relist[kind].seen.take() {
                    let stale: Vec<String> = match kind {
                        0 => self
                            .cache
                            .input
                            .nodes
                            .iter()
                            .map(|n| n.name.clone())
                            .collect(),
                        1 => self.cache.meta.keys().cloned().collect(),
                        2 => self.cache.queue_names().map(str::to_string).collect(),
                        5 => self
                            .cache
                            .input
                            .topologies
                            .iter()
                            .map(|t| t.name.clone())
                            .collect(),
                        3 => self
                            .cache
                            .input
                            .pod_groups
                            .iter()
                            .map(|g| key(&g.namespace, &g.name))
                            .collect(),
                        _ => Vec::new(),
                    };
                    for k in stale.into_iter().filter(|k| !seen.contains(k)) {
                        delete(&mut self.cache, &k);
                    }
                }
                if kind == 1 {
                    self.cache.settle_order();
                }
                self.relist[kind].synced = true;
            }
            watcher::Event::Apply(o) => apply(&mut self.cache, &o),
            watcher::Event::Delete(o) => {
                let k = obj_key(&o);
                delete(&mut self.cache, &k);
            }
        }
    }

    pub(super) fn pod_event(
        &self,
        k: &str,
        type_: &'static str,
        reason: &'static str,
        message: String,
    ) {
        let Some((ns, n)) = k.split_once('/') else {
            return;
        };
        let uid = self
            .cache
            .meta
            .get(k)
            .map(|m| m.uid.clone())
            .unwrap_or_default();
        let _ = self.status_tx.send(StatusMsg::PodEvent {
            namespace: ns.into(),
            name: n.into(),
            uid,
            said: Said {
                type_,
                reason: reason.to_string(),
                message,
            },
        });
    }
}
