//! `run`: leader election, reflectors, and the loop that owns the cache and runs cycles.
//!
//! - [`boot`]: leader election and what is created at start-up;
//! - this module: the reflectors and the loop (cache, cycles);
//! - [`writer`]: API writes and the status task.

mod boot;
mod writer;

use boot::*;
pub use boot::{run, run_with};
use writer::*;

use super::cache::{Assumed, Cache, key};
use super::events::{Events, Said};
use super::metrics::{Metrics, PhaseLabel, QueueLabel, QueueResourceLabel, ReasonLabel};
use super::status::{StatusWriter, child_queues, reason};
use super::{Error, Options, binder, podgrouper};
use crate::decisions::{Bind, Decisions, EvictReason, GpuBinding, QueueReport};
use futures::StreamExt;
use gantry_api::kai::{PodGroup, Queue};
use gantry_api::lenient::Lenient;
use gantry_api::names;
use gantry_runtime::lease::{Lease, LeaseConfig};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc, watch};

/// What the reflectors and the spawned API tasks tell the loop.
enum Msg {
    Node(Box<watcher::Event<Node>>),
    Pod(Box<watcher::Event<Lenient<Pod>>>),
    Queue(Box<watcher::Event<Queue>>),
    Group(Box<watcher::Event<PodGroup>>),
    Class(Box<watcher::Event<PriorityClass>>),
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

const KINDS: usize = 5;
/// Grace for deleting an idle reservation pod: short, but not 0 (see `collect_reservations`).
const RESERVATION_GRACE_SECONDS: u32 = 1;

async fn reflect<K>(api: Api<K>, tx: mpsc::Sender<Msg>, wrap: fn(watcher::Event<K>) -> Msg)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut s = watcher(api, watcher::Config::default()).boxed();
    while let Some(ev) = s.next().await {
        match ev {
            Ok(ev) => {
                if tx.send(wrap(ev)).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "watch error (retrying)");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Per-kind bookkeeping of a (re)list: keys seen between Init and InitDone.
#[derive(Default)]
struct Relist {
    synced: bool,
    seen: Option<HashSet<String>>,
}

fn obj_key<K: kube::Resource>(o: &K) -> String {
    let m = o.meta();
    match &m.namespace {
        Some(ns) => key(ns, m.name.as_deref().unwrap_or_default()),
        None => m.name.clone().unwrap_or_default(),
    }
}

struct Loop {
    client: kube::Client,
    opts: Options,
    cache: Cache,
    metrics: Arc<Metrics>,
    tx: mpsc::Sender<Msg>,
    status_tx: mpsc::UnboundedSender<StatusMsg>,
    bind_slots: Arc<Semaphore>,
    api_slots: Arc<Semaphore>,
    grouping: HashSet<String>,
    deleting: HashSet<String>,
    relist: [Relist; KINDS],
    said_problem: HashSet<String>,
    usage: super::usage::UsageState,
}

async fn lead(
    client: kube::Client,
    opts: Options,
    mut shutdown: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> Result<(), Error> {
    if opts.install_crds {
        install_crds(&client).await;
    }
    if opts.create_namespaces
        && let Err(e) = gantry_runtime::ensure_namespace(&client, &opts.reservation_namespace).await
    {
        tracing::warn!(namespace = %opts.reservation_namespace, error = %e, "could not create namespace");
    }
    if opts.create_default_priority_classes {
        create_priority_classes(&client).await;
    }
    if opts.create_default_queues {
        create_default_queues(&client).await;
    }
    let (tx, mut rx) = mpsc::channel::<Msg>(4096);
    let (status_tx, status_rx) = mpsc::unbounded_channel();
    // A JoinSet aborts its tasks when dropped, so they end when `lead` returns or is dropped
    // (`run` drops it on shutdown): a detached reflector would outlive the scheduler and
    // complain when the API server goes away.
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(reflect(Api::<Node>::all(client.clone()), tx.clone(), |e| {
        Msg::Node(Box::new(e))
    }));
    // Lenient: one stored pod a typed client cannot decode must not fail every relist.
    tasks.spawn(reflect(
        Api::<Lenient<Pod>>::all(client.clone()),
        tx.clone(),
        |e| Msg::Pod(Box::new(e)),
    ));
    tasks.spawn(reflect(
        Api::<Queue>::all(client.clone()),
        tx.clone(),
        |e| Msg::Queue(Box::new(e)),
    ));
    tasks.spawn(reflect(
        Api::<PodGroup>::all(client.clone()),
        tx.clone(),
        |e| Msg::Group(Box::new(e)),
    ));
    tasks.spawn(reflect(
        Api::<PriorityClass>::all(client.clone()),
        tx.clone(),
        |e| Msg::Class(Box::new(e)),
    ));
    tasks.spawn(status_task(
        client.clone(),
        opts.scheduler_name.clone(),
        opts.identity.clone(),
        status_rx,
    ));
    let usage = super::usage::UsageState::start(
        &client,
        opts.config.usage_db_config.clone(),
        &opts.namespace,
        &mut tasks,
    )
    .await;
    let mut lp = Loop {
        usage,
        cache: Cache::new(&opts.scheduler_name, &opts.reservation_namespace),
        bind_slots: Arc::new(Semaphore::new(opts.bind_concurrency.max(1))),
        api_slots: Arc::new(Semaphore::new(opts.bind_concurrency.max(1))),
        client,
        opts,
        metrics,
        tx,
        status_tx,
        grouping: HashSet::new(),
        deleting: HashSet::new(),
        relist: Default::default(),
        said_problem: HashSet::new(),
    };
    let mut last_cycle = Instant::now();
    let mut seen_version = u64::MAX;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let res = loop {
        tokio::select! {
            m = rx.recv() => {
                let Some(m) = m else { break Ok(()) };
                lp.handle(m);
                // Drain what is queued so one cycle sees a burst of events.
                while let Ok(m) = rx.try_recv() {
                    lp.handle(m);
                }
            }
            _ = tick.tick() => {}
            _ = shutdown.changed() => {
                if *shutdown.borrow() { break Ok(()); }
            }
        }
        if !lp.relist.iter().all(|r| r.synced) {
            continue; // never decide on a partial view (restart safety)
        }
        let since = last_cycle.elapsed();
        let dirty = lp.cache.version != seen_version;
        if (dirty && since >= Duration::from_millis(100)) || since >= lp.opts.cycle_period {
            seen_version = lp.cache.version;
            last_cycle = Instant::now();
            lp.cycle();
            lp.metrics.set_ready(true);
        }
    };
    drop(tasks);
    res
}

impl Loop {
    fn handle(&mut self, m: Msg) {
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

    fn pod_event(&self, k: &str, type_: &'static str, reason: &'static str, message: String) {
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

    fn cycle(&mut self) {
        let t0 = Instant::now();
        self.cache.input.now = chrono::Utc::now().timestamp();
        self.usage.apply(&mut self.cache.input);
        let snap = crate::Snapshot::build(&self.cache.input);
        let t1 = Instant::now();
        let d = crate::schedule(&snap, &self.opts.config);
        let t2 = Instant::now();
        drop(snap);
        self.usage.record(&self.cache.input, &d.queues);
        self.apply(d);
        self.report_problems();
        self.group_pods();
        self.collect_reservations();
        let t3 = Instant::now();
        tracing::debug!(
            pods = self.cache.input.pods.len(),
            snapshot = ?(t1 - t0),
            actions = ?(t2 - t1),
            apply = ?(t3 - t2),
            binds_in_flight = self.cache.assumed.len(),
            ungrouped = self.cache.ungrouped.len(),
            "cycle"
        );
        let ph = |p: &str| PhaseLabel { phase: p.into() };
        self.metrics
            .phase_seconds
            .get_or_create(&ph("snapshot"))
            .observe((t1 - t0).as_secs_f64());
        self.metrics
            .phase_seconds
            .get_or_create(&ph("actions"))
            .observe((t2 - t1).as_secs_f64());
        self.metrics
            .phase_seconds
            .get_or_create(&ph("apply"))
            .observe((t3 - t2).as_secs_f64());
        self.metrics.cycle_seconds.observe((t3 - t0).as_secs_f64());
    }

    /// Pods of ours the scheduler cannot consider at all: say why, once.
    fn report_problems(&mut self) {
        let now = self.cache.input.now;
        let mut out = Vec::new();
        for (k, c, p) in self.cache.problems() {
            out.push((k.to_string(), p.to_string()));
            let _ = c;
        }
        for (k, c) in &self.cache.meta {
            if c.ours
                && c.input.node.is_none()
                && c.problem.is_none()
                && !c.input.pod_group.is_empty()
                && now - c.input.creation > 5
                && self
                    .cache
                    .pod_group(&c.input.namespace, &c.input.pod_group)
                    .is_none()
            {
                out.push((
                    k.clone(),
                    format!(
                        "pod {k}: podgroup {:?} (annotation {}) does not exist",
                        c.input.pod_group,
                        names::ANNOTATION_POD_GROUP_NAME
                    ),
                ));
            }
        }
        for (k, msg) in out {
            if self.said_problem.insert(format!("{k}\u{0}{msg}")) {
                self.pod_event(&k, "Warning", reason::INVALID, msg);
            }
        }
    }

    fn group_pods(&mut self) {
        let todo: Vec<String> = self
            .cache
            .ungrouped
            .iter()
            .filter(|k| !self.grouping.contains(*k))
            .cloned()
            .collect();
        for k in todo {
            let Some(pod) = self.cache.meta.get(&k).cloned() else {
                continue;
            };
            self.grouping.insert(k.clone());
            let (client, tx, slots) =
                (self.client.clone(), self.tx.clone(), self.api_slots.clone());
            tokio::spawn(async move {
                let _permit = slots.acquire_owned().await;
                let result = group_one(&client, &pod).await;
                let _ = tx.send(Msg::Grouped { key: k, result }).await;
            });
        }
    }

    /// Remove reservation pods whose GPU has no fractional tenants (bound or being bound).
    fn collect_reservations(&mut self) {
        let now = self.cache.input.now;
        let idle: Vec<(String, String, String)> = self
            .cache
            .reservations
            .iter()
            .filter(|(g, r)| {
                (r.phase_failed || now - r.created > 5) && self.cache.group_tenants(g) == 0
            })
            .map(|(g, r)| (g.clone(), r.namespace.clone(), r.name.clone()))
            .collect();
        for (_, ns, name) in idle {
            let k = key(&ns, &name);
            if !self.deleting.insert(k.clone()) {
                continue;
            }
            let (client, tx) = (self.client.clone(), self.tx.clone());
            tokio::spawn(async move {
                let api: Api<Pod> = Api::namespaced(client, &ns);
                // Graceful, so the pod stays (Terminating, a Releasing holder of its GPU)
                // until the kubelet has stopped it and released the device; with grace 0 it
                // would vanish at once while the node still holds the device.
                let dp = DeleteParams {
                    grace_period_seconds: Some(RESERVATION_GRACE_SECONDS),
                    ..Default::default()
                };
                if let Err(e) = api.delete(&name, &dp).await
                    && !matches!(&e, kube::Error::Api(s) if s.code == 404)
                {
                    tracing::warn!(pod = %name, error = %e, "removing reservation pod failed");
                }
                let _ = tx.send(Msg::Deleted { key: k }).await;
            });
        }
    }
}
