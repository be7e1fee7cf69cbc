//! `run`: leader election, reflectors, and the loop that owns the cache and runs cycles.

use super::cache::{Assumed, Cache, key};
use super::metrics::{Metrics, PhaseLabel, QueueLabel, QueueResourceLabel, ReasonLabel};
use super::status::{Events, StatusWriter, reason};
use super::{Error, Options, binder, leader, podgrouper};
use crate::decisions::{Bind, Decisions, EvictReason, GpuBinding, QueueReport};
use futures::StreamExt;
use gantry_api::kai::{PodGroup, Queue};
use gantry_api::names;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
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

/// Run the scheduler until `shutdown` becomes true. With leader election, waits for the
/// Lease first and returns [`Error::LostLease`] if another replica takes it.
pub async fn run(
    client: kube::Client,
    opts: Options,
    shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    let metrics = Metrics::new();
    run_with(client, opts, shutdown, metrics).await
}

/// [`run`] with a caller-provided metrics registry.
pub async fn run_with(
    client: kube::Client,
    opts: Options,
    mut shutdown: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> Result<(), Error> {
    if let Some(addr) = opts.metrics_address {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Metrics { addr, source })?;
        tokio::spawn(super::metrics::serve(l, metrics.clone(), shutdown.clone()));
    }
    let lease = leader::LeaseConfig {
        namespace: opts.namespace.clone(),
        name: names::SCHEDULER_LEASE.to_string(),
        identity: opts.identity.clone(),
        duration: opts.lease_duration,
    };
    let lease_err = |source| Error::Lease {
        namespace: lease.namespace.clone(),
        name: lease.name.clone(),
        source,
    };
    if opts.leader_elect {
        if opts.create_namespaces {
            ensure_namespace(&client, &opts.namespace).await;
        }
        loop {
            if *shutdown.borrow() {
                return Ok(());
            }
            if leader::try_acquire(&client, &lease)
                .await
                .map_err(lease_err)?
            {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(opts.lease_duration / 5) => {}
                _ = shutdown.changed() => {}
            }
        }
        tracing::info!(identity = %lease.identity, "acquired the scheduler lease");
    }
    metrics.leader.set(1);
    // Renew in the background; a failed renewal ends leadership.
    let (lost_tx, mut lost_rx) = watch::channel(false);
    let renew = if opts.leader_elect {
        let (c, l, sd) = (client.clone(), lease.clone(), shutdown.clone());
        Some(tokio::spawn(async move {
            let mut last_ok = Instant::now();
            loop {
                tokio::time::sleep(l.duration / 3).await;
                if *sd.borrow() {
                    return;
                }
                match leader::try_acquire(&c, &l).await {
                    Ok(true) => last_ok = Instant::now(),
                    Ok(false) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "renewing the scheduler lease failed");
                        if last_ok.elapsed() > l.duration {
                            break;
                        }
                    }
                }
            }
            let _ = lost_tx.send(true);
        }))
    } else {
        None
    };
    let mut stop = shutdown.clone();
    let res = tokio::select! {
        r = lead(client.clone(), opts.clone(), stop.clone(), metrics.clone()) => r,
        _ = lost_rx.wait_for(|v| *v) => Err(Error::LostLease { namespace: lease.namespace.clone(), name: lease.name.clone() }),
        _ = stop.wait_for(|v| *v) => Ok(()),
    };
    metrics.leader.set(0);
    metrics.set_ready(false);
    if let Some(r) = renew {
        r.abort();
    }
    if opts.leader_elect && !matches!(res, Err(Error::LostLease { .. })) {
        leader::release(&client, &lease).await;
    }
    res
}

async fn ensure_namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Result<Namespace, _> = serde_json::from_value(json!({"metadata": {"name": name}}));
    if let Ok(ns) = ns
        && let Err(e) = api.create(&PostParams::default(), &ns).await
        && !matches!(&e, kube::Error::Api(s) if s.code == 409)
    {
        tracing::warn!(namespace = name, error = %e, "could not create namespace");
    }
}

async fn install_crds(client: &kube::Client) {
    let Ok(all) = gantry_api::crds::all_crds() else {
        return;
    };
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in all.into_iter().filter(|c| c.spec.group == names::KAI_GROUP) {
        if let Err(e) = api.create(&PostParams::default(), &crd).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 409)
        {
            tracing::warn!(crd = ?crd.metadata.name, error = %e, "could not install CRD");
        }
    }
}

async fn create_default_queues(client: &kube::Client) {
    let api: Api<Queue> = Api::all(client.clone());
    let open = json!({"quota": 0, "limit": -1, "overQuotaWeight": 1});
    for (name, parent) in [
        (names::DEFAULT_PARENT_QUEUE, None),
        (names::DEFAULT_QUEUE, Some(names::DEFAULT_PARENT_QUEUE)),
    ] {
        let mut spec = json!({"resources": {"gpu": open, "cpu": open, "memory": open}});
        if let Some(p) = parent {
            spec["parentQueue"] = json!(p);
        }
        let q: Result<Queue, _> = serde_json::from_value(json!({
            "apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": name}, "spec": spec,
        }));
        if let Ok(q) = q
            && let Err(e) = api.create(&PostParams::default(), &q).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 409)
        {
            tracing::warn!(queue = name, error = %e, "could not create default queue");
        }
    }
}

/// KAI's PriorityClasses (`train` 50, `build-preemptible` 75, `build` 100, `inference` 125),
/// created when missing so KAI's examples and docs work as written. Existing classes of those
/// names are left as they are.
async fn create_priority_classes(client: &kube::Client) {
    let api: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in names::KAI_PRIORITY_CLASSES {
        let preemptible = value < names::NON_PREEMPTIBLE_PRIORITY_THRESHOLD;
        let pc: Result<PriorityClass, _> = serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "globalDefault": false,
            "description": format!(
                "KAI workload priority {name} ({})",
                if preemptible { "preemptible" } else { "non-preemptible, runs only within its queue's quota" }
            ),
        }));
        if let Ok(pc) = pc
            && let Err(e) = api.create(&PostParams::default(), &pc).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 409)
        {
            tracing::warn!(priority_class = name, error = %e, "could not create KAI priority class");
        }
    }
}

/// What the reflectors and the spawned API tasks tell the loop.
enum Msg {
    Node(Box<watcher::Event<Node>>),
    Pod(Box<watcher::Event<Pod>>),
    Queue(Box<watcher::Event<Queue>>),
    Group(Box<watcher::Event<PodGroup>>),
    Class(Box<watcher::Event<PriorityClass>>),
    Bound {
        key: String,
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
}

/// Work for the status task (one writer, in order, deduplicated there).
enum StatusMsg {
    PodEvent {
        namespace: String,
        name: String,
        uid: String,
        type_: &'static str,
        reason: &'static str,
        message: String,
    },
    Forget {
        namespace: String,
        name: String,
    },
    Queue(QueueReport),
    Group {
        namespace: String,
        name: String,
        unschedulable: Option<String>,
    },
}

async fn status_task(client: kube::Client, mut rx: mpsc::UnboundedReceiver<StatusMsg>) {
    let mut events = Events::new(client.clone());
    let mut status = StatusWriter::new(client);
    while let Some(m) = rx.recv().await {
        match m {
            StatusMsg::PodEvent {
                namespace,
                name,
                uid,
                type_,
                reason,
                message,
            } => {
                events
                    .pod(&namespace, &name, &uid, type_, reason, &message)
                    .await
            }
            StatusMsg::Forget { namespace, name } => events.forget(&namespace, &name),
            StatusMsg::Queue(r) => status.queue(&r).await,
            StatusMsg::Group {
                namespace,
                name,
                unschedulable,
            } => {
                status
                    .pod_group(&namespace, &name, unschedulable.as_deref())
                    .await
            }
        }
    }
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
    if opts.create_namespaces {
        ensure_namespace(&client, &opts.reservation_namespace).await;
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
    tasks.spawn(reflect(Api::<Pod>::all(client.clone()), tx.clone(), |e| {
        Msg::Pod(Box::new(e))
    }));
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
    tasks.spawn(status_task(client.clone(), status_rx));
    let mut lp = Loop {
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
            Msg::Pod(ev) => self.reflect(
                1,
                *ev,
                |c, p| c.apply_pod(p),
                |c, k| {
                    if let Some((ns, n)) = k.split_once('/') {
                        c.delete_pod(ns, n)
                    }
                },
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
                result,
                started,
            } => match result {
                Ok(()) => {
                    self.metrics.binds.inc();
                    self.metrics
                        .bind_seconds
                        .observe(started.elapsed().as_secs_f64());
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
            type_,
            reason,
            message,
        });
    }

    fn cycle(&mut self) {
        let t0 = Instant::now();
        self.cache.input.now = chrono::Utc::now().timestamp();
        let snap = crate::Snapshot::build(&self.cache.input);
        let t1 = Instant::now();
        let d = crate::schedule(&snap, &self.opts.config);
        let t2 = Instant::now();
        drop(snap);
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

    fn apply(&mut self, d: Decisions) {
        for b in d.binds.iter().filter(|b| !b.pipelined) {
            self.dispatch_bind(b);
        }
        for e in &d.evictions {
            let k = key(&e.namespace, &e.name);
            if !self.deleting.insert(k.clone()) {
                continue;
            }
            let (rsn, label) = match &e.reason {
                EvictReason::Reclaim { .. } => (reason::RECLAIMED, "reclaim"),
                EvictReason::Preempt { .. } => (reason::PREEMPTED, "preempt"),
                EvictReason::Consolidation { .. } => (reason::CONSOLIDATED, "consolidation"),
                EvictReason::StaleGang { .. } => (reason::STALE, "stale-gang"),
            };
            self.metrics
                .evictions
                .get_or_create(&ReasonLabel {
                    reason: label.into(),
                })
                .inc();
            self.pod_event(&k, "Warning", rsn, format!("Evicted: {}", e.reason));
            self.cache.evicted(&k);
            let (client, tx, ns, name) = (
                self.client.clone(),
                self.tx.clone(),
                e.namespace.clone(),
                e.name.clone(),
            );
            tokio::spawn(async move {
                let api: Api<Pod> = Api::namespaced(client, &ns);
                if let Err(err) = api.delete(&name, &DeleteParams::default()).await
                    && !matches!(&err, kube::Error::Api(s) if s.code == 404)
                {
                    tracing::warn!(pod = %name, error = %err, "evicting failed");
                }
                let _ = tx
                    .send(Msg::Deleted {
                        key: key(&ns, &name),
                    })
                    .await;
            });
        }
        let mut group_msgs: HashMap<(String, String), Option<String>> = HashMap::new();
        let mut pending_per_queue: HashMap<String, f64> = HashMap::new();
        for u in &d.unschedulable {
            let k = key(&u.namespace, &u.name);
            let Some(meta) = self.cache.meta.get(&k) else {
                continue;
            };
            if let Some(g) = self
                .cache
                .pod_group(&meta.input.namespace, &meta.input.pod_group)
            {
                *pending_per_queue.entry(g.queue.clone()).or_default() += 1.0;
                group_msgs.insert(
                    (g.namespace.clone(), g.name.clone()),
                    Some(u.message.clone()),
                );
            }
            self.pod_event(&k, "Warning", reason::UNSCHEDULABLE, u.message.clone());
        }
        for b in &d.binds {
            if let Some(meta) = self.cache.meta.get(&key(&b.namespace, &b.name)) {
                group_msgs
                    .entry((meta.input.namespace.clone(), meta.input.pod_group.clone()))
                    .or_insert(None);
            }
        }
        for ((ns, name), msg) in group_msgs {
            let _ = self.status_tx.send(StatusMsg::Group {
                namespace: ns,
                name,
                unschedulable: msg,
            });
        }
        for m in &d.stale_marks {
            let patch = json!({"metadata": {"annotations": {
                names::ANNOTATION_STALE_PODGROUP_TIMESTAMP: m.since.and_then(|s| chrono::DateTime::from_timestamp(s, 0)).map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            }}});
            let api: Api<PodGroup> = Api::namespaced(self.client.clone(), &m.namespace);
            let name = m.pod_group.clone();
            tokio::spawn(async move {
                let _ = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            });
        }
        self.metrics.kai.update(&d.queues);
        for q in &d.queues {
            self.metrics
                .pending
                .get_or_create(&QueueLabel {
                    queue: q.name.clone(),
                })
                .set(pending_per_queue.get(&q.name).copied().unwrap_or(0.0));
            for (i, r) in ["gpu", "cpu", "memory"].iter().enumerate() {
                let l = QueueResourceLabel {
                    queue: q.name.clone(),
                    resource: r.to_string(),
                };
                self.metrics
                    .fair_share
                    .get_or_create(&l)
                    .set(q.fair_share[i]);
                self.metrics.allocated.get_or_create(&l).set(q.allocated[i]);
            }
            let _ = self.status_tx.send(StatusMsg::Queue(q.clone()));
        }
        for issue in &d.issues {
            tracing::debug!(%issue, "input issue");
        }
    }

    fn dispatch_bind(&mut self, b: &Bind) {
        let k = key(&b.namespace, &b.name);
        if self.cache.assumed.contains_key(&k) {
            return;
        }
        let (indices, groups) = match &b.gpu {
            GpuBinding::Whole { indices } => (indices.clone(), Vec::new()),
            GpuBinding::Fraction { indices, .. } => (
                indices.clone(),
                indices
                    .iter()
                    .map(|&i| binder::gpu_group(&b.node, i))
                    .collect(),
            ),
            _ => (Vec::new(), Vec::new()),
        };
        self.cache.assume(
            &k,
            Assumed {
                node: b.node.clone(),
                gpu_indices: indices,
                groups,
            },
        );
        let mps = self
            .cache
            .input
            .nodes
            .iter()
            .find(|n| n.name == b.node)
            .and_then(|n| n.labels.get(names::LABEL_GPU_SHARING_STRATEGY))
            .is_some_and(|v| v == "mps");
        let ctx = binder::BindContext {
            reservation_ns: self.opts.reservation_namespace.clone(),
            reservation_image: self.opts.reservation_image.clone(),
            reservation_service_account: self.opts.reservation_service_account.clone(),
            reservation_timeout: self.opts.reservation_timeout,
            node_gpu_mib: self.cache.node_gpu_mib.get(&b.node).copied(),
            node_mps: mps,
        };
        let (client, tx, slots, b) = (
            self.client.clone(),
            self.tx.clone(),
            self.bind_slots.clone(),
            b.clone(),
        );
        let started = Instant::now();
        tokio::spawn(async move {
            let _permit = slots.acquire_owned().await;
            let result = binder::bind(&client, &ctx, &b)
                .await
                .map_err(|e| e.to_string());
            let _ = tx
                .send(Msg::Bound {
                    key: k,
                    result,
                    started,
                })
                .await;
        });
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

/// Fetch an owner object (any kind) as JSON.
async fn fetch_owner(
    client: &kube::Client,
    namespace: &str,
    o: &super::convert::OwnerRef,
) -> Result<DynamicObject, kube::Error> {
    let (group, version) = match o.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", o.api_version.as_str()),
    };
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &o.kind));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    api.get(&o.name).await
}

/// Create (or adopt) the pod's PodGroup, then annotate the pod.
async fn group_one(
    client: &kube::Client,
    pod: &super::convert::CachedPod,
) -> Result<Box<PodGroup>, String> {
    let ns = &pod.input.namespace;
    let mut owner: Option<podgrouper::Owner> = None;
    let mut next = pod.owner.clone();
    for _ in 0..podgrouper::MAX_OWNER_DEPTH {
        let Some(o) = next.take() else { break };
        if podgrouper::per_pod_owner(&o) {
            break; // one group per pod, like KAI's Deployment grouper
        }
        match fetch_owner(client, ns, &o).await {
            Ok(obj) => {
                let meta = &obj.metadata;
                next = meta
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|r| r.controller == Some(true))
                    .map(|r| super::convert::OwnerRef {
                        api_version: r.api_version.clone(),
                        kind: r.kind.clone(),
                        name: r.name.clone(),
                        uid: r.uid.clone(),
                    });
                owner = Some(podgrouper::Owner {
                    api_version: o.api_version.clone(),
                    kind: o.kind.clone(),
                    name: o.name.clone(),
                    uid: o.uid.clone(),
                    labels: meta.labels.clone().unwrap_or_default(),
                    annotations: meta.annotations.clone().unwrap_or_default(),
                    spec: obj.data.get("spec").cloned().unwrap_or_default(),
                });
            }
            // An owner we cannot read: group under the last one we could.
            Err(e) => {
                tracing::debug!(owner = %o.name, error = %e, "owner not readable");
                break;
            }
        }
    }
    let g = podgrouper::grouping(pod, owner.as_ref());
    let api: Api<PodGroup> = Api::namespaced(client.clone(), ns);
    let obj: PodGroup = serde_json::from_value(g.object)
        .map_err(|e| format!("pod {ns}/{}: building its PodGroup: {e}", pod.input.name))?;
    let created = match api.create(&PostParams::default(), &obj).await {
        Ok(c) => c,
        // Exists: the user's or ours; it wins.
        Err(kube::Error::Api(s)) if s.code == 409 => api.get(&g.name).await.map_err(|e| {
            format!(
                "pod {ns}/{}: reading PodGroup {}: {e}",
                pod.input.name, g.name
            )
        })?,
        Err(e) => {
            return Err(format!(
                "pod {ns}/{}: creating PodGroup {}: {e}",
                pod.input.name, g.name
            ));
        }
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let patch = json!({"metadata": {"annotations": {names::ANNOTATION_POD_GROUP_NAME: g.name}}});
    pods.patch(
        &pod.input.name,
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|e| {
        format!(
            "pod {ns}/{}: setting {}: {e}",
            pod.input.name,
            names::ANNOTATION_POD_GROUP_NAME
        )
    })?;
    Ok(Box::new(created))
}
